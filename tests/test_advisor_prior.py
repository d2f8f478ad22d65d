"""The advisor's synthetic beacon answers against a prior re-estimated from n_reference synthetic
reference people (sampling error of the real prior's size), while the people stay drawn from the
public prior; a prior without a reference count keeps the public prior, with a warning."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mbeacon.attack.advisor import (
    AdvisorConfig,
    PublicInputs,
    advise_inputs,
    draw_from_prior,
    public_inputs,
    scenario_for,
    synthetic_cohort,
)
from mbeacon.attack.advisor.synthetic_prior import MAX_REFERENCE, estimated_prior, reference_size
from mbeacon.store.demo import DEMO_DATASET, ensure_demo
from mbeacon.store.priors import prior_from_means

#: A cohort and grid small enough for the fast suite.
SMALL = AdvisorConfig(
    queries=100,
    probes=2000,
    victims=25,
    repetitions=2,
    mechanisms=("online-pmw",),
    sanitiser_epsilon=(10.0,),
    sanitiser_c=(50,),
    threshold=(1,),
    margin=(60.0,),
    suppression_threshold=(),
    noisy_count_epsilon=(),
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")


@pytest.fixture(scope="module")
def inputs(demo) -> PublicInputs:
    return public_inputs(demo.store, DEMO_DATASET)


def _with_reference(inputs: PublicInputs, n_reference: int) -> PublicInputs:
    prior = replace(inputs.prior, n_reference=n_reference)
    return PublicInputs(inputs.dataset, inputs.patients, inputs.probe_ids, prior, inputs.prior_origin)


def _mean_error(truth, estimated) -> np.ndarray:
    """Each probe's estimated mean minus the truth's, in units of the truth's sd / sqrt(n_reference)."""
    rows = truth.index(estimated.probe_ids)
    assert np.all(rows >= 0)
    standard_error = truth.sd[rows] / np.sqrt(estimated.n_reference)
    return (estimated.mean - truth.mean[rows]) / standard_error


def test_the_estimated_prior_has_the_sampling_error_of_its_reference_size(inputs) -> None:
    truth = inputs.prior
    assert truth.n_reference == 120 and truth.quantiles is not None  # the demo's reference sample
    rows = np.arange(0, len(truth), 1)
    estimated = estimated_prior(truth, rows, np.random.default_rng(11), draw_from_prior)
    assert estimated is not None and estimated.n_reference == 120
    np.testing.assert_array_equal(estimated.probe_ids, truth.probe_ids[rows])
    assert estimated.quantiles is not None and estimated.quantiles.shape == (
        rows.size,
        truth.quantiles.shape[1],
    )
    # mean errors of sd / sqrt(n): the standardised errors have sd 1 (0.97 to 1.00 over seeds; 2,000
    # probes) and no bias
    z = _mean_error(truth, estimated)
    assert 0.9 < np.std(z) < 1.08
    assert abs(np.mean(z)) < 0.1
    # the sds are re-estimated too (relative error about 1 / sqrt(2n) = 0.065), not copied
    ratio = estimated.sd / truth.sd[rows]
    assert 0.9 < np.median(ratio) < 1.05 and 0.04 < np.std(ratio) < 0.15
    # a prior from 16 times the people: a quarter of the error (same standardised size)
    larger = replace(truth, n_reference=1920)
    big = estimated_prior(larger, rows, np.random.default_rng(11), draw_from_prior)
    raw = np.std(big.mean - truth.mean[rows]) / np.std(estimated.mean - truth.mean[rows])
    assert raw == pytest.approx(0.25, abs=0.03)


def test_a_prior_without_a_sketch_is_re_estimated_without_one(inputs) -> None:
    beta_only = replace(inputs.prior, quantiles=None)
    estimated = estimated_prior(beta_only, np.arange(500), np.random.default_rng(2), draw_from_prior)
    assert estimated is not None and estimated.quantiles is None
    assert 0.8 < np.std(_mean_error(beta_only, estimated)) < 1.2


def test_the_reference_size_is_the_priors_capped_and_zero_when_unknown(inputs) -> None:
    assert reference_size(inputs.prior) == 120
    assert reference_size(replace(inputs.prior, n_reference=10**6)) == MAX_REFERENCE
    assert reference_size(replace(inputs.prior, n_reference=0)) == 0
    means = prior_from_means(inputs.prior.probe_ids, inputs.prior.mean, name="means")
    assert means.n_reference == 0 and reference_size(means) == 0
    assert estimated_prior(means, np.arange(10), np.random.default_rng(0), draw_from_prior) is None


def test_the_people_come_from_the_truth_and_the_beacon_answers_from_the_estimate(inputs) -> None:
    world = synthetic_cohort(inputs, SMALL)
    assert world.reference == 120 and world.prior is not inputs.prior
    # the same people as with an exact prior: the reference is drawn after them
    exact_inputs = _with_reference(inputs, 0)
    exact = synthetic_cohort(exact_inputs, SMALL)
    assert exact.reference == 0 and exact.prior is exact_inputs.prior
    np.testing.assert_array_equal(world.cohort, exact.cohort)
    np.testing.assert_array_equal(world.victims, exact.victims)
    # outside the DMPs the members' means scatter around the truth by sd^2 / N, and around the
    # estimate by sd^2 / N + sd^2 / n_reference (N = 60, n = 120: 1.5 times as much)
    truth = inputs.prior
    others = np.setdiff1d(np.arange(world.cohort.shape[0]), world.disease.columns)
    rows = truth.index(world.probe_ids[others])
    member_mean = np.nanmean(world.cohort[others], axis=1)
    variance = truth.sd[rows] ** 2
    from_truth = np.mean((member_mean - truth.mean[rows]) ** 2 / variance) * inputs.patients
    from_estimate = np.mean((member_mean - world.prior.mean[others]) ** 2 / variance) * inputs.patients
    assert 0.8 < from_truth < 1.1
    assert from_estimate / from_truth == pytest.approx(1.5, abs=0.15)
    # the scenario's beacon and attacker use the world's prior
    assert scenario_for(world, inputs, SMALL).prior is world.prior
    assert scenario_for(exact, exact_inputs, SMALL).prior is exact_inputs.prior


def test_advice_on_a_prior_without_reference_count_keeps_it_exact_and_says_so(inputs) -> None:
    unknown = advise_inputs(_with_reference(inputs, 0), SMALL, workers=1)
    assert unknown.reference == 0 and "the prior itself" in unknown.description
    assert any("n_reference 0" in w and "optimistic" in w for w in unknown.warnings)
    estimated = advise_inputs(inputs, SMALL, workers=1)
    assert estimated.reference == 120 and "re-estimated from 120 reference people" in estimated.description
    assert not any("n_reference" in w for w in estimated.warnings)
    assert estimated.to_json()["synthetic"]["reference_people"] == 120
