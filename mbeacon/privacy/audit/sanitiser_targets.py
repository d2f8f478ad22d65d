"""Audit targets of the sanitisers the service serves (SVT² with margins, with a noisy release,
Online PMW, the cohort's Online PMW), each with a broken twin the audit must catch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbeacon.privacy import cohort_pmw, online_pmw
from mbeacon.privacy.audit import faulty
from mbeacon.privacy.audit.events import Outputs
from mbeacon.privacy.audit.registry import (
    DEFAULT_EPSILON,
    QUERIES,
    THRESHOLD,
    AuditTarget,
    InputPair,
    Runner,
    statdp_patterns,
    svt2_patterns,
)
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin_batch
from mbeacon.privacy.svt2_noisy import NoisyRelease, SVT2NoisyParams, svt2_noisy_batch

PMW_COHORT = 4  # public cohort size of the audit's Online PMW inputs: 4 bins, counts 0..2 around T = 1
PMW_RANGES = ((0, 1), (0, 2), (1, 2), (2, 4), (0, 1), (0, 2), (1, 2), (2, 4), (0, 1), (0, 2))


def pmw_patterns(k: int = QUERIES) -> list[InputPair]:
    """StatDP's count patterns as the counts of ranges of bins at one probe, whose public prior puts
    the synthetic counts on both sides of ``T`` (uniform: 1 or 2 patients; skewed: 0.2 to 3.6)."""
    priors = {
        "uniform prior": np.full(4, 0.25),
        "skewed prior": np.array([0.05, 0.05, 0.45, 0.45]),
    }
    lo = np.array([r[0] for r in PMW_RANGES[:k]])
    hi = np.array([r[1] for r in PMW_RANGES[:k]])
    return [
        InputPair(f"{p.name}, {label}", p.first, p.second, {"prior": prior, "lo": lo, "hi": hi})
        for p in statdp_patterns(k)
        for label, prior in priors.items()
    ]


def _release_outputs(release: NoisyRelease) -> Outputs:
    """Flag and answer as one code (``flag + 2 answer``, -1 unanswered), released counts as values."""
    codes = release.flags.astype(np.int16) + 2 * release.answers.astype(np.int16)
    codes[release.flags < 0] = -1
    values = np.where(release.flags == 1, release.counts, np.nan)  # BOT counts are public
    return Outputs(codes, values)


def _margin(fn: Callable[..., np.ndarray], params: SVT2MarginParams) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        return Outputs(fn(x, context["beta"], params, runs=runs, rng=rng).astype(np.int16))

    return run


def _noisy(fn: Callable[..., NoisyRelease], params: SVT2NoisyParams) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        return _release_outputs(fn(x, context["beta"], params, runs=runs, rng=rng))

    return run


def _pmw(fn: Callable[..., NoisyRelease], params: online_pmw.OnlinePMWParams) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        release = fn(0, context["lo"], context["hi"], x, context["prior"], params, runs=runs, rng=rng)
        return _release_outputs(release)

    return run


#: The audit's cohort-pmw stream: two owners taking turns, one TOP each at most, two for the cohort.
COHORT_OWNERS = np.arange(QUERIES) % 2


def _cohort(params: online_pmw.OnlinePMWParams, *, broken: bool) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        owners = COHORT_OWNERS[: len(context["lo"])]
        asked = (owners, context["lo"], context["hi"], x, context["prior"], params, 1)
        release = cohort_pmw.cohort_pmw_batch(*asked, runs=runs, rng=rng, _exact_past_quota=broken)
        # an untested query's answer is released too (the service answers it from the synthetic state)
        codes = (release.flags.astype(np.int16) + 1) + 3 * release.answers.astype(np.int16)
        return Outputs(codes, np.where(release.flags == 1, release.counts, np.nan))

    return run


def sanitiser_targets(epsilon: float = DEFAULT_EPSILON) -> list[AuditTarget]:
    """SVT² with a margin, SVT² with a noisy release and Online PMW, each with its broken twin."""
    eps = epsilon
    pairs = tuple(svt2_patterns())
    margin = SVT2MarginParams.from_epsilon(eps, 5, THRESHOLD, margin_above=1.0, margin_below=1.0)
    peeking = SVT2MarginParams.from_epsilon(eps, 1, THRESHOLD, margin_above=50.0, margin_below=50.0)
    noisy = SVT2NoisyParams.from_epsilon(eps, 2, THRESHOLD, margin_above=1.0, margin_below=1.0)
    pmw = online_pmw.OnlinePMWParams.from_epsilon(eps, 2, THRESHOLD, PMW_COHORT, margin=0.5)
    pmw_pairs = tuple(pmw_patterns())
    return [
        AuditTarget(
            "svt2-margin-c5",
            eps,
            _margin(svt2_margin_batch, margin),
            pairs,
            "pass",
            "SVT² with public margins 1 and 1 (thresholds T + 1 and T - 1), c = 5, single pair",
        ),
        AuditTarget(
            "svt2-noisy-c2",
            eps,
            _noisy(svt2_noisy_batch, noisy),
            pairs,
            "pass",
            "SVT² (margins 1), TOPs answered from alpha + Lap(c/eps3), eps3 = eps/3, c = 2",
        ),
        AuditTarget(
            "online-pmw-c2",
            eps,
            _pmw(online_pmw.online_pmw_batch, pmw),
            pmw_pairs,
            "pass",
            "Online PMW from the prior (4 bins, n = 4), decision test, margin 0.5, eps3 = eps/3, c = 2",
        ),
        AuditTarget(
            "cohort-pmw-c2",
            eps,
            _cohort(pmw, broken=False),
            pmw_pairs,
            "pass",
            "Online PMW with one state for two owners taking turns, quota 1 each, c = 2 for the cohort",
        ),
        AuditTarget(
            "svt2-margin-peeking",
            eps,
            _margin(faulty.svt2_margin_peeking_batch, peeking),
            pairs,
            "violation",
            "incorrect: margins 50 applied only where the exact count agrees with the prior; true cost inf",
        ),
        AuditTarget(
            "svt2-noisy-exact-release",
            eps,
            _noisy(faulty.svt2_noisy_exact_release_batch, noisy),
            pairs,
            "violation",
            "incorrect: SVT²'s TOPs answered from the exact count; true cost inf",
        ),
        AuditTarget(
            "online-pmw-exact-update",
            eps,
            _pmw(faulty.online_pmw_exact_update_batch, pmw),
            pmw_pairs,
            "violation",
            "incorrect: Online PMW's histogram moved to the exact count; true cost inf",
        ),
        AuditTarget(
            "cohort-pmw-exact-past-quota",
            eps,
            _cohort(pmw, broken=True),
            pmw_pairs,
            "violation",
            "incorrect: an owner past its quota answered from the exact count; true cost inf",
        ),
    ]
