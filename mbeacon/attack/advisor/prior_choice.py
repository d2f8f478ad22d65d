"""Which prior the advisor simulates a dataset's beacon with, and how that prior was chosen.

The service names a dataset's prior with :meth:`mbeacon.beacon.config.ServiceConfig.prior_for` and
:func:`mbeacon.store.priors.choose_prior`; the advisor's rule puts an explicit ``--prior`` first,
works without a service configuration, and tells the operator what to pass when the choice is
ambiguous.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mbeacon.store.errors import DataError
from mbeacon.store.priors import prior_names


def choose_prior(store: Path, dataset: str, prior: str | None, service_config: Any = None) -> tuple[str, str]:
    """The prior's name and how it was chosen: ``prior`` if given; else the dataset's configured prior
    (its ``prior`` key, else ``default_prior``) when a service configuration is given; else the only
    prior in the store. Anything else is a :class:`DataError` that says what to pass."""
    if prior:
        return prior, "--prior"
    if service_config is not None:
        configured = service_config.policy(dataset).prior or service_config.default_prior
        if configured:
            return configured, "config"
    names = prior_names(store)
    if len(names) == 1:
        return names[0], "only prior in the store"
    if not names:
        raise DataError(f"store {store} has no priors: build or import one first (mbeacon prior --help)")
    raise DataError(
        f"store {store} has {len(names)} priors ({', '.join(names)}): choose one with --prior NAME "
        "(or give the service --config whose dataset policy or default_prior names it)"
    )
