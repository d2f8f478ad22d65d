"""The batch path's lookups give the answers the per-id lookups give.

A batch resolves its probes with the cohort's hash index and finds each row's prior entry in a
per-process table (cohort row -> prior position, built at start-up); these tests hold both to the
plain per-id answers: the same rows, the same stored names, the same beta to the last bit, for ids
with EPIC v2 suffixes, probes the prior lacks (one of them non-ASCII) and probes the cohort lacks, and after
the cohort is replaced by a file with other rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.api import create_app
from mbeacon.beacon.answers import Principal
from mbeacon.beacon.engine import AnswerEngine
from mbeacon.beacon.query import MethylationQuery
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.priors import prior_from_blocks, save_prior

PATIENTS = 12
# the cohort: plain, suffixed (one CpG with two replicates), non-ASCII, and one the prior lacks
COHORT_IDS = ["cg00000001", "cg00000002_TC21", "cg00000003_TC11", "cg00000003_TC12", "cg0000000é", "rs999"]
PRIOR_IDS = ["cg00000001", "cg00000002", "cg00000003", "cg00000004"]  # a prior is ASCII
# questions are ASCII (the parser's probe pattern); the non-ASCII stored id is only in the table
ASKED = [*COHORT_IDS[:4], "rs999", "cg00000002", "cg00000003", "cg00000003_BC21"]


def _write_cohort(store: CohortStore, ids: list[str], seed: int) -> None:
    values = np.random.default_rng(seed).random((len(ids), PATIENTS)).astype(np.float32)
    store.write("c", [f"GSM{i}" for i in range(PATIENTS)], iter([(ids, values)]), replace=True)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> AnswerEngine:
    root = Path(tmp_path_factory.mktemp("lookups"))
    store = CohortStore(root / "store", create=True)
    _write_cohort(store, COHORT_IDS, 1)
    reference = np.random.default_rng(2).random((len(PRIOR_IDS), 30))
    save_prior(root / "store", prior_from_blocks([(PRIOR_IDS, reference)], name="p", quantiles=11))
    app = create_app(
        {
            "store": str(root / "store"),
            "database_url": f"sqlite:///{root}/ledger.sqlite3",
            "default_prior": "p",
            "defaults": {"mechanism": "svt2", "epsilon": 1.0, "c": 5},
        }
    )
    return app.config["MBEACON"].engine


def _query(probe: str, lo: float, hi: float) -> MethylationQuery:
    return MethylationQuery(probe, None, None, lo, hi, None)


_bound = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0])


@settings(max_examples=60, deadline=None)
@given(asked=st.lists(st.tuples(st.sampled_from(ASKED), _bound, _bound), min_size=2, max_size=25))
def test_a_batch_resolves_and_prices_each_probe_as_one_query_at_a_time(engine, asked) -> None:
    queries = [_query(p, lo, hi) for p, lo, hi in asked]
    principal = Principal("someone", "REGISTERED")
    resolved = engine._resolved(principal, queries)["c"]
    work = engine._work("c", resolved.indices, queries, "boolean", resolved=resolved)
    cohort = engine.cohort("c")
    for j, i in enumerate(resolved.indices):
        q = queries[i]
        row = cohort.probe_row(q.probe)
        assert (resolved.rows[j], resolved.probes[j]) == (row, cohort.probe_name(row))
        assert work.alpha[j] == cohort.count_one(row, q.lo, q.hi)
    # beta by the per-process table equals beta by the stored ids (the per-query path's lookup)
    lo = np.array([queries[i].lo for i in resolved.indices])
    hi = np.array([queries[i].hi for i in resolved.indices])
    by_id = cohort.n_patients * engine._probability("c", np.array(resolved.probes), lo, hi)
    assert work.beta == by_id.tolist()
    assert all(q.probe is not None for q in queries)


def test_the_table_marks_the_probes_the_prior_lacks_and_follows_a_replaced_cohort(engine, tmp_path) -> None:
    cohort = engine.cohort("c")
    table = engine._prior_rows("c")
    prior = engine.prior("c")
    assert table.tolist() == prior.index(cohort.probe_ids).tolist()
    assert table[cohort.probe_row("rs999")] == table[cohort.probe_row("cg0000000é")] == -1
    assert table[cohort.probe_row("cg00000003_TC12")] == prior.index(["cg00000003"])[0] >= 0
    # a new file with other rows: the next request's cohort gets its own table
    _write_cohort(CohortStore(engine.config.store), ["cg00000004", *COHORT_IDS[:2]], 3)
    engine._ids = None  # as a change of the datasets folder does (its mtime tick aside)
    engine.dataset_ids()
    replaced = engine._prior_rows("c")
    assert engine.cohort("c") is not cohort
    assert replaced.tolist() == prior.index(engine.cohort("c").probe_ids).tolist()
    assert replaced.tolist() != table.tolist()
