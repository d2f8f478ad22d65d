"""The DSSGD experiment: the model's gradient and its sensitivity, the server's averaging, the claim
(DSSGD approaches centralised accuracy as epsilon grows and beats standalone training), and the CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from mbeacon.cli.experiment import experiment
from mbeacon.experiments import dssgd as ds
from mbeacon.privacy.research.dssgd import dssgd_sensitivity


@pytest.fixture(scope="module")
def split() -> ds.Split:
    return ds.load_split(0.25, np.random.default_rng(0))


@pytest.fixture(scope="module")
def quick() -> dict:
    return ds.run_experiment(ds.quick_config())


def test_the_data_set_is_the_bundled_digits_scaled_with_a_bias_column(split: ds.Split) -> None:
    assert split.x_train.shape[1] == 65 and np.all(split.x_train[:, -1] == 1.0)
    assert split.x_train.min() >= 0.0 and split.x_train.max() <= 1.0
    assert len(split.x_train) + len(split.x_test) == 1797
    assert np.all(split.y_train.sum(axis=1) == 1.0)


def test_the_gradient_matches_finite_differences(split: ds.Split) -> None:
    rng = np.random.default_rng(1)
    x, y = split.x_train[np.newaxis, :50], split.y_train[np.newaxis, :50]
    w = rng.normal(0.0, 0.3, (1, 65, 10))

    def loss(weights: np.ndarray) -> float:
        p = ds._softmax(np.einsum("nmf,nfc->nmc", x, weights))
        return float(-np.mean(np.sum(y * np.log(p), axis=-1)))

    grad = ds.clipped_mean_gradient(w, x, y, 1.0).reshape(w.shape)
    for index in [(0, 10, 3), (0, 64, 7), (0, 33, 0)]:
        bump = np.zeros_like(w)
        bump[index] = 1e-5
        assert (loss(w + bump) - loss(w - bump)) / 2e-5 == pytest.approx(grad[index], abs=1e-6)


@pytest.mark.parametrize("clip", [1.0, 0.2])
def test_replacing_one_example_moves_each_coordinate_by_at_most_the_sensitivity(
    split: ds.Split, clip: float
) -> None:
    """The Df the mechanism is told: every coordinate of the clipped mean gradient of m examples moves
    by at most 2 * gamma / m when one example is replaced (tried against 200 replacements)."""
    rng = np.random.default_rng(2)
    m = 40
    x, y = split.x_train[:m], split.y_train[:m]
    w = rng.normal(0.0, 1.0, (1, 65, 10))
    base = ds.clipped_mean_gradient(w, x[np.newaxis], y[np.newaxis], clip)
    worst = 0.0
    for other in rng.choice(np.arange(m, len(split.x_train)), 200, replace=False):
        x2, y2 = x.copy(), y.copy()
        x2[0], y2[0] = split.x_train[other], split.y_train[other]
        moved = ds.clipped_mean_gradient(w, x2[np.newaxis], y2[np.newaxis], clip) - base
        worst = max(worst, float(np.abs(moved).max()))
    assert 0.0 < worst <= dssgd_sensitivity(clip, m) + 1e-12


def test_noiseless_dssgd_uploading_everything_is_centralised_training(split: ds.Split) -> None:
    """eps = inf, theta_u = 1, tau = 0: the server averages every participant's full gradient, which
    for equal shards is the pooled gradient, so DSSGD and centralised training give the same model."""
    config = replace(ds.quick_config(), epochs=15, threshold=0.0)
    x, y = ds.shards(split, 5)
    w, rate = ds.train_dssgd(x[np.newaxis], y[np.newaxis], math.inf, 1.0, config, np.random.default_rng(3))
    central = ds.train_local(x.reshape(1, -1, 65), y.reshape(1, -1, 10), config)
    assert rate == 1.0
    assert np.allclose(w, central, atol=1e-12)


def test_upload_rate_follows_theta_u(split: ds.Split) -> None:
    config = replace(ds.quick_config(), epochs=3)
    x, y = ds.shards(split, 4)
    _, rate = ds.train_dssgd(x[np.newaxis], y[np.newaxis], 50.0, 0.05, config, np.random.default_rng(4))
    assert rate == pytest.approx(round(0.05 * 650) / 650, abs=0.002)


def test_claim_dssgd_approaches_centralised_as_epsilon_grows_and_beats_standalone(quick: dict) -> None:
    """The tutorial's claim on the quick run (N = 10, theta_u = 0.1, 40 epochs, 5 paired splits):

    * at the largest finite eps (1000 per epoch) the mean accuracy is within 0.02 of centralised;
    * it beats standalone training on the same splits (paired one-sided t-test, p < 0.01);
    * accuracy rises with eps (each step by more than -0.01), and eps = 1 is near chance (< 0.25):
      the noise is real, and it is what the budget buys back.
    """
    rows = {r["epsilon"]: np.array(r["accuracy"]) for r in quick["sweeps"]["epsilon"]}
    base = quick["baselines"]["10"]
    central, alone = np.array(base["centralised"]), np.array(base["standalone"])
    best = rows["1000"]
    assert abs(best.mean() - central.mean()) <= 0.02
    assert stats.ttest_rel(best, alone, alternative="greater").pvalue < 0.01
    means = [rows[e].mean() for e in ("1", "100", "1000")]
    assert all(b > a - 0.01 for a, b in pairwise(means))
    assert means[0] < 0.25 and means[-1] > means[0] + 0.5


def test_a_seed_reproduces_the_experiment_and_another_seed_changes_it() -> None:
    config = replace(ds.quick_config(seed=7), epochs=5, runs=2)
    first, again = ds.run_experiment(config), ds.run_experiment(config)
    other = ds.run_experiment(replace(config, seed=8))
    for results in (first, again, other):
        results.pop("elapsed_seconds")
    assert first == again and first != other


def test_cli_quick_writes_png_and_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["dssgd", "--quick", "--epochs", "5", "--runs", "2", "--out", str(out), "--json"]
    result = CliRunner().invoke(experiment, args)
    assert result.exit_code == 0, result.output
    png = out / "dssgd.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    results = json.loads((out / "results.json").read_text())
    assert [r["epsilon"] for r in results["sweeps"]["epsilon"]] == ["1", "100", "1000", "inf"]
    assert results["config"]["epochs"] == 5 and results["config"]["runs"] == 2
    assert json.loads(result.stdout)["sweeps"].keys() == results["sweeps"].keys()


def test_cli_help_lists_the_options() -> None:
    result = CliRunner().invoke(experiment, ["dssgd", "--help"])
    assert result.exit_code == 0
    for option in ("--out", "--runs", "--epochs", "--seed", "--quick", "--json"):
        assert option in result.output


@pytest.mark.slow
def test_claim_on_the_full_epsilon_sweep() -> None:
    """The documented run's epsilon sweep (100 epochs, 5 splits): within 0.01 of centralised from
    eps = 1000, above standalone from eps = 300 in every split."""
    config = replace(ds.ExperimentConfig(), fraction_sweep=False, participant_sweep=False)
    results = ds.run_experiment(config)
    rows = {r["epsilon"]: np.array(r["accuracy"]) for r in results["sweeps"]["epsilon"]}
    base = results["baselines"]["10"]
    assert abs(rows["1000"].mean() - np.mean(base["centralised"])) <= 0.01
    for eps in ("300", "1000"):
        assert np.all(rows[eps] > np.array(base["standalone"]))
