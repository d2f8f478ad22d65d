"""`mbeacon ingest` end to end: every real format lands in the store; bad input exits 2, names the file,
line and column, prints no traceback, and leaves the store exactly as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mbeacon.cli import main
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.readers import open_matrix

DATA = Path(__file__).parent / "data" / "ingest"


def _ingest(store: Path, path: Path, dataset: str, *extra: str):
    args = ["ingest", str(path), "--store", str(store), "--dataset", dataset, "--json", *extra]
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        (DATA / "geo" / "GSE41169_series_matrix.txt", []),
        (DATA / "geo" / "GSE41169_series_matrix.txt.gz", []),
        (DATA / "geo" / "GSE41169_series_matrix_crlf.txt", []),
        (DATA / "matrix" / "betas_pval.tsv", ["--pval-cut", "0.01"]),
        (DATA / "matrix" / "betas_pval.csv", []),
        (DATA / "matrix" / "plain_quoted.csv", []),
        (DATA / "gdc", ["--format", "gdc"]),
    ],
    ids=lambda p: p.name if isinstance(p, Path) else " ".join(p) or "-",
)
def test_every_format_lands_in_the_store_with_the_values_the_reader_sees(tmp_path, path, extra):
    store = tmp_path / "store"
    result = _ingest(store, path, "d", *extra)
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    pval_cut = float(extra[extra.index("--pval-cut") + 1]) if "--pval-cut" in extra else None
    source = open_matrix(path, pval_cut=pval_cut)
    expected = np.concatenate([b.values for b in source.batches()])
    ids = [i for b in source.batches() for i in b.probe_ids]
    cohort = CohortStore(store).open("d")
    assert (info["patients"], info["probes"]) == (len(source.samples), len(ids))
    assert cohort.sample_ids.tolist() == list(source.samples) and cohort.probe_ids.tolist() == ids
    np.testing.assert_array_equal(cohort.rows(np.arange(len(ids))), expected)
    assert info["missing_fraction"] == pytest.approx(np.isnan(expected).mean())


def test_pval_cut_masks_values(tmp_path):
    store = tmp_path / "store"
    assert _ingest(store, DATA / "matrix" / "betas_pval.tsv", "all").exit_code == 0
    assert _ingest(store, DATA / "matrix" / "betas_pval.tsv", "cut", "--pval-cut", "0.01").exit_code == 0
    infos = {i.id: i for i in CohortStore(store).list()}
    assert infos["cut"].missing_fraction > infos["all"].missing_fraction


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("non_numeric.csv", "line"),
        ("out_of_range.csv", "line"),
        ("ragged_short.csv", "line"),
        ("duplicate_probe.csv", "duplicate"),
        ("duplicate_sample.csv", "duplicate"),
        ("empty.csv", "empty"),
        ("unknown_binary.dat", "format"),
    ],
)
def test_bad_input_exits_2_with_a_location_and_leaves_the_store_alone(tmp_path, name, fragment):
    store = tmp_path / "store"
    assert _ingest(store, DATA / "geo" / "GSE41169_series_matrix.txt", "kept").exit_code == 0
    before = CohortStore(store).info("kept")
    # run the real command so that exit status and stderr are what a user sees
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mbeacon.cli",
            "ingest",
            str(DATA / "bad" / name),
            "--store",
            str(store),
            "--dataset",
            "new",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: ")
    assert name in proc.stderr and fragment in proc.stderr.lower()
    assert CohortStore(store).ids() == ["kept"] and CohortStore(store).info("kept") == before
    assert list((store / ".staging").iterdir()) == []


def test_bad_cell_message_names_line_and_column(tmp_path):
    result = CliRunner().invoke(
        main, ["ingest", str(DATA / "bad" / "non_numeric.csv"), "--store", str(tmp_path), "--dataset", "x"]
    )
    assert result.exit_code == 2
    assert "non_numeric.csv, line " in result.output and ", column " in result.output


def test_existing_dataset_is_not_overwritten_without_replace(tmp_path):
    store = tmp_path / "store"
    geo = DATA / "geo" / "GSE41169_series_matrix.txt"
    assert _ingest(store, geo, "d").exit_code == 0
    again = _ingest(store, geo, "d")
    assert again.exit_code == 2 and "already exists" in again.output
    assert _ingest(store, geo, "d", "--replace").exit_code == 0


def test_manifest_positions_are_stored(tmp_path):
    manifest = tmp_path / "manifest.csv"
    source = open_matrix(DATA / "geo" / "GSE41169_series_matrix.txt")
    first = next(iter(source.batches())).probe_ids[0]
    manifest.write_text(f"IlmnID,CHR,MAPINFO\n{first},16,53468112\n")
    result = _ingest(
        tmp_path / "s", DATA / "geo" / "GSE41169_series_matrix.txt", "d", "--manifest", str(manifest)
    )
    assert result.exit_code == 0 and json.loads(result.output)["has_positions"] is True


def test_an_option_that_does_not_fit_the_file_is_a_clear_error(tmp_path):
    sheet = DATA / "gdc" / "gdc_sample_sheet.2024-05-01.tsv"
    args = ["ingest", str(DATA / "matrix" / "plain_quoted.csv"), "--store", str(tmp_path), "--dataset", "x"]
    result = CliRunner().invoke(main, [*args, "--sample-sheet", str(sheet)])
    assert result.exit_code == 2 and "sample_sheet applies to the gdc format only" in result.output
    assert not (tmp_path / "datasets").exists() or CohortStore(tmp_path).ids() == []


def test_ingest_says_whether_it_used_the_detection_pvalues(tmp_path):
    """A p-value file ingested without --pval-cut keeps every value, and says so."""
    path = DATA / "matrix" / "betas_pval.csv"
    store = tmp_path / "s"
    ignored = CliRunner().invoke(main, ["ingest", str(path), "--store", str(store), "--dataset", "a"])
    assert ignored.exit_code == 0, ignored.output
    assert "note: 3 detection p-value columns ignored: every beta value was kept" in ignored.stderr
    cut = json.loads(_ingest(tmp_path / "s", path, "b", "--pval-cut", "0.01").stdout)["ingest"]
    kept = np.concatenate([b.values for b in open_matrix(path, pval_cut=None).batches()])
    masked = np.concatenate([b.values for b in open_matrix(path, pval_cut=0.01).batches()])
    expected = int(np.count_nonzero(~np.isnan(kept) & np.isnan(masked)))
    assert expected > 0
    assert cut == {"store_created": False, "pvalue_columns": 3, "pvalues_applied": True, "masked": expected}
    plain = json.loads(_ingest(tmp_path / "s", DATA / "matrix" / "plain_quoted.csv", "c").stdout)["ingest"]
    assert plain["pvalue_columns"] == 0 and plain["pvalues_applied"] is False


def test_a_store_that_did_not_exist_is_reported_and_a_failed_ingest_leaves_none(tmp_path):
    path = DATA / "matrix" / "betas_pval.csv"
    made = CliRunner().invoke(main, ["ingest", str(path), "--store", str(tmp_path / "new" / "store"),
                                     "--dataset", "a"])  # fmt: skip
    assert made.exit_code == 0
    new = tmp_path / "new" / "store"
    assert f"note: the store {new} did not exist: this ingest created it" in made.stderr
    again = CliRunner().invoke(main, ["ingest", str(path), "--store", str(tmp_path / "new" / "store"),
                                      "--dataset", "b"])  # fmt: skip
    assert "did not exist" not in again.stderr
    failed = _ingest(tmp_path / "other" / "deep" / "store", DATA / "bad" / "non_numeric.csv", "x")
    assert failed.exit_code == 2
    assert not (tmp_path / "other").exists(), "a failed ingest left the store folders it created"
    existing = tmp_path / "kept"
    existing.mkdir()
    assert _ingest(existing / "store", DATA / "bad" / "non_numeric.csv", "x").exit_code == 2
    assert existing.is_dir() and not (existing / "store").exists()
