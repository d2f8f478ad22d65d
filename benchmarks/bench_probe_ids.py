"""Probe lookup by CpG on an EPIC v2-sized cohort, against the exact-id lookup it replaces.

A cohort of 936,990 EPIC v2-style ids (``cg........_TC21`` and its kin, 1% of CpGs with a replicate
pair) x 4 patients. Ours: ``Cohort.probe_index`` (1,000 random ids per call, each id reduced to its
CpG and found among the CpGs' representative probes through a hash table) and ``Cohort.probe_row``
(one id, the service's per-question path); baseline, side by side: the exact lookup of the same ids
(binary search in the sorted stored ids, what a store that knows no CpGs does). And the one-time cost
of the CpG index and its hash table (``Cohort.prepare_lookups``, which a serving process calls at
start-up), against opening the cohort.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np

from benchmarks.common import Result, speed_ratio, time_interleaved

EPIC_V2_PROBES = 936_990
PATIENTS = 4
SUFFIXES = np.array(["_TC21", "_BC21", "_TC11", "_BC11", "_TO21", "_BO11"])


def _ids(probes: int, rng: np.random.Generator) -> list[str]:
    cpgs = np.sort(rng.choice(10**8, size=probes, replace=False))
    names = [f"cg{c:08d}{s}" for c, s in zip(cpgs, rng.choice(SUFFIXES, probes), strict=True)]
    for i in rng.choice(probes, size=probes // 100, replace=False):  # replicate pairs: same CpG
        if i > 0:
            names[i] = names[i - 1][:-1] + ("2" if names[i - 1][-1] != "2" else "3")
    return list(dict.fromkeys(names))


def _exact(sorted_ids: np.ndarray, order: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    wanted = wanted.astype("S64")
    pos = np.minimum(np.searchsorted(sorted_ids, wanted), len(sorted_ids) - 1)
    return np.where(sorted_ids[pos] == wanted, order[pos], -1)


def _exact_one(sorted_ids: np.ndarray, order: np.ndarray, probe_id: str) -> int:
    wanted = probe_id.encode("ascii")
    pos = int(sorted_ids.searchsorted(wanted))
    return int(order[pos]) if pos < len(sorted_ids) and sorted_ids[pos] == wanted else -1


def run(quick: bool) -> list[Result]:
    from mbeacon.store.cohorts import Cohort, CohortStore

    probes = 50_000 if quick else EPIC_V2_PROBES
    rng = np.random.default_rng(7)  # noise-ok: benchmark input
    ids = _ids(probes, rng)
    with tempfile.TemporaryDirectory() as root:
        store = CohortStore(root, create=True)
        values = rng.random((len(ids), PATIENTS), dtype=np.float32)
        store.write("epic", [f"S{j}" for j in range(PATIENTS)], [(ids, values)])
        path = store.path_of("epic")

        def first_lookup() -> float:
            cohort = Cohort(path)
            cohort.info  # noqa: B018 - opens it
            start = time.perf_counter()
            cohort.prepare_lookups()  # the CpG index and its hash table, as a serving process builds them
            return time.perf_counter() - start

        def open_only() -> float:
            start = time.perf_counter()
            Cohort(path).info  # noqa: B018 - opens it
            return time.perf_counter() - start

        build = [first_lookup() for _ in range(3 if quick else 5)]
        opening = [open_only() for _ in range(3 if quick else 5)]

        cohort = store.open("epic")
        cohort.probe_row(ids[0])
        sorted_ids, order = cohort._sorted_ids, cohort._probe_order
        batches = [np.array(ids)[rng.integers(0, len(ids), 1_000)] for _ in range(32)]
        singles = [ids[i] for i in rng.integers(0, len(ids), 1_000)]
        for batch in batches:  # the CpG lookup answers every stored id with its CpG's representative
            found = cohort.probe_index(batch)
            assert (found >= 0).all()
        state = {"i": 0}

        def batch() -> np.ndarray:
            state["i"] = (state["i"] + 1) % len(batches)
            return batches[state["i"]]

        timing = time_interleaved(
            {
                "ours": lambda: cohort.probe_index(batch()),
                "exact": lambda: _exact(sorted_ids, order, batch()),
                "ours_one": lambda: [cohort.probe_row(p) for p in singles],
                "exact_one": lambda: [_exact_one(sorted_ids, order, p) for p in singles],
            },
            repeats=5 if quick else 15,
        )
    per = {k: 1_000 / t.median for k, t in timing.items()}
    size = f"{len(ids):,} EPIC v2-style probes, 1,000 random stored ids per call, median of rounds"
    build_s, open_s = float(np.median(build)), float(np.median(opening))
    return [
        Result(
            "store: probe lookup by CpG, 1,000 ids (Cohort.probe_index)",
            per["ours"],
            per["exact"],
            "ids/s",
            speed_ratio(per["ours"], per["exact"], "ids/s"),
            ">= 0.5x the exact lookup",
            per["ours"] >= 0.5 * per["exact"],
            baseline_name="exact-id binary search in the sorted stored ids",
            note=size,
        ),
        Result(
            "store: probe lookup by CpG, one id (Cohort.probe_row)",
            per["ours_one"],
            per["exact_one"],
            "ids/s",
            speed_ratio(per["ours_one"], per["exact_one"], "ids/s"),
            ">= 0.5x the exact lookup",
            per["ours_one"] >= 0.5 * per["exact_one"],
            baseline_name="exact-id binary search, one id per call",
            note="the per-question path: 1,000 calls in a Python loop",
        ),
        Result(
            "store: CpG index and its hash table built for a cohort",
            build_s,
            open_s,
            "s",
            speed_ratio(build_s, open_s, "s"),
            "for the record (once per process and cohort, at start-up)",
            None,
            baseline_name="opening the cohort (seal check, ids, chunk map)",
            note=f"{len(ids):,} probes; median of {len(build)} fresh cohorts",
        ),
    ]


if __name__ == "__main__":
    for row in run(quick=False):
        print(f"{row.name}: ours {row.ours:.4g} {row.unit}, baseline {row.baseline:.4g}, ratio {row.ratio}")
