"""``online-pmw`` through the answer engine and the ledger (in process, on the demo store).

Checked: a TOP records one update per positive in the account's transaction; a later, different
range at the same probe is answered from the updated synthetic distribution for free (where the
bare prior would have spent a positive), also within one batch; a repeated query is cached; a reset
deletes the updates with the account; an account never spends more than ``c`` positives or its
epsilon; an exhausted account on a ``prior`` dataset answers from its synthetic distribution; a
dataset with a contribution bound above 1 is refused at start-up. Served over HTTP by real gunicorn
in ``test_sanitisers_service.py`` and ``test_server_guarantees.py``.
"""

from __future__ import annotations

import math

import ledger_checks
import pytest

from mbeacon.beacon.answers import BudgetExhausted, Principal
from mbeacon.beacon.config import ConfigError, load_config
from mbeacon.beacon.engine import AnswerEngine
from mbeacon.beacon.ledger import Ledger
from mbeacon.beacon.query import MethylationQuery
from mbeacon.store.demo import ensure_demo

DATASET = "demo-cohort"
T = 5
CAROL = Principal("carol", "CONTROLLED")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


def _engine(demo, tmp_path, **policy) -> AnswerEngine:
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    defaults = {"mechanism": "online-pmw", "epsilon": 100.0, "c": 3, "threshold": T, **policy}
    config = load_config(None, overrides={"store": str(demo.store), "database_url": url,
                                          "default_prior": demo.prior, "defaults": defaults})  # fmt: skip
    engine = AnswerEngine(config, Ledger.open(url))
    engine.check()
    return engine


@pytest.fixture(scope="module")
def clear(demo, tmp_path_factory) -> list[tuple[str, float, float, int, float]]:
    """Contested ranges holding >= 8 patients, widened by 0.002 each side: ``(probe, lo, hi, alpha of
    the narrow range, beta of the wide one)``. The data disagree clearly with the prior on both."""
    engine = _engine(demo, tmp_path_factory.mktemp("probe"))
    cohort = engine.cohort(DATASET)
    out = []
    for q in ledger_checks.contested_queries(demo.store, demo.prior, DATASET):
        probe, lo, hi = q["probeId"], q["minValue"], q["maxValue"]
        alpha = cohort.count_one(cohort.probe_row(probe), lo, hi)
        wide = (max(lo - 0.002, 0.0), min(hi + 0.002, 1.0))
        beta = cohort.n_patients * engine._probability_one(DATASET, probe, *wide)
        if alpha >= 8 and beta < 1.0:
            out.append((probe, lo, hi, alpha, beta))
    assert len(out) >= 10
    return out


def _q(probe: str, lo: float, hi: float) -> MethylationQuery:
    return MethylationQuery(probe, None, None, lo, hi, None)


def _updates(engine: AnswerEngine, holder: str = "user:carol") -> list[tuple]:
    with engine.ledger.db.transaction(write=False) as tx:
        tx.execute("SELECT seq, probe, lo, hi, value FROM pmw_updates WHERE principal = ? ORDER BY seq",
                   (holder,))  # fmt: skip
        return tx.fetchall()


def test_a_different_range_at_an_updated_probe_is_answered_from_the_update_for_free(demo, tmp_path, clear):
    engine = _engine(demo, tmp_path)
    probe, lo, hi, alpha, beta = clear[0]
    first = engine.answer(CAROL, [_q(probe, lo, hi)], "count")
    (a,) = first.answers
    assert (a.answered_from, a.exists) == ("data", True) and abs(a.count - alpha) <= 2
    assert first.positives_spent == {DATASET: 1}
    ((seq, p, u_lo, u_hi, value),) = _updates(engine)
    assert (seq, p, u_lo, u_hi) == (0, probe, lo, hi)
    assert value * engine.cohort(DATASET).n_patients == pytest.approx(a.count, abs=0.5)
    # the wider range: the prior expects < 1 patient (a TOP under SVT²), the synthetic distribution
    # holds the released count: a free yes with the synthetic count
    wide = _q(probe, max(lo - 0.002, 0.0), min(hi + 0.002, 1.0))
    second = engine.answer(CAROL, [wide], "count")
    (b,) = second.answers
    assert (b.answered_from, b.exists, b.cached) == ("prior", True, False)
    assert beta < T and abs(b.count - a.count) <= 2
    assert second.positives_spent == {DATASET: 0} and len(_updates(engine)) == 1
    # the same question again: the cached answer, identical
    (c,) = engine.answer(CAROL, [wide], "count").answers
    assert c.cached and (c.exists, c.answered_from, c.count) == (b.exists, b.answered_from, b.count)
    # another holder's account has its own distribution: the wide range is a TOP for them
    (d,) = engine.answer(Principal("dave", "CONTROLLED"), [wide], "count").answers
    assert d.answered_from == "data"
    # a reset deletes the account's updates with it: the wide range is a TOP again
    assert engine.ledger.reset_account("user:carol", DATASET, actor="test")
    assert _updates(engine) == [] and len(_updates(engine, "user:dave")) == 1
    (e,) = engine.answer(CAROL, [wide], "count").answers
    assert e.answered_from == "data" and [row[:2] for row in _updates(engine)] == [(0, probe)]


def test_a_batch_sees_its_own_earlier_updates(demo, tmp_path, clear):
    engine = _engine(demo, tmp_path)
    probe, lo, hi, _, _ = clear[1]
    wide = _q(probe, max(lo - 0.002, 0.0), min(hi + 0.002, 1.0))
    answers = engine.answer(CAROL, [_q(probe, lo, hi), wide]).answers
    assert [a.answered_from for a in answers] == ["data", "prior"]
    assert [a.exists for a in answers] == [True, True]
    assert len(_updates(engine)) == 1


def test_an_account_spends_at_most_c_positives_and_its_epsilon(demo, tmp_path, clear):
    engine = _engine(demo, tmp_path)
    data = 0
    with pytest.raises(BudgetExhausted) as refused:
        for probe, lo, hi, _, _ in clear:
            (a,) = engine.answer(CAROL, [_q(probe, lo, hi)]).answers
            data += a.answered_from == "data"
    assert data == 3 and refused.value.budget["positivesUsed"] == 3
    account = engine.ledger.account("user:carol", DATASET)
    assert account is not None and account.state.count == 3
    assert math.isclose(account.epsilon_spent(), 100.0) and account.epsilon_spent() <= 100.0 + 1e-9
    assert [row[0] for row in _updates(engine)] == [0, 1, 2]  # one update per positive


def test_an_exhausted_account_answers_from_its_synthetic_distribution(demo, tmp_path, clear):
    engine = _engine(demo, tmp_path, c=1, on_exhausted="prior")
    probe, lo, hi, _, _ = clear[2]
    (a,) = engine.answer(CAROL, [_q(probe, lo, hi)]).answers
    assert a.answered_from == "data"
    wide = _q(probe, max(lo - 0.002, 0.0), min(hi + 0.002, 1.0))
    other_probe, o_lo, o_hi, _, _ = clear[3]
    wide_answer, other = engine.answer(CAROL, [wide, _q(other_probe, o_lo, o_hi)]).answers
    assert (wide_answer.answered_from, wide_answer.exists) == ("prior", True)  # the update's answer
    assert (other.answered_from, other.exists, other.exhausted) == ("prior", False, True)  # the prior's


def test_online_pmw_is_refused_at_a_contribution_bound_above_one(demo, tmp_path):
    with pytest.raises(ConfigError, match="contribution bound 1"):
        _engine(demo, tmp_path, contribution_bound=2)


def test_a_gene_query_is_answered_probe_by_probe_from_each_probes_distribution(demo, tmp_path):
    """A gene query expands to its probes before the ledger (regions.py): each probe is one query of
    the stream, and a repeat of the gene query is answered from the cache, spending nothing."""
    engine = _engine(demo, tmp_path, c=50, epsilon=10.0, threshold=1)
    gene = MethylationQuery(None, None, None, 0.4, 0.6, None, gene="DEMO2")
    first = engine.answer(CAROL, [gene], "count")
    probes = [a.probe for a in first.answers]
    assert len(probes) >= 2 and len(set(probes)) == len(probes)
    spent = first.positives_spent[DATASET]
    assert [row[1] for row in _updates(engine)] == [
        a.probe for a in first.answers if a.answered_from == "data"
    ]
    assert spent == len(_updates(engine))
    again = engine.answer(CAROL, [gene], "count")
    assert all(a.cached for a in again.answers) and again.positives_spent == {DATASET: 0}
    assert [(a.exists, a.count) for a in again.answers] == [(a.exists, a.count) for a in first.answers]


def test_whole_and_point_ranges_are_answered(demo, tmp_path, clear):
    """``[0, 1]`` (no bounds given) and a point range ``[x, x]`` are ranges like any other."""
    engine = _engine(demo, tmp_path)
    probe, lo, _, _, _ = clear[4]
    whole, point = engine.answer(CAROL, [_q(probe, 0.0, 1.0), _q(probe, lo, lo)], "count").answers
    n = engine.cohort(DATASET).n_patients
    assert (whole.exists, whole.answered_from) == (True, "prior") and whole.count == n  # all N patients
    assert point.answered_from in ("prior", "data") and point.count is not None
