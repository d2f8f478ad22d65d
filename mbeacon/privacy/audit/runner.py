"""The statistical DP audit: search for the most damning (inputs, event), then test it afresh.

1. **Event search** on ``runs // 4`` runs per input: for every neighbouring pair, both directions,
   and every candidate event, a quick version of the test; keep the smallest p-value.
2. **Hypothesis test** on ``runs`` *fresh* runs per input for the one chosen (pair, direction,
   event): the exact test of :mod:`stats` gives the p-value of H0 "the mechanism is eps-DP", and
   Clopper-Pearson intervals an empirical epsilon lower bound.

Because the test sample is independent of the search, the reported p-value is valid despite the
search (no multiple-comparison correction needed); this is StatDP's design (Ding et al., CCS 2018).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from mbeacon.privacy.audit.events import Event, candidate_events
from mbeacon.privacy.audit.registry import AuditTarget, InputPair
from mbeacon.privacy.audit.stats import dp_test_pvalue, epsilon_lower_bound, search_scores

DEFAULT_RUNS = 100_000
DEFAULT_SEED = 20261121
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class AuditResult:
    """The verdict on one mechanism (the fields of ``mbeacon audit --json``, plus context)."""

    mechanism: str
    claimed_epsilon: float
    verdict: str  # "pass" | "violation"
    p_value: float
    epsilon_lower_bound: float
    confidence: float
    expect: str
    inputs: str
    event: str
    counts: tuple[int, int]
    runs: int
    seconds: float

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Choice:
    pair: InputPair
    swapped: bool
    event: Event
    score: float


def _search(target: AuditTarget, runs: int, test_runs: int, rng: np.random.Generator) -> _Choice:
    """Find the (pair, direction, event) that looks most like a violation on a search sample."""
    best: _Choice | None = None
    for pair in target.inputs:
        a = target.run(pair.first, pair.context, runs, rng)
        b = target.run(pair.second, pair.context, runs, rng)
        events = candidate_events(a, b)
        ca = np.array([e.count(a) for e in events])
        cb = np.array([e.count(b) for e in events])
        for swapped, (c1, c2) in ((False, (ca, cb)), (True, (cb, ca))):
            z = search_scores(c1, c2, runs, test_runs, target.claimed_epsilon)
            i = int(np.argmax(z))
            if best is None or z[i] > best.score:
                best = _Choice(pair, swapped, events[i], float(z[i]))
    assert best is not None
    return best


def audit_target(
    target: AuditTarget,
    runs: int = DEFAULT_RUNS,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
    significance: float = SIGNIFICANCE,
) -> AuditResult:
    """Audit one mechanism; deterministic for a given ``seed``."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)  # noise-ok: reproducible audit, not a release
    choice = _search(target, max(2_000, runs // 4), runs, rng)
    first, second = choice.pair.first, choice.pair.second
    if choice.swapped:
        first, second = second, first
    c1 = choice.event.count(target.run(first, choice.pair.context, runs, rng))
    c2 = choice.event.count(target.run(second, choice.pair.context, runs, rng))
    p = dp_test_pvalue(c1, c2, runs, runs, target.claimed_epsilon, rng)
    lower = epsilon_lower_bound(c1, c2, runs, runs, confidence)
    direction = f"{choice.pair.name}{' (reversed)' if choice.swapped else ''}"
    return AuditResult(
        mechanism=target.name,
        claimed_epsilon=target.claimed_epsilon,
        verdict="violation" if p < significance else "pass",
        p_value=p,
        epsilon_lower_bound=lower,
        confidence=confidence,
        expect=target.expect,
        inputs=direction,
        event=choice.event.description,
        counts=(c1, c2),
        runs=runs,
        seconds=time.perf_counter() - start,
    )


def run_audit(
    targets: Iterable[AuditTarget],
    runs: int = DEFAULT_RUNS,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
    on_result: Callable[[AuditResult], None] | None = None,
) -> list[AuditResult]:
    """Audit several mechanisms; each gets its own seed derived from ``seed`` and its name."""
    results = []
    for target in targets:
        sub_seed = int.from_bytes(f"{seed}:{target.name}".encode(), "little") % 2**63
        result = audit_target(target, runs, sub_seed, confidence)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
