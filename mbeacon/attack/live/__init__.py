"""The live attack: MBeacon's likelihood-ratio membership attack as a real HTTP client of a running beacon.

The library attack (:mod:`mbeacon.attack.run`) simulates the beacon's answers. This package asks a
running beacon instead, with a researcher's key, exactly as an attacker would:

1. read the dataset's public parameters (``GET /api/datasets``: cohort size N, mechanism, epsilon,
   c, threshold T, variant; ``GET /api/budget``: the same parameters as frozen in the key's own
   account) and build the matching :class:`~mbeacon.attack.defences.Defence`, the attacker's model
   of what an answer means (with several keys, every key's account: they must agree);
2. plan every profile's queries (:func:`~mbeacon.attack.planning.plan_queries`): by default the
   ``pooled`` strategy, leave-one-out over all the profiles given (victims and non-members), so the
   plan carries no label;
3. ask each profile's queries in batch POSTs (``query.requestParameters`` a list of at most the
   server's ``max_batch``), in a shuffled order of profiles so that a budget that runs out part-way
   leaves victims and non-members unanswered alike; with several keys, profile ``r`` of that order
   asks through key ``r mod K``;
4. turn each answer into an observation (:func:`observation`): for ``none`` the answer itself, for
   SVT² the flag ``answeredFrom == "data"``; refused, exhausted or missing answers carry no
   information (-1);
5. score with :func:`~mbeacon.attack.lrt.observation_probabilities` and
   :func:`~mbeacon.attack.lrt.lrt_scores`; with non-members, AUC and TPR at 1% FPR by number of
   queries (victims count as members: the evaluation setting, where ``--victims`` holds the cohort's
   members); with non-members and answers that carry counts, every key's answers pooled into one
   reconstruction of the cohort (:mod:`.coalition`).

**Without the public prior.** The planner needs the prior's mass ``prior_pi`` of each range (to
break ties and, for SVT², for ``beta = N * prior_pi``). Without ``--prior`` the attacker stands in
an empirical prior of its own profiles (:func:`stand_in_prior`). That is the cohort's population,
not the general population, so ``beta`` is wrong at the disease's DMPs; but every SVT² answer
reveals the prior's side of the threshold (``answeredFrom = prior`` releases the prior's answer,
``data`` its negation), and :func:`attacker_beta` moves the stand-in ``beta`` onto the side the
beacon revealed. For ``none`` ``beta`` plays no part, and the pooled ranking does not use the prior
except for ties.

HTTP: 429 with ``Retry-After`` (rate limit) is waited out and retried; 429 for an exhausted budget
(an error body whose ``info`` names the dataset's budget, no ``Retry-After``) ends the asking: the
rest is unanswered. 5xx and connection errors are retried a few times, which is safe because the
ledger caches every answer it has committed (the same query again costs nothing and gets the same
answer). The key is sent only in the ``Authorization`` header and is never printed or written.

The package, one module per job (in dependency order):

* :mod:`.errors`: :class:`LiveAttackError` and what stops the attack (:class:`BeaconBudgetRefused`,
  :class:`BatchTooLarge`);
* :mod:`.profiles`: the attacker's profiles, read strictly (:func:`read_profiles`) and stacked
  (:class:`Profiles`);
* :mod:`.parameters`: the dataset's public parameters (:class:`DatasetParams`) read from the beacon's
  documents, and its batch limit (:func:`find_max_batch`);
* :mod:`.answers`: a batch's result sets read into observations (:func:`parse_answers`);
* :mod:`.client`: the HTTP client (:class:`BeaconClient`): rate limits, retries, the budget's 429;
* :mod:`.questions`: the plan of every profile (:func:`plan_live`) and the asking (:func:`ask_all`);
* :mod:`.scoring`: the attacker's ``beta``, the likelihood-ratio scores and the metrics by queries;
* :mod:`.coalition`: a coalition of keys' answers pooled into one reconstruction of the cohort
  (:func:`coalition_summary`);
* :mod:`.attack`: :func:`run_live_attack`, the whole attack, and its :class:`LiveResult`;
* :mod:`.outputs`: the scores, metrics and ROC plot written out (:func:`write_outputs`).
"""

from __future__ import annotations

from mbeacon.attack.live.answers import BatchAnswers, observation, parse_answers, revealed_prior_answer
from mbeacon.attack.live.attack import LiveResult, read_parameters, run_live_attack
from mbeacon.attack.live.client import (
    BeaconClient,
    api_base,
    error_message,
    is_budget_exhausted,
    retry_after_seconds,
)
from mbeacon.attack.live.coalition import coalition_summary, pooled_rows, pooled_targets, pools_counts
from mbeacon.attack.live.errors import BatchTooLarge, BeaconBudgetRefused, LiveAttackError
from mbeacon.attack.live.outputs import plot_roc, write_outputs
from mbeacon.attack.live.parameters import (
    DEFAULT_MAX_BATCH,
    DatasetParams,
    choose_dataset,
    find_max_batch,
    parse_datasets,
    with_account,
)
from mbeacon.attack.live.profiles import Profiles, read_profiles, stack_profiles
from mbeacon.attack.live.questions import LiveAnswers, LiveSettings, ask_all, plan_live, stand_in_prior
from mbeacon.attack.live.scoring import (
    attacker_beta,
    checkpoints,
    empirical_p_values,
    metrics_by_queries,
    prior_agreement,
    score,
)

__all__ = [
    "DEFAULT_MAX_BATCH",
    "BatchAnswers",
    "BatchTooLarge",
    "BeaconBudgetRefused",
    "BeaconClient",
    "DatasetParams",
    "LiveAnswers",
    "LiveAttackError",
    "LiveResult",
    "LiveSettings",
    "Profiles",
    "api_base",
    "ask_all",
    "attacker_beta",
    "checkpoints",
    "choose_dataset",
    "coalition_summary",
    "empirical_p_values",
    "error_message",
    "find_max_batch",
    "is_budget_exhausted",
    "metrics_by_queries",
    "observation",
    "parse_answers",
    "parse_datasets",
    "plan_live",
    "plot_roc",
    "pooled_rows",
    "pooled_targets",
    "pools_counts",
    "prior_agreement",
    "read_parameters",
    "read_profiles",
    "retry_after_seconds",
    "revealed_prior_answer",
    "run_live_attack",
    "score",
    "stack_profiles",
    "stand_in_prior",
    "with_account",
    "write_outputs",
]
