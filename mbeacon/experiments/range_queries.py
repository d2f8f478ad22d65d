"""Range queries worth answering: the cost, and so the accuracy, do not depend on the number of queries.

The textbook (seeds/svt-textbook-chapter, ``range_query_svt``) runs Sparse to find the range queries
whose count is above a threshold and answers only those with the Laplace mechanism: "the total
privacy cost will be proportional to the number of queries above the threshold - not the total
number of queries". This experiment checks it with
:func:`mbeacon.privacy.research.range_queries.range_query_svt_batch` on the real beta values of the shipped
GSE41169 blood table (200,000 values, each row read as one individual's record, as the textbook's
ages are).

Each stream has ``k`` range queries (``k`` = 10 ... 10,000): ``c`` broad ranges (width 0.2 to 0.5,
counts in the tens of thousands) at random positions among narrow ones (width 10^-5 to 10^-3, counts
up to about 700), threshold ``T`` = 2,000, ``c`` = 5. At one total epsilon it reports the
released answers' mean absolute error, the share of the broad ranges found (recall) and of the
answers that are broad ranges (precision), next to the Laplace mechanism answering every query at
the same total epsilon (each at ``eps/k``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon.experiments.auto_clip import load_betas
from mbeacon.privacy.accounting import range_query_svt_epsilon
from mbeacon.privacy.noise import lattice_laplace
from mbeacon.privacy.research.range_queries import range_counts, range_query_split, range_query_svt_batch
from mbeacon.privacy.sparse_vector import TOP

SOURCE = (
    "Near and Abuah, Programming Differential Privacy, the sparse vector technique chapter (range_query_svt)"
)

StepCallback = Callable[[str], None]


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that determines a run; the defaults are the documented full experiment."""

    query_counts: tuple[int, ...] = (10, 100, 1000, 10_000)
    epsilons: tuple[float, ...] = (0.1, 1.0)
    c: int = 5
    threshold: float = 2000.0
    rows: int | None = None  # None: all 200,000 values
    runs: int = 200
    seed: int = 2019


def quick_config(seed: int = 2019) -> ExperimentConfig:
    """A few seconds: fewer runs and no 10,000-query streams."""
    return ExperimentConfig(query_counts=(10, 100, 1000), runs=30, seed=seed)


def count_steps(config: ExperimentConfig) -> int:
    return len(config.query_counts) * len(config.epsilons)


def make_stream(
    values: np.ndarray, k: int, c: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``k`` ranges in stream order, ``c`` broad ones at random positions: (lows, highs, broad mask)."""
    lows, widths = rng.uniform(0.0, 1.0, k), 10 ** rng.uniform(-5.0, -3.0, k)
    broad = np.zeros(k, dtype=bool)
    broad[rng.choice(k, min(c, k), replace=False)] = True
    widths[broad] = rng.uniform(0.2, 0.5, int(broad.sum()))
    lows[broad] = rng.uniform(0.0, 0.5, int(broad.sum()))
    return lows, np.minimum(lows + widths, 1.0), broad


def _cell(
    values: np.ndarray, k: int, epsilon: float, config: ExperimentConfig, rng: np.random.Generator
) -> dict:
    eps_sparse, _, scale = range_query_split(epsilon, config.c)
    streams = [make_stream(values, k, config.c, rng) for _ in range(config.runs)]
    counts = np.stack([range_counts(values, lows, highs) for lows, highs, _ in streams])
    broad = np.stack([mask for _, _, mask in streams])
    result = range_query_svt_batch(counts, config.threshold, epsilon, config.c, runs=config.runs, rng=rng)
    top = result.flags == TOP
    answered = top.any(axis=1)
    errors = np.where(top, np.abs(np.nan_to_num(result.values) - counts), 0.0)
    mae = errors.sum(axis=1)[answered] / top.sum(axis=1)[answered]
    precision = (top & broad).sum(axis=1)[answered] / top.sum(axis=1)[answered]
    recall = (top & broad).sum(axis=1) / broad.sum(axis=1)
    # the Laplace mechanism answering all k queries at eps/k each: its error on the broad ones
    baseline = np.abs(lattice_laplace(k / epsilon, 1.0, int(broad.sum()), rng))
    return {
        "k": k,
        "epsilon_spent": range_query_svt_epsilon(eps_sparse, scale, config.c),
        "answer_scale": scale,
        "mae": float(mae.mean()) if mae.size else float("nan"),
        "recall": float(recall.mean()),
        "precision": float(precision.mean()) if precision.size else float("nan"),
        "laplace_all_mae": float(baseline.mean()),
        "laplace_all_scale": k / epsilon,
        "queries_above_threshold": float((counts >= config.threshold).sum(axis=1).mean()),
    }


def run_experiment(
    config: ExperimentConfig | None = None, *, on_step: StepCallback | None = None
) -> dict[str, Any]:
    """Every (epsilon, number of queries) cell; plain, JSON-ready results."""
    config = config or ExperimentConfig()
    started = time.perf_counter()
    values = load_betas(config.rows)
    rng = np.random.default_rng(config.seed)  # noise-ok: seeded experiment
    settings = []
    for epsilon in config.epsilons:
        cells = []
        for k in config.query_counts:
            cells.append(_cell(values, k, epsilon, config, rng))
            if on_step is not None:
                on_step(f"eps {epsilon:g}, {k} queries")
        settings.append({"epsilon": epsilon, "cells": cells})
    return {
        "source": SOURCE,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "rows": int(values.size),
        "settings": settings,
        "elapsed_seconds": round(time.perf_counter() - started, 2),
    }


def plot_results(results: dict[str, Any], path: str | Path) -> Path:
    """Left: answer error against the number of queries (ours vs Laplace on every query); right: recall
    and precision of the selection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), constrained_layout=True)
    colors = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    for i, setting in enumerate(results["settings"]):
        eps, cells, color = setting["epsilon"], setting["cells"], colors[i % len(colors)]
        ks = [cell["k"] for cell in cells]
        left.plot(
            ks,
            [cell["mae"] for cell in cells],
            marker="o",
            color=color,
            label=f"range_query_svt, ε = {eps:g}",
        )
        left.plot(
            ks,
            [cell["laplace_all_mae"] for cell in cells],
            marker="s",
            ls="--",
            color=color,
            label=f"Laplace on every query, ε = {eps:g}",
        )
        right.plot(
            ks,
            [cell["recall"] for cell in cells],
            marker="o",
            color=color,
            label=f"broad ranges found (= answers that are broad), ε = {eps:g}",
        )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("number of range queries k")
    left.set_ylabel("mean absolute error of the released counts")
    left.set_title("Error at a fixed total ε")
    right.set_xscale("log")
    right.set_ylim(-0.02, 1.02)
    right.set_xlabel("number of range queries k")
    right.set_ylabel("share")
    cfg = results["config"]
    right.set_title(f"Selection of the c = {cfg['c']} broad ranges (T = {cfg['threshold']:g})")
    for ax in (left, right):
        ax.grid(alpha=0.3, which="both")
        ax.legend(frameon=False, fontsize=8)
    fig.suptitle(
        f"Range queries worth answering (Sparse + Laplace) on {results['rows']:,} GSE41169 beta values, "
        f"{cfg['runs']} streams per point"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
