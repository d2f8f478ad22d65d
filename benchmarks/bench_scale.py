"""Scale proof: an EPIC v2 cohort of 936,000 probes x 1,000 patients in the store, ingested and served.

* **Ingest**: :mod:`benchmarks.epic` writes the simulated cohort as a GEO series matrix (about 8 GB
  of text, in a temporary directory, deleted once ingested); ``mbeacon.store.ingest.ingest`` reads it
  in a subprocess (the store group's script: wall time, peak RSS). Recorded: time, text read per
  second, peak RSS against the float32 matrix, and the cohort file's size against the float32 matrix
  (the store keeps values uncompressed, in row chunks, for the query path).
* **Queries**: a prior of the demo's kind (fitted to a simulated reference sample of 120 people, with
  the default quantile sketch) is saved in that store, and two real ``mbeacon serve`` servers
  (gunicorn, the service group's settings and policy) run side by side: one on the EPIC v2 store,
  one on the demo store (2,000 probes x 60 patients).
  Single queries (every query new, probes in a shuffled order, so rows are read all over the 3.7 GB
  file) and batches of 1,000 queries are measured in interleaved rounds, the two servers alternating,
  so both see the same machine load. Target: the EPIC v2 store's throughput >= 0.9x the demo's.
  The cohort file was just written, so its pages are in the page cache: the figures are those of a
  warm server (a cold one reads each probe row's 4 KB from disk on first use).
* **Worker RSS**: after the rounds, the largest resident set of a worker of each server, with its
  anonymous part (memory of its own) and its file-backed part (pages of the memory-mapped cohort,
  shared by all workers and reclaimable by the kernel).

``--quick`` runs the same steps on a 20,000 x 50 cohort with sub-second rounds: no verdict.
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import bench_service as service
from benchmarks import epic, loadgen
from benchmarks.bench_store import _OURS, _run
from benchmarks.common import Result, speed_ratio

PATIENTS = 1_000
TARGET = 0.9
DATASET = "bench"  # the id the store group's ingest script gives
PRIOR = "epic-v2-population"
REFERENCE = 120  # reference people behind the prior, as for the demo's prior
SIDES = ("epic", "demo")


def _ingest(root: Path, probes: int, patients: int) -> dict[str, Any]:
    """Write the cohort's text, ingest it into ``root / "store"``, delete the text; the figures."""
    text = root / "epic_v2_series_matrix.txt"
    started = time.perf_counter()
    epic.write_geo(text, probes, patients)
    written = time.perf_counter() - started
    text_bytes = text.stat().st_size
    figures = _run(_OURS, str(text), str(root / "store"))
    text.unlink()
    cohort_file = root / "store" / "datasets" / f"{DATASET}.h5"
    return figures | {
        "text_bytes": text_bytes,
        "write_text_seconds": written,
        "file_bytes": cohort_file.stat().st_size,
        "matrix_bytes": probes * patients * 4,
    }


def _save_prior(store: Path, probes: int) -> None:
    """The kind of prior the demo store has: fitted to a reference sample (``REFERENCE`` simulated
    people of the same population), with the default quantile sketch."""
    import numpy as np

    from mbeacon.store.priors import prior_from_blocks, save_prior

    means = epic.probe_means(probes, 3)
    rng = np.random.default_rng([3, 2])  # noise-ok: benchmark input

    def blocks():
        for start in range(0, probes, 50_000):
            stop = min(start + 50_000, probes)
            noise = rng.standard_normal((stop - start, REFERENCE), dtype=np.float32)
            values = np.clip(means[start:stop, None] + epic.SD * noise, 0, 1)
            yield [epic.probe_id(i) for i in range(start, stop)], values

    save_prior(store, prior_from_blocks(blocks(), name=PRIOR, source="simulated reference sample"))


def _setup(root: Path, store: Path, prior: str, probes: list[str]) -> service.Setup:
    """A config and ledger with researcher keys for ``store``, like the service group's ``prepare``."""
    from mbeacon.beacon.ledger import Ledger

    ledger_path = root / "ledger.sqlite3"
    config = root / "mbeacon.toml"
    config.write_text(
        service.CONFIG.format(
            store=json.dumps(str(store)),
            ledger=json.dumps(f"sqlite:///{ledger_path}"),
            prior=json.dumps(prior),
            batch=service.BATCH,
        )
    )
    ledger = Ledger.open(f"sqlite:///{ledger_path}")
    try:
        keys = [ledger.add_user(f"bench{i}", actor="benchmark") for i in range(service.USERS)]
    finally:
        ledger.close()
    return service.Setup(root, config, ledger_path, keys, probes)


def _worker_memory(server: service.Server) -> dict[str, float]:
    """The largest VmRSS of the server's workers (MB), with that worker's RssAnon and RssFile."""
    master = server.process.pid if server.process else None
    best: dict[str, float] = {"rss_mb": 0.0, "anon_mb": 0.0, "file_mb": 0.0}
    for pid in server._processes():
        if pid == master:
            continue
        fields: dict[str, float] = {}
        with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    fields[key] = int(value.split()[0]) / 1e3
        if fields.get("VmRSS", 0.0) > best["rss_mb"]:
            best = {"rss_mb": fields["VmRSS"], "anon_mb": fields["RssAnon"], "file_mb": fields["RssFile"]}
    return best


def _measure(servers: dict[str, service.Server], queries: dict[str, service.Queries], plan: service.Plan):
    """Interleaved closed-loop rounds of single queries and of batches on both servers."""
    clients = service.clients_for(service.WORKERS, service.THREADS)
    spreads = {side: servers[side].spread() for side in SIDES}

    def single(side: str, seconds: float) -> loadgen.LoadResult:
        return service._observed(
            servers[side], spreads[side], loadgen.closed_loop, queries[side].get, clients=clients,
            duration=seconds,
        )  # fmt: skip

    def batch(side: str, requests: int) -> loadgen.LoadResult:
        return service._observed(
            servers[side], spreads[side], loadgen.closed_loop, queries[side].batch, clients=1, duration=60,
            max_requests=requests,
        )  # fmt: skip

    for side in SIDES:  # warm-up: opens cohorts, priors and ledger connections in every worker
        single(side, plan.warmup)
        batch(side, 1)
    runs: dict[str, dict[str, list[loadgen.LoadResult]]] = {"single": {}, "batch": {}}
    for r in range(plan.rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        for side in order:
            runs["single"].setdefault(side, []).append(single(side, plan.seconds))
        for side in order:
            runs["batch"].setdefault(side, []).append(batch(side, max(1, plan.batch_requests // 3)))
    return runs


def _figures(runs: dict[str, dict[str, list[loadgen.LoadResult]]]) -> dict[str, Any]:
    f: dict[str, Any] = {}
    for side in SIDES:
        single, batch = runs["single"][side], runs["batch"][side]
        f[f"{side}_rps"] = statistics.median(x.rps for x in single)
        latencies = [t for x in batch for t in x.latencies]
        f[f"{side}_batch_answers_per_s"] = service.BATCH / statistics.median(latencies) if latencies else 0.0
        f[f"{side}_batch_requests"] = len(latencies)
        f[f"{side}_server_cpu_ms"] = service._median(single, "server_cpu_ms")
        f[f"{side}_errors"] = sum(x.errors for x in [*single, *batch])
    f["single_ratio"] = statistics.median(
        a.rps / b.rps for a, b in zip(runs["single"]["epic"], runs["single"]["demo"], strict=True)
    )
    return f


def run(quick: bool) -> list[Result]:
    probes = 20_000 if quick else epic.EPIC_V2_PROBES
    patients = 50 if quick else PATIENTS
    plan = service.Plan.of(quick)
    judged = not quick
    with service.sigterm_unwinds(), tempfile.TemporaryDirectory(prefix="mbeacon-bench-scale-") as tmp:
        root = Path(tmp)
        (root / "epic").mkdir()
        ingested = _ingest(root / "epic", probes, patients)
        _save_prior(root / "epic" / "store", probes)
        order = [epic.probe_id(i) for i in range(probes)]
        random.Random(11).shuffle(order)  # noise-ok: benchmark workload, rows all over the file
        setups = {
            "epic": _setup(root / "epic", root / "epic" / "store", PRIOR, order),
            "demo": service.prepare(root / "demo"),
        }
        queries = {
            side: service.Queries(setups[side].probes, setups[side].keys, service.HOST) for side in SIDES
        }
        servers = {
            side: service.Server(
                setups[side].config, setups[side].root, workers=service.WORKERS, threads=service.THREADS
            )
            for side in SIDES
        }
        try:
            for server in servers.values():
                server.start()
            runs = _measure(servers, queries, plan)
            memory = {side: _worker_memory(servers[side]) for side in SIDES}
        finally:
            for server in servers.values():
                server.stop()
    f = _figures(runs)
    size = f"{probes:,} probes x {patients:,} patients"
    setting = (
        f"two real gunicorn servers ({service.WORKERS} x {service.THREADS}, SQLite ledgers), the "
        f"service group's policy, measured alternately in {plan.rounds} rounds"
    )
    errors = f["epic_errors"] + f["demo_errors"]
    err = f"; {errors} errors" if errors else ""
    batch_ratio = speed_ratio(f["epic_batch_answers_per_s"], f["demo_batch_answers_per_s"], "answers/s")
    text_mb, file_mb, matrix_mb = (ingested[k] / 1e6 for k in ("text_bytes", "file_bytes", "matrix_bytes"))
    rss_mb = ingested["rss_kb"] / 1e3
    return [
        Result(
            "scale: ingest of an EPIC v2 cohort",
            ingested["seconds"],
            None,
            "s",
            None,
            "for the record",
            None,
            note=(
                f"{size}, simulated (benchmarks/epic.py), GEO series matrix of {text_mb:,.0f} MB text "
                f"read at {text_mb / ingested['seconds']:,.0f} MB/s; peak RSS {rss_mb:,.0f} MB "
                f"({rss_mb / matrix_mb:.2f}x the float32 matrix of {matrix_mb:,.0f} MB)"
            ),
        ),
        Result(
            "scale: EPIC v2 cohort file size",
            file_mb,
            matrix_mb,
            "MB",
            None,
            "for the record",
            None,
            baseline_name="the float32 matrix (probes x patients x 4 bytes)",
            note="uncompressed row chunks (the query path's layout) plus ids, probe order and attributes",
        ),
        Result(
            "scale: single query, EPIC v2 store vs demo store",
            f["epic_rps"],
            f["demo_rps"],
            "requests/s",
            f["single_ratio"],
            f">= {TARGET}x",
            f["single_ratio"] >= TARGET if judged else None,
            baseline_name="the same server settings on the demo store (2,000 probes x 60 patients)",
            note=(
                f"{size} vs the demo; {setting}; every query new, probes in shuffled order; closed loop, "
                f"median of the rounds' ratios; server CPU per request {f['epic_server_cpu_ms']:.2f} ms vs "
                f"{f['demo_server_cpu_ms']:.2f} ms{err}"
            ),
            detail=f,
        ),
        Result(
            "scale: batch of 1,000 queries, EPIC v2 store vs demo store",
            f["epic_batch_answers_per_s"],
            f["demo_batch_answers_per_s"],
            "answers/s",
            batch_ratio,
            f">= {TARGET}x",
            (batch_ratio is not None and batch_ratio >= TARGET) if judged else None,
            baseline_name="the same POST on the demo store's server",
            note=(
                f"one client, 1,000 / median latency over {f['epic_batch_requests']} and "
                f"{f['demo_batch_requests']} requests in the alternating rounds"
            ),
        ),
        Result(
            "scale: worker RSS, EPIC v2 store vs demo store",
            memory["epic"]["rss_mb"],
            memory["demo"]["rss_mb"],
            "MB",
            None,
            "for the record",
            None,
            baseline_name="a worker of the demo store's server after the same rounds",
            note=(
                f"largest worker VmRSS after the rounds; EPIC v2: {memory['epic']['anon_mb']:.0f} MB "
                f"anonymous + {memory['epic']['file_mb']:.0f} MB file-backed (memory-mapped cohort rows, "
                f"shared and reclaimable); demo: {memory['demo']['anon_mb']:.0f} + "
                f"{memory['demo']['file_mb']:.0f} MB"
            ),
        ),
    ]
