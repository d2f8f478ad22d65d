"""DSSGD's gradient selection: what it uploads, its noise, its parameter checks, its cost and its audit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mbeacon.privacy import dssgd_epsilon
from mbeacon.privacy.audit import all_targets, audit_target, faulty
from mbeacon.privacy.audit.registry import AuditTarget, _numeric, dssgd_patterns
from mbeacon.privacy.research.dssgd import (
    dssgd_select,
    dssgd_select_batch,
    dssgd_sensitivity,
    dssgd_upload_count,
)
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED


def test_a_huge_budget_uploads_exactly_the_coordinates_above_tau_with_their_signed_values() -> None:
    g = np.r_[0.5, -0.5, 0.0, 0.25, -0.01, 0.0, -0.75, 0.01]
    res = dssgd_select(g, 0.1, 1e7, 8, clip=1.0, sensitivity=0.01, rng=4)
    assert np.flatnonzero(res.flags == TOP).tolist() == [0, 1, 3, 6]
    assert np.allclose(res.values[res.flags == TOP], g[[0, 1, 3, 6]], atol=0.011)
    assert np.isnan(res.values[res.flags != TOP]).all()


def test_at_most_c_uploads_then_the_rest_is_unanswered_and_values_stay_within_gamma() -> None:
    g = np.random.default_rng(0).normal(0.0, 1.0, (50, 200))
    res = dssgd_select_batch(g, 0.0, 1.0, 7, clip=0.5, sensitivity=0.05, rng=1)
    tops = (res.flags == TOP).sum(axis=1)
    assert tops.max() <= 7 and (tops == 7).mean() > 0.9
    assert np.all(np.abs(res.values[res.flags == TOP]) <= 0.5)
    assert set(np.unique(res.flags)) <= {TOP, BOT, UNANSWERED}


def test_the_coordinates_are_examined_in_a_uniformly_random_order() -> None:
    """Every coordinate above tau, c = 1, a huge budget: the upload is the first in a random order, so
    each of 8 coordinates is chosen 1/8 of the time (chi-square, 7 degrees of freedom, p > 0.001)."""
    runs, k = 8000, 8
    res = dssgd_select_batch(np.ones(k), 0.0, 1e7, 1, clip=2.0, sensitivity=1.0, runs=runs, rng=2)
    counts = (res.flags == TOP).sum(axis=0)
    assert counts.sum() == runs
    chi2 = float(((counts - runs / k) ** 2 / (runs / k)).sum())
    assert chi2 < 24.3  # the 0.999 quantile of chi-square(7)


def test_the_value_noise_has_numeric_sparses_scale() -> None:
    """Uploaded values are ``g + Lap(2 c Df / eps2)`` with ``eps2 = 2 eps / 9``: mean absolute deviation
    ``9 c Df / eps`` (within 5% over 20,000 uploads)."""
    eps, c, df = 3.0, 2, 1.0
    runs = 10_000
    res = dssgd_select_batch(np.full(6, 40.0), 0.0, eps, c, clip=1e6, sensitivity=df, runs=runs, rng=3)
    noise = res.values[res.flags == TOP] - 40.0
    assert noise.size == runs * c
    assert abs(np.mean(noise)) < 5 * math.sqrt(2) * 6.0 / math.sqrt(noise.size)  # 5 standard errors
    assert np.mean(np.abs(noise)) == pytest.approx(9 * c * df / eps, rel=0.05)


def test_gradients_are_floored_to_the_lattice_before_the_release() -> None:
    res = dssgd_select(np.full(4, 0.337), 0.0, 1.0, 4, clip=1.0, sensitivity=0.1, rng=5)
    units = res.values[res.flags == TOP] / 0.1
    assert np.allclose(units, np.round(units))  # the fractional part 0.037 is not revealed


def test_a_seed_reproduces_a_run_and_the_default_source_is_the_csprng() -> None:
    g = np.linspace(-1, 1, 30)
    a = dssgd_select(g, 0.2, 5.0, 3, clip=1.0, sensitivity=0.1, rng=9)
    b = dssgd_select(g, 0.2, 5.0, 3, clip=1.0, sensitivity=0.1, rng=9)
    assert np.array_equal(a.flags, b.flags) and np.array_equal(a.values, b.values, equal_nan=True)
    c = dssgd_select(g, 0.2, 5.0, 3, clip=1.0, sensitivity=0.1)
    assert (c.flags == TOP).sum() <= 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilon": 0.0},
        {"epsilon": math.nan},
        {"c": 0},
        {"clip": -1.0},
        {"sensitivity": 0.0},
        {"threshold": math.inf},
    ],
)
def test_bad_parameters_are_refused(kwargs: dict) -> None:
    args = {"threshold": 0.1, "epsilon": 1.0, "c": 2, "clip": 1.0, "sensitivity": 0.1} | kwargs
    with pytest.raises(ValueError):
        dssgd_select(np.zeros(5), **args)


def test_non_finite_gradients_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        dssgd_select(np.r_[0.1, np.nan], 0.0, 1.0, 1, clip=1.0, sensitivity=0.1)


def test_sensitivity_upload_count_and_cost() -> None:
    assert dssgd_sensitivity(1.0, 100) == pytest.approx(0.02)
    assert dssgd_upload_count(0.1, 650) == 65
    assert dssgd_upload_count(0.0001, 650) == 1
    with pytest.raises(ValueError):
        dssgd_upload_count(1.5, 650)
    assert dssgd_epsilon(2.5, 40) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        dssgd_epsilon(-1.0, 3)


def test_audit_passes_the_selection_and_catches_the_exact_values_twin() -> None:
    targets = all_targets(0.5)
    ok = audit_target(targets["dssgd-selection"], runs=20_000, seed=19)
    assert ok.verdict == "pass" and ok.p_value > 0.05
    bad = audit_target(targets["dssgd-exact-values"], runs=20_000, seed=19)
    assert bad.verdict == "violation" and bad.p_value < 1e-6
    assert faulty.true_epsilon("dssgd-exact-values", 0.5, 2) == math.inf


def test_the_audit_has_the_power_to_see_a_selection_spending_four_times_its_claim() -> None:
    """The pass above is not for want of power: the same patterns and events flag the selection run
    at 4 eps while claiming eps."""
    target = AuditTarget(
        "dssgd-selection-at-4-eps",
        0.5,
        _numeric(dssgd_select_batch, epsilon=2.0, c=2, clip=3.0, sensitivity=1.0),
        tuple(dssgd_patterns()),
        "probe",
        "DSSGD selection configured for 4 x the claimed epsilon",
    )
    result = audit_target(target, runs=50_000, seed=1)
    assert result.verdict == "violation" and result.p_value < 0.01
