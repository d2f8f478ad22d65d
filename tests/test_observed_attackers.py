"""Attackers that read the whole response (flag, answer, released count) of the defences whose flag the
answer does not determine: the model is a probability law, and reading more beats reading less where
the response leaks more."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack.defences import FULL_OBSERVED, Defence
from mbeacon.attack.evaluate import JSON_KEYS, EvaluationConfig, build
from mbeacon.attack.lrt import lrt_scores, observation_probabilities, release_log_ratios
from mbeacon.attack.metrics import auc
from mbeacon.attack.run import evaluate_setting
from mbeacon.privacy.sparse_vector import BOT, TOP

N = 100
SETTINGS = [
    Defence("svt2-noisy", epsilon=10.0, c=50, threshold=5, margin=0.0, release_share=0.9),
    Defence("online-pmw", epsilon=10.0, c=50, threshold=5, margin=0.0, release_share=0.9, n=N),
    Defence("online-pmw", epsilon=10.0, c=50, threshold=1, margin=60.0, release_share=1 / 3, n=N),
]


@settings(max_examples=80, deadline=None)
@given(index=st.integers(0, len(SETTINGS) - 1), alpha=st.integers(0, N), beta=st.floats(0.0, N))
def test_the_observation_law_sums_to_one(index, alpha, beta) -> None:
    """Over every outcome (BOT; TOP with each answer; TOP with each released count) the likelihood
    sums to 1, and the answer-level law is the sum of the count-level one."""
    d = SETTINGS[index]
    bot = d.observation_likelihood(alpha, beta, BOT, 0, np.nan, use_counts=False)
    yes = d.observation_likelihood(alpha, beta, TOP, 1, np.nan, use_counts=False)
    no = d.observation_likelihood(alpha, beta, TOP, 0, np.nan, use_counts=False)
    assert float(bot + yes + no) == pytest.approx(1.0, abs=1e-9)
    # counts: v <= 0 is one outcome (the service releases max(v, 0)), then every v >= 1
    v = np.arange(0, alpha + 2000)
    counts = d.observation_likelihood(alpha, beta, TOP, (v >= d.threshold).astype(int), v, use_counts=True)
    assert float(counts.sum()) == pytest.approx(float(yes + no), abs=1e-9)
    assert float(d.observation_likelihood(alpha, beta, -1, -1, np.nan, use_counts=True)) == 1.0


def _aucs(defence: Defence, beta: float, seed: int = 0) -> tuple[float, float, float]:
    """AUCs of the answer-only, flag-reading and count-reading attackers on 200 + 200 victims, each
    asked 200 rare ranges (pi = 0.002: the victim is most of the count) whose prior says yes."""
    rng = np.random.default_rng(seed)
    victims, queries, pi = 400, 200, 0.002
    labels = np.arange(victims) < victims // 2
    alpha = rng.binomial(N - 1, pi, (victims, queries)) + labels[:, None]
    full = defence.with_cohort(N).release_all(alpha, np.full(alpha.shape, beta), rng)
    p_member, p_non = observation_probabilities(defence, np.full(alpha.shape, pi), beta, N, 0.0)
    answers = lrt_scores(full.answers, p_member, p_non)[:, -1]
    flags = release_log_ratios(defence, pi, beta, full, N, 0.0, use_counts=False).sum(axis=-1)
    counts = release_log_ratios(defence, pi, beta, full, N, 0.0, use_counts=True).sum(axis=-1)
    return auc(answers, labels), auc(flags, labels), auc(counts, labels)


@pytest.mark.parametrize("defence", SETTINGS[:2], ids=lambda d: d.label)
def test_reading_the_flag_and_the_count_beats_reading_the_answer(defence) -> None:
    """A case built to leak: T = 5, the prior says yes, the victim's range holds 0 or 1 patients, so
    every TOP's answer is "no" for members and non-members alike; the flag fires more often for a
    non-member (the data disagree more) and the released count (eps3 = 0.9 eps) shows the victim.
    Fixed seed; margins well beyond the AUCs' sd (about 0.03)."""
    answers, flags, counts = _aucs(defence, beta=10.0)
    assert flags >= answers + 0.08, (answers, flags, counts)
    assert counts >= flags + 0.05, (answers, flags, counts)


@pytest.fixture(scope="module")
def small():
    config = EvaluationConfig(
        seed=2, queries=[300], simulation={"probes": 2000, "patients": 60, "nonmembers": 60, "seed": 4}
    )
    return build(config)


def test_every_row_of_these_defences_is_scored_by_the_new_attackers(small) -> None:
    """The rows of svt2-noisy and online-pmw carry ``auc_flag`` and ``auc_count`` (the strongest one's
    AUC is ``auc``); other defences leave them null; the rarest attacker's figures do not move."""
    assert {"auc_flag", "auc_count", "auc_boundary"} <= set(JSON_KEYS)
    for defence in SETTINGS[:2]:
        (row,) = evaluate_setting(small, defence, [300], repetitions=2, seed=1)
        (old,) = evaluate_setting(
            small, defence, [300], repetitions=2, seed=1, attackers=("rarest", "tracker")
        )
        assert row["auc_flag"] is not None and row["auc_count"] is not None
        assert row["auc_rarest"] == old["auc_rarest"] and row["auc_tracker"] == old["auc_tracker"]
        each = {name: row[f"auc_{name}"] for name in ("rarest", "tracker", "flag", "count", "boundary")}
        assert row["auc"] == max(each.values()) and each[row["attacker"]] == row["auc"]
    (svt2,) = evaluate_setting(small, Defence("svt2-single", epsilon=10.0, c=5), [300], repetitions=1, seed=1)
    assert svt2["auc_flag"] is None and svt2["auc_count"] is None and svt2["auc_boundary"] is None
    assert set(FULL_OBSERVED) == {"svt2-noisy", "online-pmw", "cohort-pmw"}


def _dmp_scenario(probes: int = 200, n: int = 100, seed: int = 0, queries: int = 300):
    """Every probe a strong DMP: the cohort's population sits around 0.55-0.85 (sd 0.05), the general
    population's prior around 0.1-0.3. Victims: 100 members and 100 people of the same population."""
    from mbeacon.attack.scenario import build_scenario
    from mbeacon.store.priors import prior_from_matrix

    rng = np.random.default_rng(seed)
    ids = np.array([f"cg{i:08d}" for i in range(probes)])
    centre = rng.uniform(0.55, 0.85, probes)
    cohort = np.clip(centre[:, None] + rng.normal(0, 0.05, (probes, n)), 0, 1)
    others = np.clip(centre[:, None] + rng.normal(0, 0.05, (probes, n)), 0, 1)
    reference = np.clip(rng.uniform(0.1, 0.3, probes)[:, None] + rng.normal(0, 0.03, (probes, 200)), 0, 1)
    prior = prior_from_matrix(ids, reference, name="reference")
    noise = 0.01
    victims = np.vstack(
        [(cohort + rng.normal(0, noise, cohort.shape)).T, (others + rng.normal(0, noise, others.shape)).T]
    )
    labels = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    return build_scenario(cohort, ids, victims, labels, prior, queries=queries, noise_sd=noise)


#: The review's setting: Online PMW at epsilon 10, c = 50, T = 1, margin 60, a third on the counts.
PMW_MARGIN = SETTINGS[2]


def test_the_boundary_model_aims_below_the_margin() -> None:
    """From public parameters only: at T + margin a TOP is cheap but the window is mostly other people;
    the count that tells the most over 1,000 queries is far below it, and still buys about c TOPs."""
    from mbeacon.attack.boundary import boundary_model

    model = boundary_model(PMW_MARGIN, N, 1000)
    assert 15 <= model.target <= 35
    at_margin = float(model.value(np.array(61 / N)))
    assert float(model.value(np.array(model.target / N))) >= 2.0 * at_margin
    assert 1000 * model.p_top[model.target] >= 0.8 * 50


def test_the_boundary_plan_asks_where_the_window_tells_the_most() -> None:
    """Each planned window holds about the model's target of the pool (leave-one-out) and fewer than T
    by the prior; the victim's own value is inside it; probes come most telling first."""
    from mbeacon.attack.boundary import boundary_model, plan_boundary

    scenario = _dmp_scenario(probes=60)
    assert scenario.profiles is not None and scenario.prior is not None
    model = boundary_model(PMW_MARGIN, N, 1000)
    plan = plan_boundary(
        scenario.profiles, np.arange(60), scenario.prior.probability, model=model, below=1.0, noise_sd=0.01
    )
    valid = plan.rows >= 0
    assert valid.sum(axis=1).min() >= 50
    assert np.all(plan.beta[valid] < 1.0)
    assert np.median(np.abs(N * plan.pi[valid] - model.target)) <= 6.0
    victim, column = np.nonzero(valid)
    x = scenario.profiles[victim, plan.rows[victim, column]]
    assert np.all((plan.lo[valid] <= x) & (x <= plan.hi[valid]))
    value = np.where(valid, model.value(np.nan_to_num(plan.pi), np.nan_to_num(plan.miss)), 0.0)
    assert np.all(np.diff(value, axis=1) <= 1e-12)


def test_the_boundary_attacker_spends_the_positives_at_the_victims_windows() -> None:
    """At the review's setting every account asks each window until a TOP and so spends (nearly) all c
    positives within 1,000 queries, each at a window around its victim's value holding fewer than
    T + margin of the pool; a released count is the window's count plus the release noise. Fixed seed; the
    tolerances are several standard errors wide."""
    from mbeacon.attack.tracker_eval import boundary_search

    scenario = _dmp_scenario(queries=1000)
    assert scenario.profiles is not None
    defence = PMW_MARGIN.with_cohort(scenario.n)
    search = boundary_search(scenario, defence, repetitions=1, rng=np.random.default_rng(3))
    assert search is not None
    log, plan = search.log(), search.plan
    top = log["flag"] == TOP
    positives = np.bincount(log["run"][top], minlength=scenario.victims)
    assert positives.max() <= 50 and positives.mean() >= 0.85 * 50, np.percentile(positives, [5, 50])
    assert search.asked.max() <= 1000
    run, col = log["run"][top], log["column"][top]
    x = scenario.profiles[run, plan.rows[run, col]]
    assert np.all((plan.lo[run, col] <= x) & (x <= plan.hi[run, col]))
    assert np.all(plan.beta[run, col] < 1.0)
    # one TOP per window (Online PMW then answers it from the data)
    assert np.unique(run * plan.rows.shape[1] + col).size == run.size
    assert np.median(N * plan.pi[run, col]) < 1 + 60.0  # below T + margin: each TOP tells more
    noise = log["count"][top] - N * plan.pi[run, col]
    assert abs(float(np.mean(noise))) <= 6.0  # TOPs favour fuller windows, a few patients at most


@pytest.mark.slow
def test_the_boundary_attacker_beats_the_others_where_the_margin_hides_rare_ranges() -> None:
    """A case built to leak through the margin: Online PMW (eps 30, c 50, T = 1, margin 60) at strong
    DMPs. The rarest ranges never reach the margin (AUC near 0.5); windows holding about 61 people do,
    and their TOPs' odds and counts move with the victim. Fixed seed; margin well beyond the sd."""
    scenario = _dmp_scenario()
    defence = Defence("online-pmw", epsilon=30.0, c=50, threshold=1, margin=60.0, release_share=0.5)
    (row,) = evaluate_setting(scenario, defence, [300], repetitions=2, seed=1)
    others = max(row["auc_rarest"], row["auc_tracker"], row["auc_flag"], row["auc_count"])
    assert row["attacker"] == "boundary" and row["auc_boundary"] >= others + 0.05, row
