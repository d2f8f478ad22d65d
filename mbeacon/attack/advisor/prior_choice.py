"""Which prior the advisor simulates a dataset's beacon with, and how that prior was chosen.

The rule is the service's (:func:`mbeacon.store.priors.choose_prior` on
:meth:`mbeacon.beacon.config.ServiceConfig.prior_for`), so the advisor models the prior the beacon
answers with; the advisor only lets an explicit ``--prior`` come first, works without a service
configuration, and tells the operator what to pass when the choice is ambiguous.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mbeacon.store.priors import NoPriorChosen
from mbeacon.store.priors import choose_prior as choose_stored_prior


def choose_prior(store: Path, dataset: str, prior: str | None, service_config: Any = None) -> tuple[str, str]:
    """The prior's name and how it was chosen: ``prior`` if given; else the dataset's configured prior
    when a service configuration is given; else the only prior in the store. Anything else is a
    :class:`~mbeacon.store.priors.NoPriorChosen` that says what to pass."""
    if prior:
        named, named_by = prior, "--prior"
    else:
        named, named_by = (
            (service_config.prior_for(dataset) if service_config is not None else None),
            "config",
        )
    try:
        return tuple(choose_stored_prior(store, named, named_by=named_by))  # type: ignore[return-value]
    except NoPriorChosen as error:
        if not error.names:
            raise
        raise NoPriorChosen(
            f"{error}: choose one with --prior NAME (or give the service --config whose dataset policy or "
            "default_prior names it)",
            error.names,
        ) from None
