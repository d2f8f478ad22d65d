"""The advisor's public inputs: the dataset's size and probe ids (metadata) and its prior, never a value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon.attack.advisor.prior_choice import choose_prior
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.priors import Prior, load_prior


@dataclass(frozen=True, eq=False)
class PublicInputs:
    """Everything the advisor knows about the dataset: public metadata and the public prior."""

    dataset: str
    patients: int
    probe_ids: np.ndarray  # the dataset's probe ids (platform metadata, not values)
    prior: Prior
    prior_origin: str  # how the prior was chosen: "--prior", "config", "only prior in the store"


def public_inputs(
    store: str | Path, dataset: str, prior: str | None = None, service_config: Any = None
) -> PublicInputs:
    """The dataset's size and probe ids (metadata) and its prior; never a beta value."""
    store = Path(store)
    cohort = CohortStore(store).open(dataset)  # DataError naming the store for an unknown dataset
    patients = int(cohort.info.patients)
    probe_ids = np.asarray(cohort.probe_ids)
    name, origin = choose_prior(store, dataset, prior, service_config)
    return PublicInputs(dataset, patients, probe_ids, load_prior(store, name), origin)
