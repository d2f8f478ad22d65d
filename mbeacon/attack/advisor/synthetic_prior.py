"""The synthetic beacon's prior: the public prior re-estimated from synthetic reference people.

A real prior is estimated from ``n_reference`` reference people, so the real cohort's counts disagree
with it by the cohort's sampling error plus the prior's own. In the synthetic world the public prior
plays the population truth: :func:`estimated_prior` draws ``n_reference`` reference people from it
(:func:`~mbeacon.attack.advisor.synthetic.draw_from_prior`, as the members) and builds the beacon's
prior from them the way the store builds one from a reference table
(:func:`~mbeacon.store.priors.prior_from_blocks`: mean, sd, Beta by moments, and a quantile sketch
of as many levels as the public prior's, none where it has none).

A prior with no reference count (``n_reference`` 0: built from published means, whose sd comes from
a model) has no sampling error the advisor could size; the synthetic world then keeps the public
prior itself as the beacon's, and :func:`estimated_prior` returns None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from mbeacon.store.priors import Prior, prior_from_blocks

#: At most this many synthetic reference people: a larger reference's sampling error is already
#: small beside the cohort's own (it is drawn at this size, slightly overstating the error).
MAX_REFERENCE = 10_000
#: Values per block of drawn reference people (bounds the temporary arrays).
BLOCK_VALUES = 4_000_000

Draw = Callable[[Prior, np.ndarray, int, np.random.Generator], np.ndarray]


def reference_size(prior: Prior) -> int:
    """The synthetic reference people the prior is re-estimated from (0: the prior stays perfect)."""
    return min(max(int(prior.n_reference), 0), MAX_REFERENCE)


def estimated_prior(prior: Prior, rows: np.ndarray, rng: np.random.Generator, draw: Draw) -> Prior | None:
    """The beacon's prior in the synthetic world, at the probes ``rows`` of ``prior`` (the truth):
    re-estimated from :func:`reference_size` people drawn by ``draw``; None when that is 0."""
    people = reference_size(prior)
    if people == 0:
        return None
    rows = np.asarray(rows, dtype=np.int64)
    step = max(1, BLOCK_VALUES // people)

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, rows.size, step):
            block = rows[start : start + step]
            yield prior.probe_ids[block], draw(prior, block, people, rng).T

    levels = None if prior.quantiles is None else int(prior.quantiles.shape[1])
    return prior_from_blocks(
        blocks(),
        name=prior.name,
        quantiles=levels,
        source=f"{people} synthetic reference people drawn from prior {prior.name}",
        what=f"synthetic reference of prior {prior.name}",
    )
