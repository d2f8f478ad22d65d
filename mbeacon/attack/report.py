"""The evaluation report: result files, figures and a Markdown page that says what they mean.

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

This module writes the files, the page's tables and its verdict; the figures are drawn by
:mod:`mbeacon.attack.report_plots`, and the targets and the rules that pick which settings both show
(the headline, the frontier, the best setting by threshold) are in :mod:`mbeacon.attack.report_selection`.

``python -m mbeacon.attack.report CONFIG`` runs an evaluation, writes its report and copies the
figures to ``docs/figures/attack-*.png`` (:func:`main`): the one command behind docs/attack.md.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mbeacon.attack.coalition import coalition_table
from mbeacon.attack.defences import DEFENCES
from mbeacon.attack.evaluate import public_row
from mbeacon.attack.provable import TOLERANCE, frontier_plot, frontier_table, provable_frontier
from mbeacon.attack.report_plots import auc_panels, frontier, frontier_by_threshold, roc
from mbeacon.attack.report_selection import (
    TARGET_AUC,
    TARGET_DISCOVERY,
    TARGET_EPSILON,
    TARGET_RANDOM,
    THRESHOLDS,
    at_most_queries,
    best_by_threshold,
    headline,
    short_label,
)


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
            setting = " ".join(short_label(r["label"]).removeprefix(name).replace(f"T={t}", "").split())
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
    auc_panels(frame, out_dir / "auc_vs_queries.png")
    roc(frame, out_dir / "roc.png")
    frontier(frame, out_dir / "frontier.png")
    by_threshold = frontier_by_threshold(frame, out_dir / "frontier_by_threshold.png")
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
    pooled = coalition_table(rows)
    if pooled:
        page += [
            "",
            "## Coalitions",
            "",
            "Accounts pooling their releases and reconstructing the candidates' membership "
            "(`mbeacon.attack.coalition`), at the largest query count; `cohort`: the accounts share "
            "the cohort's one budget (cohort-pmw). The bound is the best any attack can do at the "
            "coalition's epsilon (`mbeacon.privacy.tradeoff`).",
            "",
            pooled,
        ]
    last = [r for r in rows if r["queries"] == top]
    provable = provable_frontier(last)
    if provable:
        n = next(int(r["n"]) for r in last if r["defence"] == "cohort-pmw")
        frontier_plot({f"{n:,} patients": provable}, out_dir / "provable_frontier.png")
        page += [
            "",
            "## What a cohort-level epsilon buys",
            "",
            "cohort-pmw's bound holds against any coalition of accounts, whatever it asks: per cohort "
            "epsilon, the setting with the best discovery utility among those whose random-query utility "
            f"is no worse than the public prior's alone (within {TOLERANCE}; `mbeacon.attack.provable`).",
            "",
            frontier_table(provable),
            "",
            "![provable AUC against discovery utility](provable_frontier.png)",
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
