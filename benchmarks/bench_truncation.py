"""Counting a cohort truncated at its contribution bound, against counting the same cohort untruncated.

A cohort of 20,000 probes x 1,000 samples from 400 patients (2 or 3 samples each), truncated at the
bound 2 (``mbeacon.beacon.contribution.TruncatedCohort``: each patient's first two samples), against
the plain cohort's own counts, side by side in the same run: one query (``count_one``, the service's
single-query path) and a batch of 1,000 (``count_in_range``). Target: truncation costs at most half of
the untruncated speed (ratio >= 0.5).
"""

from __future__ import annotations

import tempfile

import numpy as np

from benchmarks.common import Result, speed_ratio, time_interleaved

PROBES = 20_000
SAMPLES = 1_000


def run(quick: bool) -> list[Result]:
    from mbeacon.beacon.config import dataset_policy
    from mbeacon.beacon.contribution import TruncatedCohort, sensitivity_of, serving_cohort
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.patients import ContributionBound

    rng = np.random.default_rng(3)  # noise-ok: benchmark input
    patients = np.repeat(np.arange(400), rng.integers(2, 4, 400))[:SAMPLES]
    patients = np.r_[patients, np.arange(400, 400 + SAMPLES - patients.size)]
    rng.shuffle(patients)
    with tempfile.TemporaryDirectory() as root:
        store = CohortStore(root, create=True)
        block = 8_192
        batches = (
            (
                [f"cg{i:08d}" for i in range(s, min(s + block, PROBES))],
                rng.random((min(block, PROBES - s), SAMPLES)),
            )
            for s in range(0, PROBES, block)
        )
        store.write(
            "t", [f"S{j}" for j in range(SAMPLES)], batches, patients=[f"P{p}" for p in patients],
            bound=ContributionBound(2, "declared"),
        )  # fmt: skip
        plain = store.open("t")
        truncated = serving_cohort(plain, sensitivity_of("t", plain.info, dataset_policy()))
        assert isinstance(truncated, TruncatedCohort)
        rows = rng.integers(0, PROBES, 1_000)
        lo, hi = np.full(1_000, 0.2), np.full(1_000, 0.7)
        state = {"i": 0}

        def one(cohort) -> int:
            state["i"] = (state["i"] + 1) % rows.size
            return cohort.count_one(int(rows[state["i"]]), 0.2, 0.7)

        repeats = 3 if quick else 7
        singles = time_interleaved(
            {
                "plain": lambda: [one(plain) for _ in range(1_000)],
                "truncated": lambda: [one(truncated) for _ in range(1_000)],
            },
            repeats=repeats,
        )
        batch = time_interleaved(
            {
                "plain": lambda: plain.count_in_range(rows, lo, hi),
                "truncated": lambda: truncated.count_in_range(rows, lo, hi),
            },
            repeats=repeats,
        )
    out = []
    for name, timing, per_call in (
        ("one query (count_one)", singles, 1_000),
        ("batch of 1,000 (count_in_range)", batch, 1_000),
    ):
        ours, base = per_call / timing["truncated"].median, per_call / timing["plain"].median
        ratio = speed_ratio(ours, base, "queries/s")
        out.append(
            Result(
                f"truncation: {name}",
                ours,
                base,
                "queries/s",
                ratio,
                ">= 0.5x untruncated",
                ratio is not None and ratio >= 0.5,
                baseline_name="the same cohort untruncated",
                note=f"{PROBES:,} probes x {SAMPLES:,} samples of 400+ patients, bound 2, median of rounds",
            )
        )
    return out
