"""Whom a dataset's protection promises, and the rules that keep the unit of the promise the cohort:
one cohort file served under several ids is one cohort, and a prior is public by construction.

Used by the engine at start-up (the checks) and by ``/api/datasets`` (the statement).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from mbeacon.beacon.budget import Account
from mbeacon.beacon.config import ConfigError
from mbeacon.beacon.sanitisers import AccountParams, sanitiser_of
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.privacy.tradeoff import best_attack
from mbeacon.store.priors import Prior


def copies_by_content(ids: Iterable[str], checksum_of: Callable[[str], str]) -> dict[str, list[str]]:
    """The served ids of each cohort file's content (its checksum), sorted, for the files served
    under more than one id."""
    by_content: dict[str, list[str]] = defaultdict(list)
    for dataset in ids:
        by_content[checksum_of(dataset)].append(dataset)
    return {checksum: sorted(same) for checksum, same in by_content.items() if len(same) > 1}


def check_copies(
    copies: dict[str, list[str]], policy_of: Callable[[str], PolicyBase], params_of: Callable[[str], str]
) -> None:
    """One cohort's patients are one cohort's, whatever ids serve them: a copy of a file under
    another id would give every holder of a per-holder budget a fresh one on each copy, so it is
    refused; under a shared sanitiser the copies share one state (the engine's ``cohort_key``), which
    needs one policy (``params_of``: the stored text of a new account's parameters)."""
    for ids in copies.values():
        first, *others = ids
        if not all(sanitiser_of(policy_of(d)).shared for d in ids):
            raise ConfigError(
                f"datasets {', '.join(map(repr, others))} hold the same cohort file as {first!r}: "
                "a per-holder mechanism would give every budget holder a fresh budget on each copy; "
                "serve the file under one id, or protect every copy with cohort-pmw (one budget for "
                "the cohort)"
            )
        if len({params_of(d) for d in ids}) > 1:
            raise ConfigError(
                f"datasets {', '.join(map(repr, ids))} hold the same cohort, which cohort-pmw protects "
                "as a whole: give them one policy (the same epsilon, c, quota and keys)"
            )


def check_prior_is_public(dataset: str, prior: Prior, served: Iterable[str]) -> None:
    """A prior is public by construction: one built from a cohort of the store would publish that
    cohort's per-probe distribution at ``/api/prior`` and answer its questions for free."""
    built_from = prior.source.removeprefix("dataset ") if prior.source.startswith("dataset ") else None
    if built_from is not None and built_from in served:
        raise ConfigError(
            f"dataset {dataset!r} would be served with prior {prior.name!r}, built from the patients of "
            f"dataset {built_from!r}: a prior is published (/api/prior) and answers for free, so it must "
            "come from reference samples outside every served cohort (mbeacon prior build --from-file)"
        )


def guarantee(policy: PolicyBase, cohort: Account | None, new_params: Callable[[], AccountParams]) -> dict:
    """What the dataset's protection promises, and to whom: for a shared state (``cohort``, None while
    no one has asked), the cohort's whole budget, what is spent, and the best attack any coalition of
    askers could make (from the trade-off function of the cohort's epsilon); else the promise per
    budget holder, which k holders together compose to k times."""
    sanitiser = sanitiser_of(policy)
    if not sanitiser.spends_budget:
        return {"unit": "none"}
    if not sanitiser.shared:
        return {"unit": "budget holder", "bestAttackPerHolder": best_attack(policy.epsilon).to_json()}
    params = cohort.params if cohort is not None else new_params()
    spent = cohort.epsilon_spent() if cohort is not None else 0.0
    return {
        "unit": "cohort",
        "epsilonTotal": params.epsilon,
        "epsilonSpent": round(spent, 12),
        "positivesUsed": cohort.state.count if cohort is not None else 0,
        "positivesTotal": params.c,
        "quota": params.quota,
        "bestAttack": best_attack(params.epsilon).to_json(),
    }
