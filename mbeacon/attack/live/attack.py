"""The whole live attack: parameters, plan, questions, scores, and the result it produces."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from mbeacon.attack.defences import FULL_OBSERVED, Defence
from mbeacon.attack.live.answers import FLAGGED, NOISY_RELEASE
from mbeacon.attack.live.client import BeaconClient
from mbeacon.attack.live.coalition import coalition_summary, pools_counts
from mbeacon.attack.live.errors import LiveAttackError
from mbeacon.attack.live.parameters import (
    DEFAULT_MAX_BATCH,
    DatasetParams,
    choose_dataset,
    find_max_batch,
    parse_datasets,
    with_account,
)
from mbeacon.attack.live.profiles import Profiles
from mbeacon.attack.live.questions import LiveAnswers, LiveSettings, ask_all, plan_live, stand_in_prior
from mbeacon.attack.live.scoring import (
    attacker_beta,
    checkpoints,
    empirical_p_values,
    metrics_by_queries,
    prior_agreement,
    score,
    score_release,
    trusts_prior,
)
from mbeacon.attack.live.tracker import ask_tracker, choose_attacker, live_targets, tracker_scores
from mbeacon.attack.lrt import miss_probability
from mbeacon.attack.metrics import roc_curve
from mbeacon.attack.planning import QueryPlan
from mbeacon.store.priors import Prior


@dataclass
class LiveResult:
    """Everything one live attack produced."""

    url: str
    params: DatasetParams
    defence: Defence
    settings: LiveSettings
    profiles: Profiles
    plan: QueryPlan
    askable: np.ndarray
    answers: LiveAnswers
    scores: np.ndarray
    prior_name: str
    prior_agreement: float | None
    requests: int
    seconds: float
    warnings: list[str] = field(default_factory=list)
    attacker: str = "rarest"
    #: What of each response the scores read: the answer, SVT²'s flag, or flag, answer and count.
    observed: tuple[str, ...] = ("answer",)
    #: How many keys asked (profiles round-robin over them).
    keys: int = 1
    #: The coalition of keys' pooled reconstruction (:mod:`.coalition`), when it ran, and its scores.
    coalition: dict[str, Any] | None = None
    coalition_scores: np.ndarray | None = None

    @property
    def queries(self) -> int:
        return int(self.scores.shape[1])

    def by_queries(self) -> list[dict]:
        if not self.profiles.has_nonmembers:
            return []
        return metrics_by_queries(self.scores, self.profiles.labels, checkpoints(self.queries))

    def score_table(self) -> pd.DataFrame:
        """One row per profile: final score, p-value against the non-members, and what was answered."""
        src = self.answers.sources
        obs = self.answers.observations
        final = self.scores[:, -1] if self.queries else np.zeros(self.profiles.people)
        extra = {} if self.coalition_scores is None else {"coalition": self.coalition_scores}
        return pd.DataFrame(
            {
                "sample": self.profiles.samples,
                "group": [self.profiles.group(i) for i in range(self.profiles.people)],
                "score": final,
                "p_value": empirical_p_values(final, self.profiles.labels),
                "planned": self.askable.sum(axis=1),
                "answered": (obs >= 0).sum(axis=1),
                "positive": (obs == 1).sum(axis=1),
                "refused": ((src == "refused") | (src == "exhausted")).sum(axis=1),
                "unasked": ((src == "unasked") & self.askable).sum(axis=1),
                **extra,
            }
        )

    def summary(self) -> dict[str, Any]:
        """The metrics file's content (JSON-ready)."""
        labels = self.profiles.labels
        out: dict[str, Any] = {
            "url": self.url,
            "dataset": self.params.to_json(),
            "defence": self.defence.label,
            "profiles": {"victims": int(labels.sum()), "nonmembers": int((~labels).sum())},
            "queries_per_profile": self.queries,
            "attacker": self.attacker,
            "observed": list(self.observed),
            "strategy": self.settings.strategy,
            "noise_sd": self.settings.noise_sd,
            "z": self.settings.z,
            "missing": self.settings.missing,
            "prior": self.prior_name,
            "prior_agreement": self.prior_agreement,
            "seed": self.settings.seed,
            "answers": {**self.answers.counts(), "planned": int(self.askable.sum())},
            "keys": self.keys,
            "budget_exhausted": self.answers.exhausted,
            "keys_exhausted": self.answers.keys_exhausted or int(self.answers.exhausted),
            "positives_used_before": self.params.positives_used,
            "max_batch": self.answers.max_batch,
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "by_queries": self.by_queries(),
            "warnings": self.warnings,
            "coalition": self.coalition,
        }
        if self.profiles.has_nonmembers and self.queries:
            fpr, tpr = roc_curve(self.scores[:, -1], labels)
            out["roc"] = {"queries": self.queries, "fpr": fpr.tolist(), "tpr": tpr.tolist()}
        return out


def read_parameters(client: BeaconClient, dataset: str | None) -> tuple[DatasetParams, int]:
    """The chosen dataset's public parameters (the key's account's, if open) and the server's max batch."""
    params = choose_dataset(parse_datasets(client.get("/datasets")), dataset)
    params = with_account(params, client.get_optional("/budget"))
    documents = [client.get_optional(p) for p in ("/configuration", "/info")]
    limit = find_max_batch(*documents)
    if limit is None:
        limit = find_max_batch(client.get_optional("/openapi.json"))
    return params, limit or DEFAULT_MAX_BATCH


def read_key_parameters(
    clients: Sequence[BeaconClient], dataset: str | None
) -> tuple[DatasetParams, int, int | None]:
    """:func:`read_parameters` through every key: the first key's parameters and batch limit, and the
    positives every key had spent before (None: no key has an account). Keys whose accounts were opened
    under other parameters (another model of the answers) are refused: one model scores every answer."""
    params, max_batch = read_parameters(clients[0], dataset)
    model = params.defence()
    used = [params.positives_used]
    for number, client in enumerate(clients[1:], start=2):
        theirs = with_account(choose_dataset(parse_datasets(client.get("/datasets")), params.id),
                              client.get_optional("/budget"))  # fmt: skip
        if theirs.defence() != model:
            raise LiveAttackError(
                f"key {number} of {len(clients)}: its account on {params.id!r} was opened under "
                f"{theirs.defence().label}, key 1's under {model.label}; give keys of one setting"
            )
        used.append(theirs.positives_used)
    spent = None if all(u is None for u in used) else sum(u or 0 for u in used)
    return params, max_batch, spent


def run_live_attack(
    client: BeaconClient | Sequence[BeaconClient],
    profiles: Profiles,
    settings: LiveSettings,
    *,
    prior: Prior | None = None,
    pool: np.ndarray | None = None,
    on_start: Callable[[DatasetParams, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> LiveResult:
    """The whole live attack: parameters, plan, questions, scores. ``client``: one key's client, or
    several (a coalition of keys: profiles round-robin over them, and the pooled reconstruction of
    :mod:`.coalition`). ``on_start`` gets the dataset and the number of queries to ask (to size a
    progress bar); ``on_progress`` the queries of each profile done."""
    started = time.monotonic()
    clients = [client] if isinstance(client, BeaconClient) else list(client)
    if not clients:
        raise LiveAttackError("no API key: give --key (or set MBEACON_KEY)")
    if profiles.people < 2 and pool is None:
        raise LiveAttackError("the pooled plan needs two or more profiles (or --pool)")
    params, max_batch, used = read_key_parameters(clients, settings.dataset)
    defence = params.defence()
    warnings = []
    if not params.allocation_matches():
        warnings.append(
            "the published eps1/eps2 are not svt2_allocate's: the attacker's SVT² model is approximate"
        )
    if used:
        limit = params.quota if params.mechanism == "cohort-pmw" else params.c
        if len(clients) == 1:
            warnings.append(f"this key had already spent {used} of {limit} positives")
        else:
            warnings.append(
                f"the {len(clients)} keys had already spent {used} positives (at most {limit} each)"
            )
    params = replace(params, positives_used=used)
    public = prior is not None
    if prior is None:
        prior = stand_in_prior(profiles.values if pool is None else pool, profiles.probe_ids)
    plan, askable = plan_live(profiles, prior, settings, pool)
    attacker = choose_attacker(settings.attacker, defence)
    if on_start is not None:
        on_start(params, int(askable.sum()) if attacker == "rarest" else profiles.people * settings.queries)
    order = np.random.default_rng(settings.seed).permutation(profiles.people)  # noise-ok: query order only
    if attacker == "tracker" and len(clients) > 1:
        raise LiveAttackError("the tracker asks through one key: give one --key (or --attacker rarest)")
    if attacker == "tracker":
        return _run_tracker(clients[0], profiles, settings, params, defence, plan, askable, prior, public,
                            order, max_batch, warnings, started, on_progress)  # fmt: skip
    answers = ask_all(
        clients, params, plan, askable, prior, max_batch=max_batch, order=order, on_progress=on_progress
    )
    beta = attacker_beta(
        plan,
        params.patients,
        params.threshold,
        answers.prior_answers,
        prior_is_public=trusts_prior(params, public),
    )
    miss = miss_probability(settings.z, settings.missing)
    if defence.name in FULL_OBSERVED:  # the whole response: flag, answer, released count
        scores = score_release(defence, plan, beta, params.patients, miss, answers.release())
    else:
        scores = score(defence, plan, beta, params.patients, miss, answers.observations)
    agreement = prior_agreement(beta, params.threshold, answers.prior_answers) if public else None
    if agreement is not None and agreement < 0.9:
        warnings.append(f"only {agreement:.0%} of the beacon's prior answers agree with the prior given")
    if answers.exhausted and len(clients) == 1:
        warnings.append("the key's privacy budget ran out: the remaining queries were not answered")
    elif answers.exhausted:
        warnings.append(
            f"{answers.keys_exhausted} of the {len(clients)} keys' privacy budgets ran out: "
            "their remaining queries were not answered"
        )
    coalition, pooled = None, None
    if profiles.has_nonmembers and pools_counts(params.mechanism, answers):
        coalition, pooled = coalition_summary(defence, profiles, plan, prior, answers, askable, len(clients))
    return LiveResult(
        url=clients[0].base,
        params=params,
        defence=defence,
        settings=settings,
        profiles=profiles,
        plan=plan,
        askable=askable,
        answers=answers,
        scores=scores,
        prior_name=prior.name if public else "stand-in: the attacker's own profiles",
        prior_agreement=agreement,
        requests=sum(c.requests for c in clients),
        seconds=time.monotonic() - started,
        warnings=warnings,
        observed=observed_parts(params, answers),
        keys=len(clients),
        coalition=coalition,
        coalition_scores=pooled,
    )


def observed_parts(params: DatasetParams, answers: LiveAnswers) -> tuple[str, ...]:
    """What the scores read of each response (reported in the summary)."""
    if params.mechanism in FLAGGED:
        return ("flag",)
    if params.mechanism not in NOISY_RELEASE:
        return ("answer",)
    counted = answers.released is not None and bool(np.isfinite(answers.released[answers.flags == 1]).any())
    return ("flag", "answer", "count") if counted else ("flag", "answer")


def _run_tracker(
    client: BeaconClient,
    profiles: Profiles,
    settings: LiveSettings,
    params: DatasetParams,
    defence: Defence,
    plan: QueryPlan,
    askable: np.ndarray,
    prior: Prior,
    public: bool,
    order: np.ndarray,
    max_batch: int,
    warnings: list[str],
    started: float,
    on_progress: Callable[[int], None] | None,
) -> LiveResult:
    """The tracker's half of :func:`run_live_attack` (:mod:`mbeacon.attack.live.tracker`)."""
    search, answers, asked = ask_tracker(
        client,
        params,
        live_targets(plan, askable, prior),
        prior,
        queries=settings.queries,
        randomised=defence.randomised,
        max_batch=max_batch,
        order=order,
        on_progress=on_progress,
    )
    miss = miss_probability(settings.z, settings.missing)
    scores = tracker_scores(
        search, answers, defence, prior, params.patients, miss, settings.queries,
        prior_is_public=trusts_prior(params, public),
    )  # fmt: skip
    if answers.exhausted:
        warnings.append("the key's privacy budget ran out: the remaining queries were not answered")
    return LiveResult(
        url=client.base,
        params=params,
        defence=defence,
        settings=settings,
        profiles=profiles,
        plan=plan,
        askable=asked,
        answers=answers,
        scores=scores,
        prior_name=prior.name if public else "stand-in: the attacker's own profiles",
        prior_agreement=None,
        requests=client.requests,
        seconds=time.monotonic() - started,
        warnings=warnings,
        attacker="tracker",
        observed=observed_parts(params, answers),
    )
