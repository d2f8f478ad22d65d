"""The evaluation report: result files, three figures and a Markdown page that says what they mean.

Files written to the output directory:

* ``results.json`` -- the rows ``--json`` prints; ``results.parquet`` -- every row with its ROC points;
* ``auc_vs_queries.png`` -- attack AUC against queries per victim, one panel per defence;
* ``roc.png`` -- ROC curves at the largest query count, one representative setting per defence;
* ``frontier.png`` -- the privacy-utility map: attack AUC against discovery (left) and random-query
  (right) utility, one point per setting;
* ``report.md`` -- the page that ties them together, with the headline table and the verdict on SVT².
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from mbeacon.attack.defences import DEFENCES
from mbeacon.attack.evaluate import public_row

#: The AUC a defence must stay under to count as protecting (the issue's bar for SVT²).
TARGET_AUC = 0.6

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


def _frontier(frame: pd.DataFrame, path: Path) -> None:
    last = at_most_queries(frame)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharex=True)
    for ax, column, title in (
        (axes[0], "utility_discovery", "discovery queries (the prior is wrong)"),
        (axes[1], "utility_random", "random queries (the prior is usually right)"),
    ):
        for name in DEFENCES:
            sub = last[last["defence"] == name]
            if sub.empty:
                continue
            ax.scatter(
                sub["auc"],
                sub[column],
                color=COLOURS[name],
                marker=MARKERS[name],
                s=40,
                alpha=0.8,
                label=name,
                edgecolors="black",
                linewidths=0.4,
            )
        ax.axvline(TARGET_AUC, color="black", lw=0.8, ls="--")
        ax.set_xlabel(f"attack AUC at {int(last['queries'].max())} queries per victim (lower: more private)")
        ax.set_ylabel("agreement with the true answer")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Privacy-utility map: one point per setting; up and to the left is better")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    top = int(frame["queries"].max())
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
        f"## Every setting at {top} queries per victim",
        "",
        markdown_table(at_most_queries(frame).sort_values(["defence", "auc"])),
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
