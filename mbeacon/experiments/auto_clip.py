"""The automatic clipping bound on columns of very different scales and grids of very different lengths.

The textbook (seeds/svt-textbook-chapter, ``auto_avg``) claims that AboveThreshold finds a good
clipping bound for data "on many different scales" and that "it doesn't matter how long the list bs
is". This experiment checks both with :func:`mbeacon.privacy.research.clipping.auto_clip_batch` on one public
geometric grid from ``1e-3`` to ``1e7`` of 10, 100, 1,000 or 10,000 candidate bounds, and three
columns of 200,000 rows each:

* ``beta``: the real methylation beta values (in ``[0, 1]``) of the shipped GSE41169 blood table
  (20,000 probes x 10 samples);
* ``depth``: a read-depth-like column, lognormal with median 30 (seeded), scale tens to thousands;
* ``heavy``: a Pareto column (shape 2.5, minimum 10,000; seeded) whose maximum is far above its bulk.

For each (column, grid length) it reports the chosen bound relative to the column's 99th percentile
(median and 10-90 % range over the runs) and the relative error of the DP mean, for our default
threshold and for the textbook's threshold 0. ``epsilon = 1`` split in thirds as in the textbook.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon.privacy.research.clipping import auto_clip_batch, clip_split, default_threshold, geometric_grid

SOURCE = "Near and Abuah, Programming Differential Privacy, the sparse vector technique chapter (auto_avg)"
GRID_LOW, GRID_HIGH = 1e-3, 1e7
OURS, TEXTBOOK = "default threshold", "textbook threshold 0"
COLUMN_TITLES = {
    "beta": "beta values (GSE41169, real)",
    "depth": "read-depth-like (lognormal, median 30)",
    "heavy": "heavy-tailed (Pareto 2.5, min 10^4)",
}

StepCallback = Callable[[str], None]


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that determines a run; the defaults are the documented full experiment."""

    grid_sizes: tuple[int, ...] = (10, 100, 1000, 10_000)
    epsilon: float = 1.0
    rows: int = 200_000
    runs: int = 500
    seed: int = 2019


def quick_config(seed: int = 2019) -> ExperimentConfig:
    """A few seconds: fewer rows and runs, the same grids."""
    return ExperimentConfig(rows=20_000, runs=40, seed=seed)


def count_steps(config: ExperimentConfig) -> int:
    return len(COLUMN_TITLES) * len(config.grid_sizes) * 2


def load_betas(rows: int | None = None) -> np.ndarray:
    """The shipped GSE41169 beta values, flattened (probe-major), the first ``rows`` of them."""
    from mbeacon import data

    with gzip.open(data.path(data.BLOOD_REFERENCE), "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", skiprows=1, usecols=range(1, 11))
    values = table.ravel()
    values = values[np.isfinite(values)]
    return values if rows is None else values[:rows]


def make_columns(rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The three columns of the experiment, ``rows`` values each."""
    betas = load_betas()
    betas = betas[:rows] if rows <= betas.size else rng.choice(betas, rows)
    return {
        "beta": betas,
        "depth": rng.lognormal(np.log(30.0), 1.0, rows),
        "heavy": 1e4 * (1.0 + rng.pareto(2.5, rows)),
    }


def _cell(
    x: np.ndarray, grid_size: int, threshold: float | None, config: ExperimentConfig, rng: np.random.Generator
) -> dict[str, Any]:
    grid = geometric_grid(grid_size, GRID_LOW, GRID_HIGH)
    release = auto_clip_batch(x, config.epsilon, grid=grid, threshold=threshold, runs=config.runs, rng=rng)
    p99 = float(np.quantile(x, 0.99))
    ratio = release.bound / p99
    rel = np.abs(release.mean / x.mean() - 1.0)
    return {
        "bound_over_p99_median": float(np.median(ratio)),
        "bound_over_p99_p10": float(np.quantile(ratio, 0.1)),
        "bound_over_p99_p90": float(np.quantile(ratio, 0.9)),
        "mean_rel_error_median": float(np.median(rel)),
        "mean_rel_error_p90": float(np.quantile(rel, 0.9)),
        "grid_step": float(grid[1] / grid[0]),
    }


def run_experiment(
    config: ExperimentConfig | None = None, *, on_step: StepCallback | None = None
) -> dict[str, Any]:
    """Every (column, grid length, threshold rule) cell; plain, JSON-ready results."""
    config = config or ExperimentConfig()
    started = time.perf_counter()
    data_seed, noise_seed = np.random.SeedSequence(config.seed).spawn(2)
    columns = make_columns(config.rows, np.random.default_rng(data_seed))  # noise-ok: experiment data
    rng = np.random.default_rng(noise_seed)  # noise-ok: seeded experiment
    eps_svt = clip_split(config.epsilon)[0]
    out: dict[str, Any] = {}
    for name, x in columns.items():
        block: dict[str, Any] = {
            "title": COLUMN_TITLES[name],
            "rows": int(x.size),
            "p50": float(np.median(x)),
            "p99": float(np.quantile(x, 0.99)),
            "max": float(x.max()),
            "mean": float(x.mean()),
            "rules": {},
        }
        for rule, threshold in ((OURS, None), (TEXTBOOK, 0.0)):
            cells = []
            for m in config.grid_sizes:
                cells.append(_cell(x, m, threshold, config, rng))
                if on_step is not None:
                    on_step(f"{name}, {rule}, grid {m}")
            block["rules"][rule] = cells
        out[name] = block
    return {
        "source": SOURCE,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "grid": {"low": GRID_LOW, "high": GRID_HIGH, "sizes": list(config.grid_sizes)},
        "default_threshold": default_threshold(eps_svt),
        "columns": out,
        "elapsed_seconds": round(time.perf_counter() - started, 2),
    }


def plot_results(results: dict[str, Any], path: str | Path) -> Path:
    """Top row: chosen bound / p99 against grid length, per column; bottom row: the DP mean's error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    sizes = results["grid"]["sizes"]
    columns = results["columns"]
    fig, axes = plt.subplots(2, len(columns), figsize=(15, 8.5), sharex=True, constrained_layout=True)
    styles = {
        OURS: {"color": "tab:blue", "marker": "o"},
        TEXTBOOK: {"color": "tab:orange", "marker": "s", "ls": "--"},
    }
    for col, block in enumerate(columns.values()):
        top, bottom = axes[0, col], axes[1, col]
        for rule, cells in block["rules"].items():
            med = [c["bound_over_p99_median"] for c in cells]
            lo = [c["bound_over_p99_p10"] for c in cells]
            hi = [c["bound_over_p99_p90"] for c in cells]
            top.plot(sizes, med, label=f"{rule}: median", **styles[rule])
            top.fill_between(sizes, lo, hi, color=styles[rule]["color"], alpha=0.15, label=f"{rule}: 10-90 %")
            bottom.plot(
                sizes, [c["mean_rel_error_median"] for c in cells], label=f"{rule}: median", **styles[rule]
            )
            bottom.plot(
                sizes,
                [c["mean_rel_error_p90"] for c in cells],
                color=styles[rule]["color"],
                ls=":",
                label=f"{rule}: 90th percentile",
            )
        top.axhline(1.0, color="black", lw=0.8)
        top.axhline(block["max"] / block["p99"], color="grey", lw=0.8, ls="-.", label="column max / p99")
        top.set_xscale("log")
        top.set_yscale("log")
        top.set_title(f"{block['title']}\np99 = {block['p99']:.3g}, max = {block['max']:.3g}")
        top.set_ylabel("chosen bound / p99")
        bottom.set_yscale("log")
        bottom.set_xlabel("grid length (candidate bounds from 1e-3 to 1e7)")
        bottom.set_ylabel("|DP mean / mean - 1|")
        for ax in (top, bottom):
            ax.grid(alpha=0.3, which="both")
    axes[0, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    axes[1, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    cfg = results["config"]
    fig.suptitle(
        f"Automatic clipping bound (AboveThreshold over a geometric grid), ε = {cfg['epsilon']:g} in thirds, "
        f"{cfg['rows']:,} rows per column, {cfg['runs']} runs per point"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
