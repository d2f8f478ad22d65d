"""The frontier plot: attack AUC against discovery utility for every setting the advisor tried."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mbeacon.attack.advisor.advice import Advice
from mbeacon.attack.advisor.ranking import Candidate

#: Colours and markers of the evaluation report (:mod:`mbeacon.attack.report`), for the same defences.
STYLE = {
    "svt2-single": ("#1f77b4", "o", "SVT² single threshold"),
    "svt2-redraw": ("#17becf", "D", "SVT² redraw"),
    "suppression": ("#ff7f0e", "s", "small-count suppression"),
    "noisy-count": ("#9467bd", "^", "noisy count"),
}


def pareto(points: list[Candidate]) -> list[Candidate]:
    """The settings no other setting beats on both attack AUC (lower) and discovery utility (higher)."""
    front, best = [], -math.inf
    for c in sorted(points, key=lambda c: (c.worst_auc, -(c.utility_discovery or 0.0))):
        if (c.utility_discovery or 0.0) > best:
            front.append(c)
            best = c.utility_discovery or 0.0
    return front


def plot_frontier(advice: Advice, path: str | Path) -> Path:
    """``frontier.png``: attack AUC (x) against discovery utility (y), one point per setting.

    SVT² settings in the variant's colour (horizontal bars: the AUC's sd across repetitions; hollow
    when the setting misses the target), suppression and noisy counts in their own markers (labelled
    with their parameter), the
    target as a vertical line, the SVT² Pareto frontier as a step line and the recommendation ringed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    config = advice.config
    fig, ax = plt.subplots(figsize=(12, 6.8), layout="constrained")
    ax.axvspan(0.0, config.target_auc, color="#2ca02c", alpha=0.06, lw=0)
    ax.axvline(config.target_auc, color="#2ca02c", lw=2, ls="--", label=f"target AUC {config.target_auc:g}")
    ax.axvline(0.5, color="0.6", lw=1, ls=":")
    for name, (colour, marker, text) in STYLE.items():
        group = [c for c in advice.settings + advice.comparisons if c.defence == name]
        if not group:
            continue
        x = np.array([c.worst_auc for c in group])
        y = np.array([c.utility_discovery or 0.0 for c in group])
        sd = np.array([c.worst_auc_sd for c in group])
        ok = np.array([c.meets_target for c in group])
        if name.startswith("svt2"):
            ax.errorbar(x, y, xerr=sd, fmt="none", ecolor=colour, alpha=0.35, lw=1)
        solid = ok if name.startswith("svt2") else np.ones(len(group), dtype=bool)
        ax.scatter(x[solid], y[solid], s=55, marker=marker, color=colour, edgecolor="black", lw=0.5,
                   label=text if solid.any() else None)  # fmt: skip
        ax.scatter(x[~solid], y[~solid], s=55, marker=marker, facecolor="white", edgecolor=colour, lw=1.4,
                   label=None if solid.any() else text)  # fmt: skip
        if not name.startswith("svt2"):  # stacked labels: comparison points often coincide
            for i, (c, xi, yi) in enumerate(sorted(zip(group, x, y, strict=True), key=lambda t: t[1])):
                ax.annotate(c.label.split(" ", 1)[-1], (xi, yi), xytext=(6, -11 - 10 * (i % 3)),
                            textcoords="offset points", fontsize=8, color=colour)  # fmt: skip
    front = pareto(advice.settings)
    if front:
        fx = [c.worst_auc for c in front]
        fy = [c.utility_discovery or 0.0 for c in front]
        ax.step(fx, fy, where="post", color="0.3", lw=1, alpha=0.7, label="SVT² frontier", zorder=1)
    rec = advice.recommendation
    if rec is not None:
        ry = rec.utility_discovery or 0.0
        ax.scatter([rec.worst_auc], [ry], s=420, marker="*", color="#d62728", edgecolor="black", zorder=5,
                   label="recommended")  # fmt: skip
        ax.annotate(
            f"{rec.label}\nAUC {rec.worst_auc:.3f} ± {rec.worst_auc_sd:.3f}, discovery {ry:.2f}, "
            f"random {rec.utility_random or 0:.2f}",
            (rec.worst_auc, ry),
            xytext=(0.02, 0.97),  # the top left corner: low AUC and high utility, empty unless recommended
            textcoords="axes fraction",
            va="top",
            fontsize=10,
            arrowprops={"arrowstyle": "->", "color": "#d62728", "shrinkB": 12},
            bbox={"boxstyle": "round", "fc": "white", "ec": "#d62728"},
        )
    else:
        ax.text(
            0.98, 0.02, "no SVT² setting meets the target", transform=ax.transAxes, ha="right",
            color="#d62728", fontsize=12,
        )  # fmt: skip
    xs = [c.worst_auc + c.worst_auc_sd for c in advice.settings + advice.comparisons]
    ax.set_xlim(min(0.4, *xs) - 0.01, max(1.0, *xs) + 0.01)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel(
        f"attack AUC (worst over up to {config.queries} queries per victim; bars: ± sd)", fontsize=11
    )
    ax.set_ylabel("discovery utility (share of discovery queries answered right)", fontsize=11)
    ax.set_title(
        f"Privacy-utility frontier for {advice.dataset}: synthetic cohort, N = {advice.patients}, "
        f"prior {advice.prior}\n(hollow markers miss the target: AUC + {config.margin_sd:g} sd > "
        f"{config.target_auc:g}; seed {config.seed}, {config.repetitions} repetitions)",
        fontsize=11,
    )
    ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
