"""The evaluation report: result files, three figures and a Markdown page that says what they mean.

Files written to the output directory:

* ``results.json`` -- the rows ``--json`` prints; ``results.parquet`` -- every row with its ROC points;
* ``auc_vs_queries.png`` -- attack AUC against queries per victim, one panel per defence;
* ``roc.png`` -- ROC curves at the largest query count, one representative setting per defence;
* ``frontier.png`` -- the privacy-utility map: attack AUC against discovery, random-query and
  exploration utility, one point per setting, in both views (top: per-user accounts, the attacker
  with a Sybil account per victim; bottom: one ``global`` ledger shared by the attacker and the
  researchers, :mod:`mbeacon.attack.shared`); the settings on each panel's frontier are labelled;
* ``frontier_by_threshold.png`` -- the same map at each threshold T of :data:`THRESHOLDS` the run
  has, every setting faint and the best setting of each mechanism labelled;
* ``report.md`` -- the page that ties them together: the headline table (both views), the settings
  in the target corner, what each budget scope buys and the verdict on SVT².

``python -m mbeacon.attack.report CONFIG`` runs an evaluation, writes its report and copies the
figures to ``docs/figures/attack-*.png`` (:func:`main`): the one command behind docs/attack.md.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from mbeacon.attack.defences import DEFENCES
from mbeacon.attack.evaluate import public_row

#: The AUC a defence must stay under to count as protecting (the issue's bar for SVT²).
TARGET_AUC = 0.6
#: The corner a deployable setting must reach (issue 16): AUC at most TARGET_AUC against the strongest
#: attacker, random-query and discovery utility at least these, at a per-account epsilon at most this.
TARGET_RANDOM, TARGET_DISCOVERY, TARGET_EPSILON = 0.97, 0.75, 10.0
#: The thresholds the frontier is shown at (``frontier_by_threshold.png``).
THRESHOLDS = (1, 5, 10, 20)
#: Utility workloads: result column and panel title.
WORKLOADS = (
    ("utility_discovery", "discovery queries (the prior is wrong)"),
    ("utility_random", "random queries (the prior is usually right)"),
    ("utility_exploration", "exploration (several ranges at a DMP)"),
)
#: The two budget views: column suffix and the name a reader sees.
VIEWS = (
    ("", "per-user accounts (Sybil attacker)"),
    ("_shared", "one global ledger (attacker and researchers)"),
)

COLOURS = {
    "none": "#d62728",
    "suppression": "#ff7f0e",
    "svt2-single": "#1f77b4",
    "svt2-redraw": "#17becf",
    "noisy-count": "#9467bd",
    "flip": "#8c564b",
    "prior-only": "#7f7f7f",
    "svt2-margin": "#2ca02c",
    "svt2-noisy": "#bcbd22",
    "online-pmw": "#e377c2",
}
MARKERS = {
    "none": "X",
    "suppression": "s",
    "svt2-single": "o",
    "svt2-redraw": "D",
    "noisy-count": "^",
    "flip": "v",
    "prior-only": "P",
    "svt2-margin": "<",
    "svt2-noisy": ">",
    "online-pmw": "*",
}


def at_most_queries(frame: pd.DataFrame) -> pd.DataFrame:
    """Each setting's row at the largest query count evaluated."""
    return frame[frame["queries"] == frame["queries"].max()]


def headline(frame: pd.DataFrame, target: float = TARGET_AUC) -> pd.DataFrame:
    """One row per defence at the largest query count: the setting with the best discovery utility
    among those that keep the attack AUC at or under ``target``, or else the one with the lowest AUC."""
    last = at_most_queries(frame)
    picks = []
    for name in DEFENCES:
        rows = last[last["defence"] == name]
        if rows.empty:
            continue
        safe = rows[rows["auc"] <= target]
        if not safe.empty:
            pick = safe.sort_values(["utility_discovery", "utility_random"], ascending=False).iloc[0]
        else:
            pick = rows.sort_values("auc").iloc[0]
        picks.append(pick)
    return pd.DataFrame(picks).reset_index(drop=True)


def _auc_panels(frame: pd.DataFrame, path: Path) -> None:
    names = [n for n in DEFENCES if n in set(frame["defence"])]
    columns = min(4, len(names))
    rows = -(-len(names) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names, strict=False):
        sub = frame[frame["defence"] == name]
        settings = sub["label"].unique()
        if len(settings) > 6:  # keep a panel readable: T = smallest, then the settings it has
            t_min = sub["threshold"].min()
            sub = sub[sub["threshold"] == t_min]
            settings = sub["label"].unique()
        for label in settings:
            line = sub[sub["label"] == label].sort_values("queries")
            short = label.removeprefix(name).strip() or name
            ax.plot(line["queries"], line["auc"], marker="o", ms=3, label=short)
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.axhline(TARGET_AUC, color="black", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_ylim(0.4, 1.02)
        ax.set_title(name)
        ax.set_xlabel("queries per victim")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[:, 0]:
        ax.set_ylabel("attack AUC")
    fig.suptitle(f"Attack AUC by queries asked (dashed: {TARGET_AUC}, dotted: chance)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _roc(frame: pd.DataFrame, path: Path) -> None:
    picks = headline(frame)
    fig, ax = plt.subplots(figsize=(6, 5.5))
    for _, row in picks.iterrows():
        ax.plot(
            row["roc_fpr"],
            row["roc_tpr"],
            color=COLOURS[row["defence"]],
            label=f"{row['label']} (AUC {row['auc']:.2f})",
        )
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("false-positive rate (non-members flagged)")
    ax.set_ylabel("true-positive rate (members caught)")
    ax.set_title(f"ROC at {int(frame['queries'].max())} queries per victim")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pareto(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The rows no other row beats on both counts (lower ``x``, higher ``y``), sorted by ``x``."""
    rows = frame.dropna(subset=[x, y]).sort_values([x, y], ascending=[True, False])
    best, keep = -np.inf, []
    for index, value in zip(rows.index, rows[y], strict=True):
        if value > best + 1e-9:
            keep.append(index)
            best = value
    return rows.loc[keep]


#: Where a label may go relative to its point (offsets in typographic points), nearest first.
_OFFSETS = [
    (r * np.cos(a), r * np.sin(a))
    for r in (10, 20, 32, 46, 62, 80, 100, 125)
    for a in np.deg2rad([20, -20, 160, -160, 60, -60, 120, -120, 0, 180, 90, -90])
]


def place_labels(ax, points: list[tuple[float, float, str]], *, fontsize: float = 6.5) -> int:
    """Label ``(x, y, text)`` points without overlapping each other, the labelled points or the axes'
    edge (other markers may sit under a label's white box).

    Greedy: each label takes the nearest free offset of :data:`_OFFSETS` (with a thin leader line
    when it sits away from its point); a label that finds no free place is left out. Call after the
    figure's layout is final. Returns the number of labels placed.
    """
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    marked = ax.transData.transform([(x, y) for x, y, _ in points]) if points else []
    taken = [matplotlib.transforms.Bbox.from_bounds(px - 4, py - 4, 8, 8) for px, py in marked]
    placed = 0
    for x, y, text in sorted(points, key=lambda p: (-p[1], p[0])):
        for dx, dy in _OFFSETS:
            note = ax.annotate(
                text,
                (x, y),
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=fontsize,
                ha="left" if dx > 1 else "right" if dx < -1 else "center",
                va="bottom" if dy > 1 else "top" if dy < -1 else "center",
                arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.45"}
                if abs(dx) + abs(dy) > 15
                else None,
                bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
                zorder=5,
            )
            box = note.get_window_extent(renderer).expanded(1.04, 1.1)
            inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
            if inside and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                placed += 1
                break
            note.remove()
    return placed


def _short(label: str) -> str:
    """A setting's label as a point label: the release share, the same everywhere, left out."""
    return " ".join(part for part in label.split() if not part.startswith("r="))


def _scatter(ax, frame: pd.DataFrame, x: str, y: str, *, faint: bool = False) -> None:
    for name in DEFENCES:
        sub = frame[frame["defence"] == name].dropna(subset=[x, y])
        if sub.empty:
            continue
        ax.scatter(
            sub[x],
            sub[y],
            color=COLOURS[name],
            marker=MARKERS[name],
            s=18 if faint else 40,
            alpha=0.25 if faint else 0.85,
            label=None if faint else name,
            edgecolors="black",
            linewidths=0.2 if faint else 0.4,
        )


def _corner(ax, column: str) -> None:
    """Shade the target corner of a panel (AUC at most the target, utility at least the target)."""
    floor = {"utility_random": TARGET_RANDOM, "utility_discovery": TARGET_DISCOVERY}.get(column)
    ax.axvline(TARGET_AUC, color="black", lw=0.8, ls="--")
    if floor is not None:
        ax.fill_between([0.0, TARGET_AUC], floor, 1.0, color="#2ca02c", alpha=0.08, lw=0)


def _frontier(frame: pd.DataFrame, path: Path) -> None:
    """Both views, three workloads: one point per setting, the frontier of each panel labelled."""
    last = at_most_queries(frame)
    views = [
        (suffix, name)
        for suffix, name in VIEWS
        if f"auc{suffix}" in last and last[f"auc{suffix}"].notna().any()
    ]
    workloads = [(c, t) for c, t in WORKLOADS if c in last and last[c].notna().any()]
    fig, axes = plt.subplots(
        len(views), len(workloads), figsize=(6.2 * len(workloads), 5.6 * len(views)), squeeze=False
    )
    top = int(last["queries"].max())
    for row, (suffix, view) in enumerate(views):
        x = f"auc{suffix}"
        for col, (column, title) in enumerate(workloads):
            ax = axes[row, col]
            _corner(ax, column)
            _scatter(ax, last, x, f"{column}{suffix}")
            ax.set_xlim(0.4, 1.02)
            ax.set_ylim(-0.03, 1.12)
            ax.set_yticks(np.linspace(0.0, 1.0, 6))
            ax.set_xlabel(f"attack AUC at {top} queries per victim (lower: more private)")
            ax.set_ylabel("agreement with the true answer")
            ax.set_title(f"{title}\n{view}", fontsize=10)
            ax.grid(alpha=0.3)
        axes[row, 0].legend(fontsize=7, loc="lower right", ncols=2)
    fig.suptitle(
        "Privacy-utility map: one point per setting, the frontier labelled; up and to the left is "
        f"better (dashed: AUC {TARGET_AUC}; shaded: the target corner)"
    )
    fig.tight_layout()
    fig.canvas.draw()
    for row, (suffix, _) in enumerate(views):
        for col, (column, _) in enumerate(workloads):
            x, y = f"auc{suffix}", f"{column}{suffix}"
            # an AUC under chance is no better than chance: the frontier starts at 0.5
            front = pareto(last.assign(_x=last[x].clip(lower=0.5)), "_x", y)
            picks = [_best(last[last["defence"] == name], x, y) for name in DEFENCES]
            chosen = pd.concat([front, *[p for p in picks if p is not None]]).drop_duplicates("label")
            place_labels(axes[row, col], [(r[x], r[y], _short(r["label"])) for _, r in chosen.iterrows()])
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _best(rows: pd.DataFrame, x: str, y: str) -> pd.DataFrame | None:
    """The row with the best ``y`` among those with ``x`` at most the target AUC (else the lowest
    ``x``), as a one-row frame; None for no rows."""
    rows = rows.dropna(subset=[x, y])
    if rows.empty:
        return None
    safe = rows[rows[x] <= TARGET_AUC]
    pick = safe.sort_values([y, x], ascending=[False, True]) if not safe.empty else rows.sort_values(x)
    return pick.iloc[:1]


def best_by_threshold(frame: pd.DataFrame, target: float = TARGET_AUC) -> pd.DataFrame:
    """For each mechanism and threshold T (at the largest query count), among its settings with a
    per-account epsilon at most :data:`TARGET_EPSILON` (or none): :func:`headline`'s pick."""
    last = at_most_queries(frame)
    last = last[~(last["epsilon"] > TARGET_EPSILON)]
    picks = [headline(sub, target) for _, sub in last.groupby("threshold")]
    if not picks:
        return last.iloc[:0]
    return pd.concat(picks).sort_values(["threshold", "defence"]).reset_index(drop=True)


def _frontier_by_threshold(frame: pd.DataFrame, path: Path) -> bool:
    """The map at each threshold of :data:`THRESHOLDS` present: all settings faint, each mechanism's
    best setting at that T (strongest attacker) labelled. False (and no file) if the run has none."""
    last = at_most_queries(frame)
    thresholds = [t for t in THRESHOLDS if (last["threshold"] == t).any()]
    if not thresholds:
        return False
    workloads = [(c, t) for c, t in WORKLOADS if c in last and last[c].notna().any()]
    fig, axes = plt.subplots(
        len(workloads), len(thresholds), figsize=(5.2 * len(thresholds), 4.6 * len(workloads)), squeeze=False
    )
    best = best_by_threshold(frame)
    for col, t in enumerate(thresholds):
        at_t, picks = last[last["threshold"] == t], best[best["threshold"] == t]
        for row, (column, title) in enumerate(workloads):
            ax = axes[row, col]
            _corner(ax, column)
            _scatter(ax, at_t, "auc", column, faint=True)
            _scatter(ax, picks, "auc", column)
            ax.set_xlim(0.4, 1.02)
            ax.set_ylim(-0.03, 1.12)
            ax.set_yticks(np.linspace(0.0, 1.0, 6))
            ax.set_title(f"T = {t}: {title}", fontsize=9)
            ax.grid(alpha=0.3)
            if row == len(workloads) - 1:
                ax.set_xlabel(f"attack AUC at {int(last['queries'].max())} queries per victim")
            if col == 0:
                ax.set_ylabel("agreement with the true answer")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncols=min(10, len(labels)), fontsize=8)
    fig.suptitle(
        "Best setting of each mechanism at each threshold T (strongest attacker, per-user accounts); "
        "faint: every setting"
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.canvas.draw()
    for col, t in enumerate(thresholds):
        picks = best[best["threshold"] == t]
        for row, (column, _) in enumerate(workloads):
            points = [
                (r["auc"], r[column], _short(r["label"]).replace(f" T={t}", ""))
                for _, r in picks.iterrows()
                if r[column] == r[column]
            ]
            place_labels(axes[row, col], points, fontsize=6)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _fmt(value: object, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(frame: pd.DataFrame) -> str:
    """The rows as a Markdown table (one line per setting; AUC and TPR are the strongest attacker's)."""
    head = (
        "| setting | AUC | attacker | TPR at 1% FPR | utility random | utility discovery | burn / 1000 "
        "| refused |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        lines.append(
            f"| {r['label']} | {_fmt(r['auc'])} | {_fmt(r.get('attacker', 'rarest'))} | "
            f"{_fmt(r['tpr_at_1pct_fpr'], 2)} | "
            f"{_fmt(r['utility_random'])} | {_fmt(r['utility_discovery'])} | "
            f"{_fmt(r['burn_per_1000'], 0)} | {_fmt(r['refused'], 2)} |"
        )
    return "\n".join(lines)


def views_table(frame: pd.DataFrame) -> str:
    """Both views side by side, one line per setting: per-user accounts (the attacker with a Sybil
    account per victim, researchers on fresh accounts) and one global ledger for everybody."""
    head = (
        "| setting | T | AUC | attacker | random | discovery | exploration "
        "| AUC shared | random shared | discovery shared | exploration shared |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        shared = [_fmt(r.get(f"{k}_shared")) for k in ("auc", "utility_random", "utility_discovery")]
        lines.append(
            f"| {' '.join(str(r['label']).split())} | {int(r['threshold'])} | {_fmt(r['auc'])} | "
            f"{_fmt(r.get('attacker', 'rarest'))} | "
            f"{_fmt(r['utility_random'])} | {_fmt(r['utility_discovery'])} | "
            f"{_fmt(r.get('utility_exploration'))} | {' | '.join(shared)} | "
            f"{_fmt(r.get('utility_exploration_shared'))} |"
        )
    return "\n".join(lines)


def threshold_table(frame: pd.DataFrame) -> str:
    """:func:`best_by_threshold` as one line per mechanism and one column per threshold of
    :data:`THRESHOLDS`: each cell the setting, then AUC / random / discovery / exploration utility."""
    best = best_by_threshold(frame)
    best = best[best["threshold"].isin(THRESHOLDS)]
    shown = [t for t in THRESHOLDS if (best["threshold"] == t).any()]
    lines = [
        "| mechanism | " + " | ".join(f"T = {t}" for t in shown) + " |",
        "|---" * (len(shown) + 1) + "|",
    ]
    for name in DEFENCES:
        rows = best[best["defence"] == name].set_index("threshold")
        if rows.empty:
            continue
        cells = []
        for t in shown:
            if t not in rows.index:
                cells.append("-")
                continue
            r = rows.loc[t]
            setting = " ".join(_short(r["label"]).removeprefix(name).replace(f"T={t}", "").split())
            figures = " / ".join(
                _fmt(r.get(c), 2)
                for c in ("auc", "utility_random", "utility_discovery", "utility_exploration")
            )
            cells.append(f"{setting}: {figures}" if setting else figures)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def in_corner(frame: pd.DataFrame) -> pd.DataFrame:
    """The settings (at the largest query count) in the target corner: AUC <= :data:`TARGET_AUC`
    against the strongest attacker, random >= :data:`TARGET_RANDOM`, discovery >=
    :data:`TARGET_DISCOVERY`, per-account epsilon <= :data:`TARGET_EPSILON`; best discovery first."""
    last = at_most_queries(frame)
    ok = (
        (last["auc"] <= TARGET_AUC)
        & (last["utility_random"] >= TARGET_RANDOM)
        & (last["utility_discovery"] >= TARGET_DISCOVERY)
        & (last["epsilon"].fillna(np.inf) <= TARGET_EPSILON)
    )
    order = ["utility_discovery", "utility_random", "auc"]
    return last[ok].sort_values(order, ascending=[False, False, True]).reset_index(drop=True)


def scopes(frame: pd.DataFrame) -> str:
    """What a shared (``global``/``group``) budget buys against per-user budgets, in sentences."""
    if "auc_shared" not in frame or frame["auc_shared"].isna().all():
        return "- The run did not evaluate the shared view (`shared_view = false`)."
    last = at_most_queries(frame)
    top = int(last["queries"].max())
    corner = in_corner(frame)
    if corner.empty:
        pick = headline(frame).sort_values("auc").iloc[0]
    else:  # the corner's setting for the lowest threshold: the beacon's own question, "any patient?"
        pick = corner.sort_values(["threshold", "utility_discovery"], ascending=[True, False]).iloc[0]
    low = frame[(frame["label"] == pick["label"]) & (frame["queries"] == frame["queries"].min())].iloc[0]
    lines = [
        f'- **Per-user budgets** (`scope = "user"`): {pick["label"]} holds the attacker with a fresh '
        f"account per victim to AUC {pick['auc']:.3f}, and each researcher's own account answers "
        f"{pick['utility_random']:.0%} of random, {pick['utility_discovery']:.0%} of discovery and "
        f"{_pct(pick.get('utility_exploration'))} of exploration questions right, whatever the "
        "attacker does.",
        f'- **One global ledger** (`scope = "global"`, or `group` with the attacker in the group): the '
        f"same setting holds the attack to AUC {pick['auc_shared']:.3f}, but at {top} queries per victim the "
        f"attacker's queries spend the shared budget and researchers get "
        f"{pick['utility_random_shared']:.0%} of random, {pick['utility_discovery_shared']:.0%} of "
        f"discovery and {_pct(pick.get('utility_exploration_shared'))} of exploration questions right "
        f"({pick['honest_refused_shared']:.0%} of their questions find the budget spent and get the "
        f"prior's answer); at {int(low['queries'])} queries per victim: "
        f"{low['utility_discovery_shared']:.0%} of discoveries.",
        "- So a shared scope buys a bound on what any set of accounts learns together, and costs the "
        "researchers their discoveries as soon as anyone, attacker or not, spends the budget: it needs "
        "a per-ledger epsilon sized for everyone's questions, or an operator who resets it. Defences "
        "without a budget (suppression, flipping) are the same under either scope.",
    ]
    return "\n".join(lines)


def _pct(value: object) -> str:
    return "-" if value is None or value != value else f"{float(value):.0%}"


def verdict(frame: pd.DataFrame, target: float = TARGET_AUC) -> str:
    """Where SVT² is and is not worth its cost, from these results (plain sentences)."""
    picks = headline(frame, target).set_index("defence")
    lines = []
    if "none" in picks.index:
        none = frame[frame["defence"] == "none"].sort_values("queries")
        lines.append(
            "- **Without a defence the beacon leaks membership**: attack AUC "
            + ", ".join(f"{a:.2f} at {q}" for q, a in zip(none["queries"], none["auc"], strict=True))
            + " queries per victim."
        )
    svt = [n for n in ("svt2-single", "svt2-redraw") if n in picks.index and picks.loc[n, "auc"] <= target]
    others = {n: picks.loc[n] for n in ("suppression", "noisy-count", "flip") if n in picks.index}
    if svt:
        best = max(svt, key=lambda n: picks.loc[n, "utility_discovery"])
        row = picks.loc[best]
        lines.append(
            f"- **SVT² holds the attack to AUC {row['auc']:.2f}** ({row['label']}) while answering "
            f"{row['utility_random']:.0%} of random queries and {row['utility_discovery']:.0%} of "
            "discovery queries correctly."
        )
        for name, other in others.items():
            if other["auc"] > target:
                lines.append(
                    f"- {name} never gets the AUC to {target} in this grid (best {other['auc']:.2f}, "
                    f"{other['label']}): SVT² is worth its cost against it."
                )
            else:
                better = other["utility_discovery"] > row["utility_discovery"]
                lines.append(
                    f"- {name} reaches AUC {other['auc']:.2f} ({other['label']}) with discovery "
                    f"utility {other['utility_discovery']:.0%} and random-query utility "
                    f"{other['utility_random']:.0%}: "
                    + (
                        "better on discoveries than SVT² here, at the cost of random-query answers."
                        if better
                        else "SVT² does better on discoveries at equal protection."
                    )
                )
    else:
        lines.append(f"- No SVT² setting in this grid kept the AUC at or under {target}.")
    if svt and "prior-only" in picks.index:
        prior_random = picks.loc["prior-only", "utility_random"]
        row = picks.loc[max(svt, key=lambda n: picks.loc[n, "utility_discovery"])]
        lines.append(
            f"- On random queries the prior alone is right {prior_random:.0%} of the time; SVT² at that "
            f"setting {row['utility_random']:.0%}: its query noise (scale 2c/eps2) sends some queries the "
            "prior had right over the threshold, which both flips a right answer and spends a positive."
        )
    lines.append(
        "- **Where SVT² is not worth it**: every discovery costs one of the c positives, so a researcher "
        "who needs more discoveries than c gets prior answers for the rest (discovery utility is capped "
        "near c / queries), and the query noise grows with c. SVT² pays off where most questions agree "
        "with the prior and a few discoveries matter; where most questions are discoveries, noisy counts "
        "buy more discovery utility at equal AUC, at the price of coin-flip answers on everything else."
    )
    return "\n".join(lines)


def write_report(
    rows: list[dict], out_dir: Path, *, description: str = "", config: dict | None = None
) -> Path:
    """Write every result file and figure to ``out_dir``; return the Markdown page's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    (out_dir / "results.json").write_text(
        json.dumps({"results": [public_row(r) for r in rows]}, indent=1, allow_nan=False) + "\n",
        encoding="utf-8",
    )
    frame.to_parquet(out_dir / "results.parquet", index=False)
    _auc_panels(frame, out_dir / "auc_vs_queries.png")
    _roc(frame, out_dir / "roc.png")
    _frontier(frame, out_dir / "frontier.png")
    by_threshold = _frontier_by_threshold(frame, out_dir / "frontier_by_threshold.png")
    top = int(frame["queries"].max())
    corner = in_corner(frame)
    page = [
        "# Membership-inference evaluation",
        "",
        description,
        "",
        "## Headline",
        "",
        f"At {top} queries per victim, for each defence the setting with the best discovery utility "
        f"among those with attack AUC <= {TARGET_AUC} (or, if none, the one with the lowest AUC):",
        "",
        markdown_table(headline(frame)),
        "",
        "Both views of the same settings (`*_shared`: the attacker and the researchers in one global "
        "ledger; utility is each workload's share answered right):",
        "",
        views_table(headline(frame)),
        "",
        "## The target corner",
        "",
        f"Settings with AUC <= {TARGET_AUC} against the strongest attacker, random-query utility >= "
        f"{TARGET_RANDOM}, discovery utility >= {TARGET_DISCOVERY} and per-account epsilon <= "
        f"{TARGET_EPSILON:g}, at {top} queries per victim:",
        "",
        views_table(corner) if not corner.empty else "None in this grid.",
        "",
        "## By threshold",
        "",
        f"Each mechanism's best setting at each threshold T (per-account epsilon <= {TARGET_EPSILON:g}; the "
        "headline's rule; strongest attacker, per-user accounts): AUC / random / discovery / exploration.",
        "",
        threshold_table(frame),
        "",
        "## What each budget scope buys",
        "",
        scopes(frame),
        "",
        "## Is SVT² worth its cost?",
        "",
        verdict(frame),
        "",
        "## Figures",
        "",
        "![attack AUC by queries](auc_vs_queries.png)",
        "",
        "![ROC curves](roc.png)",
        "",
        "![privacy-utility map](frontier.png)",
        "",
        *(["![the map at each threshold](frontier_by_threshold.png)", ""] if by_threshold else []),
        f"## Every setting at {top} queries per victim",
        "",
        markdown_table(at_most_queries(frame).sort_values(["defence", "auc"])),
        "",
        "Both views:",
        "",
        views_table(at_most_queries(frame).sort_values(["defence", "threshold", "auc"])),
        "",
        "AUC and TPR are means over repetitions (fresh defence randomness each); utility is the share of "
        "a researcher's queries answered correctly (unanswered queries get the prior's answer, labelled); "
        "burn is SVT² positives spent per 1,000 attack queries answered; refused is the share of attack "
        "queries left unanswered. Every row, every query count: `results.json`, `results.parquet`.",
    ]
    if config:
        page += ["", "## Configuration", "", "```json", json.dumps(config, indent=1), "```"]
    path = out_dir / "report.md"
    path.write_text("\n".join(page) + "\n", encoding="utf-8")
    return path


#: The figures :func:`main` copies into the documentation, as ``attack-<name>.png``.
DOC_FIGURES = ("auc_vs_queries", "roc", "frontier", "frontier_by_threshold")


def main(argv: list[str] | None = None) -> int:
    """Run an evaluation config, write its report, copy its figures to the docs, print its tables.

    ``python -m mbeacon.attack.report docs/attack-report.toml`` regenerates docs/attack.md's
    headline table (printed as Markdown on stdout, from the same rows as ``results.json``) and its
    figures (``docs/figures/attack-*.png``) in one command.
    """
    import argparse

    from mbeacon.attack.evaluate import EvaluationConfigError, build, load_evaluation_config, run_grid

    parser = argparse.ArgumentParser(prog="python -m mbeacon.attack.report", description=main.__doc__)
    parser.add_argument("config", type=Path, help="the evaluation's TOML file")
    parser.add_argument("--out", type=Path, default=Path("attack-report"), help="report directory")
    parser.add_argument("--figures", type=Path, default=Path("docs/figures"), help="where attack-*.png go")
    parser.add_argument("--workers", type=int, default=None, help="local processes [the usable CPUs]")
    args = parser.parse_args(argv)
    try:
        config = load_evaluation_config(args.config)
    except EvaluationConfigError as exc:
        parser.error(str(exc))
    started = time.perf_counter()
    scenario = build(config)

    def progress(done: int, total: int) -> None:
        print(f"\r{done}/{total} settings", end="", file=sys.stderr, flush=True)

    rows = run_grid(config, scenario, workers=args.workers, on_progress=progress)
    elapsed = time.perf_counter() - started
    print(file=sys.stderr)
    write_report(rows, args.out, description=scenario.description, config=config.model_dump())
    args.figures.mkdir(parents=True, exist_ok=True)
    for name in DOC_FIGURES:
        figure = args.out / f"{name}.png"
        if figure.exists():
            shutil.copyfile(figure, args.figures / f"attack-{name}.png")
    frame = pd.DataFrame(rows)
    top = int(frame["queries"].max())
    print(f"{scenario.description}; {len(config.grid.settings())} settings in {elapsed:.0f} s\n")
    print(f"Headline at {top} queries per victim:\n\n{views_table(headline(frame))}\n")
    corner = in_corner(frame)
    print(f"In the target corner:\n\n{views_table(corner) if not corner.empty else 'none'}\n")
    print(
        "Best setting of each mechanism by threshold (epsilon <= 10; AUC / random / discovery / "
        f"exploration):\n\n{threshold_table(frame)}\n"
    )
    print(f"What each budget scope buys:\n\n{scopes(frame)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
