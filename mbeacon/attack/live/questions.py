"""The attacker's questions: every profile's queries planned, then asked in batches in a shuffled order.

Asking stops when the key's budget runs out; a batch the server finds too large is split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from mbeacon.attack.live.answers import NOISY_RELEASE, BatchAnswers, parse_answers
from mbeacon.attack.live.client import BeaconClient
from mbeacon.attack.live.errors import BatchTooLarge, BeaconBudgetRefused, LiveAttackError
from mbeacon.attack.live.parameters import DEFAULT_MAX_BATCH, DatasetParams
from mbeacon.attack.live.profiles import Profiles
from mbeacon.attack.planning import QueryPlan, plan_queries
from mbeacon.privacy.svt2_noisy import NoisyRelease
from mbeacon.store.priors import Prior, prior_from_matrix

#: What happened to one planned query.
SOURCES = ("data", "prior", "synthetic", "refused", "exhausted", "unasked")


@dataclass(frozen=True)
class LiveSettings:
    """The attacker's choices (the CLI's options)."""

    queries: int = 100
    noise_sd: float = 0.02
    z: float = 2.0
    missing: float = 0.005
    strategy: str = "pooled"
    seed: int = 0
    dataset: str | None = None
    attacker: str = "auto"


@dataclass
class LiveAnswers:
    """Every profile's answers, people x planned queries (see :class:`BatchAnswers`)."""

    observations: np.ndarray
    prior_answers: np.ndarray
    sources: np.ndarray
    exhausted: bool = False
    max_batch: int = DEFAULT_MAX_BATCH
    #: The whole response (see :class:`BatchAnswers`): flags, yes/no answers and released counts.
    flags: np.ndarray | None = None
    yes: np.ndarray | None = None
    released: np.ndarray | None = None
    #: How many of the keys ran out of budget (``exhausted``: at least one).
    keys_exhausted: int = 0

    @classmethod
    def empty(cls, shape: tuple[int, int]) -> LiveAnswers:
        return cls(
            np.full(shape, -1, dtype=np.int8),
            np.full(shape, -1, dtype=np.int8),
            np.full(shape, "unasked", dtype="<U9"),
            flags=np.full(shape, -1, dtype=np.int8),
            yes=np.full(shape, -1, dtype=np.int8),
            released=np.full(shape, np.nan),
        )

    def store(self, where: tuple, got: BatchAnswers) -> None:
        """Record one batch's answers at ``where`` (an index into people x queries)."""
        self.observations[where] = got.observations
        self.prior_answers[where] = got.prior_answers
        self.sources[where] = got.sources
        for name, theirs in (("flags", got.flags), ("yes", got.answers), ("released", got.counts)):
            mine = getattr(self, name)
            if mine is not None and theirs is not None:
                mine[where] = theirs
        self.exhausted = self.exhausted or got.exhausted

    def release(self) -> NoisyRelease:
        """The whole response as :class:`NoisyRelease` (flags, answers, counts), people x queries."""
        assert self.flags is not None and self.yes is not None and self.released is not None
        return NoisyRelease(self.flags, self.yes, self.released)

    def counts(self) -> dict[str, int]:
        """How many planned queries ended in each source (``unasked`` includes the unplannable)."""
        return {s: int(np.sum(self.sources == s)) for s in SOURCES}


def stand_in_prior(profiles: np.ndarray, probe_ids: np.ndarray) -> Prior:
    """The attacker's own empirical prior, from people x probes profiles, when it has no public prior.

    An approximation: these people are the cohort's population, not the general population the
    beacon's prior describes (see :mod:`mbeacon.attack.live` for how SVT²'s answers correct ``beta``).
    """
    return prior_from_matrix(probe_ids, np.asarray(profiles, dtype=np.float64).T, name="attacker-pool")


def plan_live(
    profiles: Profiles, prior: Prior, settings: LiveSettings, pool: np.ndarray | None = None
) -> tuple[QueryPlan, np.ndarray]:
    """The plan of every profile and which of its queries can be asked (a known probe and range).

    ``pool`` (people x the profiles' probes): other people of the cohort's population, used only for
    the rarity estimate; None pools the profiles themselves, each left out of its own estimate.
    """
    rows = prior.index(profiles.probe_ids)
    plan = plan_queries(
        profiles.values,
        prior,
        rows,
        queries=settings.queries,
        noise_sd=settings.noise_sd,
        z=settings.z,
        strategy=settings.strategy,
        pool=pool,
    )
    askable = (plan.probes >= 0) & np.isfinite(plan.lo) & np.isfinite(plan.hi) & np.isfinite(plan.prior_pi)
    return plan, askable


def granularity(params: DatasetParams) -> str:
    """``count`` for the mechanisms whose TOP releases a noisy count (the server returns it to
    CONTROLLED keys and answers boolean to the others), else ``boolean``."""
    return "count" if params.mechanism in NOISY_RELEASE else "boolean"


def request_parameters(
    plan: QueryPlan, prior: Prior, dataset: str, person: int, columns: np.ndarray
) -> list[dict]:
    """The ``requestParameters`` of one profile's planned queries ``columns``."""
    probes = prior.probe_ids[plan.probes[person, columns]]
    return [
        {"probeId": str(p), "minValue": float(lo), "maxValue": float(hi), "datasetIds": [dataset]}
        for p, lo, hi in zip(probes, plan.lo[person, columns], plan.hi[person, columns], strict=True)
    ]


def _chunks(columns: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, columns.size, size):
        yield columns[start : start + size]


def ask_all(
    clients: BeaconClient | Sequence[BeaconClient],
    params: DatasetParams,
    plan: QueryPlan,
    askable: np.ndarray,
    prior: Prior,
    *,
    max_batch: int,
    order: np.ndarray,
    on_progress: Callable[[int], None] | None = None,
) -> LiveAnswers:
    """Ask every profile's queries, one profile after another in ``order``, in batches of ``max_batch``.

    With several keys (``clients``), the ``r``-th profile in ``order`` asks through key ``r mod K``
    (round-robin). A key stops asking when its account is exhausted (a refused answer, an answer from
    the prior or the synthetic state flagged ``budgetExhausted``, or a 429 for the budget): its later
    answers could say nothing about the data; its remaining profiles stay unasked, the other keys go
    on. A batch the server finds too large is split and the smaller size kept.
    """
    keys = [clients] if isinstance(clients, BeaconClient) else list(clients)
    answers = LiveAnswers.empty(plan.shape)
    spent = np.zeros(len(keys), dtype=bool)
    batch = max(1, int(max_batch))
    for rank, person in enumerate(order):
        key = rank % len(keys)
        columns = np.flatnonzero(askable[person])
        pending = list(_chunks(columns, batch))
        while pending and not spent[key]:
            chunk = pending.pop(0)
            try:
                body = keys[key].ask(
                    request_parameters(plan, prior, params.id, int(person), chunk), granularity(params)
                )
            except BatchTooLarge as error:
                if chunk.size == 1:
                    raise LiveAttackError(f"the server refuses even one query per request: {error}") from None
                batch = min(error.limit or chunk.size // 2, chunk.size - 1)
                pending = [*_chunks(chunk, batch), *pending]
                continue
            except BeaconBudgetRefused:
                spent[key] = True
                break
            got = parse_answers(body, chunk.size, params.id, params.mechanism)
            answers.store((person, chunk), got)
            spent[key] = spent[key] or got.exhausted
        if on_progress is not None:
            on_progress(int(columns.size))
    answers.max_batch = batch
    answers.exhausted = bool(spent.any())
    answers.keys_exhausted = int(spent.sum())
    return answers
