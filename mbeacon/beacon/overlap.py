"""Two datasets that hold the same samples: found at start-up and refused, so that no patient is
protected by two budgets.

A cohort file served under two ids is one cohort (:mod:`mbeacon.beacon.guarantee`, by checksum). Two
*different* files can still hold the same samples: a series ingested whole and again as a subset, or
merged with other samples. Every budget would then count those patients twice. A shared sample is a
sample id found in both files whose beta values agree at the probes the files share: the values guard
against generic ids ("S1", "Sample_2") naming different people in unrelated files. The same patient
measured twice (two samples, two ids) or the same sample renamed cannot be found this way; that is
what the operator's own provenance must rule out (docs/privacy.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Probes compared per pair of datasets (spread over the probes they share).
COMPARED_PROBES = 2_000
#: A sample id in both files is the same sample when this share of its compared values are equal.
SAME_VALUES = 0.95
#: ... over at least this many values measured in both files (fewer: too little to tell).
MIN_COMPARED = 20


@dataclass(frozen=True)
class Overlap:
    """Samples that two datasets both hold."""

    first: str
    second: str
    samples: list[str]


def shared_samples(a: Any, b: Any) -> list[str]:
    """The samples cohorts ``a`` and ``b`` both hold (see the module docstring), sorted."""
    ids = np.intersect1d(np.asarray(a.sample_ids).astype(str), np.asarray(b.sample_ids).astype(str))
    if ids.size == 0:
        return []
    probes = np.intersect1d(np.asarray(a.probe_ids).astype(str), np.asarray(b.probe_ids).astype(str))
    if probes.size == 0:
        return []
    picked = probes[np.linspace(0, probes.size - 1, min(COMPARED_PROBES, probes.size)).astype(np.int64)]
    picked = np.unique(picked)
    values_a = _columns(a, picked, ids)
    values_b = _columns(b, picked, ids)
    both = ~np.isnan(values_a) & ~np.isnan(values_b)
    equal = (values_a == values_b) & both
    measured = both.sum(axis=0)
    same = (measured >= MIN_COMPARED) & (equal.sum(axis=0) >= SAME_VALUES * np.maximum(measured, 1))
    return sorted(ids[same].tolist())


def _columns(cohort: Any, probes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """The values of ``samples`` (columns) at ``probes`` (rows), float32 with NaN missing."""
    rows = cohort.probe_index(probes)
    order = {s: i for i, s in enumerate(np.asarray(cohort.sample_ids).astype(str).tolist())}
    columns = np.array([order[s] for s in samples.tolist()], dtype=np.int64)
    found = rows >= 0
    out = np.full((probes.size, samples.size), np.nan, dtype=np.float32)
    if found.any():
        out[found] = cohort.rows(rows[found])[:, columns]
    return out


def find_overlaps(groups: Iterable[list[str]], open_cohort: Callable[[str], Any]) -> list[Overlap]:
    """Every pair of datasets from different ``groups`` (a group: the ids of one cohort file) that
    share samples, compared once per pair of files."""
    files = [ids for ids in groups if ids]
    opened: dict[str, Any] = {}

    def cohort(dataset: str) -> Any:
        if dataset not in opened:
            opened[dataset] = open_cohort(dataset)
        return opened[dataset]

    overlaps = []
    for i, first in enumerate(files):
        for second in files[i + 1 :]:
            shared = shared_samples(cohort(first[0]), cohort(second[0]))
            if shared:
                overlaps.append(Overlap(first[0], second[0], shared))
    return overlaps


def overlap_message(o: Overlap) -> str:
    """Why the second dataset of ``o`` is not served, for the operator."""
    shown = ", ".join(o.samples[:3]) + (f" and {len(o.samples) - 3} more" if len(o.samples) > 3 else "")
    return (
        f"dataset {o.second!r} holds {len(o.samples)} of the samples of dataset {o.first!r} ({shown}; "
        "the same ids with the same values): those patients would be protected by two budgets. Serve "
        "one dataset of all the samples (ingest them together), or remove one of the two"
    )
