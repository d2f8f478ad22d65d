"""Tests for the cost rules (:mod:`mbeacon.privacy.accounting`): SVT²'s spend so far and in total,
pay-what-you-get accounting for repeated unknown-domain top-k queries, and the composition bounds."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.privacy import svt2_epsilon as package_svt2_epsilon
from mbeacon.privacy.accounting import (
    advanced_composition,
    bounded_range_composition,
    svt2_epsilon,
    svt2_spent,
)
from mbeacon.privacy.research.pay_what_you_get import PayWhatYouGet, PayWhatYouGetExhausted
from mbeacon.privacy.svt2 import svt2_allocate
from mbeacon.privacy.svt2 import svt2_epsilon as svt2_module_svt2_epsilon

SEED = 1618033
HUGE_EPS = 1e12

histograms = st.dictionaries(st.text("abcdefghij", min_size=1, max_size=3), st.integers(0, 200), max_size=30)


# --- SVT² -------------------------------------------------------------------------------------------


def test_epsilon_formulas():
    assert svt2_epsilon(0.1, 0.4, 5, redraw=False) == pytest.approx(2 * (0.1 + 0.4))
    assert svt2_epsilon(0.1, 0.4, 5, redraw=True) == pytest.approx(2 * (5 * 0.1 + 0.4))
    with pytest.raises(ValueError):
        svt2_epsilon(0.0, 0.4, 5, redraw=False)


def test_svt2_epsilon_is_importable_where_it_always_was():
    assert package_svt2_epsilon is svt2_module_svt2_epsilon is svt2_epsilon


def test_spent_follows_the_documented_rule():
    # single pair: 2 eps1 up front, then 2 eps2 / c a positive
    assert [svt2_spent(0.1, 0.4, 4, j, redraw=False) for j in range(5)] == pytest.approx(
        [0.2, 0.4, 0.6, 0.8, 1.0]
    )
    # redraw: a new pair after every positive but the last
    assert [svt2_spent(0.1, 0.4, 4, j, redraw=True) for j in range(5)] == pytest.approx(
        [0.2, 0.6, 1.0, 1.4, 1.6]
    )
    # a noisy count with each positive: count_epsilon / c more a positive
    assert svt2_spent(0.1, 0.4, 4, 2, redraw=False, count_epsilon=0.8) == pytest.approx(0.6 + 0.4)


@settings(max_examples=300, deadline=None)
@given(
    epsilon=st.floats(1e-3, 100.0),
    c=st.integers(1, 500),
    redraw=st.booleans(),
    count_share=st.one_of(st.just(0.0), st.floats(0.0, 0.9)),
)
def test_spent_grows_to_exactly_the_promised_total(epsilon, c, redraw, count_share) -> None:
    count_epsilon = epsilon * count_share
    eps1, eps2 = svt2_allocate(epsilon - count_epsilon, c, redraw=redraw)
    spent = [svt2_spent(eps1, eps2, c, j, redraw=redraw, count_epsilon=count_epsilon) for j in range(c + 1)]
    assert spent == sorted(spent) and spent[0] == 2 * eps1
    assert spent[-1] == pytest.approx(svt2_epsilon(eps1, eps2, c, redraw=redraw) + count_epsilon, rel=1e-15)
    assert spent[-1] == pytest.approx(epsilon, rel=1e-12)


@pytest.mark.parametrize("positives", [-1, 6, 2.5, True])
def test_spent_refuses_positives_outside_the_run(positives) -> None:
    with pytest.raises((ValueError, TypeError), match="positives"):
        svt2_spent(0.1, 0.4, 5, positives, redraw=False)


# --- pay-what-you-get -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    k_star=st.integers(2, 30),
    l_star=st.integers(1, 10),
    queries=st.lists(st.tuples(histograms, st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=15),
    eps=st.one_of(st.floats(0.1, 5.0), st.just(HUGE_EPS)),
    seed=st.integers(0, 2**32 - 1),
)
def test_pay_what_you_get_accounting(k_star, l_star, queries, eps, seed) -> None:
    budget = PayWhatYouGet(k_star=k_star, l_star=l_star, epsilon=eps, delta=1e-3)
    assert (budget.units_left, budget.queries_left) == (k_star, l_star)
    gen = np.random.default_rng(seed)
    for histogram, k, kbar in queries:
        units, left = budget.units_left, budget.queries_left
        if left < 1 or units < 2:
            with pytest.raises(PayWhatYouGetExhausted):
                budget.query(histogram, k, kbar, rng=gen)
            assert (budget.units_left, budget.queries_left) == (units, left)  # a refused query is free
            continue
        release = budget.query(histogram, k, kbar, rng=gen)
        assert len(release) <= min(k, units - 1)  # never asks for more than it can pay
        assert budget.units_left == units - (len(release) + 1)
        assert budget.queries_left == left - 1
        assert budget.units_left >= 0


def test_pay_what_you_get_exhaustion() -> None:
    many = {f"item{i}": 10_000 - i for i in range(20)} | {"rare": 0}
    budget = PayWhatYouGet(k_star=5, l_star=10, epsilon=1.0, delta=1e-6)
    release = budget.query(many, 10, 20, rng=SEED)
    assert len(release) == 4  # the only 4 it can pay for (+1 for the query itself)
    assert budget.units_left == 0
    with pytest.raises(PayWhatYouGetExhausted):
        budget.query(many, 1, 20, rng=SEED)
    # a single unit cannot pay for a query that may return an item
    budget = PayWhatYouGet(k_star=3, l_star=10, epsilon=1.0, delta=1e-6)
    budget.query(many, 1, 20, rng=SEED)
    assert budget.units_left == 1
    with pytest.raises(PayWhatYouGetExhausted):
        budget.query(many, 1, 20, rng=SEED)
    # query count: queries returning nothing still cost one unit and one query
    budget = PayWhatYouGet(k_star=100, l_star=2, epsilon=1.0, delta=1e-6)
    for _ in range(2):
        assert len(budget.query({}, 5, 5, rng=SEED)) == 0
    assert (budget.units_left, budget.queries_left) == (98, 0)
    with pytest.raises(PayWhatYouGetExhausted):
        budget.query({}, 5, 5, rng=SEED)


def test_pay_what_you_get_never_overspends_with_nonpositive_k() -> None:
    histogram = {str(i): 1000 for i in range(10)} | {"tail": 0}
    budget = PayWhatYouGet(k_star=3, l_star=5, epsilon=1.0, delta=0.1)
    with contextlib.suppress(ValueError):  # rejecting k = -1 outright is fine too
        budget.query(histogram, -1, 10, rng=1)
    assert budget.units_left >= 0


@pytest.mark.parametrize(("k_star", "l_star"), [(1, 5), (0, 5), (5, 0)])
def test_pay_what_you_get_rejects_bad_budgets(k_star: int, l_star: int) -> None:
    with pytest.raises(ValueError):
        PayWhatYouGet(k_star=k_star, l_star=l_star, epsilon=1.0, delta=1e-6)


def test_pay_what_you_get_totals() -> None:
    budget = PayWhatYouGet(k_star=50, l_star=10, epsilon=0.1, delta=1e-7, delta_prime=1e-8)
    assert budget.epsilon_total == bounded_range_composition(50, 0.1, 1e-8)
    assert budget.epsilon_total <= 50 * 0.1
    assert budget.delta_total == pytest.approx(10 * 1e-7 + 1e-8)


# --- composition bounds -----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(units=st.integers(-3, 100_000), eps=st.floats(1e-4, 5.0), delta=st.floats(1e-12, 0.5))
def test_composition_bounds(units: int, eps: float, delta: float) -> None:
    br = bounded_range_composition(units, eps, delta)
    adv = advanced_composition(units, eps, delta)
    if units <= 0:
        assert br == adv == 0.0
        return
    assert 0 < br <= units * eps
    assert 0 < adv <= units * eps
    # an eps-BR mechanism is eps-DP, and the BR bound is never worse than advanced composition
    assert br <= adv * (1 + 1e-12)
    # monotone in the number of units
    assert bounded_range_composition(units + 1, eps, delta) >= br
    assert advanced_composition(units + 1, eps, delta) >= adv
    assert bounded_range_composition(2 * units, eps, delta) >= br
    # a smaller delta never gives a smaller epsilon
    assert bounded_range_composition(units, eps, delta / 10) >= br


@pytest.mark.parametrize("eps", [0.01, 0.05, 0.1])
@pytest.mark.parametrize("units", [100, 1_000, 10_000])
def test_bounded_range_beats_advanced_composition_in_typical_regime(eps: float, units: int) -> None:
    br = bounded_range_composition(units, eps, 1e-6)
    adv = advanced_composition(units, eps, 1e-6)
    assert br < adv <= units * eps  # BR improves on advanced composition, both on basic
    # the bounded-range bound roughly halves the sqrt(m) term (Durfee and Rogers: > 50% gain)
    assert br < 0.6 * adv
