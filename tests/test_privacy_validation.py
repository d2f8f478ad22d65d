"""Every public mechanism of :mod:`mbeacon.privacy` refuses a bad privacy parameter the same way.

NaN, infinities, zero or negative values where the parameter must buy something, and ``bool``
(``True`` is not an epsilon of 1) are refused with a ValueError or TypeError whose message starts
with the parameter's name, before any noise is drawn (:mod:`mbeacon.privacy.validation`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.privacy import accounting, noise, sparse_vector, truncation, validation
from mbeacon.privacy.research import clipping, dssgd, pay_what_you_get, range_queries, selection
from mbeacon.privacy.svt2 import SVT2Params, svt2, svt2_allocate, svt2_batch

ANSWERS = [1.0, 2.0, 3.0, 0.0]
HISTOGRAM = {"a": 5, "b": 3, "c": 1}

NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
BOOLS = st.booleans()
NEGATIVE = st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False) | st.integers(max_value=-1)

#: the values each kind of parameter must refuse
BAD: dict[str, st.SearchStrategy] = {
    # epsilons, sensitivities, scales: finite and > 0
    "positive": st.one_of(NON_FINITE, BOOLS, NEGATIVE, st.sampled_from([0, 0.0, -0.0])),
    # an epsilon that may be 0 to switch its part off
    "non_negative": st.one_of(NON_FINITE, BOOLS, NEGATIVE),
    # a delta where 0 asks for pure DP: [0, 1)
    "delta_or_zero": st.one_of(NON_FINITE, BOOLS, NEGATIVE, st.floats(min_value=1.0, allow_nan=False)),
    # a delta that must be > 0: (0, 1)
    "delta": st.one_of(NON_FINITE, BOOLS, NEGATIVE, st.sampled_from([0, 0.0]), st.floats(min_value=1.0)),
    # a share of a budget: (0, 1)
    "fraction": st.one_of(NON_FINITE, BOOLS, NEGATIVE, st.sampled_from([0.0, 1.0, 1.5])),
    # a count >= 1 (c, k, kbar)
    "count": st.one_of(NON_FINITE, BOOLS, NEGATIVE, st.sampled_from([0, 0.0, 1.5, 2.25])),
    # a count >= 0
    "count_or_zero": st.one_of(NON_FINITE, BOOLS, NEGATIVE, st.sampled_from([0.5, 1.5])),
    # a threshold: finite
    "finite": st.one_of(NON_FINITE, BOOLS),
    # thresholds of the SVT family (a number or an array of them): finite
    "finite_array": NON_FINITE,
}


def _case(fn: Callable, valid: dict, **params: str) -> tuple[Callable, dict, dict[str, str]]:
    return fn, valid, params


SVT = {"answers": ANSWERS, "rng": 1}
SVT_BATCH = {"answers": ANSWERS, "runs": 3, "rng": 1}
SCORES = {"scores": [1.0, 2.0, 3.0], "rng": 1}

#: name -> (function, valid keyword arguments, {privacy parameter: kind})
CASES = {
    # noise
    "discrete_laplace": _case(noise.discrete_laplace, {"scale": 2.0, "size": 3, "rng": 1}, scale="positive"),
    "lattice_laplace": _case(
        noise.lattice_laplace,
        {"scale": 2.0, "sensitivity": 0.5, "size": 3, "rng": 1},
        scale="positive",
        sensitivity="positive",
    ),
    "laplace": _case(noise.laplace, {"scale": 2.0, "rng": 1}, scale="positive"),
    "gumbel": _case(noise.gumbel, {"scale": 2.0, "size": 3, "rng": 1}, scale="positive"),
    "discrete_laplace_pmf": _case(noise.discrete_laplace_pmf, {"k": 1, "scale": 2.0}, scale="positive"),
    "discrete_laplace_sf": _case(noise.discrete_laplace_sf, {"m": 1, "scale": 2.0}, scale="positive"),
    # the sparse vector family
    **{
        name: _case(
            fn,
            {**base, "threshold": 2.0, "epsilon": 1.0},
            epsilon="positive",
            sensitivity="positive",
            threshold="finite_array",
        )
        for name, fn, base in [
            ("above_threshold", sparse_vector.above_threshold, SVT),
            ("above_threshold_batch", sparse_vector.above_threshold_batch, SVT_BATCH),
        ]
    },
    **{
        name: _case(
            fn,
            {**base, "threshold": 2.0, "epsilon": 1.0, "c": 2, "delta": 1e-3},
            epsilon="positive",
            c="count",
            delta="delta_or_zero",
            sensitivity="positive",
            threshold="finite_array",
        )
        for name, fn, base in [
            ("sparse", sparse_vector.sparse, SVT),
            ("sparse_batch", sparse_vector.sparse_batch, SVT_BATCH),
            ("numeric_sparse", sparse_vector.numeric_sparse, SVT),
            ("numeric_sparse_batch", sparse_vector.numeric_sparse_batch, SVT_BATCH),
        ]
    },
    "sparse_sigma": _case(
        sparse_vector.sparse_sigma,
        {"epsilon": 1.0, "c": 2, "delta": 1e-3, "sensitivity": 1.0},
        epsilon="positive",
        c="count",
        delta="delta_or_zero",
        sensitivity="positive",
    ),
    **{
        name: _case(
            fn,
            {**base, "thresholds": 2.0, "epsilon1": 0.5, "epsilon2": 0.5, "c": 2, "epsilon3": 0.5},
            epsilon1="positive",
            epsilon2="positive",
            c="count",
            epsilon3="non_negative",
            sensitivity="positive",
            thresholds="finite_array",
        )
        for name, fn, base in [
            ("generalized_svt", sparse_vector.generalized_svt, SVT),
            ("generalized_svt_batch", sparse_vector.generalized_svt_batch, SVT_BATCH),
        ]
    },
    "generalized_svt_allocate": _case(
        sparse_vector.generalized_svt_allocate,
        {"epsilon": 1.0, "c": 2, "epsilon3": 0.25},
        epsilon="positive",
        c="count",
        epsilon3="non_negative",
    ),
    **{
        name: _case(
            fn,
            {**base, "thresholds": 2.0, "epsilon": 1.0, "c": 2, "threshold_share": 0.3},
            epsilon="positive",
            c="count",
            threshold_share="fraction",
            sensitivity="positive",
            thresholds="finite_array",
        )
        for name, fn, base in [
            ("svt_with_gap", sparse_vector.svt_with_gap, SVT),
            ("svt_with_gap_batch", sparse_vector.svt_with_gap_batch, SVT_BATCH),
        ]
    },
    **{
        name: _case(
            fn,
            {**base, "threshold": 2.0, "epsilon1": 0.5, "epsilon2": 0.5, "c": 2, "increment": 1.0},
            epsilon1="positive",
            epsilon2="positive",
            c="count",
            sensitivity="positive",
            threshold="finite",
            increment="finite",
        )
        for name, fn, base in [
            ("svt_retraversal", sparse_vector.svt_retraversal, SVT),
            ("svt_retraversal_batch", sparse_vector.svt_retraversal_batch, SVT_BATCH),
        ]
    },
    # selection
    **{
        name: _case(fn, {**SCORES, "epsilon": 1.0}, epsilon="positive", sensitivity="positive")
        for name, fn in [
            ("exponential_mechanism", selection.exponential_mechanism),
            ("exponential_mechanism_batch", selection.exponential_mechanism_batch),
            ("report_noisy_max", selection.report_noisy_max),
            ("report_noisy_max_batch", selection.report_noisy_max_batch),
        ]
    },
    **{
        name: _case(
            fn, {**SCORES, "k": 2, "epsilon": 1.0}, k="count", epsilon="positive", sensitivity="positive"
        )
        for name, fn in [("top_k", selection.top_k), ("top_k_batch", selection.top_k_batch)]
    },
    "unknown_domain_top_k": _case(
        selection.unknown_domain_top_k,
        {"histogram": HISTOGRAM, "k": 2, "kbar": 2, "epsilon": 1.0, "delta": 1e-3, "rng": 1},
        k="count",
        kbar="count",
        epsilon="positive",
        delta="delta",
    ),
    "unknown_domain_top_k_restricted": _case(
        selection.unknown_domain_top_k_restricted,
        {
            "histogram": HISTOGRAM,
            "k": 2,
            "kbar": 2,
            "epsilon": 1.0,
            "delta": 1e-3,
            "restricted_sensitivity": 2,
            "rng": 1,
        },
        k="count",
        kbar="count",
        epsilon="positive",
        delta="delta",
        restricted_sensitivity="count",
    ),
    # the SVT applications: automatic clipping bound, range queries
    **{
        name: _case(fn, {"values": [1.0, 5.0, 20.0], "epsilon": 1.0, "threshold": -1.0, "rng": 1}, **kinds)
        for name, fn, kinds in [
            ("auto_clip_batch", clipping.auto_clip_batch, {"epsilon": "positive", "threshold": "finite"}),
            ("auto_clip_bound", clipping.auto_clip_bound, {"epsilon": "positive", "threshold": "finite"}),
            ("auto_sum", clipping.auto_sum, {"epsilon": "positive", "threshold": "finite"}),
            ("auto_mean", clipping.auto_mean, {"epsilon": "positive", "threshold": "finite"}),
        ]
    },
    **{
        name: _case(
            fn,
            {
                "counts": [3, 50, 2, 80],
                "threshold": 10.0,
                "epsilon": 1.0,
                "c": 2,
                "sparse_share": 0.5,
                "rng": 1,
            },
            threshold="finite_array",
            epsilon="positive",
            c="count",
            sparse_share="fraction",
        )
        for name, fn in [
            ("range_query_svt", range_queries.range_query_svt),
            ("range_query_svt_batch", range_queries.range_query_svt_batch),
        ]
    },
    # PrivateSQL's truncation bound
    **{
        name: _case(fn, {"counts": [1, 3, 3, 9], "epsilon": 1.0, "threshold": -1.0, "rng": 1}, **kinds)
        for name, fn, kinds in [
            ("learn_bound", truncation.learn_bound, {"epsilon": "positive", "threshold": "finite"}),
            (
                "learn_bound_batch",
                truncation.learn_bound_batch,
                {"epsilon": "positive", "threshold": "finite", "runs": "count"},
            ),
        ]
    },
    "truncated_count_batch": _case(
        truncation.truncated_count_batch,
        {
            "patient_ids": ["a", "a", "b", "c", "c", "c"],
            "in_range": [True, False, True, True, True, False],
            "epsilon": 1.0,
            "epsilon_count": 0.5,
            "max_bound": 8,
            "rng": 1,
        },
        epsilon="positive",
        epsilon_count="positive",
        max_bound="count",
    ),
    "truncation_epsilon": _case(
        accounting.truncation_epsilon,
        {"epsilon_bound": 0.5, "epsilon_count": 0.5},
        epsilon_bound="positive",
        epsilon_count="non_negative",
    ),
    # accounting
    "svt2_spent": _case(
        accounting.svt2_spent,
        {"epsilon1": 0.1, "epsilon2": 0.4, "c": 5, "positives": 2, "redraw": True, "count_epsilon": 0.1},
        epsilon1="positive",
        epsilon2="positive",
        c="count",
        positives="count_or_zero",
        count_epsilon="non_negative",
    ),
    "svt2_epsilon": _case(
        accounting.svt2_epsilon,
        {"epsilon1": 0.1, "epsilon2": 0.4, "c": 5, "redraw": False},
        epsilon1="positive",
        epsilon2="positive",
        c="count",
    ),
    **{
        name: _case(fn, {"units": 10, "epsilon": 0.1, "delta": 1e-6}, epsilon="positive", delta="delta")
        for name, fn in [
            ("advanced_composition", accounting.advanced_composition),
            ("bounded_range_composition", accounting.bounded_range_composition),
        ]
    },
    "auto_clip_epsilon": _case(
        accounting.auto_clip_epsilon,
        {"epsilon_svt": 0.1, "epsilon_sum": 0.1, "epsilon_count": 0.1},
        epsilon_svt="positive",
        epsilon_sum="positive",
        epsilon_count="positive",
    ),
    "range_query_svt_epsilon": _case(
        accounting.range_query_svt_epsilon,
        {"epsilon_sparse": 0.5, "answer_scale": 10.0, "c": 5},
        epsilon_sparse="positive",
        answer_scale="positive",
        c="count",
    ),
    "PayWhatYouGet": _case(
        pay_what_you_get.PayWhatYouGet,
        {"k_star": 5, "l_star": 3, "epsilon": 1.0, "delta": 1e-6, "delta_prime": 1e-9},
        k_star="count",
        l_star="count",
        epsilon="positive",
        delta="delta",
        delta_prime="delta",
    ),
    # DSSGD's gradient upload
    **{
        name: _case(
            fn,
            {
                **extra,
                "threshold": 0.5,
                "epsilon": 1.0,
                "c": 2,
                "clip": 1.0,
                "sensitivity": 0.1,
                "rng": 1,
            },
            threshold="finite",
            epsilon="positive",
            c="count",
            clip="positive",
            sensitivity="positive",
        )
        for name, fn, extra in [
            ("dssgd_select", dssgd.dssgd_select, {"gradient": np.array([0.3, -0.8, 0.1])}),
            ("dssgd_select_batch", dssgd.dssgd_select_batch, {"gradients": np.ones((2, 3)), "runs": 2}),
        ]
    },
    "dssgd_sensitivity": _case(
        dssgd.dssgd_sensitivity, {"clip": 1.0, "n_samples": 100}, clip="positive", n_samples="count"
    ),
    "dssgd_upload_count": _case(
        dssgd.dssgd_upload_count,
        {"upload_fraction": 0.1, "n_parameters": 650},
        upload_fraction="positive",
        n_parameters="count",
    ),
    "dssgd_epsilon": _case(
        accounting.dssgd_epsilon,
        {"epsilon_per_epoch": 1.0, "epochs": 10},
        epsilon_per_epoch="positive",
        epochs="count",
    ),
    # SVT²
    "SVT2Params": _case(
        SVT2Params,
        {"threshold": 3.0, "epsilon1": 0.1, "epsilon2": 0.4, "c": 5, "sensitivity": 1.0},
        threshold="finite",
        epsilon1="positive",
        epsilon2="positive",
        c="count",
        sensitivity="positive",
    ),
    "SVT2Params.from_epsilon": _case(
        SVT2Params.from_epsilon,
        {"epsilon": 1.0, "c": 5, "threshold": 3.0, "sensitivity": 1.0},
        epsilon="positive",
        c="count",
        threshold="finite",
        sensitivity="positive",
    ),
    "svt2_allocate": _case(
        svt2_allocate, {"epsilon": 1.0, "c": 5, "redraw": True}, epsilon="positive", c="count"
    ),
    **{
        name: _case(
            fn,
            {
                **extra,
                "alpha": np.array([0.0, 5.0, 1.0]),
                "beta": np.array([0.0, 0.0, 3.0]),
                "threshold": 1.0,
                "epsilon1": 0.5,
                "epsilon2": 0.5,
                "c": 2,
                "rng": 1,
            },
            threshold="finite",
            epsilon1="positive",
            epsilon2="positive",
            c="count",
            sensitivity="positive",
        )
        for name, fn, extra in [("svt2", svt2, {}), ("svt2_batch", svt2_batch, {"runs": 2})]
    },
}

PARAMETERS = [(name, param) for name, (_, _, params) in CASES.items() for param in params]


@pytest.mark.parametrize("name", list(CASES))
def test_valid_arguments_run(name: str) -> None:
    fn, valid, _ = CASES[name]
    fn(**valid)


@pytest.mark.parametrize(("name", "param"), PARAMETERS, ids=[f"{n}-{p}" for n, p in PARAMETERS])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_bad_privacy_parameter_is_refused_by_name(name: str, param: str, data: st.DataObject) -> None:
    fn, valid, params = CASES[name]
    bad = data.draw(BAD[params[param]], label=param)
    # the SVT engine checks the thresholds of every SVT mechanism, and calls them "threshold"
    named = "threshold" if param == "thresholds" else param
    with pytest.raises((ValueError, TypeError), match=rf"^{re.escape(named)} "):
        fn(**(valid | {param: bad}))


def test_every_exported_mechanism_is_covered() -> None:
    """A mechanism added to the package is added here too (or named as taking no privacy parameter)."""
    import mbeacon.privacy as mp

    no_parameters = {
        "BOT",
        "TOP",
        "UNANSWERED",
        "NumericAnswers",
        "PayWhatYouGetExhausted",
        "SVT2State",
        "TopKRelease",
        "AutoClipRelease",  # the released numbers of the automatic clipping bound
        "TruncatedCountRelease",  # the released bound and count of PrivateSQL's truncation
        "range_counts",  # true counts, no noise: the input of range_query_svt
        "svt2_release",  # the answers from public flags and the public prior
        "svt2_resume",  # run with an SVT2Params, checked when it was built
        "svt2_step",
        "uniform",
    }
    assert set(mp.__all__) - no_parameters <= set(CASES)


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (
            lambda v: validation.positive(v, "epsilon1"),
            math.nan,
            "epsilon1 must be a finite number > 0, got nan",
        ),
        (
            lambda v: validation.positive(v, "epsilon1"),
            -math.inf,
            "epsilon1 must be a finite number > 0, got -inf",
        ),
        (lambda v: validation.integer(v, "c"), 2.5, "c must be an integer >= 1, got 2.5"),
        (lambda v: validation.delta(v, zero=True), 1.0, "delta must be a number in [0, 1), got 1.0"),
        (lambda v: validation.finite(v, "threshold"), math.inf, "threshold must be a finite number, got inf"),
    ],
)
def test_messages_name_the_parameter_and_the_value(check, value, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        check(value)
    assert str(refused.value) == message


@pytest.mark.parametrize("value", [True, "0.5", None, np.array([0.5]), np.True_])
def test_what_is_not_a_real_number_is_a_type_error(value) -> None:
    with pytest.raises(TypeError, match=r"^epsilon must be a real number, got "):
        validation.positive(value, "epsilon")
    with pytest.raises(TypeError, match=r"^c must be an integer, got "):
        validation.integer(value, "c")


def test_checked_values_are_plain_numbers() -> None:
    assert type(validation.positive(np.float32(0.5), "epsilon")) is float
    assert validation.integer(np.int64(5), "c") == 5 and type(validation.integer(5.0, "c")) is int
    params = SVT2Params(np.int64(3), np.float32(0.25), 0.5, 5.0)
    assert (type(params.threshold), type(params.epsilon1), type(params.c)) == (float, float, int)
