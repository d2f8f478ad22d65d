"""The frontier plot: attack AUC against discovery and random-query utility for every setting tried."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mbeacon.attack.advisor.advice import Advice
from mbeacon.attack.advisor.ranking import Candidate

#: Colours and markers of the evaluation report (:mod:`mbeacon.attack.report_plots`), for the same defences
#: (Online PMW's star there is a hexagon here: the star would hide the recommendation's ring).
STYLE = {
    "svt2-single": ("#1f77b4", "o", "SVT² single threshold"),
    "svt2-redraw": ("#17becf", "D", "SVT² redraw"),
    "svt2-margin": ("#2ca02c", "<", "SVT² with decision margins"),
    "svt2-noisy": ("#bcbd22", ">", "SVT² with a noisy release"),
    "online-pmw": ("#e377c2", "h", "Online PMW from the prior"),
    "cohort-pmw": ("#d62728", "p", "Online PMW of the cohort"),
    "suppression": ("#ff7f0e", "s", "small-count suppression"),
    "prior-only": ("#7f7f7f", "P", "the prior alone"),
    "noisy-count": ("#9467bd", "^", "noisy count"),
}


def _discovery(c: Candidate) -> float:
    return c.utility_discovery or 0.0


def _random(c: Candidate) -> float:
    return c.utility_random or 0.0


def pareto(points: list[Candidate], utility=_discovery) -> list[Candidate]:
    """The settings no other setting beats on both attack AUC (lower) and ``utility`` (higher;
    default: discovery utility)."""
    front, best = [], -math.inf
    for c in sorted(points, key=lambda c: (c.worst_auc, -utility(c))):
        if utility(c) > best:
            front.append(c)
            best = utility(c)
    return front


def plot_frontier(advice: Advice, path: str | Path) -> Path:
    """``frontier.png``: attack AUC (x) against discovery utility (left) and random-query utility
    (right), one point per setting.

    Served settings in their mechanism's colour (horizontal bars: the AUC's sd across repetitions;
    hollow when the setting misses the AUC target), the comparison defences in their own markers, the
    target as a vertical line and the utility floors as horizontal ones, the served settings' Pareto
    frontier as a step line and the recommendation ringed and named.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    config = advice.config
    fig, axes = plt.subplots(1, 2, figsize=(16, 7), layout="constrained", sharex=True)
    everything = advice.settings + advice.comparisons
    rec = advice.recommendation
    for ax, utility, floor, what in (
        (axes[0], _discovery, config.min_discovery, "discovery utility (discovery queries answered right)"),
        (axes[1], _random, config.min_random, "random-query utility (random queries answered right)"),
    ):
        ax.axvspan(0.0, config.target_auc, color="#2ca02c", alpha=0.06, lw=0)
        ax.axvline(config.target_auc, color="#2ca02c", lw=2, ls="--",
                   label=f"target AUC {config.target_auc:g}")  # fmt: skip
        ax.axhline(floor, color="#d62728", lw=1, ls="--", alpha=0.6, label="utility floors")
        ax.axvline(0.5, color="0.6", lw=1, ls=":")
        for name, (colour, marker, text) in STYLE.items():
            group = [c for c in everything if c.defence == name]
            if not group:
                continue
            x = np.array([c.worst_auc for c in group])
            y = np.array([utility(c) for c in group])
            sd = np.array([c.worst_auc_sd for c in group])
            served = group[0].servable
            if served:
                ax.errorbar(x, y, xerr=sd, fmt="none", ecolor=colour, alpha=0.25, lw=1)
            solid = np.array([c.meets_target for c in group]) if served else np.ones(len(group), dtype=bool)
            ax.scatter(x[solid], y[solid], s=45, marker=marker, color=colour, edgecolor="black", lw=0.4,
                       label=text if solid.any() else None)  # fmt: skip
            ax.scatter(x[~solid], y[~solid], s=45, marker=marker, facecolor="white", edgecolor=colour, lw=1.2,
                       label=None if solid.any() else text)  # fmt: skip
        front = pareto(advice.settings, utility)
        if front:
            ax.step([c.worst_auc for c in front], [utility(c) for c in front], where="post", color="0.3",
                    lw=1, alpha=0.7, label="frontier of the served settings", zorder=1)  # fmt: skip
        if rec is not None:
            ax.scatter([rec.worst_auc], [utility(rec)], s=420, facecolor="none", edgecolor="#d62728", lw=2.5,
                       zorder=5, label="recommended")  # fmt: skip
        ax.set_xlabel(
            f"attack AUC, strongest attacker (riskiest of up to {config.queries} queries per victim; "
            "bars: ± sd)",
            fontsize=10,
        )
        ax.set_ylabel(what, fontsize=10)
        ax.grid(alpha=0.3)
    if rec is not None:
        axes[0].annotate(
            f"{rec.label}\nAUC {rec.worst_auc:.3f} ± {rec.worst_auc_sd:.3f} ({rec.attacker}), discovery "
            f"{_discovery(rec):.2f}, random {_random(rec):.2f}",
            (rec.worst_auc, _discovery(rec)),
            xytext=(0.02, 0.03),  # bottom left: low AUC and low discovery utility, rarely crowded
            textcoords="axes fraction",
            fontsize=9,
            arrowprops={"arrowstyle": "->", "color": "#d62728", "shrinkB": 12},
            bbox={"boxstyle": "round", "fc": "white", "ec": "#d62728"},
        )
    else:
        axes[0].text(0.98, 0.02, "no served setting meets the target", transform=axes[0].transAxes,
                     ha="right", color="#d62728", fontsize=12)  # fmt: skip
    xs = [c.worst_auc + c.worst_auc_sd for c in everything]
    axes[0].set_xlim(min(0.4, *xs) - 0.01, max(1.0, *xs) + 0.01)
    axes[0].set_ylim(-0.03, 1.05)
    low = min([_random(c) for c in everything] + [config.min_random])
    axes[1].set_ylim(max(0.0, low - 0.03), 1.01)
    fig.suptitle(
        f"Privacy-utility frontier for {advice.dataset}: synthetic cohort, N = {advice.patients}, "
        f"prior {advice.prior}\n(hollow markers miss the target: AUC + {config.margin_sd:g} sd > "
        f"{config.target_auc:g}; seed {config.seed}, {config.repetitions} repetitions)",
        fontsize=11,
    )
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
