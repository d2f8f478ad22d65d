"""What the audit checks: every mechanism, its claimed epsilon, and the neighbouring inputs that
stress it.

Neighbouring inputs follow StatDP's patterns (Ding et al., CCS 2018, Table 1) for sensitivity-1
queries around the threshold: "one above", "one below", "one above rest below", "one below rest
above", "half-half", "all above", "all below" and "X shape". Queries may move in different directions
(bounded DP, one patient replaced), except for mechanisms whose proof assumes monotonic queries,
which are given monotonic pairs only. SVT² additionally gets the public prior ``beta`` below, above
and on both sides of the threshold, so both of its thresholds are exercised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mbeacon.privacy import sparse_vector, truncation
from mbeacon.privacy.accounting import svt2_epsilon
from mbeacon.privacy.audit import faulty
from mbeacon.privacy.audit.events import Outputs
from mbeacon.privacy.research import clipping, dssgd, range_queries, selection
from mbeacon.privacy.svt2 import svt2_allocate, svt2_batch

DEFAULT_EPSILON = 0.5
QUERIES = 10
THRESHOLD = 1.0

Runner = Callable[[np.ndarray, dict, int, np.random.Generator], Outputs]


@dataclass(frozen=True)
class InputPair:
    """Two neighbouring inputs and any public context the mechanism also takes (e.g. beta)."""

    name: str
    first: np.ndarray
    second: np.ndarray
    context: dict = field(default_factory=dict)


@dataclass(frozen=True)
class AuditTarget:
    """A mechanism under audit at one claimed epsilon."""

    name: str
    claimed_epsilon: float
    run: Runner
    inputs: tuple[InputPair, ...]
    expect: str  # "pass" (a correct mechanism), "violation" (a faulty control) or "probe"
    description: str


def statdp_patterns(k: int = QUERIES) -> list[InputPair]:
    """StatDP's neighbouring query-answer patterns, with the base value 1 at threshold 1."""
    half = k // 2
    ones = np.ones(k)
    pairs = {
        "one above": np.r_[2, np.ones(k - 1)],
        "one below": np.r_[0, np.ones(k - 1)],
        "one above rest below": np.r_[2, np.zeros(k - 1)],
        "one below rest above": np.r_[0, 2 * np.ones(k - 1)],
        "half-half": np.r_[np.zeros(half), 2 * np.ones(k - half)],
        "all above": 2 * ones,
        "all below": np.zeros(k),
    }
    out = [InputPair(name, ones, other) for name, other in pairs.items()]
    out.append(
        InputPair(
            "X shape", np.r_[np.ones(half), np.zeros(k - half)], np.r_[np.zeros(half), np.ones(k - half)]
        )
    )
    return out


def monotonic_patterns(k: int = QUERIES) -> list[InputPair]:
    """The StatDP pairs whose answers all move in one direction."""
    return [p for p in statdp_patterns(k) if np.all(p.second >= p.first) or np.all(p.second <= p.first)]


def svt2_patterns(k: int = QUERIES) -> list[InputPair]:
    """StatDP's alpha patterns, each with the public prior beta below, above and around T."""
    half = k // 2
    betas = {
        "beta below T": np.zeros(k),
        "beta above T": np.full(k, 2.5),
        "beta split": np.r_[np.zeros(half), np.full(k - half, 2.5)],
        "beta alternating": np.tile([0.0, 2.5], k)[:k],
    }
    return [
        InputPair(f"{p.name}, {label}", p.first, p.second, {"beta": beta})
        for p in statdp_patterns(k)
        for label, beta in betas.items()
    ]


# --- runners: adapt each mechanism to "input vector -> Outputs for n runs" -------------------------


def _flags(fn: Callable[..., np.ndarray], **kwargs) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        return Outputs(fn(x, THRESHOLD, runs=runs, rng=rng, **kwargs).astype(np.int16))

    return run


def _numeric(fn: Callable[..., sparse_vector.NumericAnswers], **kwargs) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        res = fn(x, THRESHOLD, runs=runs, rng=rng, **kwargs)
        return Outputs(res.flags.astype(np.int16), res.values)

    return run


def _svt2(epsilon1: float, epsilon2: float, c: int, redraw: bool) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        flags = svt2_batch(
            x, context["beta"], THRESHOLD, epsilon1, epsilon2, c, redraw=redraw, runs=runs, rng=rng
        )
        return Outputs(flags.astype(np.int16))

    return run


def _selection(fn: Callable[..., np.ndarray], **kwargs) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        picked = np.asarray(fn(x, runs=runs, rng=rng, **kwargs))
        return Outputs(picked.reshape(runs, -1).astype(np.int16))

    return run


def _retraversal(epsilon1: float, epsilon2: float, c: int) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        picked = sparse_vector.svt_retraversal_batch(  # uncapped, as in the paper
            x, THRESHOLD, epsilon1, epsilon2, c, increment=1.0, max_passes=None, runs=runs, rng=rng
        )
        return Outputs(picked.astype(np.int16))

    return run


AUTO_CLIP_GRID = np.geomspace(0.5, 64.0, 8)  # 8 candidate bounds: the chosen index is one output code


def auto_clip_patterns() -> list[InputPair]:
    """Columns of 12 rows that differ in one row (replaced, added or removed), around the grid."""
    base = np.r_[np.full(6, 1.0), np.full(6, 6.0)]
    return [
        InputPair("one row replaced by a large value", base, np.r_[base[:-1], 60.0]),
        InputPair("one row replaced by 0", base, np.r_[0.0, base[1:]]),
        InputPair("one large row added", base, np.r_[base, 60.0]),
        InputPair("one row removed", base, base[1:]),
        InputPair("all small, one beyond the grid", np.full(12, 0.4), np.r_[np.full(11, 0.4), 500.0]),
    ]


def _auto_clip(fn: Callable[..., clipping.AutoClipRelease], **kwargs) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        release = fn(x, runs=runs, rng=rng, grid=AUTO_CLIP_GRID, **kwargs)
        values = np.c_[release.noisy_sum, release.noisy_count]
        return Outputs(release.index.reshape(runs, 1).astype(np.int16), values)

    return run


def svt_application_targets(epsilon: float = DEFAULT_EPSILON) -> list[AuditTarget]:
    """The automatic clipping bound, range queries worth answering, and the clipping bound's broken twin."""
    eps = epsilon
    svt_pairs = tuple(statdp_patterns())
    return [
        AuditTarget(
            "auto-clip",
            eps,
            _auto_clip(clipping.auto_clip_batch, epsilon=eps, threshold=0.0),
            tuple(auto_clip_patterns()),
            "pass",
            "automatic clipping bound (AboveThreshold over 8 bounds), noisy sum and count, thirds",
        ),
        AuditTarget(
            "range-queries",
            eps,
            _numeric(range_queries.range_query_svt_batch, epsilon=eps, c=2),
            svt_pairs,
            "pass",
            "range queries worth answering: Sparse at eps/2, c = 2 answers at Lap(2c/eps)",
        ),
        AuditTarget(
            "auto-clip-exact-bound",
            eps,
            _auto_clip(faulty.auto_clip_exact_bound_batch, epsilon=eps),
            tuple(auto_clip_patterns()),
            "violation",
            "incorrect: clipping bound from the data's maximum; true cost inf",
        ),
    ]


TRUNCATION_MAX_BOUND = 8  # candidate bounds 1..8: the learned bound is one output code


def truncation_patterns() -> list[InputPair]:
    """Per-patient sample counts that differ by one patient (with all of their samples) added or
    removed; every sample is in range, so the count at bound ``b`` is ``sum min(m_p, b)``."""
    base = np.r_[np.ones(6), np.full(4, 2.0), 3.0]
    return [
        InputPair("a patient with many samples added", base, np.r_[base, 8.0]),
        InputPair("a patient with one sample added", base, np.r_[base, 1.0]),
        InputPair("a patient with three samples removed", base, base[:-1]),
        InputPair("one sample each, one with five added", np.ones(10), np.r_[np.ones(10), 5.0]),
        InputPair("a deeply sampled patient removed", np.r_[np.ones(8), 12.0], np.ones(8)),
    ]


def _truncation(fn: Callable[..., truncation.TruncatedCountRelease], **kwargs) -> Runner:
    def run(x: np.ndarray, context: dict, runs: int, rng: np.random.Generator) -> Outputs:
        counts = x.astype(np.int64)
        ids = np.repeat(np.arange(counts.size), counts)
        release = fn(ids, np.ones(ids.size, dtype=bool), runs=runs, rng=rng, **kwargs)
        return Outputs(
            (release.bound - 1).reshape(runs, 1).astype(np.int16), release.noisy_count.reshape(runs, 1)
        )

    return run


def truncation_targets(epsilon: float = DEFAULT_EPSILON) -> list[AuditTarget]:
    """PrivateSQL's truncation (learned bound and the count at it, eps/2 each) and its broken twin."""
    half = epsilon / 2
    pairs = tuple(truncation_patterns())
    kwargs = {"epsilon": half, "epsilon_count": half, "max_bound": TRUNCATION_MAX_BOUND}
    return [
        AuditTarget(
            "truncation",
            epsilon,
            _truncation(truncation.truncated_count_batch, threshold=0.0, **kwargs),
            pairs,
            "pass",
            "PrivateSQL truncation: bound learned by AboveThreshold over 1..8 (eps/2), count at it (eps/2)",
        ),
        AuditTarget(
            "truncation-exact-max",
            epsilon,
            _truncation(faulty.truncation_exact_max_batch, **kwargs),
            pairs,
            "violation",
            "incorrect: truncation bound read off the largest contribution; true cost inf",
        ),
    ]


def dssgd_patterns(k: int = 8) -> list[InputPair]:
    """StatDP's patterns as gradient coordinates, and the same with every coordinate negated: the
    selection compares ``|g_j|`` and uploads the signed ``g_j``, so both signs are exercised."""
    base = statdp_patterns(k)
    return base + [InputPair(f"{p.name}, negated", -p.first, -p.second) for p in base]


def dssgd_targets(epsilon: float = DEFAULT_EPSILON) -> list[AuditTarget]:
    """DSSGD's gradient selection (c = 2, gamma = 3, Df = 1) and its broken twin with exact values."""
    eps = epsilon
    pairs = tuple(dssgd_patterns())
    kwargs = {"epsilon": eps, "c": 2, "clip": 3.0, "sensitivity": 1.0}
    return [
        AuditTarget(
            "dssgd-selection",
            eps,
            _numeric(dssgd.dssgd_select_batch, **kwargs),
            pairs,
            "pass",
            "DSSGD gradient upload: NumericSparse over |g_j| in a random order, signed noisy values, c = 2",
        ),
        AuditTarget(
            "dssgd-exact-values",
            eps,
            _numeric(faulty.dssgd_exact_values_batch, **kwargs),
            pairs,
            "violation",
            "incorrect: DSSGD uploading exact values; true cost "
            f"{faulty.true_epsilon('dssgd-exact-values', eps, 2):g}",
        ),
    ]


def targets(epsilon: float = DEFAULT_EPSILON) -> list[AuditTarget]:
    """Every audited mechanism at claimed ``epsilon`` (c = 1 unless the name says otherwise)."""
    eps = epsilon
    svt_pairs = tuple(statdp_patterns())
    mono_pairs = tuple(monotonic_patterns())
    sel_pairs = tuple(statdp_patterns(5))
    g1, g2, _ = sparse_vector.generalized_svt_allocate(eps, 1)
    gm1, gm2, _ = sparse_vector.generalized_svt_allocate(eps, 1, monotonic=True)
    gn1, gn2, gn3 = sparse_vector.generalized_svt_allocate(eps, 1, epsilon3=eps / 4)
    r1, r2, _ = sparse_vector.generalized_svt_allocate(eps, 2)
    out = [
        AuditTarget(
            "above-threshold",
            eps,
            _flags(sparse_vector.above_threshold_batch, epsilon=eps),
            svt_pairs,
            "pass",
            "AboveThreshold (Dwork-Roth Alg. 1)",
        ),
        AuditTarget(
            "sparse",
            eps,
            _flags(sparse_vector.sparse_batch, epsilon=eps, c=2),
            svt_pairs,
            "pass",
            "Sparse, c = 2, threshold re-drawn (Dwork-Roth Alg. 2 = SVT-DPBook)",
        ),
        AuditTarget(
            "numeric-sparse",
            eps,
            _numeric(sparse_vector.numeric_sparse_batch, epsilon=eps, c=1),
            svt_pairs,
            "pass",
            "NumericSparse, c = 1 (Dwork-Roth Alg. 3)",
        ),
        AuditTarget(
            "generalized-svt",
            eps,
            _numeric(sparse_vector.generalized_svt_batch, epsilon1=g1, epsilon2=g2, c=1),
            svt_pairs,
            "pass",
            "Lyu-Su-Li SVT, eps1:eps2 = 1:(2c)^(2/3)",
        ),
        AuditTarget(
            "generalized-svt-numeric",
            eps,
            _numeric(sparse_vector.generalized_svt_batch, epsilon1=gn1, epsilon2=gn2, c=1, epsilon3=gn3),
            svt_pairs,
            "pass",
            "Lyu-Su-Li SVT releasing q + Lap(c/eps3) on TOP",
        ),
        AuditTarget(
            "generalized-svt-monotonic",
            eps,
            _numeric(sparse_vector.generalized_svt_batch, epsilon1=gm1, epsilon2=gm2, c=1, monotonic=True),
            mono_pairs,
            "pass",
            "Lyu-Su-Li SVT for monotonic queries (halved query noise)",
        ),
        AuditTarget(
            "svt-retraversal",
            eps,
            _retraversal(r1, r2, 2),
            tuple(statdp_patterns(6)),
            "pass",
            "non-interactive SVT with retraversal, c = 2, threshold + 1",
        ),
        AuditTarget(
            "exponential",
            eps,
            _selection(selection.exponential_mechanism_batch, epsilon=eps),
            sel_pairs,
            "pass",
            "exponential mechanism (Gumbel-max)",
        ),
        AuditTarget(
            "report-noisy-max",
            eps,
            _selection(selection.report_noisy_max_batch, epsilon=eps),
            sel_pairs,
            "pass",
            "report-noisy-max with lattice Laplace",
        ),
        AuditTarget(
            "top-k",
            eps,
            _selection(selection.top_k_batch, k=2, epsilon=eps),
            sel_pairs,
            "pass",
            "one-shot Gumbel top-2 (= 2 peeled EMs at eps/2)",
        ),
    ]
    out.append(
        AuditTarget(
            "svt-free-gap",
            eps,
            _numeric(sparse_vector.svt_with_gap_batch, epsilon=eps, c=1),
            svt_pairs,
            "pass",
            "SVT releasing the noisy gap of each TOP (Ding et al. 2019)",
        )
    )
    for c in (1, 5):
        for redraw in (False, True):
            variant = "redraw" if redraw else "single"
            e1, e2 = svt2_allocate(eps, c, redraw=redraw)
            out.append(
                AuditTarget(
                    f"svt2-{variant}-c{c}",
                    eps,
                    _svt2(e1, e2, c, redraw),
                    tuple(svt2_patterns()),
                    "pass",
                    f"SVT² ({variant} threshold pair), c = {c}, eps1/eps2 from svt2_allocate",
                )
            )
    faulty_runners: list[tuple[str, Runner]] = [
        ("svt-roth2011", _numeric(faulty.svt_roth2011_batch, epsilon=eps, c=1)),
        ("svt-lee-clifton", _flags(faulty.svt_lee_clifton_batch, epsilon=eps, c=1)),
        ("svt-stoddard", _flags(faulty.svt_stoddard_batch, epsilon=eps, c=1)),
        ("svt-chen", _flags(faulty.svt_chen_batch, epsilon=eps, c=1)),
    ]
    for name, runner in faulty_runners:
        out.append(
            AuditTarget(
                name,
                eps,
                runner,
                svt_pairs,
                "violation",
                f"incorrect variant; true cost {faulty.true_epsilon(name, eps, 1):g}",
            )
        )
    return out


def naive_svt2_targets(epsilon: float = DEFAULT_EPSILON) -> list[AuditTarget]:
    """SVT² run with ``eps1 + eps2 = epsilon`` and audited against that naive claim.

    Our derivation says these runs really cost ``2(eps1 + eps2)`` (single) or ``2(c eps1 + eps2)``
    (redraw); a violation here shows that the factor 2 is needed, no violation that the audit
    cannot tell (the derived bound may be loose).
    """
    out = []
    for c in (1, 5):
        for redraw in (False, True):
            variant = "redraw" if redraw else "single"
            e1, e2, _ = sparse_vector.generalized_svt_allocate(epsilon, c)
            out.append(
                AuditTarget(
                    f"svt2-{variant}-c{c}-naive",
                    epsilon,
                    _svt2(e1, e2, c, redraw),
                    tuple(svt2_patterns()),
                    "probe",
                    f"SVT² ({variant}), c = {c}, claimed eps1 + eps2 (derived cost "
                    f"{svt2_epsilon(e1, e2, c, redraw=redraw):.3g})",
                )
            )
    return out


def all_targets(epsilon: float = DEFAULT_EPSILON) -> dict[str, AuditTarget]:
    from mbeacon.privacy.audit.sanitiser_targets import sanitiser_targets  # it builds on this module

    everything = (
        targets(epsilon)
        + naive_svt2_targets(epsilon)
        + svt_application_targets(epsilon)
        + dssgd_targets(epsilon)
        + truncation_targets(epsilon)
        + sanitiser_targets(epsilon)
    )
    return {t.name: t for t in everything}
