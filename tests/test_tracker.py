"""The threshold-aware tracker: its bound search against an exact beacon (property tests), its model of
the test answer, and the evaluation's acceptance (suppression at T = 20 and T = 40 falls to it)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack.defences import Defence
from mbeacon.attack.evaluate import EvaluationConfig, EvaluationConfigError, build, load_evaluation_config
from mbeacon.attack.lrt import yes_probabilities
from mbeacon.attack.run import evaluate_setting
from mbeacon.attack.tracker import (
    GRID,
    Targets,
    TrackerSearch,
    difference_probabilities,
    difference_scores,
    first_grid_point_above,
)

#: 1 full-side query, at most 14 bisection steps (GRID = 2**14), 1 test.
MAX_QUERIES_PER_PROBE = 16


def _one_probe(values: np.ndarray, lo: float, hi: float, above: bool) -> Targets:
    one = np.ones((1, 1))
    return Targets(np.zeros((1, 1), np.int64), lo * one, hi * one, 0.01 * one, np.full((1, 1), above))


def _exact_ask(values: np.ndarray, threshold: int, log: list):
    def ask(runs, rows, lo, hi):
        count = int(np.sum((values >= lo[0]) & (values <= hi[0])))
        log.append((float(lo[0]), float(hi[0]), count))
        answer = np.array([int(count >= threshold)], np.int8)
        return answer, answer

    return ask


def _run(search: TrackerSearch, ask, limit: int = 100) -> int:
    steps = 0
    while not search.done and steps < limit:
        search.step(ask)
        steps += 1
    return steps


# values on distinct grid cells, away from the cell edges (so no two patients share a bound)
cells = st.lists(st.integers(1, GRID - 2), min_size=1, max_size=80, unique=True)


@settings(max_examples=150, deadline=None)
@given(cells=cells, threshold=st.integers(1, 30), centre=st.integers(1, GRID - 2), width=st.integers(0, 400),
       above=st.booleans())  # fmt: skip
def test_bound_search_finds_t_minus_one_and_the_test_asks_about_the_interval(
    cells, threshold, centre, width, above
) -> None:
    values = (np.array(cells) + 0.5) / GRID
    lo, hi = max(0.0, (centre - width) / GRID + 0.1 / GRID), min(1.0, (centre + width) / GRID + 0.1 / GRID)
    search = TrackerSearch(_one_probe(values, lo, hi, above), threshold, calibrate=False)
    log: list = []
    steps = _run(search, _exact_ask(values, threshold, log))
    assert search.done and steps <= MAX_QUERIES_PER_PROBE
    # the side searched, in true coordinates, from the first grid point clear of the interval (the
    # patients between the interval and that point count with the interval)
    if above:
        g0 = first_grid_point_above(hi)
        side = values >= g0 / GRID
    else:
        g0 = first_grid_point_above(1.0 - lo)
        side = values <= 1.0 - g0 / GRID
    if g0 > GRID:  # the interval touches the end: nothing to search on that side, nothing asked
        assert steps == 0
        return
    if side.sum() < threshold:  # one "no" on the full side and the probe is dropped
        assert steps == 1 and log[0][2] == side.sum() and search.differences().run.size == 0
        return
    tests = search.differences()
    assert tests.run.size == 1
    t_lo, t_hi = tests.lo[0], tests.hi[0]
    assert t_lo <= lo and t_hi >= hi  # the test range contains the victim's interval
    count_test = int(np.sum((values >= t_lo) & (values <= t_hi)))
    # ... and besides it (and the gap to the grid) exactly the T - 1 patients the search found
    gap_lo, gap_hi = (lo, g0 / GRID) if above else (1.0 - g0 / GRID, hi)
    near = int(np.sum((values >= min(lo, gap_lo)) & (values <= max(hi, gap_hi))))
    assert count_test - near == tests.believed[0] == (threshold - 1 if count_test - near > 0 else 0)
    # the test's answer is the T = 1 question on the interval (plus less than one grid cell)
    if tests.believed[0] == threshold - 1:
        assert tests.observation[0] == int(near >= 1)
    else:  # T patients in the first grid cell above the interval: R is empty
        assert tests.observation[0] == int(near >= threshold)
    # the search asked ranges that never contain the victim's interval, except the test
    for a, b, _ in log[:-1]:
        assert b < lo or a > hi


def test_a_refused_answer_ends_the_run() -> None:
    values = np.linspace(0.05, 0.95, 50)
    search = TrackerSearch(_one_probe(values, 0.5, 0.52, True), 5, calibrate=False)
    calls = []

    def refuse(runs, rows, lo, hi):
        calls.append(runs.size)
        return np.full(runs.size, -1, np.int8), np.full(runs.size, -1, np.int8)

    assert _run(search, refuse) == 1 and search.done and calls == [1] and search.differences().run.size == 0


def test_runs_move_on_their_own_and_skip_unusable_probes() -> None:
    """Two runs, three probes each; the unusable (-1 row, NaN interval) cost nothing."""
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 1, 200)
    rows = np.array([[0, -1, 0], [0, 0, 0]])
    lo = np.array([[0.30, 0.5, 0.60], [0.20, np.nan, 0.70]])
    targets = Targets(rows, lo, lo + 0.01, np.full((2, 3), 0.01), np.ones((2, 3), bool))
    search = TrackerSearch(targets, 10, calibrate=False)
    log: list = []

    def ask(runs, rows_, lo_, hi_):
        counts = ((values >= lo_[:, None]) & (values <= hi_[:, None])).sum(axis=1)
        log.append(runs.tolist())
        answer = (counts >= 10).astype(np.int8)
        return answer, answer

    _run(search, ask)
    tests = search.differences()
    assert sorted(tests.run.tolist()) == [0, 0, 1, 1] and set(tests.column.tolist()) == {0, 2}
    assert search.asked.tolist() == [sum(r.count(0) for r in log), sum(r.count(1) for r in log)]
    assert search.asked.max() <= 2 * MAX_QUERIES_PER_PROBE


def test_the_test_model_is_the_t1_question_under_an_exact_threshold() -> None:
    pi = np.array([0.002, 0.01, 0.05, 0.2])
    for t in (1, 5, 40):
        member, non = difference_probabilities(
            Defence("suppression", threshold=t), pi, np.zeros(4), np.full(4, t - 1), 100, 0.05
        )
        want_member, want_non = yes_probabilities(pi, 100, 1, 0.05)
        np.testing.assert_allclose(member, want_member, rtol=1e-9)
        np.testing.assert_allclose(non, want_non, rtol=1e-9)
    # the prior-only beacon answers from beta alone: the same for members and non-members
    member, non = difference_probabilities(
        Defence("prior-only", threshold=5), pi, np.full(4, 6.0), np.full(4, 4), 100, 0
    )
    np.testing.assert_array_equal(member, non)


def test_scores_land_on_the_query_that_asked() -> None:
    from mbeacon.attack.tracker import Differences

    tests = Differences(
        run=np.array([0, 0, 1]),
        step=np.array([2, 5, 1]),
        column=np.zeros(3, np.int64),
        believed=np.zeros(3, np.int64),
        lo=np.zeros(3),
        hi=np.zeros(3),
        observation=np.array([1, 0, -1], np.int8),
    )
    scores = difference_scores(tests, np.full(3, 0.8), np.full(3, 0.4), runs=2, queries=6)
    yes, no = np.log(2.0), np.log(0.2 / 0.6)
    np.testing.assert_allclose(scores[0], [0, 0, yes, yes, yes, yes + no])
    np.testing.assert_allclose(scores[1], 0.0)


@pytest.fixture(scope="module")
def small():
    config = EvaluationConfig(
        seed=2, queries=[300], simulation={"probes": 2000, "patients": 60, "nonmembers": 60, "seed": 4}
    )
    return build(config)


def test_the_tracker_beats_a_threshold_the_rarest_attacker_cannot(small) -> None:
    early, row = evaluate_setting(
        small, Defence("suppression", threshold=20), [10, 300], repetitions=1, seed=1
    )
    # after 10 queries the tracker has not finished a probe: its 0.5 is no AUC, the rarest one's stands
    assert (
        early["auc_tracker"] == 0.5 and early["attacker"] == "rarest" and early["auc"] == early["auc_rarest"]
    )
    assert row["attacker"] == "tracker" and row["auc"] == row["auc_tracker"] >= 0.9
    assert row["auc_rarest"] < 0.75
    (only,) = evaluate_setting(
        small, Defence("suppression", threshold=20), [300], repetitions=1, seed=1, attackers=("rarest",)
    )
    assert only["attacker"] == "rarest" and only["auc_tracker"] is None and only["auc"] == row["auc_rarest"]


@pytest.mark.parametrize(
    "defence",
    [Defence("prior-only", threshold=20), Defence("noisy-count", epsilon=1.0, threshold=20)],
    ids=lambda d: d.label,
)
def test_the_tracker_learns_nothing_where_nothing_is_released(small, defence) -> None:
    """The prior-only beacon says nothing about the cohort (scores all tie: exactly 0.5); noisy counts
    at eps = 1 over 300 queries drown one patient (scale 300): chance within 0.1 (3 repetitions)."""
    (row,) = evaluate_setting(small, defence, [300], repetitions=3, seed=1)
    assert abs(row["auc_tracker"] - 0.5) <= (0.0 if defence.name == "prior-only" else 0.1)


def test_the_config_names_its_attackers(tmp_path) -> None:
    path = tmp_path / "eval.toml"
    path.write_text('attackers = ["rarest", "oracle"]\n')
    with pytest.raises(EvaluationConfigError, match="attackers"):
        load_evaluation_config(path)
    path.write_text('attackers = ["tracker"]\n')
    assert load_evaluation_config(path).attackers == ["tracker"]


@pytest.mark.slow
def test_acceptance_suppression_at_t20_and_t40_falls_within_1000_queries() -> None:
    """The issue's acceptance on the default simulation: AUC >= 0.9 within 1,000 queries per victim."""
    config = load_evaluation_config()
    scenario = build(config)
    for t in (20, 40):
        rows = evaluate_setting(
            scenario, Defence("suppression", threshold=t), [1000], repetitions=1, seed=[1, t]
        )
        (row,) = rows
        assert row["queries"] == 1000 and row["attacker"] == "tracker", row
        assert row["auc"] >= 0.9, row


def test_live_answers_and_the_automatic_choice() -> None:
    from mbeacon.attack.live.errors import LiveAttackError
    from mbeacon.attack.live.tracker import choose_attacker, released_answers

    flags = np.array([1, 0, 1, 0, -1, 1], np.int8)
    prior = np.array([1, 1, 0, 0, 1, -1], np.int8)
    # answeredFrom = data negates the prior's answer; from the prior it is the prior's answer
    assert released_answers("svt2", flags, prior).tolist() == [0, 1, 1, 0, -1, -1]
    assert released_answers("none", flags, prior).tolist() == flags.tolist()
    assert choose_attacker("auto", Defence("suppression", threshold=20)) == "tracker"
    assert choose_attacker("auto", Defence("none")) == "rarest"
    assert choose_attacker("auto", Defence("svt2-single", epsilon=1.0, c=3, threshold=20)) == "rarest"
    assert choose_attacker("tracker", Defence("none")) == "tracker"
    with pytest.raises(LiveAttackError, match="unknown attacker"):
        choose_attacker("oracle", Defence("none"))


def test_scores_do_not_depend_on_the_last_bit_of_the_model() -> None:
    """A Dask worker's vectorised sums can differ from a local process's in the last bit; the scores
    (and so the ranking of nearly tied victims under heavy noise) must not."""
    from mbeacon.attack.tracker import Differences

    rng = np.random.default_rng(3)
    size = 2000
    tests = Differences(
        run=rng.integers(0, 50, size),
        step=rng.integers(0, 100, size),
        column=np.zeros(size, np.int64),
        believed=np.zeros(size, np.int64),
        lo=np.zeros(size),
        hi=np.zeros(size),
        observation=rng.integers(-1, 2, size).astype(np.int8),
    )
    p_member = 0.5 + rng.uniform(-1e-6, 1e-6, size)  # heavy noise: member and non-member nearly alike
    p_non = np.full(size, 0.5)
    exact = difference_scores(tests, p_member, p_non, runs=50, queries=100)
    nudged = difference_scores(
        tests, np.nextafter(p_member, 1.0), np.nextafter(p_non, 0.0), runs=50, queries=100
    )
    np.testing.assert_array_equal(exact, nudged)
