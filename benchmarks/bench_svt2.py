"""SVT²: the vectorised ``svt2_batch`` against a straightforward per-run Python loop of the MBeacon listing.

Workload (realistic for the beacon): a cohort of ``N = 100`` patients and a stream of 1,000 range
queries. Each query has a prior probability ``p`` (U-shaped, Beta(0.3, 0.3): most ranges almost never
or almost always contain a patient, like methylation values near 0 or 1), ``beta = N * p`` and
``alpha ~ Binomial(N, p)``; for 5% of the queries the cohort differs strongly from the prior
(``alpha ~ Binomial(N, 1 - p)``, the disease DMPs). ``T = 1``, ``eps = 1`` split by ``svt2_allocate``,
``c = 5``, sensitivity 1. The query inputs are seeded (same workload every run); the noise comes from
the OS CSPRNG on both sides, as in the service.

Throughput is counted in *answered* query-steps (flags other than ``UNANSWERED``) on both sides: a run
halts after ``c`` TOPs, typically within the first few dozen queries, and steps after the halt cost
neither implementation anything, so counting all ``runs x queries`` would inflate both figures.
The loop runs on a subset of the runs (its per-step cost does not depend on the number of runs).
Each side's timing holds its own work only: the loop tallies its flags as it goes (a few dozen per
run), the batch's flag matrix is counted after its timing, since counting reads all of its
``runs x queries`` entries (until 2026-11-22 that count was timed with the batch, a third of its time).
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks.common import Result, Timing, speed_ratio, time_interleaved
from mbeacon.privacy import BOT, TOP, UNANSWERED, discrete_laplace, svt2, svt2_allocate, svt2_batch

GROUP = "svt2"
N_PATIENTS = 100
N_QUERIES = 1_000
SHIFTED_FRACTION = 0.05
THRESHOLD = 1.0
EPSILON = 1.0
C = 5
SENSITIVITY = 1.0
SPEEDUP_TARGET = 100.0
INPUT_SEED = 20190224  # NDSS 2019: the inputs are fixed, the noise is not


def make_queries(
    n_queries: int = N_QUERIES, n_patients: int = N_PATIENTS, seed: int = INPUT_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha, beta)`` of a realistic query stream (see the module docstring)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(0.3, 0.3, n_queries)
    beta = n_patients * p
    alpha = rng.binomial(n_patients, p).astype(np.float64)
    shifted = rng.random(n_queries) < SHIFTED_FRACTION
    alpha[shifted] = rng.binomial(n_patients, 1.0 - p[shifted])
    return alpha, beta


def svt2_loop(
    alpha: list[float],
    beta: list[float],
    threshold: float,
    epsilon1: float,
    epsilon2: float,
    c: int,
    *,
    redraw: bool,
    sensitivity: float = 1.0,
) -> list[int]:
    """One SVT² run, line by line as in the MBeacon listing (Hagestedt et al., NDSS 2019).

    The baseline: plain Python over lists, one scalar draw per Laplace variate, from the same secure
    sampler as the service (``discrete_laplace``; with ``sensitivity = 1`` the lattice is the
    integers). ``redraw=True`` is the listing as printed (line 12); ``redraw=False`` keeps one
    threshold pair for the whole run. Returns the flags of the answered queries (the run halts at
    ``c`` TOPs, later queries are unanswered).
    """
    if sensitivity != 1.0:
        raise ValueError("the baseline loop is written for counting queries (sensitivity 1)")
    th_scale = sensitivity / epsilon1
    q_scale = 2 * c * sensitivity / epsilon2
    lap = discrete_laplace
    t = threshold
    z1 = lap(th_scale)  # line 1
    z2 = lap(th_scale)
    count = 0  # line 2
    flags: list[int] = []
    for a, b in zip(alpha, beta, strict=True):  # line 3
        y = lap(q_scale)  # line 4
        y_prime = lap(q_scale)
        if (a + y < t + z1 and b + y < t + z1) or (a + y_prime >= t + z2 and b + y_prime >= t + z2):
            flags.append(BOT)  # line 8
        else:
            flags.append(TOP)  # line 10
            count += 1
            if redraw:  # line 12
                z1 = lap(th_scale)
                z2 = lap(th_scale)
        if count >= c:  # line 14: halt
            break
    return flags


def _rates(timing: Timing) -> list[float]:
    """Answered steps per second of each round (the work of a round is its return value)."""
    return [steps / s for steps, s in zip(timing.values, timing.seconds, strict=True)]


def _variant_rows(redraw: bool, quick: bool, alpha: np.ndarray, beta: np.ndarray) -> list[Result]:
    batch_runs = 1_000 if quick else 10_000
    loop_runs = 20 if quick else 100
    repeats = 3 if quick else 5
    eps1, eps2 = svt2_allocate(EPSILON, C, redraw=redraw)
    alpha_list, beta_list = alpha.tolist(), beta.tolist()
    stats: dict[str, list[tuple[int, int]]] = {"batch": [], "loop": [], "svt2": []}

    def batch() -> np.ndarray:
        return svt2_batch(alpha, beta, THRESHOLD, eps1, eps2, C, redraw=redraw, runs=batch_runs)

    def count_batch(out: np.ndarray) -> int:
        """Answered steps of one batch, outside its timing: counting reads every one of the runs x
        queries entries, about twenty times what the scan touches."""
        answered = int(np.count_nonzero(out != UNANSWERED))
        stats["batch"].append((answered, int(np.count_nonzero(out == TOP))))
        return answered

    def loop() -> int:
        answered = tops = 0
        for _ in range(loop_runs):
            flags = svt2_loop(alpha_list, beta_list, THRESHOLD, eps1, eps2, C, redraw=redraw)
            answered += len(flags)
            tops += sum(flags)
        stats["loop"].append((answered, tops))
        return answered

    def reference() -> int:
        answered = tops = 0
        for _ in range(loop_runs):
            out = svt2(alpha, beta, THRESHOLD, eps1, eps2, C, redraw=redraw)
            answered += int(np.count_nonzero(out != UNANSWERED))
            tops += int(np.count_nonzero(out == TOP))
        stats["svt2"].append((answered, tops))
        return answered

    fns = {"batch": batch, "loop": loop}
    if not redraw:
        fns["svt2"] = reference
    timings = time_interleaved(fns, repeats=repeats, warmup=1, keep_values=True, after={"batch": count_batch})
    rates = {name: statistics.median(_rates(t)) for name, t in timings.items()}
    runs_of = {"batch": batch_runs, "loop": loop_runs, "svt2": loop_runs}

    def per_run(name: str) -> tuple[float, float]:
        answered = sum(a for a, _ in stats[name]) / len(stats[name]) / runs_of[name]
        tops = sum(t for _, t in stats[name]) / len(stats[name]) / runs_of[name]
        return answered, tops

    (b_ans, b_top), (l_ans, l_top) = per_run("batch"), per_run("loop")
    label = "redraw (listing as printed)" if redraw else "single threshold pair"
    detail = {
        "batch_runs": batch_runs,
        "loop_runs": loop_runs,
        "queries": len(alpha),
        "epsilon1": eps1,
        "epsilon2": eps2,
        "answered_per_run": {"batch": b_ans, "loop": l_ans},
        "tops_per_run": {"batch": b_top, "loop": l_top},
        "batch_nominal_steps_per_s": batch_runs * len(alpha) / timings["batch"].median,
        **{name: t.to_dict() for name, t in timings.items()},
    }
    rows = [
        Result(
            f"svt2: svt2_batch, {label}",
            rates["batch"],
            rates["loop"],
            "steps/s",
            speed_ratio(rates["batch"], rates["loop"], "steps/s"),
            ">= 100x the loop",
            speed_ratio(rates["batch"], rates["loop"], "steps/s") >= SPEEDUP_TARGET,
            baseline_name=f"per-run Python loop of the MBeacon listing (svt2_loop), {loop_runs} runs",
            note=f"answered query-steps/s, both sides (steps after the halt at c = {C} not counted); "
            f"batch {batch_runs:,} runs x {len(alpha):,} queries; eps1 = {eps1:.4f}, eps2 = {eps2:.4f}; "
            f"answered/run batch {b_ans:.1f} vs loop {l_ans:.1f}, TOPs/run {b_top:.2f} vs {l_top:.2f} "
            f"(same distribution); median of {repeats} interleaved rounds.",
            detail=detail,
        )
    ]
    if "svt2" in rates:
        rows.append(
            Result(
                "svt2: svt2_batch vs mbeacon's per-run svt2()",
                rates["batch"],
                rates["svt2"],
                "steps/s",
                speed_ratio(rates["batch"], rates["svt2"], "steps/s"),
                "for the record",
                None,
                baseline_name=f"mbeacon.privacy.svt2 (svt2_step per query, saved states), {loop_runs} runs",
                note="same rounds as the row above; answered query-steps/s on both sides.",
            )
        )
    return rows


def run(quick: bool) -> list[Result]:
    alpha, beta = make_queries()
    rows: list[Result] = []
    for redraw in (False, True):
        rows.extend(_variant_rows(redraw, quick, alpha, beta))
    return rows
