"""The search: every setting of the grid evaluated on the synthetic scenario, and :func:`advise`, from the
public inputs to the ranked :class:`~mbeacon.attack.advisor.advice.Advice`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mbeacon.attack.advisor.advice import Advice
from mbeacon.attack.advisor.config import AdvisorConfig
from mbeacon.attack.advisor.inputs import PublicInputs, public_inputs
from mbeacon.attack.advisor.ranking import Candidate, candidates, rank
from mbeacon.attack.advisor.synthetic import scenario_for, synthetic_cohort
from mbeacon.attack.evaluate import EvaluationConfig, run_grid
from mbeacon.attack.scenario import Scenario

Progress = Callable[[str, int, int], None]


def _report(on_progress: Progress | None, stage: str, done: int, total: int) -> None:
    if on_progress is not None:
        on_progress(stage, done, total)


def evaluate(
    scenario: Scenario,
    config: AdvisorConfig,
    *,
    workers: int | None = None,
    on_progress: Progress | None = None,
) -> list[Candidate]:
    """Every setting of the advisor's grid against ``scenario`` (:func:`run_grid`), as candidates."""
    grids = config.grids() + config.comparison_grids()
    total = sum(len(g.settings()) for g in grids)
    rows: list[dict] = []
    done = 0
    for grid in grids:
        evaluation = EvaluationConfig(
            seed=config.seed,
            repetitions=config.repetitions,
            queries=config.query_counts,
            strategy="pooled",
            grid=grid,
            # the advice is for per-account budgets (scope = "user", the attacker's Sybil accounts);
            # the shared-ledger view would cost time and enter no ranking
            shared_view=False,
        )
        offset = done

        def progress(finished: int, _total: int, offset: int = offset) -> None:
            _report(on_progress, "evaluating settings", offset + finished, total)

        rows += run_grid(evaluation, scenario, workers=workers, on_progress=progress)
        done += len(grid.settings())
    return candidates(rows, config)


def advise(
    store: str | Path,
    dataset: str,
    *,
    prior: str | None = None,
    service_config: Any = None,
    config: AdvisorConfig | None = None,
    workers: int | None = None,
    on_progress: Progress | None = None,
) -> Advice:
    """Recommend a dataset policy for ``dataset`` from its public size and prior (the package doc
    says how)."""
    inputs = public_inputs(store, dataset, prior, service_config)
    return advise_inputs(inputs, config, workers=workers, on_progress=on_progress)


def advise_inputs(
    inputs: PublicInputs,
    config: AdvisorConfig | None = None,
    *,
    workers: int | None = None,
    on_progress: Progress | None = None,
) -> Advice:
    """:func:`advise` on public inputs already read (or made up: a cohort size to plan for)."""
    config = config or AdvisorConfig()
    started = time.monotonic()
    dataset = inputs.dataset
    warnings = []
    if inputs.prior.source.strip() == f"dataset {dataset}":
        warnings.append(
            f"prior {inputs.prior.name!r} was built from dataset {dataset!r} itself: it is not public "
            "knowledge, and a mechanism that answers from it protects nobody (use a general-population prior)"
        )
    _report(on_progress, "drawing the synthetic cohort", 0, 1)
    world = synthetic_cohort(inputs, config)
    scenario = scenario_for(world, inputs, config)
    _report(on_progress, "drawing the synthetic cohort", 1, 1)
    if world.reference == 0:
        warnings.append(
            f"prior {inputs.prior.name!r} records no reference sample size (n_reference 0, e.g. built "
            "from published means): the synthetic beacon uses it as an exact prior, so the synthetic "
            "utilities are optimistic (real counts disagree with an estimated prior more often)"
        )
    found = evaluate(scenario, config, workers=workers, on_progress=on_progress)
    settings, comparisons = rank(found)
    if len(scenario.discovery) == 0:
        warnings.append("the synthetic cohort has no discovery queries: discovery utility is not measured")
    top = settings[0] if settings and settings[0].meets_target else None
    if top is not None and not top.meets_utility:
        warnings.append(
            f"no setting that meets the AUC target reaches random-query utility {config.min_random:g} "
            f"and discovery utility {config.min_discovery:g}: the recommendation is the best of those "
            "that meet the AUC target"
        )
    return Advice(
        dataset=dataset,
        patients=inputs.patients,
        prior=inputs.prior.name,
        prior_version=inputs.prior.version,
        prior_origin=inputs.prior_origin,
        config=config,
        settings=settings,
        comparisons=comparisons,
        probes=int(world.cohort.shape[0]),
        reference=world.reference,
        victims=int(scenario.labels.sum()),
        random_queries=len(scenario.random),
        discovery_queries=len(scenario.discovery),
        description=scenario.description,
        seconds=time.monotonic() - started,
        warnings=warnings,
    )
