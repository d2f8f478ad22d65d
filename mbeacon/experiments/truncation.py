"""PrivateSQL's truncation threshold on cohorts with several samples per patient.

PrivateSQL (Kotsogiannis et al., PVLDB 12(11), 2019; seeds/svt-tutorial, case study 2) learns with
the sparse vector technique how many rows one entity may contribute, truncates to it, and answers
counts at that sensitivity, so that counts stay accurate while their sensitivity is bounded without
knowing the (private) largest contribution. This experiment checks the claim with
:mod:`mbeacon.privacy.truncation` on three made-up cohort structures (seeded), each sample's beta
value drawn around its patient's value, a real beta value of the shipped GSE41169 blood table:

* ``tissues``: 400 patients with 1 to 3 samples (tissues) and two deeply sampled patients (40 and
  120 samples), as in a GEO series with a few reference individuals;
* ``longitudinal``: 300 patients followed for a geometric number of visits (mean 3, at most 30);
* ``single``: 500 patients with one sample each (the bound should be 1).

For each cohort and total epsilon it reports the learned bound against the true largest
contribution, and the error of the count of samples with a beta value in ``[0.7, 1]`` (against the
true, untruncated count) three ways:

* **truncated**: at the learned bound; half of epsilon learns the bound, half pays for the count at
  sensitivity ``b`` (private, ``epsilon`` in all);
* **capped**: no truncation, at the public worst case ``b = 256`` (the largest bound the service
  learns), all of epsilon: what a private count must assume when the largest contribution is unknown;
* **oracle**: no truncation, at the true largest contribution, all of epsilon; *not private* (the
  maximum is read off the data), the best an untruncated count could do.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon.privacy.noise import lattice_laplace
from mbeacon.privacy.truncation import (
    DEFAULT_MAX_BOUND,
    contributions,
    default_threshold,
    truncated_count_batch,
)

SOURCE = (
    "Kotsogiannis et al., PrivateSQL: a differentially private SQL query engine (PVLDB 12(11), 2019), "
    "learning the truncation threshold with SVT"
)
LOW, HIGH = 0.7, 1.0  # the counted range of beta values
COHORT_TITLES = {
    "tissues": "tissues: 400 patients x 1-3 samples,\ntwo with 40 and 120",
    "longitudinal": "longitudinal: 300 patients,\ngeometric visits (mean 3, max 30)",
    "single": "single: 500 patients,\none sample each",
}

StepCallback = Callable[[str], None]


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that determines a run; the defaults are the documented full experiment."""

    epsilons: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
    runs: int = 1000
    seed: int = 2019


def quick_config(seed: int = 2019) -> ExperimentConfig:
    """A second or two: fewer epsilons and runs."""
    return ExperimentConfig(epsilons=(0.1, 1.0, 5.0), runs=100, seed=seed)


def count_steps(config: ExperimentConfig) -> int:
    return len(COHORT_TITLES) * len(config.epsilons)


def _real_betas() -> np.ndarray:
    from mbeacon import data

    with gzip.open(data.path(data.BLOOD_REFERENCE), "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", skiprows=1, usecols=range(1, 11), max_rows=5000)
    values = table.ravel()
    return values[np.isfinite(values)]


def make_cohort(name: str, rng: np.random.Generator, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(patient_ids, values)`` of one cohort structure, samples interleaved in a random order."""
    if name == "tissues":
        counts = np.r_[rng.integers(1, 4, 400), 40, 120]
    elif name == "longitudinal":
        counts = np.minimum(rng.geometric(1 / 3, 300), 30)
    elif name == "single":
        counts = np.ones(500, dtype=np.int64)
    else:
        raise ValueError(f"unknown cohort {name!r}")
    ids = np.repeat(np.arange(counts.size), counts)
    rng.shuffle(ids)
    centre = rng.choice(betas, counts.size)  # each patient's own methylation level
    values = np.clip(centre[ids] + rng.normal(0.0, 0.03, ids.size), 0.0, 1.0)  # samples scatter around it
    return ids, values


def _cell(
    ids: np.ndarray, in_range: np.ndarray, epsilon: float, config: ExperimentConfig, rng: np.random.Generator
) -> dict[str, Any]:
    true_count = int(in_range.sum())
    true_max = int(contributions(ids).max())
    release = truncated_count_batch(ids, in_range, epsilon / 2, epsilon / 2, runs=config.runs, rng=rng)
    truncated = np.abs(release.noisy_count - true_count)
    oracle = np.abs(np.asarray(lattice_laplace(true_max / epsilon, true_max, config.runs, rng)))
    cap = float(DEFAULT_MAX_BOUND)
    capped = np.abs(np.asarray(lattice_laplace(cap / epsilon, cap, config.runs, rng)))
    return {
        "epsilon": epsilon,
        "bound_median": float(np.median(release.bound)),
        "bound_p10": float(np.quantile(release.bound, 0.1, method="nearest")),
        "bound_p90": float(np.quantile(release.bound, 0.9, method="nearest")),
        "bound_above_max": float(np.mean(release.bound > true_max)),
        "truncated_error_mean": float(np.mean(truncated)),
        "truncated_error_p90": float(np.quantile(truncated, 0.9)),
        "capped_error_mean": float(np.mean(capped)),
        "capped_error_p90": float(np.quantile(capped, 0.9)),
        "oracle_error_mean": float(np.mean(oracle)),
        "oracle_error_p90": float(np.quantile(oracle, 0.9)),
    }


def run_experiment(
    config: ExperimentConfig | None = None, *, on_step: StepCallback | None = None
) -> dict[str, Any]:
    """Every (cohort, epsilon) cell; plain, JSON-ready results."""
    config = config or ExperimentConfig()
    started = time.perf_counter()
    data_seed, noise_seed = np.random.SeedSequence(config.seed).spawn(2)
    data_rng = np.random.default_rng(data_seed)  # noise-ok: experiment data
    rng = np.random.default_rng(noise_seed)  # noise-ok: seeded experiment
    betas = _real_betas()
    out: dict[str, Any] = {}
    for name, title in COHORT_TITLES.items():
        ids, values = make_cohort(name, data_rng, betas)
        in_range = (values >= LOW) & (values <= HIGH)
        counts = contributions(ids)
        cells = []
        for epsilon in config.epsilons:
            cells.append(_cell(ids, in_range, epsilon, config, rng))
            if on_step is not None:
                on_step(f"{name}, eps {epsilon:g}")
        out[name] = {
            "title": title,
            "patients": int(counts.size),
            "samples": int(ids.size),
            "true_max": int(counts.max()),
            "p99_contribution": float(np.quantile(counts, 0.99)),
            "true_count": int(in_range.sum()),
            "cells": cells,
        }
    return {
        "source": SOURCE,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "range": [LOW, HIGH],
        "split": "epsilon/2 learns the bound, epsilon/2 pays for the count",
        "threshold": "default: -4 / (epsilon/2), one AboveThreshold query-noise scale below 0",
        "default_threshold_at_eps_1": default_threshold(0.5),
        "cap": DEFAULT_MAX_BOUND,
        "cohorts": out,
        "elapsed_seconds": round(time.perf_counter() - started, 2),
    }


def plot_results(results: dict[str, Any], path: str | Path) -> Path:
    """Top row: learned bound against epsilon, per cohort; bottom row: the count's error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    cohorts = results["cohorts"]
    fig, axes = plt.subplots(2, len(cohorts), figsize=(15, 8.5), sharex=True, constrained_layout=True)
    for col, block in enumerate(cohorts.values()):
        top, bottom = axes[0, col], axes[1, col]
        eps = [c["epsilon"] for c in block["cells"]]
        top.plot(
            eps,
            [c["bound_median"] for c in block["cells"]],
            "o-",
            color="tab:blue",
            label="learned bound: median",
        )
        top.fill_between(
            eps,
            [c["bound_p10"] for c in block["cells"]],
            [c["bound_p90"] for c in block["cells"]],
            color="tab:blue",
            alpha=0.15,
            label="learned bound: 10-90 %",
        )
        top.axhline(block["true_max"], color="tab:red", ls="--", label="true largest contribution")
        top.axhline(block["p99_contribution"], color="grey", ls=":", label="99th percentile of contributions")
        top.set_yscale("log")
        top.set_ylim(0.8, 1.5 * max(block["true_max"], max(c["bound_p90"] for c in block["cells"])))
        top.set_title(f"{block['title']}\n{block['samples']:,} samples, true count {block['true_count']:,}")
        top.set_ylabel("samples per patient")
        for key, label, style in (
            ("truncated", "truncated at the learned bound (ε/2 + ε/2)", {"color": "tab:blue", "marker": "o"}),
            (
                "capped",
                f"untruncated at the public cap {DEFAULT_MAX_BOUND} (ε)",
                {"color": "tab:grey", "marker": "^"},
            ),
            ("oracle", "untruncated at the true max (ε; not private)", {"color": "tab:red", "marker": "s"}),
        ):
            bottom.plot(
                eps, [c[f"{key}_error_mean"] for c in block["cells"]], label=f"{label}: mean", **style
            )
            bottom.plot(
                eps,
                [c[f"{key}_error_p90"] or np.nan for c in block["cells"]],
                ls=":",
                color=style["color"],
                label=f"{label}: p90",
            )
        bottom.set_yscale("log")  # lattice noise is often exactly 0 at large epsilon: those points drop out
        bottom.set_xlabel("total ε")
        bottom.set_ylabel("|noisy count - true count|")
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.grid(alpha=0.3, which="both")
    axes[0, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    axes[1, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    fig.suptitle(
        f"PrivateSQL truncation: bound learned by AboveThreshold, count of betas in [{LOW:g}, {HIGH:g}], "
        f"{results['config']['runs']} runs per point"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
