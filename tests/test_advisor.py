"""The budget advisor: its synthetic cohort follows the prior, it never reads the cohort's values,
its recommendation meets its own target, and ``mbeacon budget advise`` works end to end."""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mbeacon.attack.advisor import (
    AdvisorConfig,
    Candidate,
    PublicInputs,
    advise,
    choose_prior,
    draw_from_prior,
    public_inputs,
    rank,
    synthetic_cohort,
    synthetic_scenario,
)
from mbeacon.attack.defences import Defence
from mbeacon.attack.run import evaluate_setting
from mbeacon.beacon.config import DatasetPolicy, load_config
from mbeacon.cli import main
from mbeacon.store.cohorts import Cohort, CohortStore
from mbeacon.store.demo import DEMO_DATASET, DEMO_PRIOR, ensure_demo
from mbeacon.store.errors import DataError
from mbeacon.store.priors import Prior, beta_moments, load_prior, prior_from_matrix, save_prior

#: A grid small enough for the fast suite (a few seconds on one core).
TINY = AdvisorConfig(
    queries=100,
    probes=600,
    victims=25,
    repetitions=2,
    variants=("single",),
    epsilon=(1.0, 100.0),
    c=(5,),
    threshold=(1,),
    suppression_threshold=(5,),
    noisy_count_epsilon=(10.0,),
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")


@pytest.fixture
def store_copy(demo, tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(demo.store, root)
    return root


def _rewrite(root: Path, values) -> None:
    """Replace the demo cohort's beta matrix (same ids, same size) by ``values(original)``."""
    source = CohortStore(root).open(DEMO_DATASET)
    ids, samples = source.probe_ids.tolist(), source.sample_ids.tolist()
    original = source.rows(np.arange(source.n_probes))
    CohortStore(root).write(DEMO_DATASET, samples, [(ids, values(original))], replace=True)


# --- the synthetic draw ------------------------------------------------------------------------------


def test_draws_follow_the_quantile_sketch(demo) -> None:
    prior = load_prior(demo.store, DEMO_PRIOR)
    rows = np.arange(0, len(prior), 10)
    people = 4000
    x = draw_from_prior(prior, rows, people, np.random.default_rng(7))
    assert x.shape == (people, rows.size) and np.all((x >= 0) & (x <= 1))
    # The sample CDF at every sketch quantile against the prior's own CDF there (DKW: the sup
    # distance exceeds 0.04 with probability below 1e-5 per probe at 4,000 draws).
    sketch = prior.quantiles[rows].astype(np.float64)
    empirical = np.mean(x[:, :, None] <= sketch[None, :, :], axis=0)
    model = prior.probability(np.repeat(rows[:, None], sketch.shape[1], 1), 0.0, sketch)
    assert np.max(np.abs(empirical - model)) < 0.04
    # and the means agree with the prior's
    np.testing.assert_allclose(x.mean(axis=0), prior.mean[rows], atol=0.01)


def test_draws_follow_the_beta_where_there_is_no_sketch() -> None:
    ids = np.array([f"cg{i:08d}" for i in range(50)])
    mean = np.linspace(0.05, 0.95, 50)
    sd = 0.3 * np.sqrt(mean * (1 - mean)) / 2
    a, b = beta_moments(mean, sd)
    prior = Prior("beta-only", None, ids, mean, sd, a, b, None, 0)
    x = draw_from_prior(prior, np.arange(50), 20_000, np.random.default_rng(3))
    np.testing.assert_allclose(x.mean(axis=0), mean, atol=0.005)
    np.testing.assert_allclose(x.std(axis=0), sd, rtol=0.05)


def test_synthetic_cohort_has_the_simulations_disease_and_noise(demo) -> None:
    inputs = public_inputs(demo.store, DEMO_DATASET)
    config = replace(TINY, probes=2000, victims=60, queries=1000)
    world = synthetic_cohort(inputs, config)
    assert world.cohort.shape == (2000, 60)  # N = the dataset's size, every shared probe
    assert world.victims.shape == (120, 2000) and world.labels.sum() == 60
    assert world.disease.columns.size == 40  # 2% DMPs
    assert np.all((np.abs(world.disease.delta) >= 0.1 - 1e-9) & (np.abs(world.disease.delta) <= 0.3 + 1e-9))
    assert 0.002 < np.isnan(world.cohort).mean() < 0.008  # 0.5% missing
    # the members' re-measurements are their cohort values plus noise of sd 0.02
    diff = world.victims[:60] - world.cohort.T
    assert np.nanstd(diff) == pytest.approx(0.02, rel=0.15)
    # DMP means moved by delta, the others stayed with the prior
    prior_mean = inputs.prior.mean[inputs.prior.index(world.probe_ids)]
    moved = np.nanmean(world.cohort, axis=1) - prior_mean
    dmp = world.disease.columns
    assert np.corrcoef(moved[dmp], world.disease.delta)[0, 1] > 0.95
    others = np.setdiff1d(np.arange(2000), dmp)
    assert np.median(np.abs(moved[others])) < 0.02


def test_the_same_seed_gives_the_same_scenario(demo) -> None:
    inputs = public_inputs(demo.store, DEMO_DATASET)
    one, two = synthetic_scenario(inputs, TINY), synthetic_scenario(inputs, TINY)
    np.testing.assert_array_equal(one.alpha, two.alpha)
    other = synthetic_scenario(inputs, replace(TINY, seed=2))
    assert not np.array_equal(one.alpha, other.alpha)


# --- public inputs only ----------------------------------------------------------------------------


def _forbid_values(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the advisor read the cohort's beta values")

    for name in ("rows", "count_in_range", "blocks"):
        monkeypatch.setattr(Cohort, name, refuse)


def test_advice_never_reads_the_cohorts_values(store_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = advise(store_copy, DEMO_DATASET, config=TINY, workers=1)
    # the values replaced by NaN, then by a permutation of the real ones: the same advice
    _rewrite(store_copy, lambda v: np.full_like(v, np.nan))
    nan_store = advise(store_copy, DEMO_DATASET, config=TINY, workers=1)
    _rewrite(store_copy, lambda v: np.random.default_rng(0).permutation(v.ravel()).reshape(v.shape))
    _forbid_values(monkeypatch)  # and no reader of the values is ever called
    permuted = advise(store_copy, DEMO_DATASET, config=TINY, workers=1)
    for other in (nan_store, permuted):
        assert other.settings == original.settings
        assert other.comparisons == original.comparisons
        assert other.toml() == original.toml()


def test_recommendation_meets_its_own_target_on_its_own_scenario(demo) -> None:
    advice = advise(demo.store, DEMO_DATASET, config=TINY, workers=1)
    rec = advice.recommendation
    assert rec is not None and rec.is_svt2 and rec.meets_target
    assert rec.risk == pytest.approx(rec.worst_auc + rec.worst_auc_sd) and rec.risk <= TINY.target_auc
    # evaluated again on the same synthetic scenario, it keeps the AUC under the target at every count
    scenario = synthetic_scenario(public_inputs(demo.store, DEMO_DATASET), TINY)
    defence = Defence(rec.defence, threshold=rec.threshold, epsilon=rec.epsilon, c=rec.c)
    index = [s.label for s in TINY.svt2_grid().settings()].index(rec.label)
    rows = evaluate_setting(
        scenario, defence, TINY.query_counts, repetitions=TINY.repetitions, seed=[TINY.seed, index]
    )
    assert max(r["auc"] + r["auc_sd"] for r in rows) == pytest.approx(rec.risk)
    assert all(r["auc"] + r["auc_sd"] <= TINY.target_auc for r in rows)
    # and nothing that meets the target has better discovery utility (beyond the 0.02 tie)
    best = max(c.utility_discovery or 0 for c in advice.settings if c.meets_target)
    assert (rec.utility_discovery or 0) >= best - 0.02
    # the snippet is a valid dataset policy
    table = tomllib.loads(advice.toml())["datasets"][DEMO_DATASET]
    policy = DatasetPolicy.model_validate(table)
    assert (policy.epsilon, policy.c, policy.threshold, policy.variant) == (
        rec.epsilon,
        rec.c,
        rec.threshold,
        rec.variant,
    )
    assert policy.prior == DEMO_PRIOR


def test_no_setting_meets_an_unreachable_target(demo) -> None:
    unsafe = replace(TINY, epsilon=(100.0,), target_auc=0.5001)
    advice = advise(demo.store, DEMO_DATASET, config=unsafe, workers=1)
    assert advice.recommendation is None and advice.toml() == ""
    assert advice.closest is not None and advice.closest.risk > 0.5001
    assert advice.to_json()["recommendation"] is None


def _candidate(label: str, ud: float, ur: float, eps: float, risk: float = 0.55) -> Candidate:
    return Candidate("svt2-single", label, eps, 5, 1, 100, risk, 0.0, risk, 0.0, 100, risk, 0.0, ur, ud,
                     10.0, 0.0, risk <= 0.6)  # fmt: skip


def test_ranking_prefers_discovery_then_random_utility_then_smaller_epsilon() -> None:
    settings, _ = rank(
        [
            _candidate("unsafe", 0.99, 0.99, 1.0, risk=0.7),
            _candidate("less discovery", 0.85, 0.99, 1.0),
            _candidate("most discovery", 0.93, 0.80, 10.0),
            _candidate("tie, better random", 0.915, 0.95, 30.0),  # within 0.02 on discovery
            _candidate("tie, tie, smaller eps", 0.912, 0.945, 3.0),  # and within 0.01 on random
        ]
    )
    assert [c.label for c in settings] == [
        "tie, tie, smaller eps",
        "tie, better random",
        "most discovery",
        "less discovery",
        "unsafe",
    ]


# --- choosing the prior and errors -----------------------------------------------------------------------


def test_prior_is_the_configured_one_else_the_only_one(store_copy: Path, tmp_path: Path) -> None:
    assert choose_prior(store_copy, DEMO_DATASET, None) == (DEMO_PRIOR, "only prior in the store")
    prior = load_prior(store_copy, DEMO_PRIOR)
    save_prior(store_copy, replace(prior, name="other", version=None))
    with pytest.raises(DataError, match=r"2 priors .*--prior NAME"):
        choose_prior(store_copy, DEMO_DATASET, None)
    assert choose_prior(store_copy, DEMO_DATASET, "other") == ("other", "--prior")
    config = tmp_path / "mbeacon.toml"
    table = f'[datasets.{DEMO_DATASET}]\nprior = "other"\n'
    config.write_text(f'store = "{store_copy}"\ndefault_prior = "{DEMO_PRIOR}"\n{table}')
    assert choose_prior(store_copy, DEMO_DATASET, None, load_config(config, env={})) == ("other", "config")
    assert choose_prior(store_copy, "elsewhere", None, load_config(config, env={}))[0] == DEMO_PRIOR


def test_too_many_queries_for_the_probes_is_a_clear_error(demo) -> None:
    inputs = public_inputs(demo.store, DEMO_DATASET)
    with pytest.raises(DataError, match=r"5000 queries per victim need as many probes.*2000"):
        synthetic_cohort(inputs, replace(TINY, queries=5000, probes=20_000))


def test_a_prior_without_the_datasets_probes_is_a_clear_error(demo) -> None:
    inputs = public_inputs(demo.store, DEMO_DATASET)
    elsewhere = prior_from_matrix(["cgX"], np.array([[0.1, 0.2, 0.3]]), name="elsewhere")
    with pytest.raises(DataError, match="no usable statistics for any probe"):
        synthetic_cohort(PublicInputs(DEMO_DATASET, 60, inputs.probe_ids, elsewhere, "--prior"), TINY)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "no-such-cohort"], "error: no dataset 'no-such-cohort'"),
        (["--dataset", DEMO_DATASET, "--prior", "no-such-prior"], "error: no prior named 'no-such-prior'"),
        (["--dataset", "bad id!"], "error: invalid dataset id"),
    ],
)
def test_cli_errors(demo, tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(
        main, ["budget", "advise", "--store", str(demo.store), "--out", str(tmp_path), *args], env={}
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_cli_needs_a_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["budget", "advise", "--dataset", DEMO_DATASET], env={"MBEACON_CONFIG": ""}
    )
    assert result.exit_code == 2 and "--store" in result.output


# --- the command, end to end ---------------------------------------------------------------------------


def test_cli_end_to_end_with_a_tiny_grid(demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AdvisorConfig, "quick", classmethod(lambda cls, **kw: replace(TINY, **kw)))
    out = tmp_path / "advice"
    args = ["budget", "advise", "--store", str(demo.store), "--dataset", DEMO_DATASET, "--quick",
            "--queries", "100", "--workers", "1", "--out", str(out), "--json"]  # fmt: skip
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["recommendation"]["meets_target"] and payload["queries"] == 100
    assert payload["prior"] == {"name": DEMO_PRIOR, "version": 1, "chosen_by": "only prior in the store"}
    assert (out / "frontier.png").stat().st_size > 10_000
    assert json.loads((out / "advice.json").read_text())["toml"] == payload["toml"]
    assert "Recommendation:" in result.stderr and "[datasets.demo-cohort]" in result.stderr


@pytest.mark.slow
def test_cli_quick_on_the_demo_store(demo, tmp_path: Path) -> None:
    out = tmp_path / "advice"
    args = ["budget", "advise", "--store", str(demo.store), "--dataset", DEMO_DATASET, "--quick",
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 0, result.output
    assert "Recommendation:" in result.output
    snippet = result.output[result.output.index("# mbeacon budget advise") :].split("\nWrote")[0]
    table = tomllib.loads(snippet)["datasets"][DEMO_DATASET]
    policy = DatasetPolicy.model_validate(table)
    payload = json.loads((out / "advice.json").read_text())
    rec = payload["recommendation"]
    assert (policy.epsilon, policy.c, policy.threshold, policy.variant) == (
        rec["epsilon"],
        rec["c"],
        rec["threshold"],
        rec["variant"],
    )
    assert rec["risk"] <= 0.6
    assert len(payload["settings"]) == 24 and len(payload["comparisons"]) == 2
    assert (out / "frontier.png").exists()


def test_cli_says_when_no_setting_meets_the_target(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsafe = replace(TINY, epsilon=(100.0,))
    monkeypatch.setattr(AdvisorConfig, "quick", classmethod(lambda cls, **kw: replace(unsafe, **kw)))
    args = ["budget", "advise", "--store", str(demo.store), "--dataset", DEMO_DATASET, "--quick",
            "--queries", "100", "--workers", "1", "--out", str(tmp_path),
            "--target-auc", "0.5001"]  # fmt: skip
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 1, result.output
    assert "No setting of the grid keeps the attack under AUC 0.5001" in result.output
    assert "[datasets." not in result.output
    assert json.loads((tmp_path / "advice.json").read_text())["recommendation"] is None
    assert (tmp_path / "frontier.png").exists()
