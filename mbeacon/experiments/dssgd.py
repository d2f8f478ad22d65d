"""Distributed selective SGD (Shokri and Shmatikov, CCS 2015) on scikit-learn's bundled digits.

``N`` participants each hold an equal, disjoint shard of the training part of ``load_digits`` (1,797
8x8 images, 10 classes; shipped inside scikit-learn, nothing is downloaded) and jointly train a
multinomial logistic-regression model (64 pixel features scaled to [0, 1] plus a bias, 650
parameters). In every epoch each participant downloads the whole global model, computes the mean
gradient of the cross-entropy on its own shard (per-example coordinates clipped to ``[-gamma,
gamma]``), and uploads at most ``c = theta_u * 650`` coordinates chosen and perturbed by
:func:`mbeacon.privacy.research.dssgd.dssgd_select_batch` (``eps`` per epoch). The parameter server averages
the uploads of each coordinate and takes a gradient step with them.

Baselines, trained with the same learning rate for the same number of epochs: **centralised** (one
model on the union of the shards, no noise), **standalone** (every participant alone on its shard,
accuracy averaged over participants) and **DSSGD without noise** (``eps = inf``: the same SVT
selection with every noise term zero, so only the upload fraction limits it).

The claim (the tutorial's, after the paper): DSSGD approaches centralised accuracy as ``eps`` grows
and beats standalone training. Metric: test accuracy on a held-out quarter of the data. Reported
per-epoch ``eps`` is per participant; ``T`` epochs cost ``T * eps`` (basic composition).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon.privacy.research.dssgd import dssgd_select_batch, dssgd_sensitivity, dssgd_upload_count

PAPER = (
    "Shokri and Shmatikov, Privacy-Preserving Deep Learning, CCS 2015 (DSSGD, as the SVT tutorial gives it)"
)
N_CLASSES = 10
N_FEATURES = 65  # 64 pixels and a bias


@dataclass(frozen=True)
class ExperimentConfig:
    """Every knob of the experiment; the defaults are the run in ``docs/experiments.md``."""

    epsilons: tuple[float, ...] = (1.0, 10.0, 30.0, 100.0, 300.0, 1000.0, math.inf)
    upload_fractions: tuple[float, ...] = (0.01, 0.05, 0.1, 0.5)
    participants: tuple[int, ...] = (5, 10, 30)
    base_participants: int = 10
    base_upload_fraction: float = 0.1
    base_epsilon: float = 100.0
    epochs: int = 100
    learning_rate: float = 1.0
    clip: float = 1.0
    threshold: float = 0.01
    test_fraction: float = 0.25
    runs: int = 5
    seed: int = 2015
    epsilon_sweep: bool = True
    fraction_sweep: bool = True
    participant_sweep: bool = True


def quick_config(seed: int = 2015) -> ExperimentConfig:
    """A few seconds: the epsilon sweep only (1, 100, 1000, inf), 40 epochs."""
    return ExperimentConfig(
        epsilons=(1.0, 100.0, 1000.0, math.inf),
        epochs=40,
        seed=seed,
        fraction_sweep=False,
        participant_sweep=False,
    )


# --- data and model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """Training features with a bias column, one-hot labels, and the test set."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    labels_test: np.ndarray


def load_split(test_fraction: float, rng: np.random.Generator) -> Split:
    """``load_digits`` scaled to [0, 1], a bias column, a random stratified-by-chance split."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = np.hstack([data.data / 16.0, np.ones((len(data.data), 1))])
    labels = data.target.astype(np.int64)
    order = rng.permutation(len(labels))
    n_test = round(test_fraction * len(labels))
    test, train = order[:n_test], order[n_test:]
    return Split(x[train], np.eye(N_CLASSES)[labels[train]], x[test], labels[test])


def shards(split: Split, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` equal disjoint shards of the training set: ``(n, m, features)`` and ``(n, m, classes)``."""
    m = len(split.x_train) // n
    return split.x_train[: n * m].reshape(n, m, -1), split.y_train[: n * m].reshape(n, m, -1)


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def clipped_mean_gradient(w: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float) -> np.ndarray:
    """Mean cross-entropy gradient per model, per-example coordinates clipped to ``[-clip, clip]``.

    ``w``: ``(models, features, classes)``; ``x``: ``(models, m, features)``; returns ``(models,
    features * classes)``. With features in [0, 1] every per-example coordinate already lies in
    [-1, 1], so for ``clip >= 1`` the clipping is a no-op and the mean is taken directly.
    """
    residual = _softmax(x @ w) - y
    if clip >= 1.0:
        grad = np.swapaxes(x, 1, 2) @ residual / x.shape[1]
    else:
        per_example = np.clip(x[..., :, np.newaxis] * residual[..., np.newaxis, :], -clip, clip)
        grad = per_example.mean(axis=1)
    return grad.reshape(len(w), -1)


def accuracy(w: np.ndarray, x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Test accuracy of each model in ``w`` (``(models, features, classes)``)."""
    return (np.argmax(x @ w, axis=-1) == labels).mean(axis=1)


# --- training --------------------------------------------------------------------------------------


def train_local(x: np.ndarray, y: np.ndarray, config: ExperimentConfig) -> np.ndarray:
    """Full-batch gradient descent of one model per shard (standalone; centralised with one shard)."""
    w = np.zeros((len(x), x.shape[2], N_CLASSES))
    for _ in range(config.epochs):
        w -= config.learning_rate * clipped_mean_gradient(w, x, y, config.clip).reshape(w.shape)
    return w


def _noiseless_select(grads: np.ndarray, threshold: float, c: int, rng: np.random.Generator) -> np.ndarray:
    """``eps = inf``: the first ``c`` coordinates, in a random order, with ``|g_j| >= tau``."""
    above = np.abs(grads) >= threshold
    keys = np.where(above, rng.random(grads.shape), np.inf)
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)
    return np.where(above & (rank < c), grads, np.nan)


def train_dssgd(
    x: np.ndarray,
    y: np.ndarray,
    epsilon: float,
    upload_fraction: float,
    config: ExperimentConfig,
    rng: np.random.Generator,
) -> tuple[np.ndarray, float]:
    """DSSGD for ``R`` independent federations at once (one per run, the participants of all of them
    in one batched selection): ``x`` is ``(R, N, m, features)``; returns the ``R`` global models
    (``(R, features, classes)``) and the mean upload rate (uploads per participant and parameter)."""
    runs, n, m, f = x.shape
    xs, ys = x.reshape(runs * n, m, f), y.reshape(runs * n, m, N_CLASSES)
    w = np.zeros((runs, f, N_CLASSES))
    c = dssgd_upload_count(upload_fraction, f * N_CLASSES)
    sensitivity = dssgd_sensitivity(config.clip, m)
    uploaded = 0
    for _ in range(config.epochs):
        grads = clipped_mean_gradient(np.repeat(w, n, axis=0), xs, ys, config.clip)
        if math.isinf(epsilon):
            values = _noiseless_select(grads, config.threshold, c, rng)
        else:
            values = dssgd_select_batch(
                grads, config.threshold, epsilon, c, clip=config.clip, sensitivity=sensitivity, rng=rng
            ).values
        values = values.reshape(runs, n, f * N_CLASSES)
        got = ~np.isnan(values)
        uploaded += int(got.sum())
        counts = got.sum(axis=1)
        total = np.where(got, values, 0.0).sum(axis=1)
        step = np.where(counts > 0, total / np.maximum(counts, 1), 0.0)  # the server's average
        w = w - config.learning_rate * step.reshape(runs, f, N_CLASSES)
    return w, uploaded / (config.epochs * runs * n * f * N_CLASSES)


# --- the experiment --------------------------------------------------------------------------------


def _cells(config: ExperimentConfig) -> list[tuple[str, float, float, int]]:
    """Every (sweep, eps, theta_u, N) point to train DSSGD at."""
    cells = []
    if config.epsilon_sweep:
        cells += [
            ("epsilon", e, config.base_upload_fraction, config.base_participants) for e in config.epsilons
        ]
    if config.fraction_sweep:
        for u in config.upload_fractions:
            cells += [
                ("upload_fraction", e, u, config.base_participants) for e in (config.base_epsilon, math.inf)
            ]
    if config.participant_sweep:
        for n in config.participants:
            cells += [
                ("participants", e, config.base_upload_fraction, n) for e in (config.base_epsilon, math.inf)
            ]
    return cells


def count_steps(config: ExperimentConfig) -> int:
    """Progress steps: one per DSSGD cell and one per baseline participant count."""
    return len(_cells(config)) + len({n for *_, n in _cells(config)})


def _eps_key(epsilon: float) -> str:
    return "inf" if math.isinf(epsilon) else f"{epsilon:g}"


def run_experiment(config: ExperimentConfig, on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train every baseline and DSSGD cell ``config.runs`` times; plain data, JSON-ready.

    Run ``r`` uses data seed ``seed + r`` (its own train/test split) for every method, so methods are
    compared on the same splits; the noise comes from a Generator seeded from ``(seed, cell)``.
    """
    started = time.perf_counter()
    step = on_step or (lambda _description: None)
    cells = _cells(config)
    splits = [
        load_split(config.test_fraction, np.random.default_rng([config.seed, r])) for r in range(config.runs)
    ]
    baselines: dict[str, dict[str, list[float]]] = {}
    for n in sorted({n for *_, n in cells}):
        central, alone = [], []
        for split in splits:
            x, y = shards(split, n)
            central.append(
                float(
                    accuracy(
                        train_local(x.reshape(1, -1, x.shape[2]), y.reshape(1, -1, N_CLASSES), config),
                        split.x_test,
                        split.labels_test,
                    )[0]
                )
            )
            alone.append(float(accuracy(train_local(x, y, config), split.x_test, split.labels_test).mean()))
        baselines[str(n)] = {"centralised": central, "standalone": alone}
        step(f"baselines, N = {n}")
    sweeps: dict[str, list[dict[str, Any]]] = {}
    for index, (sweep, epsilon, fraction, n) in enumerate(cells):
        parts = [shards(split, n) for split in splits]
        x, y = np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])
        w, rate = train_dssgd(x, y, epsilon, fraction, config, np.random.default_rng([config.seed, index]))
        accs = [float(accuracy(w[r : r + 1], s.x_test, s.labels_test)[0]) for r, s in enumerate(splits)]
        sweeps.setdefault(sweep, []).append(
            {
                "epsilon": _eps_key(epsilon),
                "upload_fraction": fraction,
                "participants": n,
                "c": dssgd_upload_count(fraction, N_FEATURES * N_CLASSES),
                "accuracy": accs,
                "mean_accuracy": float(np.mean(accs)),
                "upload_rate": rate,
            }
        )
        step(f"DSSGD {sweep}: eps = {_eps_key(epsilon)}, theta_u = {fraction:g}, N = {n}")
    return {
        "paper": PAPER,
        "dataset": "sklearn.datasets.load_digits (1,797 images, 64 features, 10 classes)",
        "model": "multinomial logistic regression (650 parameters), full-batch gradient steps",
        "config": {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items() if k != "epsilons"
        }
        | {"epsilons": [_eps_key(e) for e in config.epsilons]},
        "baselines": baselines,
        "sweeps": sweeps,
        "elapsed_seconds": time.perf_counter() - started,
    }


# --- figure ----------------------------------------------------------------------------------------


def _x(epsilon: str, finite_max: float) -> float:
    return finite_max * 3 if epsilon == "inf" else float(epsilon)


def plot_results(results: dict[str, Any], path: str | Path) -> Path:
    """One panel per sweep: DSSGD accuracy (mean and spread over runs) next to the two baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = results["sweeps"]
    base = results["baselines"]
    cfg = results["config"]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(5.2 * len(sweeps), 4.2), squeeze=False)
    for ax, (sweep, rows) in zip(axes[0], sweeps.items(), strict=True):
        if sweep == "epsilon":
            finite = [float(r["epsilon"]) for r in rows if r["epsilon"] != "inf"]
            xs = np.array([_x(r["epsilon"], max(finite)) for r in rows])
            acc = np.array([r["accuracy"] for r in rows])
            ax.errorbar(xs, acc.mean(1), yerr=acc.std(1), marker="o", capsize=3, label="DSSGD")
            b = base[str(cfg["base_participants"])]
            ax.axhline(np.mean(b["centralised"]), color="k", ls="--", label="centralised")
            ax.axhline(np.mean(b["standalone"]), color="tab:red", ls=":", label="standalone")
            ax.set_xscale("log")
            ticks = list(xs)
            ax.set_xticks(ticks, [r["epsilon"].replace("inf", "∞") for r in rows], fontsize=8)
            ax.set_xlabel("ε per epoch (per participant)")
            ax.set_title(f"N = {cfg['base_participants']}, θu = {cfg['base_upload_fraction']:g}")
        else:
            key = "upload_fraction" if sweep == "upload_fraction" else "participants"
            for eps, style in ((f"{cfg['base_epsilon']:g}", "o-"), ("inf", "s--")):
                pts = [r for r in rows if r["epsilon"] == eps]
                xs = np.array([r[key] for r in pts], dtype=float)
                acc = np.array([r["accuracy"] for r in pts])
                label = "DSSGD, ε = ∞" if eps == "inf" else f"DSSGD, ε = {eps}"
                ax.errorbar(xs, acc.mean(1), yerr=acc.std(1), fmt=style, capsize=3, label=label)
            if key == "participants":
                ns = sorted(int(n) for n in base if int(n) in {r["participants"] for r in rows})
                ax.plot(ns, [np.mean(base[str(n)]["centralised"]) for n in ns], "k--", label="centralised")
                ax.plot(
                    ns,
                    [np.mean(base[str(n)]["standalone"]) for n in ns],
                    "r:",
                    marker="v",
                    label="standalone",
                )
                ax.set_xlabel("participants N")
                ax.set_title(f"θu = {cfg['base_upload_fraction']:g}")
            else:
                b = base[str(cfg["base_participants"])]
                ax.axhline(np.mean(b["centralised"]), color="k", ls="--", label="centralised")
                ax.axhline(np.mean(b["standalone"]), color="tab:red", ls=":", label="standalone")
                ax.set_xscale("log")
                ax.set_xlabel("upload fraction θu")
                ax.set_title(f"N = {cfg['base_participants']}")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle("DSSGD (Shokri-Shmatikov) on scikit-learn digits, logistic regression", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
