"""The privacy-utility evaluation: every defence setting of a grid against the same scenario.

A grid run builds one :class:`~mbeacon.attack.scenario.Scenario` (simulate, plan the attack, count)
and evaluates each defence setting on it (:func:`mbeacon.attack.run.evaluate_setting`), one task
per setting. Tasks run on local processes by default, or on a Dask distributed cluster given its
scheduler address (the scenario is scattered to the workers once). Each setting's randomness is
seeded from ``(seed, setting index)``, so results do not depend on where or in which order tasks ran.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mbeacon.attack.defences import DEFAULT_DEFENCES, DEFENCES, Defence
from mbeacon.attack.planning import ATTACKERS, STRATEGIES
from mbeacon.attack.run import evaluate_setting
from mbeacon.attack.scenario import Scenario, build_scenario, scenario_from_simulation
from mbeacon.attack.shared import SHARED_KEYS
from mbeacon.store.simulate import SimulationConfig, simulate_arrays

#: Keys of a result row in ``--json`` output (the ROC points stay in the Parquet file).
JSON_KEYS = (
    "defence",
    "label",
    "epsilon",
    "c",
    "threshold",
    "flip",
    "query_cap",
    "margin",
    "release_share",
    "quota",
    "n",
    "queries",
    "attacker",
    "auc",
    "auc_rarest",
    "auc_tracker",
    "auc_flag",
    "auc_count",
    "auc_boundary",
    "auc_sd",
    "tpr_at_1pct_fpr",
    "utility_random",
    "utility_discovery",
    "utility_exploration",
    "burn_per_1000",
    "refused",
    "queries_asked",
    "repetitions",
    # the deployment view: attacker and researchers in one global ledger (mbeacon.attack.shared)
    *SHARED_KEYS,
    # the coalition attacker at the largest query count (mbeacon.attack.coalition)
    "auc_coalition",
    "tpr_at_0_1pct_fpr_coalition",
    "bound_auc_coalition",
    "coalition",
)


class GridConfig(BaseModel):
    """Which defence settings to evaluate (the cross product, per defence, of what applies to it)."""

    model_config = ConfigDict(extra="forbid")

    defences: list[str] = Field(default_factory=lambda: list(DEFAULT_DEFENCES))
    epsilon: list[float] = Field(default_factory=lambda: [1.0, 3.0, 10.0, 30.0, 100.0])
    c: list[int] = Field(default_factory=lambda: [5, 20, 50])
    threshold: list[int] = Field(default_factory=lambda: [1, 5])
    suppression_threshold: list[int] = Field(default_factory=lambda: [2, 5, 10])
    flip: list[float] = Field(default_factory=lambda: [0.25, 0.5, 0.75])
    #: Decision margins (patients) of svt2-margin, svt2-noisy and online-pmw.
    margin: list[float] = Field(default_factory=lambda: [0.0, 20.0])
    #: Share of epsilon spent on the noisy counts of svt2-noisy, online-pmw and cohort-pmw.
    release_share: list[float] = Field(default_factory=lambda: [1 / 3])
    #: cohort-pmw's positives per account (empty: the service's default, a tenth of c).
    quota: list[int] = Field(default_factory=list)

    @field_validator("defences")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        unknown = sorted(set(names) - set(DEFENCES))
        if unknown:
            raise ValueError(f"unknown defence(s) {', '.join(unknown)}; choose from {', '.join(DEFENCES)}")
        return names

    def settings(self) -> list[Defence]:
        """Every defence setting of the grid, in a fixed order."""
        out: list[Defence] = []
        for name in self.defences:
            if name == "none":
                out.append(Defence("none"))
            elif name == "suppression":
                out += [Defence(name, threshold=t) for t in self.suppression_threshold]
            elif name == "prior-only":
                out += [Defence(name, threshold=t) for t in self.threshold]
            elif name == "flip":
                out += [Defence(name, flip=p) for p in self.flip]
            elif name == "noisy-count":
                pairs = product(self.threshold, self.epsilon)
                out += [Defence(name, epsilon=e, threshold=t) for t, e in pairs]
            elif name == "svt2-margin":
                grid = product(self.threshold, self.c, self.epsilon, self.margin)
                out += [Defence(name, epsilon=e, c=c, threshold=t, margin=m) for t, c, e, m in grid]
            elif name in ("svt2-noisy", "online-pmw"):
                grid = product(self.threshold, self.c, self.epsilon, self.margin, self.release_share)
                out += [
                    Defence(name, epsilon=e, c=c, threshold=t, margin=m, release_share=r)
                    for t, c, e, m, r in grid
                ]
            elif name == "cohort-pmw":
                quotas: list[int | None] = list(self.quota) or [None]
                grid = product(self.threshold, self.c, self.epsilon, self.margin, self.release_share, quotas)
                out += [
                    Defence(name, epsilon=e, c=c, threshold=t, margin=m, release_share=r, quota=u)
                    for t, c, e, m, r, u in grid
                    if u is None or u <= c
                ]
            else:
                out += [
                    Defence(name, epsilon=e, c=c, threshold=t)
                    for t, c, e in product(self.threshold, self.c, self.epsilon)
                ]
        return out


class CohortData(BaseModel):
    """An ingested cohort with a held-out set, instead of a simulation (``[data]`` in the TOML file).

    ``members``: profiles of people in the cohort as the attacker measured them (probes x samples,
    CSV/TSV, probe ids first: e.g. ``mbeacon simulate``'s ``members_remeasured.csv.gz``);
    ``nonmembers``: people of the same population kept out of the cohort, same format.
    """

    model_config = ConfigDict(extra="forbid")

    store: Path
    dataset: str
    prior: str
    members: Path
    nonmembers: Path
    noise_sd: float = Field(0.02, ge=0)
    missing: float = Field(0.0, ge=0, lt=1)


class EvaluationConfig(BaseModel):
    """An evaluation: the cohort (simulated, or ``data``), the attack and the grid (a TOML file)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 1
    repetitions: int = Field(3, ge=1)
    queries: list[int] = Field(default_factory=lambda: [10, 30, 100, 300, 1000])
    strategy: str = "pooled"
    z: float = Field(2.0, gt=0)
    adaptive_bound: float | None = Field(None, gt=0)
    attackers: list[str] = Field(default_factory=lambda: list(ATTACKERS))
    #: Also evaluate the deployment view: attacker and honest researchers share one ``global`` ledger.
    shared_view: bool = True
    #: Also run the coalition attacker (pooled accounts, reconstruction) at the largest query count.
    coalition: bool = False
    #: The deployment view's attacking identities (cohort-pmw's quotas are per identity).
    attacker_accounts: int = Field(1, ge=1)
    simulation: dict[str, Any] = Field(default_factory=dict)
    data: CohortData | None = None
    grid: GridConfig = Field(default_factory=GridConfig)

    @field_validator("queries")
    @classmethod
    def _positive(cls, queries: list[int]) -> list[int]:
        if not queries or min(queries) < 1:
            raise ValueError("queries must be a non-empty list of positive query counts")
        return sorted(set(queries))

    @field_validator("attackers")
    @classmethod
    def _attackers(cls, names: list[str]) -> list[str]:
        unknown = sorted(set(names) - set(ATTACKERS))
        if unknown or not names:
            raise ValueError(f"attackers must be a non-empty list of {', '.join(ATTACKERS)}")
        return names

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, name: str) -> str:
        if name not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
        return name

    @field_validator("simulation")
    @classmethod
    def _simulation(cls, values: dict[str, Any]) -> dict[str, Any]:
        SimulationConfig(**values).validate()  # unknown keys raise TypeError, bad values ValueError
        return values

    def simulation_config(self) -> SimulationConfig:
        return SimulationConfig(**self.simulation)


#: ``--quick``: a smaller cohort and grid that finishes within about a minute on two cores.
QUICK = {
    "repetitions": 2,
    "queries": [10, 30, 100, 300],
    "simulation": {"probes": 5000},
    "grid": {
        "epsilon": [1.0, 10.0, 100.0],
        "c": [5, 50],
        "threshold": [1, 5],
        "flip": [0.5],
        "suppression_threshold": [2, 5],
    },
}


class EvaluationConfigError(ValueError):
    """An evaluation config that cannot be used; the message names the file and the field."""


def load_evaluation_config(path: Path | None = None, *, quick: bool = False) -> EvaluationConfig:
    """Defaults, then ``--quick``'s smaller preset, then the TOML file's values."""
    values: dict[str, Any] = {}
    if quick:
        values = {k: (dict(v) if isinstance(v, dict) else v) for k, v in QUICK.items()}
    if path is not None:
        try:
            loaded = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise EvaluationConfigError(f"{path}: {exc}") from exc
        except RecursionError:
            raise EvaluationConfigError(f"{path}: arrays or tables nested too deeply") from None
        for key, value in loaded.items():
            if isinstance(value, dict) and isinstance(values.get(key), dict):
                values[key] = {**values[key], **value}
            else:
                values[key] = value
    try:
        return EvaluationConfig(**values)
    except ValidationError as exc:
        where = f"{path}: " if path else ""
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors())
        raise EvaluationConfigError(f"{where}{problems}") from exc
    except (TypeError, ValueError) as exc:
        raise EvaluationConfigError(f"{path or 'config'}: simulation: {exc}") from exc


def build(config: EvaluationConfig) -> Scenario:
    """Simulate the cohort (or read ``data``) and plan the attack (the part every setting shares)."""
    if config.data is not None:
        return _scenario_from_store(config, config.data)
    simulation = simulate_arrays(config.simulation_config())
    return scenario_from_simulation(
        simulation, queries=max(config.queries), strategy=config.strategy, z=config.z, seed=config.seed
    )


def _scenario_from_store(config: EvaluationConfig, data: CohortData) -> Scenario:
    from mbeacon.attack.live import LiveAttackError, read_profiles
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.errors import DataError
    from mbeacon.store.priors import load_prior

    try:
        cohort = CohortStore(data.store).open(data.dataset)
        prior = load_prior(data.store, data.prior)
        members, nonmembers = read_profiles(data.members), read_profiles(data.nonmembers)
    except (DataError, LiveAttackError, OSError) as exc:
        raise EvaluationConfigError(f"data: {exc}") from exc
    ids = np.asarray(cohort.probe_ids).astype(str)
    victims = np.vstack([members.reindex(ids).T.to_numpy(), nonmembers.reindex(ids).T.to_numpy()])
    if not np.isfinite(victims).any(axis=1).all():
        raise EvaluationConfigError("data: a profile shares no probe with the dataset (wrong probe ids?)")
    labels = np.r_[np.ones(members.shape[1], bool), np.zeros(nonmembers.shape[1], bool)]
    return build_scenario(
        cohort.rows(np.arange(cohort.n_probes)),
        ids,
        victims,
        labels,
        prior,
        queries=max(config.queries),
        noise_sd=data.noise_sd,
        missing=data.missing,
        z=config.z,
        strategy=config.strategy,
        seed=config.seed,
        description=(
            f"dataset {data.dataset}: {cohort.n_patients} patients, {cohort.n_probes:,} probes; "
            f"{members.shape[1]} members and {nonmembers.shape[1]} held-out non-members attacked; "
            f"prior {data.prior}"
        ),
    )


# --- running the grid ------------------------------------------------------------------------------

_WORKER_SCENARIO: Scenario | None = None


def _init_worker(scenario: Scenario) -> None:
    global _WORKER_SCENARIO
    _WORKER_SCENARIO = scenario


def _run_in_worker(defence: Defence, kwargs: dict[str, Any]) -> list[dict]:
    assert _WORKER_SCENARIO is not None
    return evaluate_setting(_WORKER_SCENARIO, defence, **kwargs)


def _task_kwargs(config: EvaluationConfig, index: int) -> dict[str, Any]:
    return {
        "query_counts": config.queries,
        "repetitions": config.repetitions,
        "seed": [config.seed, index],
        "adaptive_bound": config.adaptive_bound,
        "attackers": tuple(config.attackers),
        "shared": config.shared_view,
        "coalition": config.coalition,
        "attacker_accounts": config.attacker_accounts,
    }


def run_grid(
    config: EvaluationConfig,
    scenario: Scenario | None = None,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Every setting's result rows, in grid order (not completion order).

    ``scheduler``: a Dask scheduler address (``tcp://host:8786``) to run the settings there;
    otherwise ``workers`` local processes (default: the usable CPUs; 1 runs in this process).
    """
    scenario = scenario if scenario is not None else build(config)
    settings = config.grid.settings()
    results: list[list[dict] | None] = [None] * len(settings)
    for done, (index, rows) in enumerate(_execute(scenario, settings, config, scheduler, workers), 1):
        results[index] = rows
        if on_progress:
            on_progress(done, len(settings))
    return [row for rows in results for row in rows or []]


def _execute(
    scenario: Scenario,
    settings: list[Defence],
    config: EvaluationConfig,
    scheduler: str | None,
    workers: int | None,
) -> Iterator[tuple[int, list[dict]]]:
    if scheduler is not None:
        yield from _execute_dask(scenario, settings, config, scheduler)
        return
    workers = workers or len(os.sched_getaffinity(0))
    if workers <= 1:
        for index, defence in enumerate(settings):
            yield index, evaluate_setting(scenario, defence, **_task_kwargs(config, index))
        return
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(scenario,)) as pool:
        futures = {
            pool.submit(_run_in_worker, defence, _task_kwargs(config, index)): index
            for index, defence in enumerate(settings)
        }
        for future in as_completed(futures):
            yield futures[future], future.result()


def _execute_dask(
    scenario: Scenario, settings: list[Defence], config: EvaluationConfig, address: str
) -> Iterator[tuple[int, list[dict]]]:
    from distributed import Client
    from distributed import as_completed as dask_completed

    with Client(address, timeout=30) as client:
        shared = client.scatter(scenario, broadcast=True)
        futures = {
            client.submit(evaluate_setting, shared, defence, **_task_kwargs(config, index), pure=False): index
            for index, defence in enumerate(settings)
        }
        for future in dask_completed(futures):
            yield futures[future], future.result()


def public_row(row: dict) -> dict:
    """A result row as ``--json`` prints it (no ROC points)."""
    return {key: row.get(key) for key in JSON_KEYS}
