"""The sensitivity a dataset is served at (mbeacon.beacon.contribution): the declared or learned
per-patient contribution bound, truncation to it, and what /api/datasets says about it; end to end
over HTTP with the real gunicorn server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from mbeacon.api import create_app
from mbeacon.beacon.config import dataset_policy
from mbeacon.beacon.contribution import (
    ContributionBoundMissing,
    TruncatedCohort,
    bound_rule,
    sensitivity_of,
    serving_cohort,
)
from mbeacon.beacon.ledger import Ledger
from mbeacon.store.cohorts import CohortStore, DatasetInfo
from mbeacon.store.demo import ensure_demo
from mbeacon.store.ingest import ingest
from tests.beacon_schemas import validate
from tests.servers import BeaconServer

DATA = Path(__file__).parent / "data" / "ingest"
REPEATED = DATA / "geo" / "GSE900000_repeated_patients_series_matrix.txt"
PROBE = "cg00000029"  # patient P1's six samples read 0.9 here, the four other patients' one sample 0.1


def _info(**fields) -> DatasetInfo:
    base = {"id": "d", "name": "d", "patients": 10, "probes": 3, "missing_fraction": 0.0}
    return DatasetInfo(**{**base, "value_min": 0.0, "value_max": 1.0, **fields})


def test_the_bound_in_effect_and_where_it_came_from() -> None:
    plain = _info()
    assert sensitivity_of("d", plain, dataset_policy()).to_json() == {
        "bound": 1, "source": "one sample per patient", "learningEpsilon": 0.0, "truncated": False,
        "patients": 10,
    }  # fmt: skip
    learned = _info(has_patient_ids=True, patient_count=5, max_samples_per_patient=6, contribution_bound=3,
                    bound_source="learned", bound_epsilon=0.5)  # fmt: skip
    got = sensitivity_of("d", learned, dataset_policy())
    assert (got.bound, got.source, got.epsilon, got.truncated, got.patients) == (3, "learned", 0.5, True, 5)
    configured = sensitivity_of("d", learned, dataset_policy(contribution_bound=2))
    assert (configured.bound, configured.source, configured.epsilon) == (2, "configuration", 0.0)
    # without patient ids a configured bound is the operator's statement: used, nothing truncated
    stated = sensitivity_of("d", plain, dataset_policy(contribution_bound=4))
    assert (stated.bound, stated.truncated) == (4, False)
    unique = _info(has_patient_ids=True, patient_count=10, contribution_bound=0, bound_source="")
    assert sensitivity_of("d", unique, dataset_policy()).bound == 1


def test_repeated_patients_without_a_bound_are_never_served_at_sensitivity_one(tmp_path) -> None:
    ingest(REPEATED, tmp_path / "store", "rep")  # no bound rule: ids stored, bound left open
    with pytest.raises(ContributionBoundMissing, match=r"dataset 'rep': some patients give several samples"):
        sensitivity_of("rep", CohortStore(tmp_path / "store").info("rep"), dataset_policy())
    settings = {"store": str(tmp_path / "store"), "database_url": f"sqlite:///{tmp_path}/l.sqlite3"}
    with pytest.raises(ContributionBoundMissing, match=r"set contribution_bound = N in its \[datasets.rep\]"):
        create_app({**settings, "defaults": {"mechanism": "none", "allow_unprotected": True}})
    # declaring one in the configuration serves it
    declared = {"mechanism": "none", "allow_unprotected": True, "contribution_bound": 2}
    app = create_app({**settings, "datasets": {"rep": declared}})
    engine = app.config["MBEACON"].engine
    assert engine.sensitivity("rep").bound == 2
    assert engine.new_params("rep").sensitivity == 2.0


def test_the_served_cohort_counts_each_patients_first_b_samples(tmp_path) -> None:
    ingest(REPEATED, tmp_path, "rep", bound_rule=bound_rule(declared=2))
    cohort = CohortStore(tmp_path).open("rep")
    served = serving_cohort(cohort, sensitivity_of("rep", cohort.info, dataset_policy()))
    assert isinstance(served, TruncatedCohort)
    row = cohort.probe_row(PROBE)
    assert cohort.count_one(row, 0.8, 1.0) == 6
    assert served.count_one(row, 0.8, 1.0) == 2  # P1's first two samples
    counts = served.count_in_range(np.array([row, row]), np.array([0.0, 0.8]), np.array([0.5, 1.0]))
    assert counts.tolist() == [4, 2]
    assert served.n_patients == 6  # kept samples: P1's 2 and one each of P2..P5
    assert served.probe_ids.tolist() == cohort.probe_ids.tolist()  # everything else is the cohort's
    # a bound no patient exceeds keeps every sample: the plain cohort is served
    wide = serving_cohort(cohort, sensitivity_of("rep", cohort.info, dataset_policy(contribution_bound=6)))
    assert wide is cohort


# --- end to end over HTTP --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """gunicorn (2 workers) on the demo store plus the repeated-patients series ingested three times:
    bound 2 declared at ingest, learned at ingest, and bound 6 declared (nothing truncated)."""
    tmp = tmp_path_factory.mktemp("contribution")
    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    store = tmp / "store"
    shutil.copytree(demo.store, store)
    ingest(REPEATED, store, "rep-declared", bound_rule=bound_rule(declared=2))
    ingest(_variant(REPEATED, tmp, 1), store, "rep-learned", bound_rule=bound_rule(epsilon=0.5))
    ingest(_variant(REPEATED, tmp, 2), store, "rep-wide", bound_rule=bound_rule(declared=6))
    url = f"sqlite:///{tmp}/ledger.sqlite3"
    ledger = Ledger.open(url)
    key = ledger.add_user("alice")
    ledger.close()
    config = tmp / "beacon.toml"
    # T = 3 and a large epsilon: the noise (scale about bound/20 on the lattice bound*Z) is almost
    # surely 0, so each answer is the truth about the counted samples
    config.write_text(
        f"store = {json.dumps(str(store))}\n"
        f"database_url = {json.dumps(url)}\n"
        f"default_prior = {json.dumps(demo.prior)}\n"
        "rate_limit_per_minute = 0\n"
        '[defaults]\nmechanism = "svt2"\nc = 1\nepsilon = 100.0\nthreshold = 3\n'
    )
    with BeaconServer(config, tmp, workers=2, threads=2) as running:
        yield running, key


def _variant(path: Path, folder: Path, k: int) -> Path:
    """``path`` with one probe more (a copy of its last row): a cohort file of its own, since the
    service refuses one file served under two ids with per-holder budgets."""
    lines = path.read_text(encoding="utf-8").splitlines()
    end = lines.index("!series_matrix_table_end")
    extra = f'"cg9999990{k}"' + lines[end - 1][lines[end - 1].index("\t") :]
    out = folder / f"variant-{k}-{path.name}"
    out.write_text("\n".join([*lines[:end], extra, *lines[end:]]) + "\n", encoding="utf-8")
    return out


def _datasets(server) -> dict[str, dict]:
    running, key = server
    response = httpx.get(
        running.url + "/api/datasets", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    validate(response.json(), "responses/beaconCollectionsResponse.json")
    return {c["id"]: c["info"] for c in response.json()["response"]["collections"]}


def _exists(server, dataset: str) -> bool:
    running, key = server
    body = {
        "meta": {"apiVersion": "v2.0.0"},
        "query": {"requestParameters": {"probeId": PROBE, "minValue": 0.8}},
    }
    response = httpx.post(
        running.url + f"/api/datasets/{dataset}/methylation",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.json()["responseSummary"]["exists"]


@pytest.mark.slow
def test_api_datasets_states_the_bound_its_source_and_its_cost(server) -> None:
    info = _datasets(server)
    assert info["rep-declared"]["contribution"] == {
        "bound": 2, "source": "declared", "learningEpsilon": 0.0, "truncated": True, "patients": 5,
    }  # fmt: skip
    assert info["rep-declared"]["privacy"]["sensitivity"] == 2
    learned = info["rep-learned"]["contribution"]
    assert (learned["source"], learned["learningEpsilon"], learned["truncated"]) == ("learned", 0.5, True)
    assert info["rep-learned"]["privacy"]["sensitivity"] == learned["bound"] >= 1
    assert info["demo-cohort"]["contribution"]["source"] == "one sample per patient"
    assert info["demo-cohort"]["privacy"]["sensitivity"] == 1
    assert "max_samples_per_patient" not in json.dumps(info)  # the exact maximum is never published
    running, key = server
    budget = httpx.get(running.url + "/api/budget", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert budget.status_code == 200, budget.text
    assert budget.json()["response"]["budgets"]["rep-declared"]["sensitivity"] == 2


@pytest.mark.slow
def test_answers_count_truncated_samples(server) -> None:
    """Patient P1 has six samples at 0.9, so six samples are in [0.8, 1] and T = 3. Truncated at the
    bound 2, two are counted: the answer is "no". The same series with the bound 6 (nothing
    truncated) answers "yes", so the first answer is the truncation's doing, not the prior's."""
    assert _exists(server, "rep-declared") is False
    assert _exists(server, "rep-wide") is True
