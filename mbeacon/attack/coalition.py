"""The coalition attacker: many accounts pool their releases and reconstruct the cohort.

The per-victim attackers score each candidate on the answers of the one account that asked about
them. A coalition pools what ``K`` accounts were released and solves for the whole membership vector
at once (a Dinur-Nissim style reconstruction):

* **Rows.** Every pooled query (the planned rarest-range queries of the ``K`` accounts, each account
  asking about its own victim) is a row ``a_q``: ``a_q[i] = 1`` when candidate ``i``'s measured value
  at the query's probe lies in the query's range (a missing value counts 0).
* **Targets.** ``none`` (the unprotected beacon) releases the exact count. A released noisy count
  ``y_q`` is used as is: ``y_q = a_q . x + noise``. A yes/no
  answer is a censored row; it is kept as a row with the least count consistent with it, ``T`` for a
  "yes" and ``(T - 1) / 2`` (the middle of ``[0, T-1]``) for a "no". An unanswered query is dropped.
* **Solve.** Damped sparse least squares (``scipy.sparse.linalg.lsqr``), clipped to ``[0, 1]``: the
  score of each candidate is its reconstructed membership. Clipping keeps the ranking of the bounded
  solver on these problems and solves a 2,000-candidate cohort in seconds, where a bounded solver does
  not.

The budget the coalition buys depends on the mechanism's accounting. Per-account mechanisms (svt2,
online-pmw, noisy-count) give each account a fresh budget: ``K`` accounts are ``K`` independent
streams, and the release is ``K * epsilon``-DP for the coalition. ``cohort-pmw`` keeps one budget for
the cohort: the coalition's queries run through **one** stream (round-robin over the accounts, each
within its quota; :meth:`~mbeacon.attack.defences.Defence.release_accounts`), so more accounts buy at
most the cohort's ``c`` releases, and the bound stays at the cohort's epsilon. Its answers past a
quota come from the public synthetic state and are dropped, as unanswered ones.
:func:`mbeacon.privacy.tradeoff.best_attack` of that epsilon is reported beside the measured figures.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import lsqr

from mbeacon.attack.defences import FULL_OBSERVED, Defence
from mbeacon.attack.metrics import auc, tpr_at_fpr
from mbeacon.attack.scenario import Scenario
from mbeacon.privacy.tradeoff import best_attack

#: Accounts pooled per coalition (``0``: all of them, one per victim).
COALITION_SIZES = (1, 2, 5, 20, 0)
#: Keys of a coalition row.
COALITION_KEYS = (
    "accounts",
    "accounting",
    "coalition_auc",
    "coalition_tpr_at_0_1pct_fpr",
    "coalition_tpr_at_1pct_fpr",
    "bound_epsilon",
    "bound_auc",
    "bound_tpr_at_0_1pct_fpr",
    "bound_tpr_at_1pct_fpr",
)
#: Mixed into the setting's seed: the coalition's own randomness (the other views' figures do not move).
_SEED_TAG = 7_919
#: Rows built at a time (memory: candidates x block booleans).
_BLOCK = 4096
#: Ridge damping of the least squares: keeps candidates no row touches at zero, not arbitrary.
_DAMP = 0.05


def design(scenario: Scenario, accounts: np.ndarray, q: int) -> sparse.csr_matrix:
    """The rows ``a_q`` of the ``accounts``' first ``q`` planned queries, account-major."""
    if scenario.profiles is None or scenario.cohort_rows is None:
        raise ValueError("the coalition attacker needs the candidates' profiles and the cohort's rows")
    plan = scenario.plan
    probes = plan.probes[accounts, :q].reshape(-1)
    lo = plan.lo[accounts, :q].reshape(-1)
    hi = plan.hi[accounts, :q].reshape(-1)
    return range_rows(scenario.profiles, scenario.cohort_rows[probes], lo, hi)


def range_rows(profiles: np.ndarray, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> sparse.csr_matrix:
    """Rows x candidates: 1 where candidate ``i``'s value in profile column ``cols[q]`` lies in
    ``[lo[q], hi[q]]`` (a column of -1, or a missing value, counts 0)."""
    known = cols >= 0
    cols = np.where(known, cols, 0)
    blocks = []
    for start in range(0, cols.size, _BLOCK):  # in blocks: candidates x rows dense would not fit
        part = slice(start, start + _BLOCK)
        values = profiles[:, cols[part]]  # candidates x rows
        inside = (values >= lo[part]) & (values <= hi[part]) & known[part]  # NaN: a missing value counts 0
        blocks.append(sparse.csr_matrix(inside.T, dtype=np.float64))
    if not blocks:
        return sparse.csr_matrix((0, profiles.shape[0]))
    return sparse.vstack(blocks, format="csr")


def reconstruct(rows: sparse.spmatrix, targets: np.ndarray) -> np.ndarray:
    """Each candidate's membership in ``[0, 1]`` from noisy subset sums ``rows @ x ~ targets``."""
    keep = np.isfinite(targets)
    if not keep.any():
        return np.zeros(rows.shape[1])
    a = sparse.csr_matrix(rows)[np.flatnonzero(keep)]
    x = lsqr(a, targets[keep], damp=_DAMP, atol=1e-8, btol=1e-8, iter_lim=2000)[0]
    return np.clip(x, 0.0, 1.0)


def targets_of(defence: Defence, counts: np.ndarray | None, answers: np.ndarray) -> np.ndarray:
    """Row targets: released counts where there are any, else the censored yes/no (NaN: drop)."""
    t = float(defence.threshold)
    out = np.where(answers == 1, t, np.where(answers == 0, (t - 1.0) / 2.0, np.nan))
    if counts is not None:
        out = np.where(np.isfinite(counts), counts, out)
    return out


def release(
    defence: Defence, alpha: np.ndarray, beta: np.ndarray, *, shared: bool, rng: np.random.Generator
) -> tuple[np.ndarray | None, np.ndarray]:
    """Counts (or None) and answers for ``accounts x q`` queries; ``shared``: one stream for all.

    A shared stream asks round-robin over the accounts (every account's first query, then every
    second, ...), as accounts working side by side on one cohort budget would.
    """
    k, q = alpha.shape
    if defence.name == "none":  # the unprotected beacon: the exact count (Beacon v2 count granularity)
        return np.asarray(alpha, dtype=np.float64), (alpha >= defence.threshold).astype(np.int8)
    if defence.name == "cohort-pmw":  # the cohort's one stream, each account within its quota
        out = defence.release_accounts(alpha, beta, rng, accounts=k)
        untested = out.flags < 0  # answered from the public synthetic state: nothing about the data
        return np.where(untested, np.nan, out.counts), np.where(untested, -1, out.answers).astype(np.int8)
    if shared:
        order = alpha.T.reshape(1, -1), beta.T.reshape(1, -1)
        counts, answers = release(defence, *order, shared=False, rng=rng)
        back = lambda m: None if m is None else m.reshape(q, k).T  # noqa: E731
        return back(counts), back(answers)
    if defence.name in FULL_OBSERVED:
        out = defence.release_all(alpha, beta, rng)
        return out.counts, out.answers
    obs = defence.release(alpha, beta, rng)
    if defence.flags_observed:  # SVT²: the flag and the public prior's answer give the yes/no
        from mbeacon.privacy.svt2 import svt2_release

        obs = svt2_release(obs, beta, defence.threshold)
    return None, obs


def coalition_epsilon(defence: Defence, accounts: int, *, shared: bool) -> float:
    """The coalition's epsilon: the cohort's under one budget (``shared``, or ``cohort-pmw``),
    ``accounts`` budgets otherwise.

    Infinite for a defence without a DP guarantee (``none``, ``suppression``, ``flip``): no bound.
    """
    if defence.epsilon is None:
        return math.inf
    return float(defence.epsilon) * (1 if shared or defence.name == "cohort-pmw" else accounts)


def coalition_view(
    scenario: Scenario,
    defence: Defence,
    q: int,
    *,
    sizes: tuple[int, ...] = COALITION_SIZES,
    repetitions: int = 1,
    shared: bool = False,
    rng: np.random.Generator,
) -> list[dict]:
    """The coalition figures at each number of accounts pooled (:data:`COALITION_KEYS`).

    ``defence`` must carry its query cap and cohort size. The accounts pooled are the victims'
    own accounts of a random subset of the victims (``0`` in ``sizes``: all). Figures average over
    ``repetitions`` draws of the subset and of the defence's randomness.
    """
    victims, q = scenario.victims, min(q, scenario.queries)
    labels = scenario.labels
    out = []
    for size in sizes:
        k = victims if size in (0, None) or size >= victims else int(size)
        aucs, low, one = [], [], []
        for _ in range(repetitions):
            # random order: the scenario lists members first, and the order decides who a shared
            # budget's first answers go to
            accounts = rng.permutation(victims)[:k]
            rows = design(scenario, accounts, q)
            alpha = scenario.alpha[accounts, :q]
            beta = scenario.beta[accounts, :q]
            counts, answers = release(defence, alpha, beta, shared=shared, rng=rng)
            scores = reconstruct(rows, targets_of(defence, counts, answers).reshape(-1))
            aucs.append(auc(scores, labels))
            low.append(tpr_at_fpr(scores, labels, 0.001))
            one.append(tpr_at_fpr(scores, labels, 0.01))
        epsilon = coalition_epsilon(defence, k, shared=shared)
        bound = best_attack(epsilon) if math.isfinite(epsilon) else None  # no DP: no bound
        out.append(
            {
                "accounts": k,
                "accounting": "cohort" if shared or defence.name == "cohort-pmw" else "account",
                "coalition_auc": float(np.mean(aucs)),
                "coalition_tpr_at_0_1pct_fpr": float(np.mean(low)),
                "coalition_tpr_at_1pct_fpr": float(np.mean(one)),
                "bound_epsilon": bound and bound.epsilon,
                "bound_auc": bound and bound.auc,
                "bound_tpr_at_0_1pct_fpr": bound and bound.tpr_at_fpr_0_1pct,
                "bound_tpr_at_1pct_fpr": bound and bound.tpr_at_fpr_1pct,
            }
        )
    return out


def coalition_figures(
    scenario: Scenario, defence: Defence, q: int, *, repetitions: int, seed: int | list[int]
) -> dict:
    """The evaluation row's coalition keys: every sweep row and the strongest coalition's figures
    (``bound_auc_coalition``: the bound at that coalition's epsilon)."""
    seeds = list(seed) if isinstance(seed, (list, tuple)) else [seed]
    rng = np.random.default_rng([*seeds, _SEED_TAG])  # noise-ok: evaluation, seeded
    rows = coalition_view(scenario, defence, q, repetitions=repetitions, rng=rng)
    best = max(rows, key=lambda r: r["coalition_auc"])
    return {
        "coalition": rows,
        "auc_coalition": best["coalition_auc"],
        "tpr_at_0_1pct_fpr_coalition": best["coalition_tpr_at_0_1pct_fpr"],
        "bound_auc_coalition": best["bound_auc"],
    }


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def coalition_table(rows: list[dict]) -> str:
    """The report's Markdown table: every setting's coalition sweep, measured beside the bound."""
    lines = [
        "| setting | accounting | accounts | AUC | TPR @ 0.1% FPR | TPR @ 1% FPR | bound epsilon "
        "| bound AUC | bound TPR @ 0.1% | bound TPR @ 1% |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for c in row.get("coalition") or []:
            lines.append(
                f"| {row['label']} | {c['accounting']} | {c['accounts']} | {_cell(c['coalition_auc'])} "
                f"| {_cell(c['coalition_tpr_at_0_1pct_fpr'])} | {_cell(c['coalition_tpr_at_1pct_fpr'])} "
                f"| {'-' if c['bound_epsilon'] is None else format(c['bound_epsilon'], 'g')} "
                f"| {_cell(c['bound_auc'])} | {_cell(c['bound_tpr_at_0_1pct_fpr'])} "
                f"| {_cell(c['bound_tpr_at_1pct_fpr'])} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""
