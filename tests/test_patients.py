"""Patient ids in the store (mbeacon.store.patients): read from GEO characteristics, GDC case ids or
an operator's table, stored with the cohort, and refused clearly when incomplete."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.beacon.contribution import bound_rule
from mbeacon.cli import main
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.errors import IngestError
from mbeacon.store.ingest import ingest
from mbeacon.store.patients import (
    ContributionBound,
    geo_patient_ids,
    normalise_key,
    read_patient_table,
)

DATA = Path(__file__).parent / "data" / "ingest"
REPEATED = DATA / "geo" / "GSE900000_repeated_patients_series_matrix.txt"
TABLE = DATA / "geo" / "GSE900000_patients.csv"
PATIENTS = ["P1", "P1", "P1", "P2", "P1", "P1", "P1", "P3", "P4", "P5"]
SAMPLES = [f"GSM90000{i}" for i in range(10)]


def test_a_geo_series_with_several_samples_per_patient_records_whose_each_sample_is(tmp_path) -> None:
    info = ingest(REPEATED, tmp_path, "rep", bound_rule=bound_rule(declared=2))
    assert (info.patients, info.patient_count, info.max_samples_per_patient) == (10, 5, 6)
    assert (info.has_patient_ids, info.contribution_bound, info.bound_source, info.bound_epsilon) == (
        True, 2, "declared", 0.0,
    )  # fmt: skip
    cohort = CohortStore(tmp_path).open("rep")
    assert cohort.patient_ids.tolist() == PATIENTS
    assert cohort.sample_ids.tolist() == SAMPLES


def test_a_learned_bound_is_recorded_with_its_cost(tmp_path) -> None:
    info = ingest(REPEATED, tmp_path, "rep", bound_rule=bound_rule(epsilon=0.25))
    assert info.bound_source == "learned"
    assert info.bound_epsilon == 0.25
    assert 1 <= info.contribution_bound <= 256


def test_without_a_bound_rule_the_ids_are_stored_and_the_bound_left_open(tmp_path) -> None:
    info = ingest(REPEATED, tmp_path, "rep")
    assert info.has_patient_ids and info.contribution_bound == 0 and info.bound_source == ""


def test_a_file_without_patient_ids_is_one_sample_per_patient(tmp_path) -> None:
    info = ingest(DATA / "geo" / "GSE41169_series_matrix.txt", tmp_path, "plain", bound_rule=bound_rule(2))
    assert not info.has_patient_ids
    assert (info.patient_count, info.max_samples_per_patient, info.contribution_bound) == (3, 1, 1)
    assert info.bound_source == "one sample per patient"
    assert CohortStore(tmp_path).open("plain").patient_ids is None


def test_gdc_case_ids_are_the_patients(tmp_path) -> None:
    info = ingest(DATA / "gdc", tmp_path, "gdc", format="gdc", bound_rule=bound_rule(declared=1))
    ids = CohortStore(tmp_path).open("gdc").patient_ids.tolist()
    assert ids == ["TCGA-A1-A0SB", "TCGA-A1-A0SD", "TCGA-A1-A0SE", "TCGA-A1-A0SF"]
    assert (info.patient_count, info.max_samples_per_patient) == (4, 1)


def test_a_patient_table_gives_ids_for_any_format(tmp_path) -> None:
    info = ingest(REPEATED, tmp_path, "rep", patients=TABLE, bound_rule=bound_rule(3))
    assert CohortStore(tmp_path).open("rep").patient_ids.tolist() == PATIENTS
    assert info.contribution_bound == 3


def test_a_named_key_wins_and_must_be_on_every_sample(tmp_path) -> None:
    info = ingest(REPEATED, tmp_path / "visits", "rep", patient_key="Visit")  # any spelling of the key
    assert CohortStore(tmp_path / "visits").open("rep").patient_ids.tolist() == ["1"] * 3 + ["2"] * 4 + [
        "1", "2", "2",
    ]  # fmt: skip
    assert (info.patient_count, info.max_samples_per_patient) == (2, 6)
    tmp_path = tmp_path / "other"
    tmp_path.mkdir()
    with pytest.raises(IngestError, match=r"no 'donor' characteristic"):
        ingest(REPEATED, tmp_path, "rep", patient_key="donor")
    assert list(tmp_path.iterdir()) == []  # refused before the store is touched


def test_a_sample_without_a_patient_id_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(IngestError) as refused:
        ingest(DATA / "bad" / "geo_patient_id_missing.txt", tmp_path, "bad")
    message = str(refused.value)
    assert "geo_patient_id_missing.txt" in message and "'GSM900004'" in message
    assert "1 of 10 samples have no 'patient id' characteristic" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sample,patient_id\n" + "".join(f"{s},P{i}\n" for i, s in enumerate(SAMPLES[:-1])), "1 samples"),
        ("sample,patient\nGSM1,P1\n", "line 2, column 1: sample 'GSM1' is not a sample of the matrix"),
        ("sample,patient\nGSM900000,P1\nGSM900000,P2\n", "line 3, column 1: sample 'GSM900000' is listed"),
        ("sample,patient\nGSM900000,\n", "line 2, column 2: sample 'GSM900000' has no patient id"),
        ("gsm;who\n", "line 1: the header needs a sample column"),
        ("", "line 1: the patient table is empty"),
    ],
)
def test_a_bad_patient_table_is_refused_with_line_and_column(tmp_path, text: str, message: str) -> None:
    table = tmp_path / "patients.csv"
    table.write_text(text)
    with pytest.raises(IngestError) as refused:
        read_patient_table(table, SAMPLES)
    assert message in str(refused.value)


def test_a_key_and_a_table_together_or_a_key_for_a_matrix_are_refused(tmp_path) -> None:
    with pytest.raises(IngestError, match="either a patient key or a patient table"):
        ingest(REPEATED, tmp_path, "rep", patient_key="patient id", patients=TABLE)
    with pytest.raises(IngestError, match="names a GEO characteristic"):
        ingest(DATA / "matrix" / "plain_quoted.csv", tmp_path, "m", patient_key="patient id")


def test_a_bound_below_one_is_refused(tmp_path) -> None:
    with pytest.raises(IngestError, match="whole number >= 1"):
        ingest(REPEATED, tmp_path, "rep", bound_rule=lambda counts: ContributionBound(0, "declared"))


SPELLINGS = st.sampled_from(["patient id", "Patient ID", "patient_id", "PATIENT-ID", "  patient  id "])


@settings(max_examples=60)
@given(
    patients=st.lists(st.sampled_from(["A", "B", "C", "D"]), min_size=1, max_size=8),
    spelling=st.data(),
    lines=st.integers(min_value=1, max_value=3),
    where=st.data(),
)
def test_geo_patient_ids_are_found_on_any_characteristics_line_in_any_spelling(
    patients: list[str], spelling: st.DataObject, lines: int, where: st.DataObject
) -> None:
    samples = [f"GSM{i}" for i in range(len(patients))]
    rows = [[f"other{k}: x" for _ in samples] for k in range(lines)]
    for j, patient in enumerate(patients):
        line = where.draw(st.integers(0, lines - 1))
        rows[line][j] = f"{spelling.draw(SPELLINGS)}: {patient}"
    metadata = {
        "Sample_geo_accession": "\t".join(samples),
        "Sample_characteristics_ch1": "\n".join("\t".join(row) for row in rows),
    }
    assert geo_patient_ids(metadata, samples) == patients
    # the table's column order may differ from the header lines' order
    assert geo_patient_ids(metadata, samples[::-1]) == patients[::-1]


def test_normalised_keys() -> None:
    assert normalise_key(" Patient_ID ") == normalise_key("patient-id") == "patient id"


def test_the_cli_declares_or_learns_and_says_what_it_cost(tmp_path) -> None:
    runner = CliRunner()
    base = ["ingest", str(REPEATED), "--store", str(tmp_path)]
    out = runner.invoke(main, [*base, "--dataset", "d", "--contribution-bound", "2"])
    assert out.exit_code == 0, out.output
    assert "5 patients, at most 6 samples each; counted at most 2 per patient (declared)" in out.output
    out = runner.invoke(main, [*base, "--dataset", "l", "--bound-epsilon", "0.3", "--json"])
    assert out.exit_code == 0, out.output
    info = json.loads(out.output)
    assert (info["bound_source"], info["bound_epsilon"]) == ("learned", 0.3)
    out = runner.invoke(main, [*base, "--dataset", "x", "--bound-epsilon", "0"])
    assert out.exit_code == 2 and "--bound-epsilon" in out.output
    out = runner.invoke(main, [*base, "--dataset", "x", "--patient-key", "donor"])
    assert out.exit_code == 2 and "no 'donor' characteristic" in out.output
    assert sorted(CohortStore(tmp_path).ids()) == ["d", "l"]
    assert np.array_equal(CohortStore(tmp_path).open("d").patient_ids, np.array(PATIENTS))


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_any_patient_table_text_is_read_or_refused_with_an_ingest_error(tmp_path_factory, text: str) -> None:
    """Fuzz: whatever the table holds, the result is ids for every sample or an IngestError."""
    table = tmp_path_factory.mktemp("fuzz") / "patients.csv"
    table.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        ids = read_patient_table(table, ["S1", "S2"])
    except IngestError:
        return
    assert len(ids) == 2 and all(ids)
