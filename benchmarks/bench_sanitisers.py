"""The SVT² sanitisers: each batch form against its own per-query step loop, side by side.

* ``svt2_margin_batch`` vs :func:`~mbeacon.privacy.svt2_margin.svt2_margin` (``svt2_margin_step``
  once per query) and ``svt2_noisy_batch`` vs :func:`~mbeacon.privacy.svt2_noisy.svt2_noisy`, on
  the SVT² benchmark's query stream (``bench_svt2.make_queries``: ``N = 100``, 1,000 queries, 5%
  disease DMPs), ``T = 20``, ``eps = 1``, ``c = 5``, margins 5 and 5, ``eps3 = eps/3``.
* ``online_pmw_batch`` vs :func:`~mbeacon.privacy.online_pmw.online_pmw` on 1,000 questions over
  50 probes of 10 bins each (random ranges of bins, priors and cohort drawn once from a seed, the
  cohort shifted from the prior at 5 probes), ``T = 20``, ``eps = 1``, ``c = 5``.

* The service's ``online-pmw`` (:func:`mbeacon.beacon.sanitisers.online_pmw_state.run`, a whole
  request decided at once) vs :func:`~mbeacon.beacon.sanitisers.online_pmw_state.run_stepwise` (the
  same request one ``online_pmw_step`` per query, the reference it is tested against), and, for the
  record, vs SVT²'s service path (:meth:`mbeacon.beacon.sanitisers.svt2.SVT2.decide`) on the same
  counts: requests of 1,000 queries at random
  probes of 2,000 and random ranges, a smooth prior per probe, the cohort's counts near the prior's
  (5% of probes shifted), the documented corner setting (``eps = 10``, ``c = 50``, margin 60,
  ``T = 1``, ``N = 100``), each request from a fresh account.

Throughput counts *answered* query-steps on both sides (a run halts after ``c`` TOPs); the loop runs
on fewer runs, its per-step cost does not depend on their number. Noise from the OS CSPRNG on both
sides, as in the service.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

from benchmarks.bench_svt2 import make_queries
from benchmarks.common import Result, speed_ratio, time_interleaved
from mbeacon.beacon.config import dataset_policy
from mbeacon.beacon.sanitisers import Fresh, account_params, sanitiser_of
from mbeacon.beacon.sanitisers import online_pmw_state as pmw_state
from mbeacon.privacy import UNANSWERED
from mbeacon.privacy.online_pmw import OnlinePMWParams, online_pmw, online_pmw_batch
from mbeacon.privacy.svt2 import SVT2State
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin, svt2_margin_batch
from mbeacon.privacy.svt2_noisy import SVT2NoisyParams, svt2_noisy, svt2_noisy_batch

GROUP = "sanitisers"
EPSILON = 1.0
C = 5
THRESHOLD = 20.0
N_PATIENTS = 100
SPEEDUP_TARGET = 50.0
PMW_PROBES, PMW_BINS, PMW_QUERIES = 50, 10, 1_000
SERVICE_PROBES, SERVICE_QUERIES, SERVICE_TARGET = 2_000, 1_000, 10.0
INPUT_SEED = 20261124


def pmw_workload(seed: int = INPUT_SEED) -> dict[str, np.ndarray]:
    """Priors (probes x bins), and a question stream with its cohort counts (see the docstring)."""
    rng = np.random.default_rng(seed)
    prior = rng.dirichlet(np.full(PMW_BINS, 0.5), PMW_PROBES) + 1e-3
    prior /= prior.sum(axis=1, keepdims=True)
    cohort = np.array([rng.multinomial(N_PATIENTS, p) for p in prior])
    for probe in rng.choice(PMW_PROBES, 5, replace=False):
        cohort[probe] = rng.multinomial(N_PATIENTS, prior[probe][::-1])
    probe = rng.integers(0, PMW_PROBES, PMW_QUERIES)
    a, b = rng.integers(0, PMW_BINS, (2, PMW_QUERIES))
    lo, hi = np.minimum(a, b), np.maximum(a, b) + 1
    csum = np.concatenate([np.zeros((PMW_PROBES, 1), dtype=np.int64), np.cumsum(cohort, axis=1)], axis=1)
    alpha = csum[probe, hi] - csum[probe, lo]
    return {"prior": prior, "probe": probe, "lo": lo, "hi": hi, "alpha": alpha}


def _row(
    label: str,
    batch: Callable[[], np.ndarray],
    loop: Callable[[], int],
    batch_runs: int,
    loop_runs: int,
    repeats: int,
    baseline_name: str,
) -> Result:
    timings = time_interleaved(
        {"batch": batch, "loop": loop},
        repeats=repeats,
        warmup=1,
        keep_values=True,
        after={"batch": lambda flags: int(np.count_nonzero(flags != UNANSWERED))},
    )
    rates = {
        name: statistics.median(v / s for v, s in zip(t.values, t.seconds, strict=True))
        for name, t in timings.items()
    }
    answered = {
        "batch": statistics.mean(timings["batch"].values) / batch_runs,
        "loop": statistics.mean(timings["loop"].values) / loop_runs,
    }
    ratio = speed_ratio(rates["batch"], rates["loop"], "steps/s")
    return Result(
        f"sanitisers: {label}",
        rates["batch"],
        rates["loop"],
        "steps/s",
        ratio,
        f">= {SPEEDUP_TARGET:g}x the loop",
        ratio is not None and ratio >= SPEEDUP_TARGET,
        baseline_name=baseline_name,
        note=f"answered query-steps/s on both sides; batch {batch_runs:,} runs, loop {loop_runs} runs; "
        f"answered/run batch {answered['batch']:.1f} vs loop {answered['loop']:.1f} (same distribution); "
        f"eps = {EPSILON:g}, c = {C}, T = {THRESHOLD:g}; median of {repeats} interleaved rounds.",
        detail={name: t.to_dict() for name, t in timings.items()} | {"answered_per_run": answered},
    )


def run(quick: bool) -> list[Result]:
    batch_runs = 1_000 if quick else 10_000
    loop_runs = 10 if quick else 50
    repeats = 3 if quick else 5
    alpha, beta = make_queries(n_patients=N_PATIENTS)
    alpha = np.round(alpha)
    margin = SVT2MarginParams.from_epsilon(EPSILON, C, THRESHOLD, margin_above=5.0, margin_below=5.0)
    noisy = SVT2NoisyParams.from_epsilon(EPSILON, C, THRESHOLD, margin_above=5.0, margin_below=5.0)
    pmw = OnlinePMWParams.from_epsilon(EPSILON, C, THRESHOLD, N_PATIENTS)
    w = pmw_workload()
    names = [f"cg{i}" for i in range(PMW_PROBES)]
    priors = {name: w["prior"][i] for i, name in enumerate(names)}
    probes = [names[i] for i in w["probe"]]

    def loop_of(fn: Callable[[], np.ndarray]) -> Callable[[], int]:
        return lambda: sum(int(np.count_nonzero(fn() != UNANSWERED)) for _ in range(loop_runs))

    rows = [
        _row(
            "svt2_margin_batch (margins 5 and 5)",
            lambda: svt2_margin_batch(alpha, beta, margin, runs=batch_runs),
            loop_of(lambda: svt2_margin(alpha, beta, margin)),
            batch_runs,
            loop_runs,
            repeats,
            "svt2_margin (svt2_margin_step per query)",
        ),
        _row(
            "svt2_noisy_batch (eps3 = eps/3)",
            lambda: svt2_noisy_batch(alpha, beta, noisy, runs=batch_runs).flags,
            loop_of(lambda: svt2_noisy(alpha, beta, noisy).flags),
            batch_runs,
            loop_runs,
            repeats,
            "svt2_noisy (svt2_noisy_step per query)",
        ),
        _row(
            f"online_pmw_batch ({PMW_PROBES} probes x {PMW_BINS} bins)",
            lambda: (
                online_pmw_batch(
                    w["probe"], w["lo"], w["hi"], w["alpha"], w["prior"], pmw, runs=batch_runs
                ).flags
            ),
            loop_of(lambda: online_pmw(probes, w["lo"], w["hi"], w["alpha"], priors, pmw).flags),
            batch_runs,
            loop_runs,
            repeats,
            "online_pmw (online_pmw_step per query, saved states)",
        ),
    ]
    return [*rows, *_service_rows(repeats)]


def service_workload(seed: int = INPUT_SEED) -> tuple[list[pmw_state.PMWQuery], pmw_state.PriorMass]:
    """A request as the service's ``online-pmw`` sees it, and the prior's mass function (docstring)."""
    rng = np.random.default_rng(seed)
    power = rng.uniform(0.3, 3.0, SERVICE_PROBES)  # probe k's prior CDF is x ** power[k]
    shifted = rng.random(SERVICE_PROBES) < 0.05
    names = np.array([f"cg{k:08d}" for k in range(SERVICE_PROBES)])
    probe = rng.integers(0, SERVICE_PROBES, SERVICE_QUERIES)
    a, b = rng.random((2, SERVICE_QUERIES)).round(2)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    expected = N_PATIENTS * (hi ** power[probe] - lo ** power[probe])
    alpha = rng.binomial(N_PATIENTS, np.clip(expected / N_PATIENTS + 0.3 * shifted[probe], 0, 1))
    queries = [
        pmw_state.PMWQuery(str(names[p]), float(x), float(y), int(v))
        for p, x, y, v in zip(probe, lo, hi, alpha, strict=True)
    ]

    def mass(ids: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        k = power[np.searchsorted(names, ids)]  # names are sorted, as the store's ids are
        return np.where(end > start, end**k - start**k, 0.0)

    return queries, mass


def _service_rows(repeats: int) -> list[Result]:
    params = OnlinePMWParams.from_epsilon(10.0, 50, 1.0, N_PATIENTS, margin=60.0)
    queries, mass = service_workload()
    alpha = [float(q.alpha) for q in queries]
    ids, lo, hi = (np.array(v) for v in zip(*((q.probe, q.lo, q.hi) for q in queries), strict=True))
    beta = (N_PATIENTS * mass(ids, lo, hi)).tolist()
    svt2 = account_params(dataset_policy(mechanism="svt2", epsilon=10.0, c=50))
    fresh = Fresh(alpha, beta, [q.probe for q in queries], [(q.lo, q.hi) for q in queries])
    timings = time_interleaved(
        {
            "ours": lambda: pmw_state.run(params, 0.0, 0, queries, {}, mass),
            "stepwise": lambda: pmw_state.run_stepwise(params, 0.0, 0, queries, {}, mass),
            "svt2": lambda: sanitiser_of("svt2").decide(svt2, SVT2State(0.0, 0.0, 0), fresh, None),
        },
        repeats=repeats,
        warmup=1,
    )
    rate = {name: SERVICE_QUERIES / t.median for name, t in timings.items()}
    ratio = speed_ratio(rate["ours"], rate["stepwise"], "queries/s")
    versus_svt2 = speed_ratio(rate["ours"], rate["svt2"], "queries/s")
    note = (
        f"requests of {SERVICE_QUERIES:,} queries over {SERVICE_PROBES:,} probes, eps = 10, c = 50, "
        f"margin 60, T = 1, N = {N_PATIENTS}; median of {repeats} interleaved rounds"
    )
    detail = {name: t.to_dict() for name, t in timings.items()}
    return [
        Result(
            "sanitisers: service online-pmw, a request decided at once (pmw_state.run)",
            rate["ours"],
            rate["stepwise"],
            "queries/s",
            ratio,
            f">= {SERVICE_TARGET:g}x the per-query loop",
            ratio is not None and ratio >= SERVICE_TARGET,
            baseline_name="run_stepwise (online_pmw_step per query on its segment histogram)",
            note=note,
            detail=detail,
        ),
        Result(
            "sanitisers: service online-pmw request vs SVT²'s (mechanisms.run)",
            rate["ours"],
            rate["svt2"],
            "queries/s",
            versus_svt2,
            "for the record (the mechanism's own cost in a request)",
            None,
            baseline_name="svt2 on the same counts (vectorised svt2_resume)",
            note=note + "; SVT²'s prior counts precomputed, as the engine passes them",
            detail=detail,
        ),
    ]
