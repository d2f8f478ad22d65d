"""The evaluation report's figures: AUC by queries, ROC curves and the privacy-utility maps.

:func:`mbeacon.attack.report.write_report` calls these to draw ``auc_vs_queries.png``, ``roc.png``,
``frontier.png`` and ``frontier_by_threshold.png``. Drawing is kept apart from the report's tables
and verdict so that each module has one job; this is the one module of the report that imports
matplotlib (with the non-interactive Agg backend, so that figures render without a display).
Which settings a figure shows and labels comes from :mod:`mbeacon.attack.report_selection`, the
same rules the tables use.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from mbeacon.attack.defences import DEFENCES
from mbeacon.attack.report_selection import (
    TARGET_AUC,
    TARGET_DISCOVERY,
    TARGET_RANDOM,
    THRESHOLDS,
    at_most_queries,
    best_by_threshold,
    headline,
    pareto,
    short_label,
)

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
#: Each defence's colour in every figure (:mod:`mbeacon.attack.advisor.frontier` keeps the same).
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
    "cohort-pmw": "#d62728",
}
#: Each defence's marker in every figure.
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
    "cohort-pmw": "p",
}


def auc_panels(frame: pd.DataFrame, path: Path) -> None:
    """Draw ``auc_vs_queries.png``: attack AUC against queries per victim, one panel per defence and
    one line per setting (only the smallest threshold's settings where a defence has more than six)."""
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


def roc(frame: pd.DataFrame, path: Path) -> None:
    """Draw ``roc.png``: the ROC curve of each defence's headline setting (:func:`headline`) at the
    largest query count."""
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


#: Where a label may go relative to its point (offsets in typographic points), nearest first.
_OFFSETS = [
    (r * np.cos(a), r * np.sin(a))
    for r in (10, 20, 32, 46, 62, 80, 100, 125)
    for a in np.deg2rad([20, -20, 160, -160, 60, -60, 120, -120, 0, 180, 90, -90])
]


def place_labels(ax: Axes, points: list[tuple[float, float, str]], *, fontsize: float = 6.5) -> int:
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


def _scatter(ax: Axes, frame: pd.DataFrame, x: str, y: str, *, faint: bool = False) -> None:
    """One point per row in its defence's colour and marker; ``faint`` for the background of every
    setting (small, pale, kept out of the legend)."""
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


def _corner(ax: Axes, column: str) -> None:
    """Shade the target corner of a panel (AUC at most the target, utility at least the target)."""
    floor = {"utility_random": TARGET_RANDOM, "utility_discovery": TARGET_DISCOVERY}.get(column)
    ax.axvline(TARGET_AUC, color="black", lw=0.8, ls="--")
    if floor is not None:
        ax.fill_between([0.0, TARGET_AUC], floor, 1.0, color="#2ca02c", alpha=0.08, lw=0)


def frontier(frame: pd.DataFrame, path: Path) -> None:
    """Draw ``frontier.png``: both views, three workloads, one point per setting; each panel's frontier
    and each mechanism's best setting labelled."""
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
            place_labels(
                axes[row, col], [(r[x], r[y], short_label(r["label"])) for _, r in chosen.iterrows()]
            )
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


def frontier_by_threshold(frame: pd.DataFrame, path: Path) -> bool:
    """Draw ``frontier_by_threshold.png``: the map at each threshold of :data:`THRESHOLDS` present, all
    settings faint, each mechanism's best setting at that T (strongest attacker) labelled. False (and
    no file) if the run has none."""
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
                (r["auc"], r[column], short_label(r["label"]).replace(f" T={t}", ""))
                for _, r in picks.iterrows()
                if r[column] == r[column]
            ]
            place_labels(axes[row, col], points, fontsize=6)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
