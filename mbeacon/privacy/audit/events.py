"""Output events for the audit: which sets of outputs to count.

A mechanism's outputs for ``n`` runs are an integer matrix ``codes`` (flags or selected indices, one
row per run) and, for mechanisms that release numbers, a float matrix ``values`` (NaN where nothing
is released). Numbers are cut into a few bins so that events stay countable. Candidate events are
built from what the event-search sample shows, as StatDP does: whole output patterns, pattern
prefixes, single positions, counts of positives, and for numeric outputs "pattern and value below
(or above) a cut".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

TOP = 1
# Output codes lie in [CODE_MIN, CODE_MIN + CODE_BASE): flags -1..1 or item indices below 14.
CODE_MIN = -1
CODE_BASE = 16


@dataclass(frozen=True, eq=False)
class Outputs:
    """Outputs of ``n`` runs of one mechanism on one input."""

    codes: np.ndarray
    values: np.ndarray | None = None

    @property
    def runs(self) -> int:
        return self.codes.shape[0]

    @cached_property
    def _prefix_keys(self) -> list[np.ndarray]:
        """``keys[L][r]``: run ``r``'s first ``L`` outputs as one integer (fast pattern counting)."""
        shifted = self.codes.astype(np.int64) - CODE_MIN
        keys = [np.zeros(self.runs, dtype=np.int64)]
        for col in range(self.codes.shape[1]):
            keys.append(keys[-1] * CODE_BASE + shifted[:, col])
        return keys

    def prefix_key(self, length: int) -> np.ndarray:
        return self._prefix_keys[length]

    @cached_property
    def first_value(self) -> np.ndarray:
        """The first released number of every run (NaN if none)."""
        if self.values is None:
            return np.full(self.runs, np.nan)
        released = ~np.isnan(self.values)
        first = np.argmax(released, axis=1)
        vals = self.values[np.arange(self.runs), first]
        return np.where(released.any(axis=1), vals, np.nan)


def decode_key(key: int, width: int) -> np.ndarray:
    """Invert :func:`pattern_key` for a pattern of ``width`` outputs."""
    digits = []
    for _ in range(width):
        key, digit = divmod(int(key), CODE_BASE)
        digits.append(digit + CODE_MIN)
    return np.array(digits[::-1], dtype=np.int64)


def pattern_key(pattern: np.ndarray) -> int:
    """The integer key of an output pattern, as :meth:`Outputs.prefix_key` computes it."""
    key = 0
    for v in pattern:
        key = key * CODE_BASE + int(v) - CODE_MIN
    return key


@dataclass(frozen=True)
class Event:
    """A set of outputs, as a predicate over a batch of outputs, with a readable description."""

    description: str
    predicate: Callable[[Outputs], np.ndarray]

    def count(self, outputs: Outputs) -> int:
        return int(np.count_nonzero(self.predicate(outputs)))


def _pattern_event(pattern: np.ndarray, length: int | None = None) -> Event:
    n = pattern.size if length is None else length
    key = pattern_key(pattern[:n])

    def predicate(out: Outputs) -> np.ndarray:
        return out.prefix_key(n) == key

    label = "output" if length is None else f"first {n} outputs"
    return Event(f"{label} == {pattern[:n].tolist()}", predicate)


def _column_event(col: int, value: int) -> Event:
    return Event(f"output[{col}] == {value}", lambda out: out.codes[:, col] == value)


def _top_count_event(m: int) -> Event:
    return Event(f"#TOP >= {m}", lambda out: np.count_nonzero(out.codes == TOP, axis=1) >= m)


def _value_event(pattern: np.ndarray | None, cut: float, below: bool) -> Event:
    key = None if pattern is None else pattern_key(pattern)

    def predicate(out: Outputs) -> np.ndarray:
        v = out.first_value
        hit = (v <= cut) if below else (v >= cut)
        if key is not None:
            hit &= out.prefix_key(out.codes.shape[1]) == key
        return hit

    where = "any output" if pattern is None else f"output == {pattern.tolist()}"
    op = "<=" if below else ">="
    return Event(f"{where} and first released value {op} {cut:g}", predicate)


def candidate_events(a: Outputs, b: Outputs, max_patterns: int = 200) -> list[Event]:
    """Candidate events from the event-search outputs of both neighbouring inputs."""
    codes = np.concatenate([a.codes, b.codes])
    if codes.min() < CODE_MIN or codes.max() >= CODE_MIN + CODE_BASE or codes.shape[1] > 15:
        raise ValueError("audit outputs must be codes in [-1, 14] and at most 15 wide")
    width = codes.shape[1]
    keys, counts = np.unique(np.concatenate([a.prefix_key(width), b.prefix_key(width)]), return_counts=True)
    order = np.argsort(-counts, kind="stable")[:max_patterns]
    top_patterns = [decode_key(k, width) for k in keys[order]]
    events = [_pattern_event(p) for p in top_patterns]
    for p in top_patterns[: max_patterns // 4]:
        events.extend(_pattern_event(p, length) for length in range(1, width))
    for col in range(width):
        events.extend(_column_event(col, int(v)) for v in np.unique(codes[:, col]))
    if np.any(codes == TOP):
        max_tops = int(np.max(np.count_nonzero(codes == TOP, axis=1)))
        events.extend(_top_count_event(m) for m in range(1, max_tops + 1))
    if a.values is not None and b.values is not None:
        pooled = np.concatenate([a.first_value, b.first_value])
        pooled = pooled[~np.isnan(pooled)]
        if pooled.size:
            cuts = np.unique(np.quantile(pooled, np.linspace(0.02, 0.98, 13)))
            for pattern in [None, *top_patterns[:20]]:
                for cut in cuts:
                    events.append(_value_event(pattern, float(cut), below=True))
                    events.append(_value_event(pattern, float(cut), below=False))
    return _deduplicate(events)


def _deduplicate(events: list[Event]) -> list[Event]:
    seen: set[str] = set()
    unique = []
    for e in events:
        if e.description not in seen:
            seen.add(e.description)
            unique.append(e)
    return unique
