"""The experiments of the textbook's SVT applications: ``mbeacon experiment auto-clip`` and
``mbeacon experiment range-queries`` (quick forms, fixed seeds), and the claims they reproduce."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mbeacon.cli.experiment import experiment
from mbeacon.experiments import auto_clip, range_queries


@pytest.fixture(scope="module")
def clip_results() -> dict:
    return auto_clip.run_experiment(auto_clip.quick_config(seed=19))


@pytest.fixture(scope="module")
def range_results() -> dict:
    return range_queries.run_experiment(range_queries.quick_config(seed=19))


def test_clipping_bound_lands_near_the_data_scale_whatever_the_grid_length(clip_results):
    """With the default threshold, on columns whose 99th percentiles span five orders of magnitude,
    the median bound lies between p99 / (one grid step) and the column's max x (one grid step), for
    every grid length from 10 to 10,000; and the DP mean is within 5 % of the mean (median run)."""
    scales = [block["p99"] for block in clip_results["columns"].values()]
    assert max(scales) / min(scales) > 1e4
    for name, block in clip_results["columns"].items():
        for cell in block["rules"][auto_clip.OURS]:
            step = cell["grid_step"]
            ratio = cell["bound_over_p99_median"]
            assert 1 / step <= ratio <= block["max"] / block["p99"] * step, (name, cell)
            assert cell["mean_rel_error_median"] < 0.05, (name, cell)
        fine = block["rules"][auto_clip.OURS][1:]  # 100 candidates or more: within a factor 3 of [p99, max]
        assert all(1 / 3 <= c["bound_over_p99_median"] <= 3 * block["max"] / block["p99"] for c in fine)


def test_textbook_threshold_overshoots_on_a_coarse_grid(clip_results):
    """The textbook's threshold 0 walks past the data on the 10-candidate grid in a tenth of the runs
    or more (90th percentile of the bound far above the max); the default threshold does not."""
    for name, block in clip_results["columns"].items():
        ours, textbook = block["rules"][auto_clip.OURS][0], block["rules"][auto_clip.TEXTBOOK][0]
        top = block["max"] / block["p99"]
        assert ours["bound_over_p99_p90"] <= top * ours["grid_step"], (name, ours)
        if name != "heavy":  # the heavy column's max is itself near the grid's end
            assert textbook["bound_over_p99_p90"] > 100 * top, (name, textbook)


def test_range_query_cost_and_error_do_not_depend_on_the_number_of_queries(range_results):
    """At each epsilon the cost is epsilon for every k, the released answers' error stays at the
    Laplace scale 2c/eps (within 20 %, and within 25 % of each other across k), while the Laplace
    mechanism on every query at the same epsilon has error growing as k/eps."""
    c = range_results["config"]["c"]
    for setting in range_results["settings"]:
        eps, cells = setting["epsilon"], setting["cells"]
        assert all(cell["epsilon_spent"] == pytest.approx(eps) for cell in cells)
        maes = np.array([cell["mae"] for cell in cells])
        assert np.all(np.abs(maes / (2 * c / eps) - 1) < 0.2), maes
        assert maes.max() / maes.min() < 1.25
        ks = np.array([cell["k"] for cell in cells])
        baseline = np.array([cell["laplace_all_mae"] for cell in cells])
        assert np.all(np.abs(baseline / (ks / eps) - 1) < 0.5), baseline
        if eps >= 1:
            assert all(cell["recall"] >= 0.95 for cell in cells)


@pytest.mark.parametrize(
    ("command", "figure"), [("auto-clip", "auto-clip.png"), ("range-queries", "range-queries.png")]
)
def test_cli_writes_results_and_figure(tmp_path: Path, command: str, figure: str):
    result = CliRunner().invoke(
        experiment, [command, "--quick", "--runs", "3", "--out", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["config"]["runs"] == 3
    assert (tmp_path / figure).stat().st_size > 10_000


def test_quick_configs_are_reproducible():
    small = replace(range_queries.quick_config(seed=3), runs=4, query_counts=(10, 100))
    a, b = range_queries.run_experiment(small), range_queries.run_experiment(small)
    assert a["settings"] == b["settings"]
