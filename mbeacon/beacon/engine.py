"""The answer engine: methylation queries in, SVT²-sanitised answers out, budget committed first.

For each request:

1. resolve the datasets the caller may see and the probe of each query in each dataset it targets;
   region and gene queries are first expanded into the probe queries they stand for
   (:mod:`mbeacon.beacon.regions`, refusing what does not resolve); a query whose probe no targeted
   dataset has refuses the whole request with :class:`UnknownProbe` (HTTP 400) before the ledger is
   touched: the probe lists are public, so the refusal reveals nothing and nonsense spends nothing. A query is
   answered by the targeted datasets that have its probe and skipped by the others;
2. compute, outside any lock, ``alpha`` (patients with a value in the range, from the HDF5 store)
   and ``beta = N * P_prior(range)`` with N the **public** cohort size (never a per-probe count of
   non-missing values: docs/privacy.md explains why that would leak); a cohort with several samples
   per patient counts only each patient's first ``b`` samples, ``b`` its contribution bound and the
   sensitivity of SVT² and noisy counts (:mod:`mbeacon.beacon.contribution`);
3. in one ledger transaction: lock every budget account involved (sorted, so no deadlock), take
   cached answers, run SVT² over the rest from the saved state (:mod:`mbeacon.beacon.release`),
   store the new state, the new cached answers and the audit rows; commit;
4. only then return the answers.

If an account is already exhausted when the request starts and its policy is ``refuse``, the whole
transaction is rolled back (nothing spent, nothing cached) and :class:`BudgetExhausted` is raised
(HTTP 429); a batch that runs out part-way returns the answered queries and marks the rest refused.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from mbeacon.beacon.answers import (
    Answer,
    AnswerSet,
    BudgetExhausted,
    DatasetUnavailable,
    Principal,
    UnknownProbe,
)
from mbeacon.beacon.budget import Account, AccountParams, cohort_budget, unopened_budget
from mbeacon.beacon.config import ConfigError, ServiceConfig
from mbeacon.beacon.contribution import Sensitivity, TruncatedCohort, sensitivity_of, serving_cohort
from mbeacon.beacon.guarantee import check_copies, check_prior_is_public, copies_by_content, guarantee
from mbeacon.beacon.ledger.database import Tx
from mbeacon.beacon.ledger.ledger import AuditRow, Ledger
from mbeacon.beacon.overlap import find_overlaps, overlap_message
from mbeacon.beacon.query import MethylationQuery
from mbeacon.beacon.regions import Expansion, Located, Locators, expand
from mbeacon.beacon.release import Work, audit_text, query_key, release
from mbeacon.beacon.sanitisers import PMWSource, account_params, sanitiser_of
from mbeacon.beacon.sanitisers.cohort_pmw import COHORT_HOLDER
from mbeacon.privacy.svt2 import SVT2State
from mbeacon.store.cohorts import Cohort, CohortStore, Counts
from mbeacon.store.errors import DataError
from mbeacon.store.priors import NoPriorChosen, Prior, choose_prior, load_prior
from mbeacon.store.probe_ids import case_hint

log = logging.getLogger("mbeacon.engine")

#: Cohort rows per block when the prior's position of every row is looked up (bounds the decoded ids).
_INDEX_BLOCK = 65_536
#: How long after a change of the store's datasets folder its listing and open cohorts are not reused.
SETTLE_NS = 1_000_000_000


@dataclass
class _Resolved:
    """Per dataset: the queries it answers, the probe each resolved to and that probe's row.

    The probe is the stored id of the row, whatever spelling found it (``cg00000029`` or
    ``cg00000029_TC21``): the cache key and the audit name the row, so every spelling of one CpG is
    one question."""

    indices: list[int]
    probes: list[str | None]  # never None here; typed as _work's probes
    rows: list[int]


class AnswerEngine:
    """Answers queries for one process; opens cohorts and priors lazily (after fork)."""

    def __init__(self, config: ServiceConfig, ledger: Ledger) -> None:
        self.config = config
        self.ledger = ledger
        self.store = CohortStore(config.store)
        self._cohorts: dict[str, Cohort | TruncatedCohort] = {}
        self._sensitivities: dict[str, Sensitivity] = {}
        self._priors: dict[str, Prior] = {}
        #: per dataset: (cohort, prior, the prior's position of each cohort row); see _prior_rows
        self._prior_positions: dict[str, tuple[Counts, Prior, np.ndarray]] = {}
        self._ids: tuple[int, list[str]] | None = None
        self._datasets_dir = str(self.store.root / "datasets")
        self._lock = threading.Lock()
        self._locators = Locators(self.store.root)
        self._copies_of: tuple[list[str], dict[str, list[str]]] | None = None
        #: Datasets of the store that are not served, and why (a file holding another's samples).
        self.refused: dict[str, str] = {}
        self._overlaps_of: tuple[tuple[tuple[str, ...], int], list[str]] | None = None

    # --- datasets and priors -------------------------------------------------------------------

    def dataset_ids(self) -> list[str]:
        """The store's datasets, re-listed only when the datasets folder changes (one stat a request).

        Every store write publishes by renaming into that folder, which changes its mtime: the
        cohorts opened so far are then dropped, so a replaced file is served from the next request
        on without a restart (requests already running finish on the old file, whose inode lives on).
        Timestamps have a coarse tick, and two changes within one tick (rsync's temporary file
        created, then renamed) leave one mtime: so for a second after a change nothing is kept.
        """
        stamp = os.stat(self._datasets_dir).st_mtime_ns
        settling = abs(time.time_ns() - stamp) < SETTLE_NS
        if self._ids is None or self._ids[0] != stamp or settling:
            ids = self.store.ids()
            with self._lock:
                self._cohorts = {}
            self._ids = (stamp, self._without_overlaps(ids, stamp))
        return self._ids[1]

    def _without_overlaps(self, ids: list[str], stamp: int) -> list[str]:
        """``ids`` without the files that hold samples of a file listed before them (overlap.py): such
        a file is not served, whether it was there at start-up or ingested since, and the reason is
        kept in :attr:`refused` (``mbeacon serve`` and ``config check`` refuse to start with one).
        Worked out again whenever the datasets folder changes (a replaced file may overlap now)."""
        key = (tuple(ids), stamp)
        if self._overlaps_of is None or self._overlaps_of[0] != key:
            files: dict[str, list[str]] = defaultdict(list)
            for dataset in ids:
                try:
                    files[self.store.info(dataset).checksum].append(dataset)
                except DataError:  # a damaged file: refused when it is asked, compared with nothing
                    continue
            groups = sorted(files.values())
            refused: dict[str, str] = {}
            for overlap in find_overlaps(groups, self.store.open):
                message = overlap_message(overlap)
                for dataset in next(g for g in groups if g[0] == overlap.second):
                    if dataset not in refused:
                        refused[dataset] = message
                        log.error("dataset not served: %s", message)
            self.refused = refused
            self._overlaps_of = (key, [d for d in ids if d not in refused])
        return self._overlaps_of[1]

    def visible(self, principal: Principal) -> list[str]:
        return [d for d in self.dataset_ids() if principal.may_see(self.config.policy(d))]

    def cohort(self, dataset: str) -> Counts:
        """The dataset as it is counted: truncated at its contribution bound (contribution.py)."""
        with self._lock:
            if dataset not in self._cohorts:
                raw = self.store.open(dataset)
                raw.populate = True  # a serving process reads rows all over the file
                sensitivity = sensitivity_of(dataset, raw.info, self.config.policy(dataset))
                self._sensitivities[dataset] = sensitivity
                self._cohorts[dataset] = serving_cohort(raw, sensitivity)
            return self._cohorts[dataset]

    def sensitivity(self, dataset: str) -> Sensitivity:
        """The contribution bound ``dataset`` is served at, and where it came from."""
        self.cohort(dataset)
        return self._sensitivities[dataset]

    def prior_name(self, dataset: str) -> str:
        """The dataset's prior; :class:`NoPriorChosen` saying where to name one if it has none."""
        try:
            return choose_prior(self.config.store, self.config.prior_for(dataset)).name
        except NoPriorChosen as error:
            raise NoPriorChosen(
                f"dataset {dataset!r} has no prior: set prior = NAME in its [datasets.{dataset}] table or "
                f"default_prior ({error})",
                error.names,
            ) from None

    def prior(self, dataset: str) -> Prior:
        name = self.prior_name(dataset)
        with self._lock:
            if name not in self._priors:
                self._priors[name] = load_prior(self.config.store, name)
            return self._priors[name]

    def check(self) -> None:
        """Fail at start-up, with a clear message, if a dataset cannot be served. Reads the store only:
        the ledger is not touched. What a worker only logs and ``mbeacon serve`` refuses (a table that
        names no dataset, a file holding another's samples) is :func:`~.preflight.store_problems`."""
        for dataset in self.dataset_ids():
            policy = self.config.policy(dataset)
            self.cohort(dataset).info  # noqa: B018 - opens and validates the file
            self.cohort(dataset).prepare_lookups()  # built at start-up: no request waits for them
            if sanitiser_of(policy).spends_budget:
                self._prior_rows(dataset)
                check_prior_is_public(dataset, self.prior(dataset), self.dataset_ids())
            self._servable(dataset)
        check_copies(self._copies(), self.config.policy, lambda d: self.new_params(d).to_storage())

    def _servable(self, dataset: str) -> None:
        """:class:`ConfigError` if the dataset's sanitiser cannot serve it at its contribution bound."""
        try:
            sanitiser_of(self.config.policy(dataset)).check_servable(dataset, self.sensitivity(dataset).bound)
        except ValueError as error:
            raise ConfigError(str(error)) from None

    def new_params(self, dataset: str) -> AccountParams:
        policy = self.config.policy(dataset)
        self._servable(dataset)
        return account_params(policy, sensitivity=self.sensitivity(dataset).bound)

    # --- answering -----------------------------------------------------------------------------

    def _targets(self, principal: Principal, queries: list[MethylationQuery]) -> dict[str, list[int]]:
        visible = self.visible(principal)
        visible_set = set(visible)
        targets: dict[str, list[int]] = defaultdict(list)
        for i, q in enumerate(queries):
            wanted = q.datasets if q.datasets is not None else visible
            for dataset in wanted:
                if dataset not in visible_set:
                    raise DatasetUnavailable(f"dataset {dataset!r} does not exist or is not available to you")
                targets[dataset].append(i)
        return targets

    def located(self, dataset: str) -> Located:
        """How the probes of ``dataset`` are found by region and by gene (regions.py)."""
        return self._locators.of(dataset, self.cohort(dataset))

    def _expand(self, principal: Principal, queries: list[MethylationQuery]) -> Expansion:
        """Region and gene queries as the single-probe queries they stand for (regions.py)."""
        if all(q.probe is not None for q in queries):  # most requests: nothing to expand
            return Expansion(queries)
        return expand(queries, visible=self.visible(principal), cohort=self.cohort, locators=self._locators,
                      max_total=self.config.max_batch)  # fmt: skip

    def _resolved(self, principal: Principal, queries: list[MethylationQuery]) -> dict[str, _Resolved]:
        """Each targeted dataset's queries whose probe it has; :class:`UnknownProbe` (naming the
        field, and the query's index in a batch) if a query's probe is in none of its datasets.

        Runs before the ledger is touched, so a refused request spends nothing and records nothing.
        """
        targets = self._targets(principal, queries)
        resolved: dict[str, _Resolved] = {}
        found = [False] * len(queries)
        for dataset in sorted(targets):
            cohort = self.cohort(dataset)
            indices = targets[dataset]
            if len(indices) == 1:  # most requests: no arrays, no loop
                i = indices[0]
                row = cohort.probe_row(queries[i].probe_id)
                if row >= 0:
                    resolved[dataset] = _Resolved(indices, [cohort.probe_name(row)], [row])
                    found[i] = True
                continue
            found_rows = cohort.probe_index(np.array([queries[i].probe for i in indices]))
            known = np.flatnonzero(found_rows >= 0)
            kept = _Resolved([indices[k] for k in known.tolist()], [], found_rows[known].tolist())
            kept.probes = list(cohort.probe_names(found_rows[known]))
            for i in kept.indices:
                found[i] = True
            if kept.indices:
                resolved[dataset] = kept
        if not all(found):
            targeted = defaultdict(list)
            for dataset, indices in targets.items():
                for i in indices:
                    targeted[i].append(dataset)
            missing = [i for i, ok in enumerate(found) if not ok and targeted[i]]
            if missing:
                raise self._unknown(queries, missing[0], sorted(targeted[missing[0]]))
        return resolved

    def _unknown(self, queries: list[MethylationQuery], index: int, datasets: list[str]) -> UnknownProbe:
        """The refusal of query ``index``, whose probe none of ``datasets`` (all visible to the
        caller) has: the field named as the parser names it, and a hint where one helps."""
        q = queries[index]
        where = f"query.requestParameters[{index}]" if len(queries) > 1 else "query.requestParameters"
        shown = ", ".join(repr(d) for d in datasets[:5]) + (
            f" and {len(datasets) - 5} more" if len(datasets) > 5 else ""
        )
        of = f"dataset {shown}" if len(datasets) == 1 else f"any of the datasets {shown}"
        message = f"{where}.probeId: {q.probe!r} is not a probe of {of}"
        lower = case_hint(q.probe_id)
        if lower != q.probe and any(self.cohort(d).probe_row(lower) >= 0 for d in datasets):
            message += f" (probe ids are case-sensitive: did you mean {lower!r}?)"
        if len(queries) > 1:
            message += "; the batch is refused whole (nothing was answered or spent)"
        return UnknownProbe(message)

    def _work(
        self, dataset: str, indices: list[int], queries: list[MethylationQuery], granularity: str,
        *, read_data: bool = True, resolved: _Resolved | None = None,
    ) -> Work:  # fmt: skip
        """alpha, beta, cache keys and audit texts of the queries ``indices`` on ``dataset``;
        ``resolved`` (from :meth:`_resolved`) saves looking their probes up again."""
        cohort = self.cohort(dataset)
        policy = self.config.policy(dataset)
        qs = [queries[i] for i in indices]
        if resolved is not None:
            probes = resolved.probes
            rows: list[int] | None = resolved.rows
        else:  # not resolved beforehand: an unknown probe counts 0
            probes, rows = [q.probe for q in qs], None
        # N public: never a per-probe count of non-missing values (see the module docstring)
        with_beta = sanitiser_of(policy).spends_budget or not read_data
        if len(qs) == 1:  # most requests: plain floats, no arrays (their set-up cost more than the work)
            q, probe = qs[0], probes[0]
            n = cohort.n_patients
            if not read_data:
                alpha = [0.0]
            elif rows is not None:
                alpha = [float(cohort.count_one(rows[0], q.lo, q.hi))]
            else:
                alpha = [float(self._alpha_one(cohort, probe, q.lo, q.hi))]
            beta = [n * self._probability_one(dataset, probe, q.lo, q.hi) if with_beta else 0.0]
        else:
            ids = np.array([p or "" for p in probes])
            lo = np.array([q.lo for q in qs], dtype=np.float64)
            hi = np.array([q.hi for q in qs], dtype=np.float64)
            if not read_data:
                alpha = [0.0] * len(qs)
            elif rows is not None:
                alpha = (
                    cohort.count_in_range(np.array(rows, dtype=np.int64), lo, hi).astype(np.float64).tolist()
                )
            else:
                alpha = self._alpha(cohort, ids, lo, hi).tolist()
            beta = (
                (cohort.n_patients * self._probability(dataset, ids, lo, hi, rows)).tolist()
                if with_beta
                else [0.0] * len(qs)
            )
        version = cohort.info.checksum[:16]
        keys = [query_key(version, p, q, granularity) for p, q in zip(probes, qs, strict=True)]
        texts = [audit_text(q, p, granularity) for p, q in zip(probes, qs, strict=True)]
        ranges = [(q.lo, q.hi) for q in qs]
        return Work(dataset, policy, indices, keys, probes, alpha, beta, texts, ranges)

    @staticmethod
    def _alpha(cohort: Counts, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Patients in range per query; 0 for probes the cohort lacks (one store call when it has all)."""
        rows = cohort.probe_index(ids)
        known = rows >= 0
        if known.all():
            return cohort.count_in_range(rows, lo, hi).astype(np.float64)
        alpha = np.zeros(len(ids), dtype=np.float64)
        if known.any():
            alpha[known] = cohort.count_in_range(rows[known], lo[known], hi[known])
        return alpha

    @staticmethod
    def _alpha_one(cohort: Counts, probe: str | None, lo: float, hi: float) -> int:
        """:meth:`_alpha` of one query."""
        row = cohort.probe_row(probe or "")
        return cohort.count_one(row, lo, hi) if row >= 0 else 0

    def _prior_rows(self, dataset: str) -> np.ndarray:
        """The prior's position of every row of ``dataset`` (-1 where the prior lacks the probe):
        what :meth:`Prior.index` finds for the row's stored id, looked up once per process and per
        (cohort, prior) pair rather than per query. :class:`NoPriorChosen` as :meth:`prior`."""
        cohort, prior = self.cohort(dataset), self.prior(dataset)
        with self._lock:
            held = self._prior_positions.get(dataset)
        if held is not None and held[0] is cohort and held[1] is prior:
            return held[2]
        stored = cohort.stored_probe_ids  # every row, once, in blocks (each decoded to str for the prior)
        stored = stored.astype(f"S{max(int(np.char.str_len(stored).max()), 1)}")  # no padding to decode
        blocks = range(0, len(stored), _INDEX_BLOCK)
        table = np.concatenate([prior.index(stored[start : start + _INDEX_BLOCK]) for start in blocks])
        with self._lock:
            self._prior_positions[dataset] = (cohort, prior, table)
        return table

    def _probability(
        self, dataset: str, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray, rows: list[int] | None = None
    ) -> np.ndarray:
        """P_prior(range) per query; the public uniform prior on [0, 1] where the prior lacks the probe,
        or for an unprotected dataset that has no prior configured. ``rows`` (the cohort rows of
        ``ids``) finds the prior's positions in the per-process table instead of by id."""
        try:
            if rows is not None:
                positions = self._prior_rows(dataset)[np.asarray(rows, dtype=np.int64)]
                probability = self.prior(dataset).probability(positions, lo, hi)
            else:
                probability = self.prior(dataset).probability(ids, lo, hi)
        except NoPriorChosen:  # allowed only for an unprotected dataset
            if sanitiser_of(self.config.policy(dataset)).spends_budget:
                raise
            return np.clip(hi - lo, 0.0, 1.0)
        missing = np.isnan(probability)
        if missing.any():
            probability = np.where(missing, np.clip(hi - lo, 0.0, 1.0), probability)
        return probability

    def _probability_one(self, dataset: str, probe: str | None, lo: float, hi: float) -> float:
        """:meth:`_probability` of one query, the same float."""
        try:
            probability = self.prior(dataset).probability_one(probe or "", lo, hi)
        except NoPriorChosen:
            if sanitiser_of(self.config.policy(dataset)).spends_budget:
                raise
            probability = math.nan
        return min(max(hi - lo, 0.0), 1.0) if math.isnan(probability) else probability

    def answer(
        self, principal: Principal, queries: list[MethylationQuery], granularity: str = "boolean"
    ) -> AnswerSet:
        """Answer every (query, dataset) pair; the ledger is committed before this returns."""
        expansion = self._expand(principal, queries)
        queries = expansion.queries
        targets = self._resolved(principal, queries)
        returned = self._granularity(principal, granularity, list(targets))
        work = [self._work(d, r.indices, queries, returned, resolved=r) for d, r in targets.items()]
        # a shared cohort state is locked before any holder's account, and cohorts in one order, so
        # that two requests over the same cohorts never wait for each other's locks in a cycle
        work.sort(key=lambda w: (self.cohort_key(w.dataset), w.dataset))
        answers: list[Answer] = []
        budgets: dict[str, dict] = {}
        spent: dict[str, int] = {}
        audit: list[AuditRow] = []
        try:
            with self.ledger.db.transaction() as tx:
                for w in work:
                    holder = principal.budget_holder(w.policy.scope)
                    cohort = self._lock_cohort(tx, w.dataset)  # None unless the state is the cohort's
                    # a holder's quota of a shared state is one account for every id of the cohort
                    filed = w.dataset if cohort is None else cohort.dataset
                    account, cached = self.ledger.lock_account_and_answers(
                        tx, holder, filed, w.keys, functools.partial(self.new_params, w.dataset)
                    )
                    runs_on = cohort or account
                    pmw: PMWSource | None = None
                    if sanitiser_of(runs_on.params.mechanism).learns:  # read under the lock just taken
                        pmw = self._pmw_source(tx, runs_on.principal, runs_on.dataset)
                    released, new_rows, state_after, pmw_new = release(
                        account, w, cached, returned, pmw, cohort
                    )
                    if (
                        account.exhausted
                        and w.policy.on_exhausted == "refuse"
                        and any(a.answered_from == "refused" for a in released)
                    ):
                        raise _Rollback(w.dataset, self._budget(account, cohort))
                    self.ledger.save_account(tx, runs_on, state_after)
                    if pmw_new:  # one update per positive spent, under the same lock and commit
                        self.ledger.store_pmw_updates(tx, runs_on, pmw_new)
                    gained = state_after.count - runs_on.state.count
                    if cohort is not None:  # the holder's quota: the positives its queries spent
                        state_after = SVT2State(0.0, 0.0, account.state.count + gained)
                        self.ledger.save_account(tx, account, state_after)
                        cohort = Account(cohort.principal, cohort.dataset, cohort.params,
                                         SVT2State(cohort.state.z1, cohort.state.z2,
                                                   cohort.state.count + gained), cohort.created)  # fmt: skip
                    self.ledger.store_answers(tx, holder, filed, new_rows)
                    audit += [
                        AuditRow("query", principal.name, holder, w.dataset, text, a.answered_from, a.cached)
                        for a, text in zip(released, w.audit_texts, strict=True)
                    ]
                    answers.extend(released)
                    after = Account(holder, w.dataset, account.params, state_after, account.created)
                    budgets[w.dataset] = self._budget(after, cohort)
                    spent[w.dataset] = gained
                self.ledger.append_audit(tx, audit)
        except _Rollback as rollback:
            dataset, budget = rollback.args
            holder = principal.budget_holder(self.config.policy(dataset).scope)
            refusal = AuditRow("refused", principal.name, holder, dataset, detail="budget exhausted")
            with self.ledger.db.transaction() as tx:
                self.ledger.append_audit(tx, [refusal])
            raise BudgetExhausted(dataset, budget) from None
        answers.sort(key=lambda a: (a.query_index, a.dataset))
        refused = sum(a.answered_from == "refused" for a in answers)
        return expansion.restore(AnswerSet(answers, budgets, returned, spent, refused, len(queries)))

    def answer_from_prior(self, principal: Principal, queries: list[MethylationQuery]) -> AnswerSet:
        """Test-mode answers: the public prior's answer to every query; no data read, no ledger, free."""
        expansion = self._expand(principal, queries)
        queries = expansion.queries
        targets = self._resolved(principal, queries)
        answers, budgets = [], {}
        for dataset, resolved in targets.items():
            w = self._work(dataset, resolved.indices, queries, "boolean", read_data=False, resolved=resolved)
            threshold = self.new_params(dataset).threshold
            answers += [
                Answer(i, dataset, probe, bool(b >= threshold), "prior")
                for i, probe, b in zip(w.query_index, w.probes, w.beta, strict=True)
            ]
            budgets[dataset] = {"testMode": True}
        answers.sort(key=lambda a: (a.query_index, a.dataset))
        return expansion.restore(AnswerSet(answers, budgets, "boolean", queries=len(queries)))

    def _granularity(self, principal: Principal, requested: str, datasets: list[str]) -> str:
        """Count answers only for CONTROLLED callers on datasets with noisy counts enabled."""
        if requested == "boolean" or principal.tier != "CONTROLLED":
            return "boolean"
        policies = [self.config.policy(d) for d in datasets]
        sanitisers = [sanitiser_of(p) for p in policies]
        if policies and all(
            (p.count_epsilon > 0 and s.spends_budget) or s.releases_counts
            for p, s in zip(policies, sanitisers, strict=True)
        ):
            return "count"
        return "boolean"

    def _copies(self) -> dict[str, list[str]]:
        """The ids serving one cohort file, for the files served under more than one id (cached per
        listing of the store)."""
        ids = self.dataset_ids()
        held = self._copies_of
        if held is None or held[0] is not ids:  # a new listing: perhaps new files
            self._copies_of = (ids, copies_by_content(ids, lambda d: self.cohort(d).info.checksum))
        return self._copies_of[1] if self._copies_of is not None else {}

    def guarantee(self, dataset: str) -> dict:
        """What the dataset's protection promises, and to whom (:func:`~.guarantee.guarantee`)."""
        policy = self.config.policy(dataset)
        shared = sanitiser_of(policy).shared
        cohort = self.ledger.account(COHORT_HOLDER, self.cohort_key(dataset)) if shared else None
        return guarantee(policy, cohort, lambda: self.new_params(dataset))

    def cohort_key(self, dataset: str) -> str:
        """The cohort a dataset's patients form: the unit a shared sanitiser's state belongs to. Ids that
        serve one file (the same checksum) are one cohort, filed under the first of them."""
        for ids in self._copies().values():
            if dataset in ids:
                return ids[0]
        return dataset

    def _lock_cohort(self, tx: Tx, dataset: str) -> Account | None:
        """The cohort's shared state, locked until ``tx`` ends (opened on first use), when the dataset's
        sanitiser keeps one; else None."""
        if not sanitiser_of(self.config.policy(dataset)).shared:
            return None
        return self.ledger.lock_account(
            tx, COHORT_HOLDER, self.cohort_key(dataset), lambda: self.new_params(dataset)
        )

    def _budget(self, account: Account, cohort: Account | None) -> dict:
        """What the holder is told of its budget; with a shared state, its quota and the cohort's."""
        return account.budget() if cohort is None else _with_cohort(account.budget(), cohort, cohort.params)

    def _pmw_source(self, tx: Tx, holder: str, dataset: str) -> PMWSource:
        """What a learning sanitiser reads for ``holder`` on ``dataset`` inside the transaction ``tx``: the
        account's recorded updates, the cohort's size and the prior's mass, each when it is needed."""
        return PMWSource(
            functools.partial(self.ledger.pmw_updates, tx, holder, dataset),
            lambda: self.cohort(dataset).n_patients,
            functools.partial(self._probability, dataset),
        )

    def budget_of(self, principal: Principal, dataset: str) -> dict:
        """Budget state and the parameters it was promised under (frozen when it was opened)."""
        policy = self.config.policy(dataset)
        holder = principal.budget_holder(policy.scope)
        shared = sanitiser_of(policy).shared
        account = self.ledger.account(holder, self.cohort_key(dataset) if shared else dataset)
        params = (
            account.params
            if account is not None
            else self.ledger.params_for_new(holder, dataset, lambda: self.new_params(dataset))
        )
        budget = account.budget() if account is not None else unopened_budget(params)
        if shared:
            cohort = self.ledger.account(COHORT_HOLDER, self.cohort_key(dataset))
            budget = _with_cohort(budget, cohort, params)
        return {
            **budget,
            "mechanism": params.mechanism,
            "epsilon1": params.epsilon1,
            "epsilon2": params.epsilon2,
            "countEpsilon": params.count_epsilon,
            "threshold": params.threshold,
            "variant": params.variant,
            "sensitivity": params.sensitivity,
            "marginAbove": params.margin_above,
            "marginBelow": params.margin_below,
            "epsilon3": params.epsilon3,
            "margin": params.margin,
            "quota": params.quota,
        }


def _with_cohort(budget: dict, cohort: Account | None, params: AccountParams) -> dict:
    """A holder's budget (its quota) with the shared state's (``cohort``, None while no one has asked):
    the epsilon spent is the cohort's."""
    shared = cohort_budget(cohort, params)
    return {**budget, "epsilonSpent": shared["epsilonSpent"], "cohort": shared}


class _Rollback(Exception):
    """Raised inside the transaction to undo it (an exhausted account refused the request)."""
