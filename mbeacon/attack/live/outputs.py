"""The live attack's files: the score table, the metrics and the ROC plot."""

from __future__ import annotations

import json
from pathlib import Path

from mbeacon.attack.live.attack import LiveResult
from mbeacon.attack.metrics import auc, roc_curve


def plot_roc(result: LiveResult, path: Path) -> Path:
    """ROC curves at a few query counts, and AUC / TPR at 1% FPR against the number of queries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    labels = result.profiles.labels
    rows = result.by_queries()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8), constrained_layout=True)
    shown = sorted({k for k in (1, 10, result.queries) if k <= result.queries})
    for k in shown:
        fpr, tpr = roc_curve(result.scores[:, k - 1], labels)
        area = auc(result.scores[:, k - 1], labels)
        left.plot(fpr, tpr, lw=2, label=f"{k} {'query' if k == 1 else 'queries'} (AUC {area:.3f})")
    left.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="chance")
    left.set(
        xlabel="false-positive rate (non-members flagged)",
        ylabel="true-positive rate (victims caught)",
        xlim=(0, 1),
        ylim=(0, 1.01),
        title=f"ROC ({int(labels.sum())} victims, {int((~labels).sum())} non-members)",
    )
    left.legend(loc="lower right")
    left.grid(alpha=0.3)
    ks = [r["queries"] for r in rows]
    right.plot(ks, [r["auc"] for r in rows], marker="o", lw=2, label="AUC")
    right.plot(ks, [r["tpr_at_1pct_fpr"] for r in rows], marker="s", lw=2, label="TPR at 1% FPR")
    right.axhline(0.5, ls="--", color="grey", lw=1, label="AUC of a coin toss")
    if max(ks) > 1:
        right.set_xscale("log")
        right.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    right.set(
        ylim=(0, 1.02), xlabel="queries per profile", ylabel="attack success", title="By number of queries"
    )
    right.legend(loc="lower right")
    right.grid(alpha=0.3, which="both")
    counts = result.answers.counts()
    unasked = int(((result.answers.sources == "unasked") & result.askable).sum())
    fig.suptitle(
        f"Live attack on {result.params.id} ({result.defence.label}, N = {result.params.patients})\n"
        f"answers: {counts['data']} from the data, {counts['prior']} from the prior, "
        f"{counts['refused'] + counts['exhausted']} refused, {unasked} not asked",
        fontsize=11,
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(result: LiveResult, out_dir: Path) -> dict[str, Path]:
    """``scores.csv``, ``metrics.json`` and, with non-members, ``roc.png`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"scores": out_dir / "scores.csv", "metrics": out_dir / "metrics.json"}
    result.score_table().to_csv(paths["scores"], index=False, float_format="%.6g")
    paths["metrics"].write_text(json.dumps(result.summary(), indent=2) + "\n")
    if result.profiles.has_nonmembers and result.queries:
        paths["roc"] = plot_roc(result, out_dir / "roc.png")
    return paths
