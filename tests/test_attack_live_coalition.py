"""``mbeacon attack live`` against ``cohort-pmw`` (the service's default) and with a coalition of keys:
the published quota read into the model, profiles spread round-robin over the keys (each stopping at
its own budget), the pooled reconstruction and its provable bound, the ledger's word that no key spent
more than its quota and the cohort no more than c, and no key in any output. Fast tests against
in-process fake beacons; end to end against a real gunicorn server (``--runslow``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import httpx
import numpy as np
import pytest
from test_attack_live import KEY, FakeBeacon, _synthetic

from mbeacon.attack.live import (
    BeaconClient,
    DatasetParams,
    LiveAttackError,
    LiveSettings,
    parse_datasets,
    run_live_attack,
    stack_profiles,
    with_account,
)
from mbeacon.cli.attack import _keys
from mbeacon.privacy.tradeoff import best_attack
from mbeacon.store.simulate import FILES

COHORT_PMW = {
    "mechanism": "cohort-pmw",
    "epsilon": 10.0,
    "epsilon1": 0.34,
    "epsilon2": 6.33,
    "countEpsilon": 0.0,
    "c": 40,
    "threshold": 1,
    "variant": "single",
    "sensitivity": 1.0,
    "marginAbove": 0.0,
    "marginBelow": 0.0,
    "epsilon3": 10.0 / 3,
    "margin": 0.0,
    "quota": 10,
    "onExhausted": "prior",
    "guarantee": {"unit": "cohort", "epsilonTotal": 10.0, "positivesTotal": 40, "quota": 10},
}


def test_cohort_pmw_is_modelled_from_its_published_quota() -> None:
    """/api/datasets' cohort-pmw (as the service publishes it) is Online PMW's model with the cohort's
    quota and size; the key's account (``/api/budget``) holds its quota in ``positivesTotal`` and the
    cohort's c in ``cohort``; a cohort-pmw without a quota is refused, not modelled wrongly."""
    body = {"response": {"collections": [{"id": "d", "info": {"patients": 60, "privacy": COHORT_PMW}}]}}
    (params,) = parse_datasets(body)
    model = params.defence()
    assert (model.name, model.epsilon, model.c, model.quota, model.n) == ("cohort-pmw", 10.0, 40, 10, 60)
    assert model.release_share == pytest.approx(1 / 3) and model.label.endswith("quota=10")
    budget = {"response": {"budgets": {"d": {
        "positivesUsed": 4, "positivesTotal": 10, "epsilonTotal": 10.0, "mechanism": "cohort-pmw",
        "quota": 10, "margin": 0.0, "epsilon3": 10.0 / 3,
        "cohort": {"positivesUsed": 17, "positivesTotal": 40, "epsilonTotal": 10.0},
    }}}}  # fmt: skip
    opened = with_account(params, budget)
    assert (opened.c, opened.quota, opened.positives_used) == (40, 10, 4)
    assert opened.defence() == model
    for quota in (None, 41):
        with pytest.raises(LiveAttackError, match="quota") as refused:
            DatasetParams("d", 60, "cohort-pmw", 10.0, 40, 1, epsilon3=2.0, quota=quota).defence()
        assert "mbeacon attack evaluate" in str(refused.value)


def _clients(fakes: list[FakeBeacon], keys: list[str]) -> list[BeaconClient]:
    return [
        BeaconClient("http://beacon.test", k, transport=httpx.MockTransport(f), sleep=lambda s: None)
        for f, k in zip(fakes, keys, strict=True)
    ]


def test_profiles_go_round_robin_over_the_keys() -> None:
    """The r-th profile of the shuffled order asks through key r mod K: each key's batches are exactly
    its profiles' queries, and the answers are those of one key."""
    cohort, members, others = _synthetic()
    profiles = stack_profiles(members, others)
    fakes = [FakeBeacon(cohort) for _ in range(3)]
    firsts: list[set] = [set() for _ in fakes]

    def recording(k: int):
        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/api/methylation":
                first = json.loads(request.content)["query"]["requestParameters"][0]
                firsts[k].add((first["probeId"], first["minValue"]))
            return fakes[k](request)

        return handler

    keys = [KEY[:-1] + str(i) for i in range(3)]
    clients = [
        BeaconClient("http://beacon.test", key, transport=httpx.MockTransport(recording(k)))
        for k, key in enumerate(keys)
    ]
    result = run_live_attack(clients, profiles, LiveSettings(queries=10, seed=4))
    order = np.random.default_rng(4).permutation(profiles.people)
    for k, fake in enumerate(fakes):
        assert fake.auth == {f"Bearer {keys[k]}"} and len(fake.batches) == len(order) // 3
        assert firsts[k] == {(_probe_id(result, p), float(result.plan.lo[p, 0])) for p in order[k::3]}
    one = run_live_attack(clients[:1], profiles, LiveSettings(queries=10, seed=4))
    np.testing.assert_array_equal(result.scores, one.scores)  # exact answers: the keys change nothing
    assert result.keys == 3 and result.summary()["coalition"]["keys"] == 3


def _probe_id(result, person: int) -> str:
    from mbeacon.attack.live.questions import stand_in_prior

    prior = stand_in_prior(result.profiles.values, result.profiles.probe_ids)
    return str(prior.probe_ids[result.plan.probes[person, 0]])


def test_each_key_stops_at_its_own_budget() -> None:
    """Three keys, each its own SVT² budget of c = 3 (one fake beacon per key): a key that runs out
    stops asking while the others go on, every key's positives count, and no key is printed."""
    cohort, members, others = _synthetic()
    profiles = stack_profiles(members, others)
    fakes = [FakeBeacon(cohort, mechanism="svt2", c=3) for _ in range(3)]
    keys = [KEY[:-1] + str(i) for i in range(3)]
    clients = _clients(fakes, keys)
    result = run_live_attack(clients, profiles, LiveSettings(queries=10, seed=4))
    counts = result.answers.counts()
    assert counts["data"] == 9 and result.answers.keys_exhausted == 3 and result.keys == 3
    for k, fake in enumerate(fakes):
        assert fake.auth == {f"Bearer {keys[k]}"} and fake.positives == 3 and fake.late <= 1
    assert "3 of the 3 keys' privacy budgets ran out" in " ".join(result.warnings)
    summary = json.dumps(result.summary())
    assert all(k not in summary + repr(clients) for k in keys)
    assert result.summary()["coalition"] is None  # svt2 releases no counts: nothing to pool


def test_keys_from_options_and_a_file(tmp_path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# the coalition\nmbk_a\n\n  mbk_b  \nmbk_a\n")
    assert _keys(("mbk_c",), keys) == ["mbk_c", "mbk_a", "mbk_b"]  # each once, in order
    keys.write_text("mbk_a mbk_b\n")
    with pytest.raises(click.BadParameter, match="line 1") as bad:
        _keys((), keys)
    assert "mbk_a" not in str(bad.value)
    with pytest.raises(click.UsageError, match="--keys FILE"):
        _keys(("  ",), None)


def test_keys_opened_under_other_parameters_are_refused() -> None:
    """One model scores every answer: a key whose account was opened under another setting stops the
    attack with a message naming the key by its number only."""
    cohort, members, others = _synthetic(probes=50, members=5, others=5)
    fakes = [FakeBeacon(cohort, mechanism="svt2", c=3), FakeBeacon(cohort, mechanism="svt2", c=4)]
    keys = [KEY, KEY[:-1] + "x"]
    with pytest.raises(LiveAttackError, match="key 2 of 2") as refused:
        run_live_attack(_clients(fakes, keys), stack_profiles(members, others), LiveSettings(queries=5))
    assert all(k not in str(refused.value) for k in keys)


# --- end to end: one real server, the real command ---------------------------------------------------

QUOTA, C, EPSILON = 10, 40, 10.0


@pytest.fixture(scope="module")
def beacon(tmp_path_factory):
    """A real server (gunicorn) on the demo data: the demo cohort unprotected (``none``), and a copy of
    it under ``cohort-pmw`` (epsilon 10, c = 40, quota 10: four keys spend the cohort's positives)."""
    from servers import BeaconServer

    from mbeacon.beacon.ledger import Ledger
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.demo import ensure_demo

    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    work = tmp_path_factory.mktemp("live-coalition")
    store = work / "store"
    shutil.copytree(demo.store, store)
    cohorts = CohortStore(store)
    source = cohorts.open(demo.dataset)
    rows = np.roll(np.arange(source.n_probes), 1)  # the rows rotated: a cohort file of its own
    samples = [f"pmw-{s}" for s in source.sample_ids.astype(str).tolist()]
    cohorts.write("pmw", samples, [(source.probe_ids[rows].tolist(), source.rows(rows))])
    url = f"sqlite:///{work}/ledger.sqlite3"
    ledger = Ledger.open(url)
    registered = [ledger.add_user(f"eve{i}") for i in range(3)]
    controlled = [ledger.add_user(f"mallory{i}", tier="CONTROLLED") for i in range(5)]
    ledger.close()
    config = work / "beacon.toml"
    config.write_text(
        f'store = "{store}"\ndatabase_url = "{url}"\ndefault_prior = "{demo.prior}"\n'
        "rate_limit_per_minute = 0\n"
        '[defaults]\nmechanism = "svt2"\nepsilon = 1.0\nc = 3\n'
        f'[datasets.{demo.dataset}]\nmechanism = "none"\nallow_unprotected = true\n'
        f'[datasets.pmw]\nmechanism = "cohort-pmw"\nepsilon = {EPSILON}\nc = {C}\nquota = {QUOTA}\n'
    )
    with BeaconServer(config, work, workers=2) as server:
        yield server, registered, controlled, demo, url


def _attack(beacon, keys: list[str], out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The command with the keys in a ``--keys`` file; asserts no key shows in stdout, stderr or out."""
    server, _, _, demo, _ = beacon
    out.mkdir(parents=True, exist_ok=True)
    key_file = out.parent / f"{out.name}-keys.txt"
    key_file.write_text("\n".join(keys) + "\n")
    command = [
        sys.executable, "-m", "mbeacon.cli", "attack", "live", "--url", server.url,
        "--keys", str(key_file),
        "--victims", str(demo.simulation / FILES["members_remeasured"]),
        "--nonmembers", str(demo.simulation / FILES["nonmembers_remeasured"]),
        "--prior", str(demo.store), demo.prior, "--out", str(out), "--json", *extra,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "MBEACON_KEY"} | {"COLUMNS": "120"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    written = b"".join(p.read_bytes() for p in out.iterdir())
    for key in keys:
        assert key not in done.stdout + done.stderr, "a key was printed"
        assert key.encode() not in written, "a key was written"
    return done, json.loads(done.stdout)


@pytest.mark.slow
def test_coalition_of_keys_against_the_unprotected_beacon(beacon, tmp_path) -> None:
    """``none`` with three keys: every profile answered exactly, the per-profile scores as with one
    key, and the pooled reconstruction over all 120 profiles (yes/no rows: the service releases no
    count for ``none``) separates victims from non-members, with no bound (no DP guarantee)."""
    _, registered, _, demo, _ = beacon
    done, summary = _attack(beacon, registered, tmp_path / "none", "--dataset", demo.dataset)
    assert summary["keys"] == 3 and summary["answers"]["data"] == summary["answers"]["planned"] == 12_000
    assert summary["by_queries"][-1]["auc"] >= 0.9
    coalition = summary["coalition"]
    assert coalition["keys"] == 3 and coalition["rows"] == 12_000 and coalition["bound"] is None
    assert coalition["auc"] >= 0.58, coalition  # measured 0.62 (deterministic: exact answers)
    assert "coalition of 3 keys" in done.stderr
    print("none, 3 keys: per-profile AUC", round(summary["by_queries"][-1]["auc"], 3), "coalition", coalition)


@pytest.mark.slow
def test_coalition_of_keys_against_cohort_pmw(beacon, tmp_path) -> None:
    """``cohort-pmw`` with five CONTROLLED keys: each key stops at its quota, the cohort at c (the
    ledger's count), so five keys buy no more than four; the pooled reconstruction reads the released
    counts, and the bound is the cohort's epsilon whatever the number of keys."""
    from mbeacon.beacon.ledger import Ledger
    from mbeacon.beacon.sanitisers.cohort_pmw import COHORT_HOLDER

    _, _, controlled, _, url = beacon
    done, summary = _attack(beacon, controlled, tmp_path / "pmw", "--dataset", "pmw")
    assert summary["defence"] == f"cohort-pmw eps={EPSILON:g} c={C} r=0.333333 quota={QUOTA}"
    assert summary["dataset"]["quota"] == QUOTA and summary["observed"] == ["flag", "answer", "count"]
    assert summary["keys"] == 5 and summary["keys_exhausted"] == 5 and summary["budget_exhausted"]
    assert summary["answers"]["data"] == C  # the cohort's positives, whoever asked
    coalition = summary["coalition"]
    assert coalition["keys"] == 5 and coalition["accounting"] == "cohort" and coalition["counted_rows"] > 0
    assert coalition["bound"] == best_attack(EPSILON).to_json()
    assert "coalition of 5 keys" in done.stderr and "provable bound at eps = 10" in done.stderr
    ledger = Ledger.open(url)
    try:
        spent = [ledger.account(f"user:mallory{i}", "pmw") for i in range(5)]
        cohort = ledger.account(COHORT_HOLDER, "pmw")
    finally:
        ledger.close()
    assert all(a is None or a.state.count <= QUOTA for a in spent)
    assert sum(a.state.count for a in spent if a is not None) == cohort.state.count == C
    print(
        "cohort-pmw, 5 keys: per-profile AUC", round(summary["by_queries"][-1]["auc"], 3),
        "coalition", coalition, "keys' positives", [a and a.state.count for a in spent],
    )  # fmt: skip
