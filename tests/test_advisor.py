"""The budget advisor: its synthetic cohort follows the prior, it never reads the cohort's values,
it compares every served mechanism and ranks them by the strongest attacker, its recommendation meets
its own target and loads as a dataset policy, and ``mbeacon budget advise`` works end to end."""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mbeacon.attack.advisor import (
    MECHANISMS,
    Advice,
    AdvisorConfig,
    Candidate,
    PublicInputs,
    advise,
    advise_inputs,
    candidates,
    choose_prior,
    draw_from_prior,
    public_inputs,
    rank,
    synthetic_cohort,
    synthetic_scenario,
)
from mbeacon.attack.defences import Defence
from mbeacon.attack.run import evaluate_setting
from mbeacon.beacon.config import dataset_policy, load_config
from mbeacon.beacon.sanitisers import SANITISERS, account_params, sanitiser_of
from mbeacon.cli import main
from mbeacon.store.cohorts import Cohort, CohortStore
from mbeacon.store.demo import DEMO_DATASET, DEMO_PRIOR, ensure_demo
from mbeacon.store.errors import DataError
from mbeacon.store.priors import Prior, beta_moments, load_prior, prior_from_matrix, save_prior

#: A grid small enough for the fast suite (a few seconds on one core), with every served mechanism.
TINY = AdvisorConfig(
    queries=100,
    probes=600,
    victims=25,
    repetitions=2,
    variants=("single",),
    epsilon=(1.0, 100.0),
    c=(5,),
    threshold=(1,),
    sanitiser_epsilon=(10.0,),
    sanitiser_c=(50,),
    margin=(0.0, 60.0),
    suppression_threshold=(5,),
    noisy_count_epsilon=(10.0,),
)
#: Only plain SVT².
TINY_SVT2 = replace(TINY, mechanisms=("svt2",))


def _served_by_dataset_policy(policy: dict) -> bool:
    """Whether a served sanitiser takes the policy's mechanism and every key it uses."""
    served = SANITISERS.get(policy["mechanism"])
    return served is not None and set(policy) <= set(served.policy_model.model_fields)


def _check_policy(table: dict, candidate: Candidate, prior: str) -> None:
    """The advised table is the candidate's setting, as a DatasetPolicy loads it."""
    expected = {"mechanism", "epsilon", "c", "threshold", "count_epsilon", "prior"}
    expected |= {
        "svt2": {"variant"},
        "svt2-margin": {"variant", "margin_above", "margin_below"},
        "svt2-noisy": {"variant", "margin_above", "margin_below", "release_share"},
        "online-pmw": {"variant", "margin", "release_share"},
    }[candidate.mechanism]
    assert set(table) == expected
    assert table["mechanism"] == candidate.mechanism and table["prior"] == prior
    assert (table["epsilon"], table["c"], table["threshold"]) == (
        candidate.epsilon,
        candidate.c,
        candidate.threshold,
    )
    assert table["count_epsilon"] == 0.0
    if candidate.margin is not None:
        margins = [table[k] for k in ("margin", "margin_above", "margin_below") if k in table]
        assert margins and all(m == candidate.margin for m in margins)
    if candidate.release_share is not None:
        assert table["release_share"] == pytest.approx(candidate.release_share)
    if not _served_by_dataset_policy(table):  # not yet on this branch: the keys above are the contract
        return
    policy = dataset_policy(**table)
    assert (policy.mechanism, policy.epsilon, policy.c, policy.threshold, policy.prior) == (
        candidate.mechanism, candidate.epsilon, candidate.c, candidate.threshold, prior,
    )  # fmt: skip
    if candidate.variant is not None:
        assert policy.variant == candidate.variant


def _defence_and_index(config: AdvisorConfig, candidate: Candidate) -> tuple[Defence, int]:
    """The grid setting behind ``candidate`` and its index in its grid (the evaluation's seed)."""
    for grid in config.grids():
        for index, defence in enumerate(grid.settings()):
            if defence.label == candidate.label:
                return defence, index
    raise AssertionError(f"{candidate.label} is in no grid of the config")


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
    assert {c.mechanism for c in original.settings} == set(MECHANISMS)
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
    assert rec is not None and rec.servable and rec.meets_target
    assert rec.risk == pytest.approx(rec.worst_auc + rec.worst_auc_sd) and rec.risk <= TINY.target_auc
    # evaluated again on the same synthetic scenario, it keeps the AUC under the target at every count
    scenario = synthetic_scenario(public_inputs(demo.store, DEMO_DATASET), TINY)
    defence, index = _defence_and_index(TINY, rec)
    rows = evaluate_setting(
        scenario, defence, TINY.query_counts, repetitions=TINY.repetitions, seed=[TINY.seed, index]
    )
    assert max(r["auc"] + r["auc_sd"] for r in rows) == pytest.approx(rec.risk)
    assert all(r["auc"] + r["auc_sd"] <= TINY.target_auc for r in rows)
    # the risk is the strongest attacker's: at least each attacker's own AUC
    worst = next(r for r in rows if r["queries"] == rec.worst_queries)
    assert rec.attacker == worst["attacker"]
    assert (
        rec.worst_auc >= max(a for a in (worst["auc_rarest"], worst["auc_tracker"]) if a is not None) - 1e-12
    )
    # nothing in the same tier (utility floors met or not) has better discovery utility beyond the tie
    tier = [c for c in advice.settings if c.meets_target and c.meets_utility == rec.meets_utility]
    assert (rec.utility_discovery or 0) >= max(c.utility_discovery or 0 for c in tier) - 0.02
    if not rec.meets_utility:
        assert not any(c.meets_target and c.meets_utility for c in advice.settings)
    # the snippet is the dataset policy of the setting
    _check_policy(tomllib.loads(advice.toml())["datasets"][DEMO_DATASET], rec, DEMO_PRIOR)
    assert advice.to_json()["policy"] == {**rec.policy(), "prior": DEMO_PRIOR}


def test_no_setting_meets_an_unreachable_target(demo) -> None:
    unsafe = replace(TINY_SVT2, epsilon=(100.0,), target_auc=0.5001)
    advice = advise(demo.store, DEMO_DATASET, config=unsafe, workers=1)
    assert advice.recommendation is None and advice.toml() == ""
    assert advice.closest is not None and advice.closest.risk > 0.5001
    assert advice.to_json()["recommendation"] is None


def test_the_grid_holds_each_mechanisms_own_parameters_and_the_known_winner() -> None:
    config = AdvisorConfig()
    settings = [d for grid in config.grids() for d in grid.settings()]
    by_name: dict[str, list[Defence]] = {}
    for d in settings:
        by_name.setdefault(d.name, []).append(d)
    assert set(by_name) == {"svt2-single", "svt2-redraw", "svt2-margin", "svt2-noisy", "online-pmw"}
    assert all(d.margin is None and d.release_share is None for d in by_name["svt2-single"])
    assert {d.margin for d in by_name["svt2-margin"]} == {20.0, 40.0, 60.0}  # 0 would be plain SVT²
    assert all(d.release_share is None for d in by_name["svt2-margin"])
    for name in ("svt2-noisy", "online-pmw"):
        assert {d.margin for d in by_name[name]} == {0.0, 20.0, 40.0, 60.0}
        assert {d.release_share for d in by_name[name]} == {1 / 3}
    # the setting docs/attack.md found in the corner (eps 10, c 50, margin 60, r 1/3, T = 1)
    winner = Defence("online-pmw", epsilon=10.0, c=50, threshold=1, margin=60.0, release_share=1 / 3)
    assert winner in by_name["online-pmw"]
    assert len(settings) == len(set(settings))
    # restricting the mechanisms and capping epsilon
    only = replace(config, mechanisms=("online-pmw",), max_epsilon=10.0)
    names = {d.name for grid in only.grids() for d in grid.settings()}
    assert names == {"online-pmw"}
    assert max(d.epsilon or 0 for grid in only.grids() for d in grid.settings()) == 10.0
    with pytest.raises(ValueError, match="mechanisms must be among"):
        AdvisorConfig(mechanisms=("svt3",))
    with pytest.raises(ValueError, match="at most max_epsilon"):
        AdvisorConfig(mechanisms=("online-pmw",), max_epsilon=1.0)


# --- ranking ---------------------------------------------------------------------------------------


def _candidate(
    label: str, ud: float, ur: float, eps: float, risk: float = 0.55, *, defence: str = "svt2-single",
    margin: float | None = None, share: float | None = None, ue: float | None = None, floors: bool = False,
) -> Candidate:  # fmt: skip
    return Candidate(defence, label, eps, 5, 1, 100, risk, 0.0, risk, 0.0, 100, risk, 0.0, ur, ud,
                     10.0, 0.0, risk <= 0.6, margin=margin, release_share=share, attacker="rarest",
                     utility_exploration=ue, meets_utility=floors)  # fmt: skip


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


def test_ranking_puts_the_corner_first_and_weighs_exploration_before_epsilon() -> None:
    settings, others = rank(
        [
            _candidate("svt2: more discovery, worse than the prior on random", 0.99, 0.87, 3.0),
            _candidate(
                "pmw m=60",
                0.946,
                0.977,
                10.0,
                defence="online-pmw",
                margin=60.0,
                share=1 / 3,
                ue=0.80,
                floors=True,
            ),
            _candidate(
                "pmw m=40",
                0.95,
                0.975,
                10.0,
                defence="online-pmw",
                margin=40.0,
                share=1 / 3,
                ue=0.90,
                floors=True,
            ),
            _candidate(
                "noisy m=0",
                0.94,
                0.972,
                3.0,
                defence="svt2-noisy",
                margin=0.0,
                share=1 / 3,
                ue=0.60,
                floors=True,
            ),
            _candidate("suppression", 1.0, 1.0, 0.0, risk=0.95, defence="suppression"),
        ]
    )
    # the corner (AUC target and both floors) first, whatever the discovery utility outside it; in it,
    # discovery and random tie, so the better exploration wins over the smaller epsilon
    assert [c.label for c in settings] == [
        "pmw m=40",
        "pmw m=60",
        "noisy m=0",
        "svt2: more discovery, worse than the prior on random",
    ]
    assert [c.label for c in others] == ["suppression"]
    # otherwise equal settings of one mechanism are told apart by their own parameters
    twins = [
        _candidate(f"pmw m={m}", 0.9, 0.98, 10.0, defence="online-pmw", margin=m, share=1 / 3, floors=True)
        for m in (60.0, 20.0)
    ]
    assert [c.margin for c in rank(twins)[0]] == [20.0, 60.0]


def _row(q: int, auc: float, sd: float, attacker: str, rarest: float, tracker: float) -> dict:
    return {"defence": "online-pmw", "label": "online-pmw eps=10 c=50 m=60 r=0.333333", "epsilon": 10.0,
            "c": 50, "threshold": 1, "margin": 60.0, "release_share": 1 / 3, "queries": q, "auc": auc,
            "auc_sd": sd, "attacker": attacker, "auc_rarest": rarest, "auc_tracker": tracker,
            "tpr_at_1pct_fpr": 0.02, "utility_random": 0.98, "utility_discovery": 0.95,
            "utility_exploration": 0.9, "burn_per_1000": None, "refused": 0.0}  # fmt: skip


def test_candidates_take_the_strongest_attackers_riskiest_count() -> None:
    rows = [
        _row(100, 0.58, 0.03, "tracker", 0.52, 0.58),  # the tracker is stronger early ...
        _row(1000, 0.56, 0.01, "rarest", 0.56, 0.51),  # ... and the rarest-range attack at the end
    ]
    (c,) = candidates(rows, AdvisorConfig())
    assert (c.worst_queries, c.attacker, c.auc_tracker, c.auc_rarest) == (100, "tracker", 0.58, 0.52)
    assert c.risk == pytest.approx(0.61) and not c.meets_target  # the rarest alone would meet 0.6
    assert (c.auc, c.queries) == (0.56, 1000)
    assert (c.mechanism, c.margin, c.release_share, c.variant, c.is_svt2) == (
        "online-pmw", 60.0, 1 / 3, "single", False,
    )  # fmt: skip
    assert c.meets_utility
    (strict,) = candidates(rows, replace(AdvisorConfig(), min_random=0.99))
    assert not strict.meets_utility


@pytest.mark.parametrize(
    ("defence", "margin", "share"),
    [("svt2-single", None, None), ("svt2-redraw", None, None), ("svt2-margin", 40.0, None),
     ("svt2-noisy", 20.0, 0.25), ("online-pmw", 60.0, 1 / 3)],
)  # fmt: skip
def test_every_mechanisms_advice_is_a_dataset_policy(
    defence: str, margin: float | None, share: float | None, tmp_path: Path
) -> None:
    candidate = _candidate("x", 0.9, 0.98, 10.0, defence=defence, margin=margin, share=share, floors=True)
    advice = Advice("demo-cohort", 100, DEMO_PRIOR, 1, "--prior", AdvisorConfig(), [candidate], [], 600, 25,
                    200, 30, "synthetic", 1.0)  # fmt: skip
    text = advice.toml()
    _check_policy(tomllib.loads(text)["datasets"]["demo-cohort"], candidate, DEMO_PRIOR)
    if not _served_by_dataset_policy(advice.policy()):
        return
    # pasted under [defaults] that say otherwise, the table still serves exactly the evaluated setting
    config = tmp_path / "mbeacon.toml"
    config.write_text(
        '[defaults]\nmechanism = "svt2"\nvariant = "redraw"\ncount_epsilon = 0.5\nepsilon = 1.0\n\n' + text
    )
    policy = load_config(config, env={}).policy("demo-cohort")
    assert (policy.mechanism, policy.epsilon, policy.count_epsilon) == (candidate.mechanism, 10.0, 0.0)
    assert policy.variant == candidate.variant
    # and the account the service opens under it has the parameters the evaluation ran
    account = account_params(policy)
    defence = Defence(defence, epsilon=10.0, c=5, threshold=1, margin=margin, release_share=share)
    if candidate.mechanism == "online-pmw":
        served, evaluated = (
            sanitiser_of(policy).mechanism_params(account, n=100),
            defence.with_cohort(100).pmw_params,
        )
    else:
        served, evaluated = sanitiser_of(policy).mechanism_params(account), defence.svt2_params
    assert type(served) is type(evaluated)
    for key, value in asdict(evaluated).items():
        assert getattr(served, key) == pytest.approx(value), key


@pytest.mark.slow
def test_the_advisor_recommends_a_corner_setting_when_its_grid_has_one(demo) -> None:
    """N = 100 on the demo's prior (as the default simulation's cohort): the grid holds plain SVT² and
    the sanitisers at eps 10, c 50; Online PMW with margin 60 reaches the corner (AUC <= 0.6, random
    >= 0.97, discovery >= 0.75) there, plain SVT² does not, and the advisor recommends a corner setting."""
    known = public_inputs(demo.store, DEMO_DATASET)
    inputs = PublicInputs(DEMO_DATASET, 100, known.probe_ids, known.prior, "--prior")
    config = AdvisorConfig(
        probes=2000,
        variants=("single",),
        epsilon=(10.0,),
        c=(50,),
        threshold=(1,),
        sanitiser_epsilon=(10.0,),
        sanitiser_c=(50,),
        margin=(0.0, 60.0),
        suppression_threshold=(),
        noisy_count_epsilon=(),
    )
    # both cores: the grid is seeded per setting, so any number of workers gives the same advice
    advice = advise_inputs(inputs, config, workers=2)
    rec = advice.recommendation
    assert rec is not None and rec.meets_target and rec.meets_utility
    assert rec.risk <= 0.6 and rec.utility_random >= 0.97 and rec.utility_discovery >= 0.75
    assert rec.mechanism == "online-pmw" and rec.margin == 60.0 and rec.epsilon <= 10
    svt2 = [c for c in advice.settings if c.is_svt2]
    assert svt2 and not any(c.meets_target and c.meets_utility for c in svt2)
    assert (
        rec.utility_random
        >= max(c.utility_random for c in advice.comparisons if c.defence == "prior-only") - 0.02
    )
    _check_policy(tomllib.loads(advice.toml())["datasets"][DEMO_DATASET], rec, known.prior.name)


# --- choosing the prior and errors -----------------------------------------------------------------------


def test_prior_is_the_configured_one_else_the_stores_default_else_the_only_one(
    store_copy: Path, tmp_path: Path
) -> None:
    assert choose_prior(store_copy, DEMO_DATASET, None) == (DEMO_PRIOR, "only prior in the store")
    prior = load_prior(store_copy, DEMO_PRIOR)
    save_prior(store_copy, replace(prior, name="other", version=None))
    assert choose_prior(store_copy, DEMO_DATASET, None)[0] == DEMO_PRIOR  # the store's recorded default
    (store_copy / "priors" / "DEFAULT").unlink()
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
        (["--dataset", DEMO_DATASET, "--mechanisms", "svt2,svt3"], "svt3: choose among svt2, svt2-margin"),
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
    assert payload["mechanisms"] == list(MECHANISMS)
    assert {s["mechanism"] for s in payload["settings"]} == set(MECHANISMS)
    assert (out / "frontier.png").stat().st_size > 10_000
    assert json.loads((out / "advice.json").read_text())["toml"] == payload["toml"]
    assert "Recommendation:" in result.stderr and "[datasets.demo-cohort]" in result.stderr
    # the JSON's policy is the TOML's table, key for key
    assert tomllib.loads(payload["toml"])["datasets"][DEMO_DATASET] == payload["policy"]
    assert payload["policy"] == {**payload["recommendation"]["policy"], "prior": DEMO_PRIOR}


def test_cli_mechanisms_and_max_epsilon_restrict_the_grid(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(AdvisorConfig, "quick", classmethod(lambda cls, **kw: replace(TINY, **kw)))
    args = ["budget", "advise", "--store", str(demo.store), "--dataset", DEMO_DATASET, "--quick",
            "--queries", "100", "--workers", "1", "--out", str(tmp_path), "--json",
            "--mechanisms", "online-pmw,svt2", "--max-epsilon", "10"]  # fmt: skip
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code in (0, 1), result.output
    payload = json.loads(result.stdout)
    assert payload["mechanisms"] == ["online-pmw", "svt2"] and payload["max_epsilon"] == 10.0
    assert {s["mechanism"] for s in payload["settings"]} == {"online-pmw", "svt2"}
    assert max(s["epsilon"] for s in payload["settings"]) <= 10.0
    # a cap below every epsilon of a mechanism's grid is a usage error, not an empty advice
    args = [*args[:-4], "--mechanisms", "online-pmw", "--max-epsilon", "1"]
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 2 and "max_epsilon" in result.output


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
    payload = json.loads((out / "advice.json").read_text())
    rec = payload["recommendation"]
    assert table == payload["policy"] and table["mechanism"] == rec["mechanism"]
    if _served_by_dataset_policy(table):
        policy = dataset_policy(**table)
        assert (policy.epsilon, policy.c, policy.threshold) == (rec["epsilon"], rec["c"], rec["threshold"])
    assert rec["risk"] <= 0.6
    # the quick grid (24 of SVT², 2 with margins, 4 each of svt2-noisy and online-pmw) without the 8
    # settings above the CLI's default --max-epsilon 10; suppression, prior x 2, noisy count
    assert payload["max_epsilon"] == 10.0 and all(s["epsilon"] <= 10.0 for s in payload["settings"])
    assert len(payload["settings"]) == 26 and len(payload["comparisons"]) == 4
    assert (out / "frontier.png").exists()


def test_cli_says_when_no_setting_meets_the_target(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsafe = replace(TINY_SVT2, epsilon=(100.0,))
    monkeypatch.setattr(AdvisorConfig, "quick", classmethod(lambda cls, **kw: replace(unsafe, **kw)))
    args = ["budget", "advise", "--store", str(demo.store), "--dataset", DEMO_DATASET, "--quick",
            "--queries", "100", "--workers", "1", "--out", str(tmp_path),
            "--target-auc", "0.5001", "--max-epsilon", "100"]  # fmt: skip
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 1, result.output
    assert "No setting of the grid keeps the attack under AUC 0.5001" in result.output
    assert "[datasets." not in result.output
    assert json.loads((tmp_path / "advice.json").read_text())["recommendation"] is None
    assert (tmp_path / "frontier.png").exists()
