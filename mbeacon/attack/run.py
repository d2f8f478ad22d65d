"""One defence setting against one scenario: attack metrics by number of queries, and utility.

Every attacker of :data:`~mbeacon.attack.planning.ATTACKERS` runs on the setting (``rarest``: the
likelihood-ratio attack on the rarest ranges around the victim's value; ``tracker``: the
threshold-aware tracker of :mod:`mbeacon.attack.tracker`; ``flag`` and ``count``: the rarest plan's
answers scored on the whole response, for the defences whose flag the answer does not determine;
``boundary``: for those defences, ranges where their decision margin is just reached,
:mod:`mbeacon.attack.boundary`),
and each row reports the strongest one's AUC as ``auc`` and its name as ``attacker``, with every
attacker's own AUC beside it (``auc_rarest``, ``auc_tracker``, ``auc_flag``, ``auc_count``,
``auc_boundary``; null where an attacker does not apply).

Vectorised over victims and repetitions: a repetition is a fresh draw of the defence's randomness
(every victim's queries go through its own account, as if the attacker opened one per victim, which
favours the attacker), so ``repetitions x victims`` streams run through the defence in one call
(:func:`mbeacon.privacy.svt2_batch` for SVT²).
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from mbeacon.attack.coalition import coalition_figures
from mbeacon.attack.defences import FULL_OBSERVED, Defence
from mbeacon.attack.lrt import lrt_scores, observation_probabilities, release_log_ratios
from mbeacon.attack.metrics import auc, roc_curve, tpr_at_fpr
from mbeacon.attack.planning import ATTACKERS
from mbeacon.attack.scenario import Scenario, Workload
from mbeacon.attack.shared import copied_view, shared_rng, shared_view, uses_ledger
from mbeacon.attack.tracker_eval import boundary_scores, tracker_scores
from mbeacon.privacy.noise import as_source
from mbeacon.privacy.online_pmw import online_pmw_batch
from mbeacon.privacy.svt2 import svt2_release

ROC_POINTS = 101
#: Researcher accounts per workload: utility is cheap to measure but varies a lot from one account to
#: the next (one SVT² threshold draw decides a whole account's answers), so it gets many more runs
#: than the attack's repetitions.
UTILITY_RUNS = 200


def released_answers(defence: Defence, observations: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Yes/no answers (-1 unanswered) from observations: SVT²'s flags become answers through the prior."""
    if not defence.flags_observed:
        return observations
    return svt2_release(observations, beta, defence.threshold)


def utility(defence: Defence, workload: Workload, runs: int, rng: np.random.Generator) -> float | None:
    """Share of a workload's queries answered correctly, averaged over ``runs`` researchers.

    Each run is one researcher's account answering the whole workload in order. A query left
    unanswered (budget exhausted, query cap reached) gets the prior's answer, as the service's
    ``on_exhausted = "prior"`` policy releases it; the share refused is reported separately.
    """
    if len(workload) == 0:
        return None
    alpha = np.broadcast_to(workload.alpha, (runs, len(workload)))
    if defence.is_pmw and workload.histograms is not None:
        # queries that share a probe share its histogram: the mechanism learns across them
        cohort = defence.name == "cohort-pmw"  # asked by its researchers in turn, each within a quota
        observations = online_pmw_batch(
            workload.probe,
            workload.lo,
            workload.hi,
            alpha,
            workload.histograms,
            defence.pmw_params,
            runs=runs,
            rng=as_source(rng),
            owner=np.arange(len(workload)) % defence.researchers if cohort else None,
            quota=defence.effective_quota if cohort else None,
        ).answers
    else:
        observations = defence.release(alpha, workload.beta, rng)
    answers = released_answers(defence, observations, workload.beta)
    answers = np.where(answers < 0, workload.beta >= defence.threshold, answers)
    truth = workload.alpha >= defence.threshold
    return float(np.mean(answers == truth))


def _downsample(fpr: np.ndarray, tpr: np.ndarray) -> tuple[list[float], list[float]]:
    grid = np.linspace(0.0, 1.0, ROC_POINTS)
    return grid.tolist(), np.interp(grid, fpr, tpr).tolist()


def adaptive_stop(scores: np.ndarray, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Freeze each stream's score once ``|score| >= bound``: the adaptive attacker stops asking.

    Returns the frozen scores and the queries each stream asked (online mechanisms answer earlier
    queries the same whether or not later ones are asked, so freezing is exactly not asking).
    """
    decisive = np.abs(scores) >= bound
    first = np.where(decisive.any(axis=-1), decisive.argmax(axis=-1), scores.shape[-1] - 1)
    index = np.minimum(np.arange(scores.shape[-1]), first[..., None])
    return np.take_along_axis(scores, index, axis=-1), first + 1


def evaluate_setting(
    scenario: Scenario,
    defence: Defence,
    query_counts: list[int],
    *,
    repetitions: int,
    seed: int | list[int],
    adaptive_bound: float | None = None,
    attackers: tuple[str, ...] | list[str] = ATTACKERS,
    shared: bool = False,
    coalition: bool = False,
    attacker_accounts: int = 1,
) -> list[dict]:
    """One result row per query count: attack AUC and TPR at 1% FPR (means over repetitions), ROC,
    utility on both workloads, positives spent per 1,000 attack queries and the share refused.

    ``auc``, ``auc_sd``, ``tpr_at_1pct_fpr`` and the ROC are the strongest attacker's (highest mean
    AUC at that query count among the attackers that have scored something by then; ``attacker``
    names it); ``burn_per_1000``, ``refused`` and ``queries_asked`` describe the ``rarest``
    attacker's stream.

    ``shared``: also the deployment view (:mod:`mbeacon.attack.shared`): the attacker and honest
    researchers in one ``global`` ledger, its figures under the ``*_shared`` keys of every row (the
    grid asks for it by default, ``EvaluationConfig.shared_view``; a lone call does not).
    ``coalition``: also the coalition attacker (:mod:`mbeacon.attack.coalition`) at the largest query
    count, its figures on that (last) row. ``attacker_accounts``: the deployment view's attacking
    identities (``cohort-pmw``'s quotas are per identity).
    """
    unknown = sorted(set(attackers) - set(ATTACKERS))
    if unknown or not attackers:
        raise ValueError(f"attackers must be some of {', '.join(ATTACKERS)}; got {list(attackers)}")
    rng = np.random.default_rng(seed)  # noise-ok: evaluation, seeded for reproducibility
    defence = defence.with_cap(scenario.queries).with_cohort(scenario.n)
    reps = repetitions if defence.randomised else 1
    utility_runs = UTILITY_RUNS if defence.randomised else 1
    beta = scenario.beta
    p_member, p_non = observation_probabilities(defence, scenario.plan.pi, beta, scenario.n, scenario.miss)
    streams = np.broadcast_to(scenario.alpha, (reps, *scenario.alpha.shape)).reshape(-1, scenario.queries)
    if defence.name == "cohort-pmw":  # every victim's account asks through the cohort's one stream
        full = defence.release_accounts(streams, np.tile(beta, (reps, 1)), rng, accounts=scenario.victims)
    elif defence.name in FULL_OBSERVED:
        full = defence.release_all(streams, np.tile(beta, (reps, 1)), rng)
    else:
        full = None
    observations = (
        # an untested answer (cohort-pmw past a quota) is the public synthetic one: nothing observed
        np.where(full.flags < 0, -1, full.answers).astype(np.int8)
        if full is not None
        else defence.release(streams, np.tile(beta, (reps, 1)), rng)
    ).reshape(reps, scenario.victims, -1)
    scores = lrt_scores(observations, p_member, p_non)
    asked = np.full(scores.shape[:-1], scenario.queries)
    if adaptive_bound is not None:
        scores, asked = adaptive_stop(scores, adaptive_bound)
    common = {
        **{k: v for k, v in asdict(defence).items() if k != "name"},
        "defence": defence.name,
        "label": defence.label,
        "utility_random": utility(defence, scenario.random, utility_runs, rng),
        "utility_discovery": utility(defence, scenario.discovery, utility_runs, rng),
        "repetitions": reps,
    }
    labels = scenario.labels
    by_attacker = {"rarest": scores} if "rarest" in attackers else {}
    if "tracker" in attackers:  # after everything above, so the rarest attacker's figures do not move
        by_attacker["tracker"] = tracker_scores(scenario, defence, repetitions=reps, rng=rng)[0]
    for name in ("flag", "count"):  # the rarest plan's release read whole (no randomness drawn)
        if name in attackers and full is not None:
            steps = release_log_ratios(
                defence,
                np.tile(scenario.plan.pi, (reps, 1)),
                np.tile(beta, (reps, 1)),
                full,
                scenario.n,
                scenario.miss,
                use_counts=name == "count",
            )
            scores_of = np.cumsum(steps, axis=-1).reshape(reps, scenario.victims, -1)
            if adaptive_bound is not None:
                scores_of = adaptive_stop(scores_of, adaptive_bound)[0]
            by_attacker[name] = scores_of
    # last, so that adding it moved no other figure
    exploration = scenario.exploration
    common["utility_exploration"] = (
        None if exploration is None else utility(defence, exploration, utility_runs, rng)
    )
    if "boundary" in attackers:  # its own accounts, after everything above (no other figure moves)
        found = boundary_scores(scenario, defence, repetitions=reps, rng=rng)
        if found is not None:
            by_attacker["boundary"] = found
    rows = []
    for q in sorted(set(min(q, scenario.queries) for q in query_counts)):
        each = {name: [auc(s[r, :, q - 1], labels) for r in range(reps)] for name, s in by_attacker.items()}
        # An attacker that has scored nothing yet (the tracker before its first test: every score
        # still equal) has no AUC to speak of; its 0.5 would only hide the other one's.
        scored = [name for name, s in by_attacker.items() if np.ptp(s[:, :, q - 1]) > 0] or list(each)
        strongest = max(scored, key=lambda name: np.mean(each[name]))  # ties: the first, rarest
        at_q = by_attacker[strongest][:, :, q - 1]
        aucs = each[strongest]
        tprs = [tpr_at_fpr(at_q[r], labels, 0.01) for r in range(reps)]
        answered = observations[:, :, :q] >= 0
        positives = np.sum(observations[:, :, :q] == 1) if defence.flags_observed else None
        burn = None if positives is None else float(1000 * positives / max(1, answered.sum()))
        fpr, tpr = _downsample(*roc_curve(at_q[0], labels))
        rows.append(
            {
                **common,
                "queries": q,
                "attacker": strongest,
                "auc": float(np.mean(aucs)),
                **{f"auc_{name}": float(np.mean(each[name])) if name in each else None for name in ATTACKERS},
                "auc_sd": float(np.std(aucs)),
                "tpr_at_1pct_fpr": float(np.mean(tprs)),
                "burn_per_1000": burn,
                "refused": float(1.0 - answered.mean()),
                "queries_asked": float(np.mean(np.minimum(asked, q))),
                "roc_fpr": fpr,
                "roc_tpr": tpr,
            }
        )
    if shared:  # last, from its own generator: the Sybil view's figures do not move
        if uses_ledger(defence):
            view = shared_view(
                scenario,
                defence,
                [row["queries"] for row in rows],
                repetitions=reps,
                p_member=p_member,
                p_non=p_non,
                rng=shared_rng(seed),
                attacker_accounts=attacker_accounts,
            )
            for row in rows:
                row.update(view[row["queries"]])
        else:
            for row in rows:
                row.update(copied_view(row))
    if coalition and rows:
        rows[-1].update(
            coalition_figures(scenario, defence, rows[-1]["queries"], repetitions=reps, seed=seed)
        )
    return rows
