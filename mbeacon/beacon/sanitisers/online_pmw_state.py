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
:func:`~mbeacon.privacy.online_pmw.synthetic_histogram`, and the query's synthetic count ``s`` is
``N`` times its segments' mass. :func:`run` then makes
:func:`~mbeacon.privacy.online_pmw.online_pmw_step`'s test and release, on a whole request at once
(the same law: its docstring says why), since a request of 1,000 queries at probes that no TOP
has moved needs no per-query histogram.

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

from mbeacon.privacy.noise import as_source, lattice_laplace
from mbeacon.privacy.online_pmw import (
    OnlinePMWParams,
    OnlinePMWState,
    online_pmw_step,
    synthetic_histogram,
    update_target,
)
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
    the synthetic answer, which :mod:`mbeacon.beacon.release` releases only if the dataset answers
    exhausted accounts from the prior); ``counts``: the count a CONTROLLED caller gets (``round(s)``
    on BOT and UNANSWERED, ``max(round(v), 0)`` on TOP); ``updates``: one per TOP, to record;
    ``count``: the positives spent after the stream.
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
    return segs, _starting(_flat_masses(mass, [(probe, segs)]), n)


def _flat_masses(mass: PriorMass, plans: Sequence[tuple[str, list[tuple[float, float]]]]) -> np.ndarray:
    """The prior masses of every plan's segments, one after another, from one call of ``mass``."""
    probes = np.array([probe for probe, segs in plans for _ in segs])
    starts = np.array([a for _, segs in plans for a, _ in segs], dtype=np.float64)
    ends = np.array([b for _, segs in plans for _, b in segs], dtype=np.float64)
    return np.asarray(mass(probes, starts, ends), dtype=np.float64)


def synthetic_count(
    n: int, probe: str, lo: float, hi: float, updates: Sequence[PMWUpdate], mass: PriorMass
) -> float:
    """``s``: the synthetic count of ``[lo, hi]`` after ``updates`` in a cohort of ``n`` patients
    (public, free). The evaluation's model of the service (:mod:`mbeacon.attack.pmw_state`) uses it too."""
    segs, prior = histogram_for(probe, [(u.lo, u.hi) for u in updates] + [(lo, hi)], n, mass)
    h = synthetic_histogram(prior, [(*covered(segs, u.lo, u.hi), u.value) for u in updates])
    i, j = covered(segs, lo, hi)
    return n * float(h[i:j].sum())


def _starting_counts(
    params: OnlinePMWParams, queries: Sequence[PMWQuery], updates: dict[str, list[PMWUpdate]], mass: PriorMass
) -> np.ndarray:
    """Each query's synthetic count ``s`` as the account's recorded ``updates`` leave it.

    One call of ``mass`` gives every query's segment masses. A query at a probe without updates (all
    but at most ``c`` probes) is its range's share of its floored masses, summed over that query's own
    segments only, so a query's ``s`` is the same whatever else its request asks; a query at an
    updated probe replays the updates (:func:`synthetic_count`).
    """
    plans = [
        (q.probe, segments([(u.lo, u.hi) for u in updates.get(q.probe, ())] + [(q.lo, q.hi)]))
        for q in queries
    ]
    flat = np.maximum(np.nan_to_num(_flat_masses(mass, plans)), 0.5 / params.n)
    flat = np.append(flat, 0.0)  # reduceat's indices must stay below its length
    edges: list[int] = []
    start = 0
    for q, (_, segs) in zip(queries, plans, strict=True):
        i, j = covered(segs, q.lo, q.hi)
        edges += [start, start + len(segs), start + i, start + j]
        start += len(segs)
    sums = np.add.reduceat(flat, np.array(edges, dtype=np.int64))  # increasing: plans follow each other
    # sums[4k] is query k's total, sums[4k + 2] its range's; odd entries span neighbours and are unused
    s = params.n * sums[2::4] / sums[0::4]
    for k, q in enumerate(queries):
        if updates.get(q.probe):
            s[k] = synthetic_count(params.n, q.probe, q.lo, q.hi, updates[q.probe], mass)
    return s


def run(
    params: OnlinePMWParams,
    z: float,
    count: int,
    queries: Sequence[PMWQuery],
    updates: dict[str, list[PMWUpdate]],
    mass: PriorMass,
    rng=None,
    *,
    limit: int | None = None,
) -> PMWRun:
    """Answer ``queries`` in order from the account's threshold ``z`` (secret), ``count`` positives
    spent and its recorded ``updates`` by probe (extended in place by this stream's TOPs, so a later
    query of the same request sees an earlier one's update). The stream halts when ``count`` reaches
    ``limit`` (``params.c`` by default; a cohort-pmw caller's quota may stop it earlier).

    :func:`~mbeacon.privacy.online_pmw.online_pmw_step`'s test, on the whole stream at once: every
    query's noise ``nu`` is drawn up front (independent of everything, and unseen until its query is
    decided, so the law is the step loop's), the first query whose ``q + nu`` reaches
    ``margin + z`` is the next TOP, and only the later queries at its probe get a new ``s``. A TOP's
    release noise is drawn when it happens; draws for queries after the halt are discarded unseen.
    """
    out = PMWRun([], [], [], [], count)
    k = len(queries)
    if k == 0:
        return out
    source = as_source(rng)
    alpha = np.array([q.alpha for q in queries], dtype=np.float64)
    s = _starting_counts(params, queries, updates, mass)
    nu = np.atleast_1d(lattice_laplace(params.query_scale, 1.0, k, source)).astype(np.float64)
    flags = np.full(k, BOT, dtype=np.int8)
    released = np.full(k, np.nan)  # v of each TOP
    t, bar = params.count_threshold, params.margin + z
    at_probe: dict[str, list[int]] = {}  # each probe's queries, in order: a TOP moves only these
    for m, q in enumerate(queries):
        at_probe.setdefault(q.probe, []).append(m)
    i = 0
    while i < k:
        if out.count >= (params.c if limit is None else min(limit, params.c)):  # halted: the rest are
            # answered from the synthetic distribution
            flags[i:] = UNANSWERED
            break
        yes = s[i:] >= params.threshold
        test = np.where(yes, t - 1 - alpha[i:], alpha[i:] - t)
        tops = np.flatnonzero(test + nu[i:] >= bar)
        if tops.size == 0:
            break
        j = i + int(tops[0])
        top = queries[j]
        v = alpha[j] + float(lattice_laplace(params.release_scale, 1.0, None, source))
        flags[j], released[j] = TOP, v
        update = PMWUpdate(top.probe, top.lo, top.hi, update_target(v, params.n))
        updates.setdefault(top.probe, []).append(update)
        out.updates.append(update)
        out.count += 1
        same = at_probe[top.probe]
        for m in same[bisect.bisect_right(same, j) :]:
            later = queries[m]
            s[m] = synthetic_count(params.n, top.probe, later.lo, later.hi, updates[top.probe], mass)
        i = j + 1
    value = np.where(flags == TOP, released, s)  # v on a TOP, the synthetic count elsewhere
    out.flags = flags.tolist()
    out.answers = (value >= params.threshold).tolist()
    out.counts = [max(round(x), 0) for x in value.tolist()]  # post-processing of released values
    return out


def run_stepwise(
    params: OnlinePMWParams,
    z: float,
    count: int,
    queries: Sequence[PMWQuery],
    updates: dict[str, list[PMWUpdate]],
    mass: PriorMass,
    rng=None,
) -> PMWRun:
    """:func:`run` the literal way, the reference it is tested and benchmarked against: per query, the
    histogram of its segments with the probe's updates and one
    :func:`~mbeacon.privacy.online_pmw.online_pmw_step`."""
    out = PMWRun([], [], [], [], count)
    source = as_source(rng)
    for q in queries:
        recorded = updates.setdefault(q.probe, [])
        segs, prior = histogram_for(
            q.probe, [(u.lo, u.hi) for u in recorded] + [(q.lo, q.hi)], params.n, mass
        )
        state = OnlinePMWState(
            z, out.count, tuple((q.probe, *covered(segs, u.lo, u.hi), u.value) for u in recorded)
        )
        i, j = covered(segs, q.lo, q.hi)
        flag, answer, v, after = online_pmw_step(state, q.probe, i, j, q.alpha, prior, params, source)
        if flag == UNANSWERED:
            v = params.n * float(synthetic_histogram(prior, [u[1:] for u in state.updates])[i:j].sum())
            answer = v >= params.threshold
        elif flag == TOP:
            update = PMWUpdate(q.probe, q.lo, q.hi, after.updates[-1][3])
            recorded.append(update)
            out.updates.append(update)
            out.count = after.count
        assert v is not None
        out.flags.append(flag)
        out.answers.append(bool(answer))
        out.counts.append(max(round(v), 0))
    return out
