"""Lyu, Su and Li's comparison of SVT variants (PVLDB 10(6), 2017, Section 6) on Zipf item counts.

The task is to find the top-``c`` most frequent items of a transaction data set under differential
privacy. Every item's support count is one query (sensitivity 1, and monotonic: adding or removing
a record moves every count in the same direction). Two settings, as in the paper:

* **interactive** (``eps = 0.25``): the items arrive one by one in a random order and an SVT flags
  each as above or below a threshold, halting after ``c`` positives. Variants: SVT-DPBook (Dwork
  and Roth's *Sparse*) and the standard SVT (SVT-S) with ``eps1:eps2`` = 1:1, 1:3, 1:c, 1:c^(2/3).
* **non-interactive** (``eps = 0.1``): all queries are known up front. SVT with retraversal
  (SVT-ReTr, 1:c^(2/3), threshold raised by 1, 3 or 5 ``D``) against the exponential mechanism
  (EM: ``c`` peeled selections at ``eps/c`` each).

Metrics (the paper's): the F-measure of the selected set against the true top-``c`` and the
normalised cumulative support, NCS = (sum of the selected items' true counts) / (sum of the true
top-``c`` counts). ``docs/experiments.md`` records every choice made where the paper is silent.

All randomness comes from one seeded numpy Generator for the mechanisms (and a sibling for the
data), so a run is reproducible from ``seed`` alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon.privacy.research.selection import top_k_batch
from mbeacon.privacy.sparse_vector import (
    TOP,
    generalized_svt_allocate,
    generalized_svt_batch,
    sparse_batch,
    svt_retraversal_batch,
)

PAPER = (
    "Lyu, Su and Li, Understanding the Sparse Vector Technique for Differential Privacy, PVLDB 10(6), 2017"
)
SENSITIVITY = 1.0  # one record changes one item's support by one

INTERACTIVE = "interactive"
NON_INTERACTIVE = "non_interactive"
SETTING_TITLES = {INTERACTIVE: "Interactive", NON_INTERACTIVE: "Non-interactive"}

DPBOOK = "SVT-DPBook"
# eps2 / eps1 for each SVT-S allocation, as a function of c.
SVT_S_RATIOS: dict[str, Callable[[int], float]] = {
    "1:1": lambda c: 1.0,
    "1:3": lambda c: 3.0,
    "1:c": lambda c: float(c),
    "1:c^(2/3)": lambda c: c ** (2 / 3),
}
EM = "EM"

StepCallback = Callable[[str], None]


# --- configuration --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that determines a run; the defaults are the documented full experiment."""

    n_records: int = 1_000_000
    n_items: int = 10_000
    zipf_exponent: float = 1.0
    cs: tuple[int, ...] = (25, 50, 100, 150, 200, 250, 300)
    runs: int = 200
    seed: int = 2017
    epsilon_interactive: float = 0.25
    epsilon_non_interactive: float = 0.1
    increments: tuple[int, ...] = (1, 3, 5)
    # "noise-sd": k D = k standard deviations of the comparison noise nu - rho (our reading of the
    # paper); "sensitivity": k D = k counts.
    increment_unit: str = "noise-sd"
    # EM with exp(eps u / (c D)) for monotonic scores (True) or the general exp(eps u / (2 c D)).
    em_monotonic: bool = True
    # SVT-ReTr retraverses until it has c items, as in the paper (None), or gives up after this many
    # passes (the library's default cap of 1000 passes truncates 5D at small c).
    max_passes: int | None = None

    def __post_init__(self) -> None:
        if self.n_records < 1 or self.n_items < 2 or self.runs < 1:
            raise ValueError("need n_records >= 1, n_items >= 2 and runs >= 1")
        if not self.cs or min(self.cs) < 1 or max(self.cs) >= self.n_items:
            raise ValueError("every c must be in [1, n_items)")
        if self.increment_unit not in ("noise-sd", "sensitivity"):
            raise ValueError("increment_unit must be 'noise-sd' or 'sensitivity'")


def quick_config(seed: int = 2017) -> ExperimentConfig:
    """A tiny setting (100,000 records over 1,000 items, three values of c, 5 runs): seconds."""
    return ExperimentConfig(n_records=100_000, n_items=1_000, cs=(10, 25, 50), runs=5, seed=seed)


def method_names(config: ExperimentConfig) -> dict[str, list[str]]:
    """The methods of each setting, in plotting order."""
    interactive = [DPBOOK] + [f"SVT-S-{ratio}" for ratio in SVT_S_RATIOS]
    retraversal = [f"SVT-ReTr-1:c^(2/3)-{k}D" for k in config.increments]
    return {INTERACTIVE: interactive, NON_INTERACTIVE: [*retraversal, EM]}


def count_steps(config: ExperimentConfig) -> int:
    """Number of (setting, c, method) cells, i.e. progress-bar steps of :func:`run_experiment`."""
    return len(config.cs) * sum(len(names) for names in method_names(config).values())


# --- data -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZipfData:
    """A synthetic transaction data set: one item per record, item ``i`` has Zipf rank ``i + 1``."""

    records: np.ndarray  # item id of each record
    counts: np.ndarray  # support count of each item (the query answers)


def zipf_probabilities(n_items: int, exponent: float) -> np.ndarray:
    """``P(item of rank k) = k^-s / H(n, s)`` for ranks ``k = 1..n_items``."""
    weights = np.arange(1, n_items + 1, dtype=np.float64) ** -float(exponent)
    return weights / weights.sum()


def make_zipf_data(n_records: int, n_items: int, exponent: float, rng: int | np.random.Generator) -> ZipfData:
    """Draw ``n_records`` records, each one item from a Zipf law; deterministic for an int seed."""
    generator = rng
    if not isinstance(rng, np.random.Generator):
        generator = np.random.default_rng(rng)  # noise-ok: seeded experiment
    records = generator.choice(n_items, size=n_records, p=zipf_probabilities(n_items, exponent))
    counts = np.bincount(records, minlength=n_items).astype(np.int64)
    return ZipfData(records=records, counts=counts)


# --- ground truth and metrics ---------------------------------------------------------------------


@dataclass(frozen=True)
class GroundTruth:
    """The true top-``c`` items and the SVT threshold derived from them."""

    c: int
    top: np.ndarray  # indices of the true top-c (ties broken towards the lower index)
    mask: np.ndarray  # boolean membership of the true top-c, one entry per item
    threshold: float  # mean of the c-th and (c+1)-th largest counts
    top_sum: float  # sum of the true top-c counts (NCS denominator)


def ground_truth(counts: np.ndarray, c: int) -> GroundTruth:
    """True top-``c`` and the threshold Lyu et al. use: between the ``c``-th and ``(c+1)``-th counts.

    A threshold between the two is where a noiseless SVT would flag exactly the top-``c``; any
    choice of this kind is data-dependent and is *not* itself private (the paper makes the same
    simplification, since the goal is to compare the mechanisms, not to pick thresholds).
    """
    counts = np.asarray(counts)
    if not 1 <= c < counts.size:
        raise ValueError(f"c must be in [1, {counts.size})")
    order = np.argsort(-counts, kind="stable")
    top = order[:c]
    mask = np.zeros(counts.size, dtype=bool)
    mask[top] = True
    threshold = (float(counts[order[c - 1]]) + float(counts[order[c]])) / 2
    return GroundTruth(c=c, top=top, mask=mask, threshold=threshold, top_sum=float(counts[top].sum()))


def f_measure(selected: Sequence[int] | np.ndarray, true_top: Sequence[int] | np.ndarray) -> float:
    """Harmonic mean of precision and recall of the ``selected`` set against ``true_top``.

    Precision is ``|S & T| / |S|`` (0 for an empty selection) and recall ``|S & T| / |T|``; every
    true item counts the same, whatever its rank.
    """
    s, t = set(np.asarray(selected).tolist()), set(np.asarray(true_top).tolist())
    hits = len(s & t)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(s), hits / len(t)
    return 2 * precision * recall / (precision + recall)


def ncs(
    selected: Sequence[int] | np.ndarray, counts: np.ndarray, true_top: Sequence[int] | np.ndarray
) -> float:
    """Normalised cumulative support: true counts of the selected set over those of the true top.

    Unlike the F-measure it rewards picking heavy items: missing the most frequent item costs more
    than missing the ``c``-th. Items selected twice count once.
    """
    counts = np.asarray(counts, dtype=np.float64)
    chosen = np.unique(np.asarray(selected, dtype=np.int64))
    return float(counts[chosen].sum() / counts[np.asarray(true_top, dtype=np.int64)].sum())


def batch_scores(
    selected: np.ndarray, counts: np.ndarray, truth: GroundTruth
) -> tuple[np.ndarray, np.ndarray]:
    """F-measure and NCS of every run from a ``runs x items`` boolean selection mask (vectorised)."""
    selected = np.asarray(selected, dtype=bool)
    hits = (selected & truth.mask).sum(axis=1)
    size = selected.sum(axis=1)
    # F = 2 P R / (P + R) = 2 |S & T| / (|S| + |T|), and 0 when nothing right was selected
    f = np.where(hits > 0, 2 * hits / np.maximum(size + truth.c, 1), 0.0)
    support = selected.astype(np.float64) @ np.asarray(counts, dtype=np.float64)
    return f, support / truth.top_sum


def indices_to_mask(indices: Sequence[np.ndarray] | np.ndarray, n_items: int) -> np.ndarray:
    """``runs x items`` boolean mask from one array of selected item indices per run."""
    mask = np.zeros((len(indices), n_items), dtype=bool)
    for run, chosen in enumerate(indices):
        mask[run, np.asarray(chosen, dtype=np.int64)] = True
    return mask


# --- the mechanisms, as used in each setting ------------------------------------------------------


def svt_s_split(epsilon: float, c: int, ratio: str) -> tuple[float, float]:
    """``(eps1, eps2)`` with ``eps1 + eps2 = epsilon`` and ``eps2/eps1`` given by the ``ratio`` name.

    1:c^(2/3) is the optimum for monotonic queries and comes from the library's allocator.
    """
    if ratio == "1:c^(2/3)":
        eps1, eps2, _ = generalized_svt_allocate(epsilon, c, monotonic=True)
        return eps1, eps2
    r = SVT_S_RATIOS[ratio](c)
    return epsilon / (1 + r), epsilon * r / (1 + r)


def random_orders(runs: int, n_items: int, rng: np.random.Generator) -> np.ndarray:
    """A fresh uniformly random traversal order of the items for every run (``runs x items``)."""
    return rng.permuted(np.tile(np.arange(n_items), (runs, 1)), axis=1)


def _unpermute(selected_in_order: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Map a ``runs x position`` mask back to ``runs x item`` via each run's traversal order."""
    mask = np.zeros(selected_in_order.shape, dtype=bool)
    np.put_along_axis(mask, orders, selected_in_order, axis=1)
    return mask


def run_interactive(
    method: str,
    counts: np.ndarray,
    truth: GroundTruth,
    epsilon: float,
    orders: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """One interactive method over every run's item order; returns the ``runs x items`` selection.

    SVT-DPBook is Dwork and Roth's Sparse (``eps1 = eps/2``, ``rho ~ Lap(cD/eps1)`` re-drawn after
    each positive, ``nu ~ Lap(2cD/eps1)``). SVT-S draws ``rho ~ Lap(D/eps1)`` once and, the counts
    being monotonic, ``nu ~ Lap(cD/eps2)``. Both halt after ``c`` positives.
    """
    answers = np.asarray(counts, dtype=np.float64)[orders]
    runs, c = orders.shape[0], truth.c
    if method == DPBOOK:
        flags = sparse_batch(
            answers, truth.threshold, epsilon, c, sensitivity=SENSITIVITY, runs=runs, rng=rng
        )
    else:
        eps1, eps2 = svt_s_split(epsilon, c, method.removeprefix("SVT-S-"))
        flags = generalized_svt_batch(
            answers,
            truth.threshold,
            eps1,
            eps2,
            c,
            monotonic=True,
            sensitivity=SENSITIVITY,
            runs=runs,
            rng=rng,
        ).flags
    return _unpermute(flags == TOP, orders)


def retraversal_increment(k: float, epsilon1: float, epsilon2: float, c: int, unit: str) -> float:
    """The threshold increment ``k D`` of SVT-ReTr.

    ``unit="noise-sd"``: ``D`` is the standard deviation of the comparison noise ``nu - rho`` of the
    monotonic SVT-S, ``sqrt(2 (cD/eps2)^2 + 2 (D/eps1)^2)`` (a Laplace of scale ``b`` has variance
    ``2 b^2``). ``unit="sensitivity"``: ``D`` is one count.
    """
    if unit == "sensitivity":
        return k * SENSITIVITY
    sd = math.sqrt(2 * (c * SENSITIVITY / epsilon2) ** 2 + 2 * (SENSITIVITY / epsilon1) ** 2)
    return k * sd


def run_retraversal(
    k: float,
    counts: np.ndarray,
    truth: GroundTruth,
    epsilon: float,
    orders: np.ndarray,
    rng: np.random.Generator,
    unit: str = "noise-sd",
    max_passes: int | None = 1000,
) -> np.ndarray:
    """SVT-ReTr (1:c^(2/3), monotonic noise) with threshold ``T + k D``, one traversal order per run."""
    c = truth.c
    eps1, eps2 = svt_s_split(epsilon, c, "1:c^(2/3)")
    positions = svt_retraversal_batch(
        np.asarray(counts, dtype=np.float64)[orders],
        truth.threshold,
        eps1,
        eps2,
        c,
        increment=retraversal_increment(k, eps1, eps2, c, unit),
        monotonic=True,
        sensitivity=SENSITIVITY,
        max_passes=max_passes,
        rng=rng,
    )
    selected = np.zeros(orders.shape, dtype=bool)
    rows, cols = np.nonzero(positions >= 0)
    selected[rows, orders[rows, positions[rows, cols]]] = True
    return selected


def run_em(
    counts: np.ndarray, c: int, epsilon: float, runs: int, rng: np.random.Generator, monotonic: bool = True
) -> np.ndarray:
    """EM: ``c`` peeled exponential mechanisms at ``eps/c`` each (one-shot Gumbel top-``c``)."""
    chosen = top_k_batch(
        np.asarray(counts, dtype=np.float64),
        c,
        epsilon,
        sensitivity=SENSITIVITY,
        monotonic=monotonic,
        runs=runs,
        rng=rng,
    )
    return indices_to_mask(chosen, len(counts))


# --- the experiment -------------------------------------------------------------------------------


def _describe(method: str, config: ExperimentConfig) -> str:
    if method == DPBOOK:
        return (
            "Dwork-Roth Sparse: eps1 = eps/2, rho ~ Lap(cD/eps1) re-drawn after each TOP, nu ~ Lap(2cD/eps1)"
        )
    if method.startswith("SVT-S-"):
        ratio = method.removeprefix("SVT-S-")
        return f"standard SVT, eps1:eps2 = {ratio}, rho ~ Lap(D/eps1), nu ~ Lap(cD/eps2) (monotonic)"
    if method == EM:
        law = "exp(eps u / (c D)) (monotonic)" if config.em_monotonic else "exp(eps u / (2 c D))"
        return f"c peeled exponential mechanisms at eps/c each, P ~ {law}"
    unit = "sd of nu - rho" if config.increment_unit == "noise-sd" else "count"
    return f"SVT-S 1:c^(2/3) with retraversal, threshold T + kD (D = one {unit})"


def _summary(f: list[np.ndarray], s: list[np.ndarray], sizes: list[np.ndarray]) -> dict[str, list[float]]:
    return {
        "f_measure": [float(x.mean()) for x in f],
        "f_measure_sd": [float(x.std()) for x in f],
        "ncs": [float(x.mean()) for x in s],
        "ncs_sd": [float(x.std()) for x in s],
        "selected": [float(x.mean()) for x in sizes],
    }


def _run_cell(
    setting: str,
    method: str,
    config: ExperimentConfig,
    counts: np.ndarray,
    truth: GroundTruth,
    orders: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    if setting == INTERACTIVE:
        return run_interactive(method, counts, truth, config.epsilon_interactive, orders, rng)
    if method == EM:
        return run_em(counts, truth.c, config.epsilon_non_interactive, config.runs, rng, config.em_monotonic)
    k = float(method.rsplit("-", 1)[1].removesuffix("D"))
    return run_retraversal(
        k,
        counts,
        truth,
        config.epsilon_non_interactive,
        orders,
        rng,
        unit=config.increment_unit,
        max_passes=config.max_passes,
    )


def _run_setting(
    setting: str,
    config: ExperimentConfig,
    counts: np.ndarray,
    truths: list[GroundTruth],
    rng: np.random.Generator,
    on_step: StepCallback | None,
) -> dict[str, Any]:
    """All methods of one setting for every ``c``: per-method lists (over ``c``) of summaries."""
    methods = method_names(config)[setting]
    f: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    s: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    sizes: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    for truth in truths:
        orders = random_orders(config.runs, config.n_items, rng)
        for method in methods:
            selected = _run_cell(setting, method, config, counts, truth, orders, rng)
            fm, ns = batch_scores(selected, counts, truth)
            f[method].append(fm)
            s[method].append(ns)
            sizes[method].append(selected.sum(axis=1))
            if on_step is not None:
                on_step(f"{SETTING_TITLES[setting]}, c={truth.c}, {method}")
    epsilon = config.epsilon_interactive if setting == INTERACTIVE else config.epsilon_non_interactive
    return {
        "epsilon": epsilon,
        "methods": {
            m: {"description": _describe(m, config), **_summary(f[m], s[m], sizes[m])} for m in methods
        },
    }


def run_experiment(
    config: ExperimentConfig | None = None, *, on_step: StepCallback | None = None
) -> dict[str, Any]:
    """Run both settings for every ``c`` and method; return plain, JSON-ready results.

    Within one ``c`` all methods of a setting see the same random item orders (paired comparison);
    every run draws a fresh order. ``on_step`` is called after each (setting, c, method) cell, e.g.
    to advance a progress bar (:func:`count_steps` cells in all).
    """
    config = config or ExperimentConfig()
    started = time.perf_counter()
    data_seed, noise_seed = np.random.SeedSequence(config.seed).spawn(2)
    data = make_zipf_data(
        config.n_records,
        config.n_items,
        config.zipf_exponent,
        np.random.default_rng(data_seed),  # noise-ok: experiment data
    )
    rng = np.random.default_rng(noise_seed)  # noise-ok: seeded experiment
    truths = [ground_truth(data.counts, c) for c in config.cs]
    settings = {
        setting: _run_setting(setting, config, data.counts, truths, rng, on_step)
        for setting in (INTERACTIVE, NON_INTERACTIVE)
    }
    return {
        "paper": PAPER,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "c": list(config.cs),
        "data": {
            "n_records": int(data.counts.sum()),
            "n_items": int(data.counts.size),
            "max_count": int(data.counts.max()),
            "items_with_zero_count": int((data.counts == 0).sum()),
            "threshold": [t.threshold for t in truths],
            "top_sum": [t.top_sum for t in truths],
        },
        "settings": settings,
        "elapsed_seconds": round(time.perf_counter() - started, 2),
    }


# --- the figure -----------------------------------------------------------------------------------


def _label(method: str) -> str:
    """Legend label with the exponent typeset (``1:c^(2/3)`` -> ``1:c^{2/3}``)."""
    return method.replace("c^(2/3)", r"$c^{2/3}$")


def plot_results(results: dict[str, Any], path: str | Path) -> Path:
    """Draw the 2x2 comparison (rows: settings; columns: F-measure, NCS; x: c) and save it as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    cs = results["c"]
    metrics = (("f_measure", "F-measure"), ("ncs", "NCS"))
    markers = "osD^v<>px"
    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5), sharex=True, constrained_layout=True)
    for row, (setting, block) in enumerate(results["settings"].items()):
        for col, (key, label) in enumerate(metrics):
            ax = axes[row, col]
            for i, (method, values) in enumerate(block["methods"].items()):
                style: dict[str, Any] = {"marker": markers[i % len(markers)], "lw": 1.8, "ms": 5}
                if method == EM:  # the baseline stands out
                    style.update(color="black", ls="--")
                ax.plot(cs, values[key], label=_label(method), **style)
            ax.set_title(f"{SETTING_TITLES[setting]}, ε = {block['epsilon']:g}: {label}")
            ax.set_ylim(-0.02, 1.02)
            ax.set_xticks(cs)
            ax.grid(alpha=0.3)
            ax.set_ylabel(label)
            if row == len(results["settings"]) - 1:
                ax.set_xlabel("c (number of items to select)")
        axes[row, 1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    cfg = results["config"]
    fig.suptitle(
        f"SVT variants vs EM on Zipf({cfg['zipf_exponent']:g}) item counts: {cfg['n_records']:,} records, "
        f"{cfg['n_items']:,} items, {cfg['runs']} runs per point (after Lyu, Su and Li, PVLDB 2017)"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
