"""The deployment view: the attacker and honest researchers share one budget (``global``/``group`` scope).

The evaluation's main view gives every victim's queries an account of their own (Sybil accounts, the
attacker's best case) and every researcher a fresh account. With ``scope = "global"`` (or ``group``,
with the attacker inside the group) the service keeps **one** ledger for everybody: one noisy
threshold, one count of positives, one query cap, one Online PMW histogram per probe. This module
measures that deployment:

* **The stream.** At ``q`` queries per victim the attacker asks its planned queries round-robin over
  the victims (every victim's first query, then every victim's second, ...: the planned queries are
  ranked most informative first, so this spreads what the budget buys over everyone the attacker
  scores). The honest researchers ask the evaluation's three workloads between them (random,
  discovery, exploration: every question once, in random order). Who of them asked what does not
  matter under one ledger, and a question asked twice gets the cached answer at no cost, so the honest
  side is those questions once each, however many researchers share them. The honest questions fall
  at uniformly random positions of the attacker's stream: researchers keep working while the attack
  runs, so the attacker may spend the budget they need.
* **The attacker** is the rarest-range attacker with the same public model as in the Sybil view,
  scored on its own answers from the shared stream. The tracker is not run through a shared ledger
  (its stepper keeps one state per victim); against the budgeted defences it is the weaker attacker
  in the Sybil view already.
* **Honest utility** is measured in that same stream: the share of each workload's questions answered
  right, an unanswered question getting the prior's answer (``on_exhausted = "prior"``), as in the
  Sybil view. The same researchers' questions through the same ledger with no attacker give
  ``utility_discovery_unattacked``, and ``honest_kept_shared`` is the share of it they keep under
  attack.

``cohort-pmw``'s one state is already the cohort's, whatever the scope; what the deployment adds is
its quotas. The attacker asks through ``attacker_accounts`` identities (default one: the accounts an
operator issues or an identity provider vouches for are not free to multiply), victim ``v``'s queries
through identity ``v mod attacker_accounts``, each within its quota; the honest questions are asked
by :attr:`~mbeacon.attack.defences.Defence.researchers` holders in turn, each within its own quota.
An answer past a quota comes from the learnt synthetic state: the researchers use it, the attacker
reads nothing from it.

Defences without per-account state (``none``, ``suppression``, ``flip``, ``prior-only``) answer every
query the same whoever asks, so the scope changes nothing: their shared-view figures are the Sybil
view's (the tracker included). ``noisy-count``'s query cap and every SVT²-based defence's state are
per ledger, so they are run through the shared stream.

Each ``(setting, q)`` runs ``repetitions`` shared streams at once (one row per stream, vectorised as
the Sybil view is). The randomness comes from its own generator, seeded from the setting's seed, so
the shared view neither moves nor is moved by the Sybil view's figures.
"""

from __future__ import annotations

import numpy as np

from mbeacon.attack.defences import STATEFUL, Defence
from mbeacon.attack.lrt import lrt_scores
from mbeacon.attack.metrics import auc
from mbeacon.attack.scenario import BINS, Scenario, Workload
from mbeacon.privacy.noise import as_source
from mbeacon.privacy.online_pmw import online_pmw_batch
from mbeacon.privacy.svt2 import svt2_release
from mbeacon.privacy.svt2_noisy import NoisyRelease

#: The scope the view models (``group`` behaves the same with the attacker in the group).
SCOPE = "global"
#: Keys the shared view adds to every result row.
SHARED_KEYS = (
    "auc_shared",
    "attacker_shared",
    "utility_random_shared",
    "utility_discovery_shared",
    "utility_exploration_shared",
    "refused_shared",
    "honest_refused_shared",
    "utility_discovery_unattacked",
    "honest_kept_shared",
)
#: Mixed into the setting's seed: the shared view's own stream of randomness.
_SEED_TAG = 5_417


def uses_ledger(defence: Defence) -> bool:
    """Whether the defence keeps per-account state (so the budget scope changes its answers)."""
    return defence.name in STATEFUL or defence.name == "noisy-count"


def shared_rng(seed: int | list[int]) -> np.random.Generator:
    """The shared view's generator for a setting seeded with ``seed``."""
    seeds = list(seed) if isinstance(seed, (list, tuple)) else [seed]
    return np.random.default_rng([*seeds, _SEED_TAG])  # noise-ok: evaluation, seeded


def _honest(scenario: Scenario) -> tuple[list[str], list[Workload]]:
    named = [("random", scenario.random), ("discovery", scenario.discovery)]
    if scenario.exploration is not None:
        named.append(("exploration", scenario.exploration))
    return [name for name, _ in named], [w for _, w in named]


def shared_streams(
    victims: int, q: int, honest: int, runs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` interleavings of the attacker's ``victims x q`` queries and ``honest`` honest ones.

    Returns ``source`` (runs x (victims * q + honest)): the query at each position, as an index into
    the attacker's queries in victim-major order (``v * q + k``: victim ``v``'s ``k``-th planned
    query) followed by the honest questions (``victims * q + j``); and ``is_honest`` (same shape).
    The attacker goes round-robin (every victim's ``k``-th query before any ``k+1``-th) over the
    victims in an order of its own per stream: the scenario lists members first, and an attacker
    does not know who they are. Honest questions take uniformly random positions, in random order.
    """
    attack = victims * q
    length = attack + honest
    source = np.empty((runs, length), dtype=np.int64)
    is_honest = np.zeros((runs, length), dtype=bool)
    for r in range(runs):
        order = (rng.permutation(victims)[None, :] * q + np.arange(q)[:, None]).reshape(-1)
        positions = rng.choice(length, size=honest, replace=False)
        is_honest[r, positions] = True
        source[r, ~is_honest[r]] = order
        source[r, is_honest[r]] = attack + rng.permutation(honest)
    return source, is_honest


def _pmw_answers(
    defence: Defence,
    scenario: Scenario,
    q: int,
    honest: list[Workload],
    source: np.ndarray,
    alpha: np.ndarray,
    rng: np.random.Generator,
    *,
    attacker_accounts: int = 1,
) -> NoisyRelease:
    """Online PMW over the shared streams: one histogram per probe for everybody (``cohort-pmw``:
    each holder within its quota, see the module docstring).

    A query of the attacker, random or discovery workload is at a probe of its own (the Sybil view's
    model: its range's prior mass in bin 0, the rest spread over the other bins); the exploration
    workload's queries share their probes' histograms, across researchers and with the attacker's
    updates (none land there: the attacker never asks at those histograms).
    """
    p = defence.pmw_params
    n = p.n
    attack_beta = scenario.beta[:, :q].reshape(-1)
    own_beta = [attack_beta] + [w.beta for w in honest if w.histograms is None]
    inside = np.clip(np.concatenate(own_beta) / n, 0.5 / n, 1.0 - 0.5 / n)
    explored = next((w for w in honest if w.histograms is not None), None)
    base = 0 if explored is None else explored.histograms.shape[0]
    own = np.empty((inside.size, BINS))
    own[:, 0] = inside
    own[:, 1:] = ((1.0 - inside) / (BINS - 1))[:, None]
    table = own if explored is None else np.vstack([explored.histograms, own])
    # per query of the concatenated order (attacker, then the workloads in order): probe and bins
    probe, lo, hi = [], [], []
    next_own = base
    for block in [attack_beta.size] + [len(w) if w.histograms is None else w for w in honest]:
        if isinstance(block, Workload):
            probe.append(block.probe)
            lo.append(block.lo)
            hi.append(block.hi)
            continue
        probe.append(np.arange(next_own, next_own + block))
        lo.append(np.zeros(block, dtype=np.int64))
        hi.append(np.ones(block, dtype=np.int64))
        next_own += block
    probe_all, lo_all, hi_all = (np.concatenate(x).astype(np.int64) for x in (probe, lo, hi))
    owner = None
    if defence.name == "cohort-pmw":
        victims = scenario.victims
        attack = (np.arange(victims * q) // q) % max(1, attacker_accounts)  # victim-major
        honest_owner = attacker_accounts + np.arange(probe_all.size - attack.size) % defence.researchers
        owner = np.concatenate([attack, honest_owner])[source]
    return online_pmw_batch(
        probe_all[source],
        lo_all[source],
        hi_all[source],
        alpha,
        table,
        p,
        runs=source.shape[0],
        rng=as_source(rng),
        owner=owner,
        quota=defence.effective_quota if owner is not None else None,
    )


def shared_view(
    scenario: Scenario,
    defence: Defence,
    query_counts: list[int],
    *,
    repetitions: int,
    p_member: np.ndarray,
    p_non: np.ndarray,
    rng: np.random.Generator,
    attacker_accounts: int = 1,
) -> dict[int, dict]:
    """The shared-budget figures at each query count per victim: ``{q: {key: value}}`` (:data:`SHARED_KEYS`).

    ``defence`` must already carry its query cap and cohort size (as :func:`evaluate_setting` makes
    it); ``p_member``/``p_non`` are the attacker's model (victims x queries). Only for defences that
    :func:`uses_ledger`; the others' figures are the Sybil view's.
    """
    names, honest = _honest(scenario)
    honest_alpha = np.concatenate([w.alpha for w in honest])
    honest_beta = np.concatenate([w.beta for w in honest])
    kinds = np.repeat(np.arange(len(honest)), [len(w) for w in honest])
    victims, t = scenario.victims, defence.threshold
    discovery = names.index("discovery")

    def stream(q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The attacker's observations (runs x victims x q), the honest answers, and which were right."""
        attack = victims * q
        all_alpha = np.concatenate([scenario.alpha[:, :q].reshape(-1), honest_alpha])
        all_beta = np.concatenate([scenario.beta[:, :q].reshape(-1), honest_beta])
        source, is_honest = shared_streams(victims, q, honest_alpha.size, repetitions, rng)
        alpha, beta = all_alpha[source], all_beta[source]
        if defence.is_pmw:
            release = _pmw_answers(
                defence, scenario, q, honest, source, alpha, rng, attacker_accounts=attacker_accounts
            )
            answers = release.answers  # the researchers' (cohort-pmw past a quota: the synthetic one)
            observations = np.where(release.flags < 0, -1, release.answers).astype(np.int8)
        else:
            observations = defence.release(alpha, beta, rng)
            answers = svt2_release(observations, beta, t) if defence.flags_observed else observations
        # the attacker's observations back in victims x queries order, one block per stream
        attack_obs = np.empty((repetitions, attack), dtype=observations.dtype)
        np.put_along_axis(
            attack_obs,
            source[~is_honest].reshape(repetitions, -1),
            observations[~is_honest].reshape(repetitions, -1),
            axis=1,
        )
        honest_order = np.argsort(source[is_honest].reshape(repetitions, -1), axis=1)
        honest_answers = np.take_along_axis(answers[is_honest].reshape(repetitions, -1), honest_order, axis=1)
        released = np.where(honest_answers < 0, honest_beta >= t, honest_answers)
        return attack_obs.reshape(repetitions, victims, q), honest_answers, released == (honest_alpha >= t)

    out: dict[int, dict] = {}
    for q in sorted(set(min(q, scenario.queries) for q in query_counts)):
        attack_obs, honest_answers, right = stream(q)
        scores = lrt_scores(attack_obs, p_member[:, :q], p_non[:, :q])[:, :, -1]
        row = {
            "auc_shared": float(np.mean([auc(scores[r], scenario.labels) for r in range(repetitions)])),
            "attacker_shared": "rarest",
            "refused_shared": float(np.mean(attack_obs < 0)),
            "honest_refused_shared": float(np.mean(honest_answers < 0)),
        }
        for i, name in enumerate(names):
            row[f"utility_{name}_shared"] = (
                float(np.mean(right[:, kinds == i])) if np.any(kinds == i) else None
            )
        row.setdefault("utility_exploration_shared", None)
        out[q] = row
    # the researchers alone in the same ledger, what the attacker's spending is measured against (drawn
    # last: the figures above do not move)
    unattacked = float(np.mean(stream(0)[2][:, kinds == discovery]))
    for row in out.values():
        row["utility_discovery_unattacked"] = unattacked
        row["honest_kept_shared"] = _kept(row["utility_discovery_shared"], unattacked)
    return out


def _kept(attacked: float | None, unattacked: float | None) -> float | None:
    """The share of their discovery utility the researchers keep under attack (None: nothing to keep)."""
    if attacked is None or not unattacked:
        return None
    return attacked / unattacked


def copied_view(row: dict) -> dict:
    """The shared-view figures of a defence without per-account state: its Sybil-view figures."""
    return {
        "auc_shared": row["auc"],
        "attacker_shared": row["attacker"],
        "utility_random_shared": row["utility_random"],
        "utility_discovery_shared": row["utility_discovery"],
        "utility_exploration_shared": row.get("utility_exploration"),
        "refused_shared": row["refused"],
        "honest_refused_shared": 0.0,
        "utility_discovery_unattacked": row["utility_discovery"],
        "honest_kept_shared": _kept(row["utility_discovery"], row["utility_discovery"]),
    }
