"""``online-pmw`` as the service runs it: per account and probe, a synthetic distribution without bins.

:mod:`mbeacon.privacy.online_pmw` answers queries over a probe's histogram of value bins. The service
has no bins: a query is any closed range ``[lo, hi]`` of beta values. So for each query the probe's
histogram is built on the fly from **segments**: the ranges between the sorted endpoints of the
probe's recorded updates and of the query itself (plus 0 and 1), and a point segment ``[x, x]`` for
every point range among them. A range covers the contiguous run of segments inside it. Each
segment's starting mass is the public prior's probability of that interval (the engine's function
that gives ``beta / N``), floored at half a patient (``0.5 / N``) so no segment is impossible (a
multiplicative-weights update cannot move mass into a segment of weight 0), then normalised. The
updates, in the order they were released, are replayed by
:func:`~mbeacon.privacy.online_pmw.synthetic_histogram` and the query is answered by
:func:`~mbeacon.privacy.online_pmw.online_pmw_step` with the query as a segment range.

Replaying an update on a finer segmentation is the same update: an update rescales the mass inside
its range by one factor and outside by another, and both sides are unions of whole segments, so the
synthetic mass of every range depends only on the public prior, the public ranges asked and the
released values, never on how the segments were cut beyond the floor, which is itself a function
of those ranges.

Privacy: unchanged from :mod:`mbeacon.privacy.online_pmw` (``eps1 + eps2 + eps3`` per account,
however many queries). Its proof needs the synthetic answer ``s`` of each query to be a function of
public information and of earlier outputs, so that the sign of the sensitivity-1 query ``q`` is
chosen adaptively from public data; here ``s`` is a function of the public prior, the public query
ranges (every range the account asked, the current one included) and the released updates, which
are post-processing of the released counts. The data enter only through ``alpha`` in the step.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mbeacon.privacy.online_pmw import OnlinePMWParams, OnlinePMWState, online_pmw_step, synthetic_histogram
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED

#: ``mass(probes, starts, ends)``: the public prior's probability of each interval ``[start, end]`` of
#: the probe beside it (arrays of one length: one call answers many queries' segments).
PriorMass = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class PMWUpdate:
    """One released update of a probe's synthetic distribution: ``[lo, hi]`` moved to mass ``value``."""

    probe: str
    lo: float
    hi: float
    value: float


@dataclass(frozen=True)
class PMWQuery:
    """One fresh query as the mechanism sees it; ``alpha`` is the cohort's count (the only data)."""

    probe: str
    lo: float
    hi: float
    alpha: int


@dataclass
class PMWRun:
    """What ``online-pmw`` decided for a stream of fresh queries (see :class:`mechanisms.Run`).

    ``answers``: the yes/no released (the synthetic answer on BOT, ``v >= T`` on TOP; on UNANSWERED
    the synthetic answer, which the engine releases only if the dataset answers exhausted accounts
    from the prior); ``counts``: the count a CONTROLLED caller gets (``round(s)`` on BOT and
    UNANSWERED, ``max(round(v), 0)`` on TOP); ``updates``: one per TOP, to record; ``count``: the
    positives spent after the stream.
    """

    flags: list[int]
    answers: list[bool]
    counts: list[int]
    updates: list[PMWUpdate]
    count: int


def segments(ranges: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The segments ``ranges`` cut ``[0, 1]`` into, ordered so that every range covers a contiguous run:
    the open gaps between consecutive endpoints, and a point segment at each point range's value
    (at least two segments: a histogram has at least two bins)."""
    edges = sorted({0.0, 1.0, *(x for r in ranges for x in r)})
    if len(edges) == 2 and not any(lo == hi for lo, hi in ranges):
        edges = [0.0, 0.5, 1.0]  # only [0, 1] asked: the histogram needs two segments (a public cut)
    points = {lo for lo, hi in ranges if lo == hi}
    out: list[tuple[float, float]] = []
    for i, x in enumerate(edges):
        if x in points:
            out.append((x, x))
        if i + 1 < len(edges):
            out.append((x, edges[i + 1]))
    return out


def covered(segs: list[tuple[float, float]], lo: float, hi: float) -> tuple[int, int]:
    """The segment indices ``[i, j)`` that ``[lo, hi]`` covers (its endpoints are segment edges)."""
    i = bisect.bisect_left(segs, (lo, lo))
    j = bisect.bisect_right(segs, (hi, hi))
    return i, j


def _starting(masses: np.ndarray, n: int) -> np.ndarray:
    """Segment masses as the histogram starts: the prior's, floored at ``0.5 / n``, normalised."""
    floored = np.maximum(np.nan_to_num(np.asarray(masses, dtype=np.float64)), 0.5 / n)
    return floored / floored.sum()


def histogram_for(
    probe: str, ranges: Sequence[tuple[float, float]], n: int, mass: PriorMass
) -> tuple[list[tuple[float, float]], np.ndarray]:
    """The segments of ``ranges`` and their starting masses (:func:`_starting`)."""
    segs = segments(ranges)
    return segs, _starting(_masses(mass, [(probe, segs)])[0], n)


def _masses(mass: PriorMass, plans: Sequence[tuple[str, list[tuple[float, float]]]]) -> list[np.ndarray]:
    """The prior masses of each plan's segments, in one call of ``mass``."""
    sizes = [len(segs) for _, segs in plans]
    probes = np.array([probe for probe, segs in plans for _ in segs])
    starts = np.array([a for _, segs in plans for a, _ in segs], dtype=np.float64)
    ends = np.array([b for _, segs in plans for _, b in segs], dtype=np.float64)
    flat = np.asarray(mass(probes, starts, ends), dtype=np.float64)
    return np.split(flat, np.cumsum(sizes)[:-1])


def synthetic_count(
    params: OnlinePMWParams, probe: str, lo: float, hi: float, updates: Sequence[PMWUpdate], mass: PriorMass
) -> float:
    """``s``: the synthetic count of ``[lo, hi]`` after ``updates`` (public, free)."""
    segs, prior = histogram_for(probe, [(u.lo, u.hi) for u in updates] + [(lo, hi)], params.n, mass)
    h = synthetic_histogram(prior, [(*covered(segs, u.lo, u.hi), u.value) for u in updates])
    i, j = covered(segs, lo, hi)
    return params.n * float(h[i:j].sum())


def run(
    params: OnlinePMWParams,
    z: float,
    count: int,
    queries: Sequence[PMWQuery],
    updates: dict[str, list[PMWUpdate]],
    mass: PriorMass,
    rng=None,
) -> PMWRun:
    """Answer ``queries`` in order from the account's threshold ``z`` (secret), ``count`` positives
    spent and its recorded ``updates`` by probe (extended in place by this stream's TOPs, so a later
    query of the same request sees an earlier one's update)."""
    out = PMWRun([], [], [], [], count)
    # every query's segments as the recorded updates cut them, their prior masses in one call; only a
    # query at a probe this stream has updated is cut again (at most c probes)
    plans = []
    for q in queries:
        recorded = updates.get(q.probe, [])
        plans.append((q.probe, segments([(u.lo, u.hi) for u in recorded] + [(q.lo, q.hi)])))
    masses = _masses(mass, plans) if plans else []
    moved: set[str] = set()
    for k, q in enumerate(queries):
        probe_updates = updates.setdefault(q.probe, [])
        if q.probe in moved:
            ranges = [(u.lo, u.hi) for u in probe_updates] + [(q.lo, q.hi)]
            segs, prior = histogram_for(q.probe, ranges, params.n, mass)
        else:
            segs, prior = plans[k][1], _starting(masses[k], params.n)
        state = OnlinePMWState(
            z, out.count, tuple((q.probe, *covered(segs, u.lo, u.hi), u.value) for u in probe_updates)
        )
        i, j = covered(segs, q.lo, q.hi)
        flag, answer, v, after = online_pmw_step(state, q.probe, i, j, q.alpha, prior, params, rng)
        if flag == UNANSWERED:  # halted: the synthetic answer, free
            h = synthetic_histogram(prior, [(lo, hi, t) for _, lo, hi, t in state.updates])
            s = params.n * float(h[i:j].sum())
            out.flags.append(UNANSWERED)
            out.answers.append(bool(s >= params.threshold))
            out.counts.append(max(round(s), 0))
            continue
        assert v is not None
        out.flags.append(flag)
        out.answers.append(bool(answer))
        out.counts.append(max(round(v), 0))  # post-processing of the released value
        if flag == TOP:
            update = PMWUpdate(q.probe, q.lo, q.hi, after.updates[-1][3])
            probe_updates.append(update)
            out.updates.append(update)
            moved.add(q.probe)
            out.count = after.count
        else:
            assert flag == BOT
    return out
