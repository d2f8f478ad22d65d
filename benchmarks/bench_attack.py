"""The attack evaluation: the vectorised ``evaluate_setting`` against a per-victim, per-query loop, and
the full grid on local processes against a local Dask cluster.

**Vectorised vs loop.** One SVT² setting (``svt2-single``, eps = 10, c = 20, T = 1) on the scenario of
the evaluation's defaults (``load_evaluation_config()``: 20,000 simulated probes, 100 members + 100
non-members, 1,000 planned queries per victim, 3 repetitions; ``--quick``:
``load_evaluation_config(quick=True)``).

* ours: :func:`mbeacon.attack.run.evaluate_setting` (``svt2_batch`` over repetitions x victims streams,
  ``observation_probabilities`` over victims x queries, cumulative scores, AUC/TPR/ROC at every query
  count, utility on both workloads);
* baseline: :func:`attack_loop`, the same attack written plainly: for each victim and repetition a
  fresh :class:`~mbeacon.privacy.svt2.SVT2State`, then for each query ``svt2_step``, and for an
  answered query its likelihood ratio from ``observation_probabilities`` on that one query, added to
  the score; the same AUC at every query count. Unanswered queries (after the halt at c TOPs)
  contribute nothing, so the loop does not compute their likelihood.

Both are timed per *item*, one (victim x repetition x query) of the nominal grid, unanswered ones
included (both sides skip or get them for free in their own way). The loop runs on an evenly spaced
subset of the victims (members and non-members alike) with all queries and repetitions: its cost per
item does not depend on how many victims there are. ``tests/test_attack_equivalence.py`` checks that
the loop and ``evaluate_setting`` compute the same thing (same scores from the same observations,
AUCs within a tolerance).

The loop is the rarest-range attacker, so ``evaluate_setting`` runs that attacker alone here.

**Grid: every attacker vs the rarest-range attacker alone.** ``run_grid(config)`` as the evaluation
runs it (the rarest-range attacker and the tracker, :mod:`mbeacon.attack.tracker`, on every setting)
against the same grid with ``attackers = ["rarest"]``, side by side on local processes (build
excluded, one scenario shared): what measuring the tracker too costs.

**Grid: local processes vs Dask.** ``run_grid(config)`` (build + every setting) with ``workers`` = the
usable CPUs, then on ``distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``
through its scheduler address. The cluster is started, and each worker evaluates the setting on 10
queries, before the clock starts: the figure is a standing cluster's, as warm as the forked local
processes (which inherit this process's imports and compiled SVT² scan). One round each (the full
grid takes a minute or more), local first; the ratio is recorded for information (no target), with
the machine's 1-minute load average (on a shared machine it moves the figures more than anything else).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks.common import Result, Timing, skipped, speed_ratio, time_interleaved, time_it, time_once
from mbeacon.attack.defences import Defence
from mbeacon.attack.evaluate import EvaluationConfig, build, load_evaluation_config, run_grid
from mbeacon.attack.lrt import observation_probabilities
from mbeacon.attack.metrics import auc
from mbeacon.attack.run import evaluate_setting
from mbeacon.attack.scenario import Scenario
from mbeacon.privacy.sparse_vector import TOP, UNANSWERED
from mbeacon.privacy.svt2 import SVT2State, svt2_step

GROUP = "attack"
SETTING = Defence("svt2-single", epsilon=10.0, c=20)
SPEEDUP_TARGET = 50.0
SEED = 20190224  # both sides draw their noise from a seeded generator, as evaluate_setting does
DASK_WORKERS = 2


def attack_loop(
    scenario: Scenario,
    defence: Defence,
    query_counts: list[int],
    *,
    repetitions: int,
    seed: int | list[int],
    victims: np.ndarray | None = None,
) -> dict[str, Any]:
    """The SVT² attack one victim, one repetition and one query at a time.

    Returns ``scores`` (repetitions x victims x query counts: the log-likelihood ratio after that many
    queries), ``observations`` (repetitions x victims x queries: the flags, -1 unanswered), ``aucs``
    (query count -> AUC, mean over repetitions) and ``victims`` (the scenario rows used).
    """
    if not defence.is_svt2:
        raise ValueError("the loop is written for the SVT² defences")
    rng = np.random.default_rng(seed)  # noise-ok: evaluation baseline, seeded for reproducibility
    params = defence.svt2_params
    rows = np.arange(scenario.victims) if victims is None else np.asarray(victims)
    counts = sorted({min(q, scenario.queries) for q in query_counts})
    n_queries = counts[-1]
    alpha, beta, pi = scenario.alpha, scenario.beta, scenario.plan.pi
    scores = np.zeros((repetitions, rows.size, len(counts)))
    observations = np.full((repetitions, rows.size, n_queries), UNANSWERED, dtype=np.int8)
    for i, v in enumerate(rows):
        for r in range(repetitions):
            state = SVT2State.start(params, rng)
            score = 0.0
            k = 0
            for q in range(n_queries):
                flag, state = svt2_step(state, float(alpha[v, q]), float(beta[v, q]), params, rng)
                observations[r, i, q] = flag
                if flag != UNANSWERED:
                    p_member, p_non = observation_probabilities(
                        defence, pi[v, q : q + 1], beta[v, q : q + 1], scenario.n, scenario.miss
                    )
                    pm, pn = float(p_member[0]), float(p_non[0])
                    if flag == TOP:
                        score += math.log(pm) - math.log(pn)
                    else:
                        score += math.log1p(-pm) - math.log1p(-pn)
                if q + 1 == counts[k]:
                    scores[r, i, k] = score
                    k += 1
    labels = scenario.labels[rows]
    aucs = {
        q: float(np.mean([auc(scores[r, :, j], labels) for r in range(repetitions)]))
        for j, q in enumerate(counts)
    }
    return {"scores": scores, "observations": observations, "aucs": aucs, "victims": rows}


def _median_rate(timing: Timing, items: int) -> float:
    return statistics.median(items / s for s in timing.seconds)


def _loop_rows(quick: bool) -> tuple[list[Result], Scenario]:
    config = load_evaluation_config(quick=quick)
    loop_victims = 6 if quick else 20
    repeats = 3 if quick else 5
    build_s, scenario = time_once(lambda: build(config))
    reps = config.repetitions
    subset = np.unique(np.linspace(0, scenario.victims - 1, loop_victims).round().astype(np.int64))
    items_vec = scenario.victims * reps * scenario.queries
    items_loop = subset.size * reps * scenario.queries
    seen: dict[str, Any] = {}

    def vectorised() -> None:
        seen["vectorised"] = evaluate_setting(
            scenario, SETTING, config.queries, repetitions=reps, seed=[SEED, 0], attackers=("rarest",)
        )

    def loop() -> None:
        seen["loop"] = attack_loop(
            scenario, SETTING, config.queries, repetitions=reps, seed=[SEED, 1], victims=subset
        )

    timings = time_interleaved({"vectorised": vectorised, "loop": loop}, repeats=repeats, warmup=1)
    # How evaluate_setting's time splits: the likelihood model is most of it.
    model_s = time_it(
        lambda: observation_probabilities(
            SETTING, scenario.plan.pi, scenario.beta, scenario.n, scenario.miss
        ),
        repeats=2,
        warmup=0,
    ).best
    ours = _median_rate(timings["vectorised"], items_vec)
    base = _median_rate(timings["loop"], items_loop)
    ratio = speed_ratio(ours, base, "items/s")
    top = seen["vectorised"][-1]
    answered_vec = 1.0 - top["refused"]
    answered_loop = float(np.mean(seen["loop"]["observations"] >= 0))
    q_max = top["queries"]
    detail = {
        "victims": scenario.victims,
        "loop_victims": int(subset.size),
        "queries": scenario.queries,
        "repetitions": reps,
        "build_s": build_s,
        "observation_probabilities_s": model_s,
        "auc_vectorised": {row["queries"]: row["auc"] for row in seen["vectorised"]},
        "auc_loop_subset": seen["loop"]["aucs"],
        "answered_share": {"vectorised": answered_vec, "loop": answered_loop},
        **{name: t.to_dict() for name, t in timings.items()},
    }
    row = Result(
        f"attack: evaluate_setting, {SETTING.label}",
        ours,
        base,
        "items/s",
        ratio,
        f">= {SPEEDUP_TARGET:g}x the loop",
        ratio is not None and ratio >= SPEEDUP_TARGET,
        baseline_name=f"per-victim, per-query loop (svt2_step + observation_probabilities on one query), "
        f"{subset.size} of {scenario.victims} victims",
        note=f"items = victims x repetitions x queries, unanswered included ({scenario.victims} x "
        f"{reps} x {scenario.queries:,} ours; {subset.size} x {reps} x {scenario.queries:,} loop); "
        f"answered share {answered_vec:.1%} ours vs {answered_loop:.1%} loop (the loop computes "
        f"likelihoods for answered queries only); evaluate_setting {timings['vectorised'].median:.2f} s "
        f"a call, of which observation_probabilities {model_s:.2f} s; AUC at {q_max:,} queries "
        f"{top['auc']:.3f} (all victims); median of {repeats} interleaved rounds.",
        detail=detail,
    )
    return [row], scenario


def _grid_rows(quick: bool, scenario: Scenario) -> list[Result]:
    """``scenario`` (the same config's, built by the loop rows) only warms the Dask workers up (its first
    10 queries)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        return [skipped("attack: grid on a local Dask cluster", "distributed is not installed", unit="s")]
    config: EvaluationConfig = load_evaluation_config(quick=quick)
    settings = len(config.grid.settings())
    load_before = os.getloadavg()[0]
    workers = len(os.sched_getaffinity(0))
    started = time.perf_counter()
    with LocalCluster(
        n_workers=DASK_WORKERS,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",  # any free loopback port (None still binds 8787, or warns when taken)
    ) as cluster:
        # A standing cluster, as warm as the forked local processes (which inherit this process's state,
        # compiled SVT² scan included): every worker first evaluates the setting on 10 queries.
        with Client(cluster) as client:
            small = replace(scenario, plan=scenario.plan.head(10), alpha=scenario.alpha[:, :10])
            client.run(evaluate_setting, small, SETTING, [10], repetitions=1, seed=0)
        cluster_s = time.perf_counter() - started
        local_s, local_rows = time_once(lambda: run_grid(config, workers=workers))
        dask_s, dask_rows = time_once(lambda: run_grid(config, scheduler=cluster.scheduler_address))
    load_after = os.getloadavg()[0]
    same = len(local_rows) == len(dask_rows) and all(
        a["label"] == b["label"] and a["queries"] == b["queries"] and a["auc"] == b["auc"]
        for a, b in zip(local_rows, dask_rows, strict=False)
    )
    source = "load_evaluation_config(quick=True)" if quick else "load_evaluation_config() defaults"
    probes = config.simulation_config().probes
    size = f"{settings} settings x {len(config.queries)} query counts, {probes:,} probes"
    return [
        Result(
            f"attack: full grid (build + run_grid), {workers} local processes",
            local_s,
            None,
            "s",
            None,
            "for the record",
            None,
            note=f"{source}: {size}, {config.repetitions} repetitions; one round each, local first; "
            f"1-minute load average {load_before:.1f} before, {load_after:.1f} after, {os.cpu_count()} CPUs.",
            detail={
                "settings": settings,
                "rows": len(local_rows),
                "workers": workers,
                "load_average": [load_before, load_after],
            },
        ),
        Result(
            f"attack: full grid on a local Dask cluster ({DASK_WORKERS} workers x 1 thread)",
            dask_s,
            local_s,
            "s",
            speed_ratio(dask_s, local_s, "s"),
            "for the record",
            None,
            baseline_name=f"the same grid on {workers} local processes (row above)",
            note=f"run_grid(scheduler=LocalCluster(n_workers={DASK_WORKERS}, threads_per_worker=1, "
            f"processes=True).scheduler_address), run right after the local one; cluster start-up and "
            f"warm-up (the setting on 10 queries per worker) {cluster_s:.1f} s not counted; rows identical "
            f"to the local run: {same}.",
            detail={"cluster_start_s": cluster_s, "identical_rows": same},
        ),
    ]


def _attackers_rows(quick: bool, scenario: Scenario) -> list[Result]:
    """The grid with every attacker against the rarest-range attacker alone, on ``scenario``."""
    config: EvaluationConfig = load_evaluation_config(quick=quick)
    rarest = config.model_copy(update={"attackers": ["rarest"]})
    workers = len(os.sched_getaffinity(0))
    timings = time_interleaved(
        {
            "all": lambda: run_grid(config, scenario, workers=workers),
            "rarest": lambda: run_grid(rarest, scenario, workers=workers),
        },
        repeats=1,
        warmup=0,
    )
    all_s, rarest_s = timings["all"].median, timings["rarest"].median
    settings = len(config.grid.settings())
    source = "load_evaluation_config(quick=True)" if quick else "load_evaluation_config() defaults"
    return [
        Result(
            f"attack: grid with every attacker (rarest + tracker), {workers} local processes",
            all_s,
            rarest_s,
            "s",
            speed_ratio(all_s, rarest_s, "s"),
            "for the record",
            None,
            baseline_name="the same grid with the rarest-range attacker alone (attackers = ['rarest'])",
            note=f"{source}: {settings} settings, scenario built once (not counted); one interleaved "
            f"round each; 1-minute load average {os.getloadavg()[0]:.1f} after.",
            detail={"settings": settings, "workers": workers},
        )
    ]


def run(quick: bool) -> list[Result]:
    rows, scenario = _loop_rows(quick)
    return rows + _attackers_rows(quick, scenario) + _grid_rows(quick, scenario)
