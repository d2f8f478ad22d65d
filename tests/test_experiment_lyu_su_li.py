"""Tests for the Lyu, Su and Li SVT comparison experiment (metrics, data, simulator, CLI)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mbeacon.cli.experiment import experiment
from mbeacon.experiments import lyu_su_li as lsl

# --- metrics on hand-made examples ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("selected", "true_top", "expected"),
    [
        ([0, 1, 2, 3], [0, 1, 2, 3], 1.0),
        ([0, 1, 2, 5], [0, 1, 2, 3], 0.75),  # P = R = 3/4
        ([0], [0, 1, 2, 3], 0.4),  # P = 1, R = 1/4: 2 * 0.25 / 1.25
        ([0, 1, 2, 3, 4, 5, 6, 7], [0, 1], 2 * 0.25 * 1.0 / 1.25),  # P = 1/4, R = 1
        ([7, 8], [0, 1], 0.0),
        ([], [0, 1], 0.0),
    ],
)
def test_f_measure_hand_made(selected: list[int], true_top: list[int], expected: float) -> None:
    assert lsl.f_measure(selected, true_top) == pytest.approx(expected)


def test_ncs_hand_made() -> None:
    counts = np.array([10, 8, 5, 1, 0])
    assert lsl.ncs([0, 1], counts, [0, 1]) == pytest.approx(1.0)
    assert lsl.ncs([0, 2], counts, [0, 1]) == pytest.approx(15 / 18)
    assert lsl.ncs([2, 3, 4], counts, [0, 1]) == pytest.approx(6 / 18)
    assert lsl.ncs([0, 0, 2], counts, [0, 1]) == pytest.approx(15 / 18)  # duplicates count once
    assert lsl.ncs([], counts, [0, 1]) == 0.0


def test_ground_truth_top_and_threshold() -> None:
    truth = lsl.ground_truth(np.array([5, 9, 1, 7, 3]), 2)
    assert sorted(truth.top.tolist()) == [1, 3]
    assert truth.mask.tolist() == [False, True, False, True, False]
    assert truth.threshold == 6.0  # between the 2nd (7) and 3rd (5) largest
    assert truth.top_sum == 16.0


def test_batch_scores_agree_with_the_scalar_metrics() -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 100, size=40)
    truth = lsl.ground_truth(counts, 7)
    masks = rng.random((25, 40)) < rng.random((25, 1)) * 0.5
    masks[0] = False  # an empty selection
    f, s = lsl.batch_scores(masks, counts, truth)
    for run, mask in enumerate(masks):
        chosen = np.flatnonzero(mask)
        assert f[run] == pytest.approx(lsl.f_measure(chosen, truth.top))
        assert s[run] == pytest.approx(lsl.ncs(chosen, counts, truth.top))


def test_allocations_split_epsilon_in_the_named_ratio() -> None:
    for ratio, expected in (("1:1", 1.0), ("1:3", 3.0), ("1:c", 64.0), ("1:c^(2/3)", 16.0)):
        eps1, eps2 = lsl.svt_s_split(0.25, 64, ratio)
        assert eps1 + eps2 == pytest.approx(0.25)
        assert eps2 / eps1 == pytest.approx(expected)


def test_retraversal_increment_units() -> None:
    assert lsl.retraversal_increment(3, 0.1, 0.2, 10, "sensitivity") == 3.0
    sd = math.sqrt(2 * (10 / 0.2) ** 2 + 2 * (1 / 0.1) ** 2)
    assert lsl.retraversal_increment(3, 0.1, 0.2, 10, "noise-sd") == pytest.approx(3 * sd)


# --- data -----------------------------------------------------------------------------------------


def test_zipf_data_has_the_requested_shape_and_law() -> None:
    data = lsl.make_zipf_data(1_000_000, 10_000, 1.0, 2017)
    assert data.records.shape == (1_000_000,)
    assert data.counts.shape == (10_000,)
    assert data.counts.sum() == 1_000_000
    assert data.records.min() >= 0 and data.records.max() < 10_000
    # rank 1 has probability 1 / H(10000) ~ 0.1021; 5 binomial standard deviations
    p1 = 1 / np.sum(1 / np.arange(1, 10_001))
    assert abs(data.counts[0] - 1e6 * p1) < 5 * math.sqrt(1e6 * p1 * (1 - p1))
    assert data.counts[0] / data.counts[9] == pytest.approx(10, rel=0.05)  # k^-1 law


def test_zipf_data_is_deterministic_for_a_seed() -> None:
    a = lsl.make_zipf_data(50_000, 500, 1.0, 7)
    b = lsl.make_zipf_data(50_000, 500, 1.0, 7)
    c = lsl.make_zipf_data(50_000, 500, 1.0, 8)
    assert np.array_equal(a.records, b.records)
    assert np.array_equal(a.counts, b.counts)
    assert not np.array_equal(a.records, c.records)


# --- sanity: with a huge budget every method finds the true top-c ---------------------------------


def test_huge_epsilon_recovers_the_true_top_c() -> None:
    rng = np.random.default_rng(11)
    counts = rng.permutation(np.arange(600) * 5)  # distinct counts, 5 apart
    truth = lsl.ground_truth(counts, 40)
    orders = lsl.random_orders(10, counts.size, rng)
    eps = 1e4
    picks = {
        name: lsl.run_interactive(name, counts, truth, eps, orders, rng)
        for name in lsl.method_names(lsl.ExperimentConfig())[lsl.INTERACTIVE]
    }
    picks["SVT-ReTr-3D"] = lsl.run_retraversal(3, counts, truth, eps, orders, rng)
    picks["EM"] = lsl.run_em(counts, 40, eps, 10, rng)
    for name, selected in picks.items():
        f, s = lsl.batch_scores(selected, counts, truth)
        assert f.min() > 0.97, name
        assert s.min() > 0.97, name


def test_tiny_epsilon_em_is_close_to_random() -> None:
    rng = np.random.default_rng(5)
    counts = rng.permutation(np.arange(1000))
    truth = lsl.ground_truth(counts, 50)
    f, _ = lsl.batch_scores(lsl.run_em(counts, 50, 1e-6, 200, rng), counts, truth)
    assert f.mean() == pytest.approx(50 / 1000, abs=0.02)  # a random 50-subset hits 5% of the top


# --- end to end -----------------------------------------------------------------------------------


def test_quick_experiment_is_reproducible() -> None:
    a = lsl.run_experiment(lsl.quick_config(seed=3))
    b = lsl.run_experiment(lsl.quick_config(seed=3))
    a.pop("elapsed_seconds")
    b.pop("elapsed_seconds")
    assert a == b


def test_cli_quick_writes_png_and_json_with_every_method_and_c(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(experiment, ["lyu-su-li", "--quick", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    png = out / "lyu-su-li.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    results = json.loads((out / "results.json").read_text())
    assert results["c"] == [10, 25, 50]
    names = lsl.method_names(lsl.quick_config())
    for setting, expected in names.items():
        methods = results["settings"][setting]["methods"]
        assert list(methods) == expected
        for values in methods.values():
            for key in ("f_measure", "ncs", "f_measure_sd", "ncs_sd", "selected"):
                assert len(values[key]) == 3
            assert all(0.0 <= x <= 1.0 for x in values["f_measure"] + values["ncs"])
    stdout_json = json.loads(result.stdout)  # --json: only the results on stdout
    assert stdout_json["settings"].keys() == results["settings"].keys()


def test_cli_help_lists_the_options() -> None:
    result = CliRunner().invoke(experiment, ["lyu-su-li", "--help"])
    assert result.exit_code == 0
    for option in ("--out", "--runs", "--seed", "--quick", "--json", "--records"):
        assert option in result.output
