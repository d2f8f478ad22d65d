"""What a cohort-level epsilon buys: the best discovery utility at each provable bound.

``cohort-pmw``'s guarantee does not depend on any attacker: every answer about a cohort, to every
account together, is one Online PMW run of cost ``epsilon``, so no coalition's membership test on any
patient does better than AUC ``e^eps / (1 + e^eps)`` and TPR ``e^eps * FPR``
(:func:`mbeacon.privacy.tradeoff.best_attack`). What the operator chooses is how that epsilon is spent
(``c``, the decision margin, the share on released counts, ``T``). This module reads an evaluation's
rows and, per epsilon, keeps the setting with the best **discovery** utility among those whose
**random-query** utility is no worse than the public prior's alone (within ``tolerance``): a
researcher must gain the findings without losing the answers the prior already gets right. The
frontier of provable AUC against that utility, by cohort size, is what an ethics board can be
promised and what it costs.
"""

from __future__ import annotations

import math
from pathlib import Path

from mbeacon.privacy.tradeoff import best_attack

#: How much random-query utility a setting may lose against the public prior alone.
TOLERANCE = 0.01
#: Keys of a frontier point.
POINT_KEYS = (
    "epsilon",
    "bound_auc",
    "bound_tpr_at_0_1pct_fpr",
    "utility_discovery",
    "utility_random",
    "prior_random",
    "label",
    "utility_discovery_any",
    "utility_random_any",
    "label_any",
)


def prior_random(rows: list[dict]) -> float | None:
    """The public prior's random-query utility at the grid's smallest threshold (None: no prior-only row)."""
    prior = [r for r in rows if r.get("defence") == "prior-only" and r.get("utility_random") is not None]
    if not prior:
        return None
    t = min(r["threshold"] for r in prior)
    return max(r["utility_random"] for r in prior if r["threshold"] == t)


def provable_frontier(rows: list[dict], *, tolerance: float = TOLERANCE) -> list[dict]:
    """Per epsilon of the ``cohort-pmw`` rows, the best admissible setting (:data:`POINT_KEYS`), in
    increasing epsilon; an epsilon with no admissible setting has ``utility_discovery`` None. The
    ``*_any`` keys are the best discovery utility at that epsilon whatever it costs the random queries."""
    floor = prior_random(rows)
    cohort = [r for r in rows if r.get("defence") == "cohort-pmw" and r.get("utility_discovery") is not None]
    out = []
    for epsilon in sorted({float(r["epsilon"]) for r in cohort}):
        bound = best_attack(epsilon)
        admissible = [
            r
            for r in cohort
            if float(r["epsilon"]) == epsilon
            and (floor is None or (r["utility_random"] or 0.0) >= floor - tolerance)
        ]
        best = max(admissible, key=_ranking, default=None)
        free = max((r for r in cohort if float(r["epsilon"]) == epsilon), key=_ranking)
        out.append(
            {
                "epsilon": epsilon,
                "bound_auc": bound.auc,
                "bound_tpr_at_0_1pct_fpr": bound.tpr_at_fpr_0_1pct,
                "utility_discovery": None if best is None else best["utility_discovery"],
                "utility_random": None if best is None else best["utility_random"],
                "prior_random": floor,
                "label": None if best is None else best["label"],
                # what the closest point costs: the best discovery at any random-query utility
                "utility_discovery_any": free["utility_discovery"],
                "utility_random_any": free["utility_random"],
                "label_any": free["label"],
            }
        )
    return out


def _ranking(row: dict) -> tuple[float, float]:
    return (row["utility_discovery"], row["utility_random"] or 0.0)


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def frontier_table(points: list[dict]) -> str:
    """Markdown: one line per epsilon, the bound beside the best admissible setting's utility."""
    if not points:
        return ""
    lines = [
        "| cohort epsilon | provable AUC <= | TPR @ 0.1% FPR <= | discovery utility | random utility "
        "(prior alone) | setting | best discovery at any cost (random utility) |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(
            f"| {p['epsilon']:g} | {_cell(p['bound_auc'])} | {_cell(p['bound_tpr_at_0_1pct_fpr'], 4)} "
            f"| {_cell(p['utility_discovery'])} | {_cell(p['utility_random'])} ({_cell(p['prior_random'])}) "
            f"| {p['label'] or 'none admissible'} "
            f"| {_cell(p['utility_discovery_any'])} ({_cell(p['utility_random_any'])}) |"
        )
    return "\n".join(lines)


def frontier_plot(by_cohort: dict[str, list[dict]], path: Path) -> None:
    """Provable AUC (x) against the best admissible discovery utility (y), one line per cohort."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, points in by_cohort.items():
        kept = [p for p in points if p["utility_discovery"] is not None]
        ax.plot(
            [p["bound_auc"] for p in kept], [p["utility_discovery"] for p in kept], marker="o", label=name
        )
        for p in kept:
            ax.annotate(f"{p['epsilon']:g}", (p["bound_auc"], p["utility_discovery"]), fontsize=7,
                        xytext=(3, -9), textcoords="offset points")  # fmt: skip
    ax.axvline(0.6, color="#999999", linestyle=":", linewidth=1)
    ax.set_xlabel("provable AUC of any coalition (cohort epsilon marked)")
    ax.set_ylabel("discovery utility (random no worse than the prior)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(title="cohort")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """``python -m mbeacon.attack.provable RESULTS.json... --out FIGURE.png``: the frontier of several
    evaluations (one per cohort size, each ``mbeacon attack evaluate``'s ``results.json``) in one
    figure, and each one's table on stdout."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m mbeacon.attack.provable", description=main.__doc__)
    parser.add_argument("results", nargs="+", type=Path, help="an evaluation's results.json")
    parser.add_argument("--out", type=Path, required=True, help="the figure to write (PNG)")
    args = parser.parse_args(argv)
    by_cohort = {}
    for path in args.results:
        rows = json.loads(path.read_text(encoding="utf-8"))["results"]
        sizes = {r.get("n") for r in rows if r.get("defence") == "cohort-pmw"}
        if len(sizes) != 1:
            parser.error(f"{path}: needs cohort-pmw rows of one cohort size, found {sorted(map(str, sizes))}")
        name = f"{sizes.pop():,} patients"
        by_cohort[name] = provable_frontier(
            [r for r in rows if r["queries"] == max(x["queries"] for x in rows)]
        )
        print(f"{name} ({path}):\n\n{frontier_table(by_cohort[name])}\n")
    frontier_plot(by_cohort, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
