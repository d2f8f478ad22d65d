"""Probe annotations: the three table layouts read alike, bad tables are refused by file, line and
column, an import is atomic, datasets are linked to their platform, and region and gene lookups are
exact (checked against a brute-force filter)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.cli import main
from mbeacon.store.annotation import (
    AnnotationStore,
    ProbeAnnotation,
    canonical_build,
    canonical_chromosome,
    import_annotation,
    read_annotation,
)
from mbeacon.store.atomic import STAGING
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.errors import DataError, IngestError
from mbeacon.store.ingest import ingest, read_manifest

DATA = Path(__file__).parent / "data" / "annotation"
BAD = DATA / "bad"
LAYOUTS = ["illumina_manifest.csv", "GPL13534_family.soft", "GPL13534_family.soft.gz", "plain_positions.tsv"]


def _rows(table) -> dict[str, tuple[str, int]]:
    return {
        p.decode(): (c.decode(), int(x))
        for p, c, x in zip(table.probe_ids, table.chromosome, table.position, strict=True)
    }


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_layout_reads_the_same_positions_and_genes(name: str) -> None:
    table = read_annotation(DATA / name)
    reference = read_annotation(DATA / "GPL13534_family.soft")
    expected = {p: v for p, v in _rows(reference).items() if p in _rows(table)}
    assert _rows(table) == expected and len(expected) >= 9
    assert _rows(table)["cg00000007"] == ("X", 300)  # chrX in the plain table, X elsewhere
    genes = sorted(zip(table.gene_names, table.probe_ids[table.gene_rows].astype(str), strict=True))
    assert ("GENEA", "cg00000001") in genes and ("C2ORF99", "cg00000006") in genes
    assert genes.count(("GENEA", "cg00000001")) == 1  # "GENEA;GENEA": one membership


def test_platform_and_build_come_from_the_file_where_it_states_them() -> None:
    soft = read_annotation(DATA / "GPL13534_family.soft.gz")
    assert (soft.format, soft.platform, soft.build) == ("geo-platform", "GPL13534", "GRCh37")
    manifest = read_annotation(DATA / "illumina_manifest.csv")
    assert (manifest.format, manifest.platform, manifest.build) == ("illumina-manifest", "", "GRCh37")
    assert manifest.island.astype(str).tolist()[:2] == ["Island", "N_Shore"]
    plain = read_annotation(DATA / "plain_positions.tsv")
    assert (plain.format, plain.platform, plain.build) == ("table", "", "")


@pytest.mark.parametrize(
    ("name", "where", "words"),
    [
        ("position_not_number.csv", "line 3, column 3", "position '12x4' is not a number"),
        ("ragged.csv", "line 3, column 3", "row has 2 fields"),
        ("duplicate_probe.csv", "line 4, column 1", "repeats line 2"),
        ("mixed_builds.csv", "line 3, column 5", "differs from 'GRCh37' on line 2"),
        ("bad_gene.csv", "line 2, column 4", "'B C' is not a gene symbol"),
        ("header_only.csv", "line 1", "no probe rows"),
        ("no_header.csv", "", "no header row"),
        ("truncated.soft", "line 13", "no !platform_table_end"),
        ("corrupt.soft.gz", "", "corrupt gzip"),
    ],
)
def test_a_bad_table_is_refused_by_file_line_and_column(name: str, where: str, words: str) -> None:
    with pytest.raises(IngestError) as caught:
        read_annotation(BAD / name)
    text = str(caught.value)
    assert text.startswith(str(BAD / name)) and where in text and words in text, text


def test_an_import_states_platform_and_build_or_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with pytest.raises(DataError, match="does not state its platform id: give --platform"):
        import_annotation(DATA / "illumina_manifest.csv", store)
    with pytest.raises(DataError, match="does not state its genome build: give --build"):
        import_annotation(BAD / "no_build.csv", store, platform="P1")
    with pytest.raises(DataError, match="--build 'GRCh38' contradicts the file's genome build 'GRCh37'"):
        import_annotation(DATA / "GPL13534_family.soft", store, build="hg38")
    with pytest.raises(DataError, match="--platform 'GPL21145' contradicts"):
        import_annotation(DATA / "GPL13534_family.soft", store, platform="GPL21145")
    assert AnnotationStore(store).platforms() == []
    info = import_annotation(BAD / "no_build.csv", store, platform="P1", build="hg19")
    assert (info.platform, info.build, info.probes, info.genes) == ("P1", "GRCh37", 1, 0)


def test_an_import_is_atomic_and_replaced_only_when_asked(tmp_path: Path) -> None:
    store = tmp_path / "s"
    first = import_annotation(DATA / "GPL13534_family.soft", store)
    path = AnnotationStore(store).path_of("GPL13534")
    before = path.read_bytes()
    with pytest.raises(DataError, match="already has an annotation"):
        import_annotation(DATA / "GPL13534_family.soft.gz", store)
    broken = tmp_path / "broken.soft"
    broken.write_text((DATA / "GPL13534_family.soft").read_text().replace("\t5000\t", "\t5e0x\t"))
    with pytest.raises(IngestError, match="line 14, column 7"):
        import_annotation(broken, store, replace=True)
    assert path.read_bytes() == before and not list((store / STAGING).glob("*"))
    again = import_annotation(DATA / "GPL13534_family.soft.gz", store, replace=True)
    assert again.checksum == first.checksum  # the same table, gzip or not: the same arrays


def test_links_name_a_dataset_platform_and_a_geo_cohort_records_its_own(tmp_path: Path) -> None:
    store = tmp_path / "s"
    info = ingest(DATA / "GSE9000001_series_matrix.txt", store, "made-up")
    assert info.platform == "GPL13534"  # from !Series_platform_id
    other = ingest(DATA / "GSE9000001_series_matrix.txt", store, "other", metadata=None, replace=False)
    assert other.platform == "GPL13534"
    annotations = AnnotationStore(store)
    annotations.link("other", "demo-x")
    assert annotations.links() == {"other": "demo-x"}
    annotations.link("other", None)
    assert annotations.links() == {}
    with pytest.raises(DataError, match="invalid platform id"):
        annotations.link("other", "../x")


def test_the_manifest_option_reads_through_the_annotation_reader(tmp_path: Path) -> None:
    for name in LAYOUTS:
        manifest = read_manifest(DATA / name)
        table = read_annotation(DATA / name)
        assert manifest.probe_ids.astype(str).tolist() == sorted(table.probe_ids.astype(str).tolist())
        places = zip(manifest.chromosome.astype(str), manifest.position.tolist(), strict=True)
        found = dict(zip(manifest.probe_ids.astype(str), places, strict=True))
        assert found["cg00000007"] == ("chrX", 300) and found["cg00000001"] == ("chr1", 1000)
        assert found.get("cg00000010", ("", -1)) == ("", -1)  # a probe the table does not place


def test_the_annotation_cli_imports_lists_and_links(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    runner = CliRunner()
    ingested = runner.invoke(
        main,
        [
            "ingest",
            str(DATA / "GSE9000001_series_matrix.txt"),
            "--store",
            store,
            "--dataset",
            "d1",
            "--platform",
            "P7",
        ],
    )
    assert ingested.exit_code == 0 and "platform P7" in ingested.output, ingested.output
    result = runner.invoke(
        main,
        [
            "annotation",
            "import",
            str(DATA / "illumina_manifest.csv"),
            "--store",
            store,
            "--platform",
            "P7",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["probes"] == 10
    listed = runner.invoke(main, ["annotation", "list", "--store", store, "--json"])
    assert [(a["platform"], a["datasets"]) for a in json.loads(listed.output)] == [("P7", ["d1"])]
    bad = runner.invoke(
        main,
        [
            "annotation",
            "import",
            str(BAD / "ragged.csv"),
            "--store",
            store,
            "--platform",
            "P8",
            "--build",
            "GRCh37",
        ],
    )
    assert bad.exit_code == 2 and "line 3, column 3" in bad.output and "Traceback" not in bad.output
    assert runner.invoke(main, ["annotation", "link", "d1", "P8", "--store", store]).exit_code == 0
    assert AnnotationStore(store).links() == {"d1": "P8"}
    unknown = runner.invoke(main, ["annotation", "link", "nope", "P8", "--store", store])
    assert unknown.exit_code == 2 and "no dataset 'nope'" in unknown.output


# --- lookups ---------------------------------------------------------------------------------------

_CHROMOSOMES = st.sampled_from(["1", "chr1", "2", "X", "chrX", "MT", "chrM"])


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    rows=st.lists(
        st.tuples(_CHROMOSOMES, st.integers(-1, 60), st.sets(st.sampled_from("ABCDE"), max_size=3)),
        min_size=1,
        max_size=40,
    ),
    chromosome=_CHROMOSOMES,
    start=st.integers(0, 70),
    width=st.integers(1, 30),
    gene=st.sampled_from(["A", "b", "C", "Z"]),
)
def test_region_and_gene_lookups_match_a_brute_force_filter(rows, chromosome, start, width, gene) -> None:
    ids = np.array([f"cg{i:08d}" for i in range(len(rows))], dtype="S")
    chrom = np.array([c for c, _, _ in rows], dtype="S")
    pos = np.array([p for _, p, _ in rows], dtype=np.int64)
    pairs = [(g, i) for i, (_, _, genes) in enumerate(rows) for g in sorted(genes)]
    annotation = ProbeAnnotation.from_arrays(
        "P", "GRCh37", ids, chrom, pos, None, ([g for g, _ in pairs], [i for _, i in pairs])
    )
    end = start + width
    in_region = {
        ids[i]
        for i, (c, p, _) in enumerate(rows)
        if canonical_chromosome(c) == canonical_chromosome(chromosome) and start < p <= end
    }
    got = annotation.region(chromosome, start, end)
    assert set(annotation.probe_ids[got]) == in_region
    assert list(annotation.position[got]) == sorted(annotation.position[got])  # genome order
    in_gene = {ids[i] for i, (_, _, genes) in enumerate(rows) if gene.upper() in genes}
    assert set(annotation.probe_ids[annotation.gene(gene)]) == in_gene


def test_names_have_one_canonical_spelling() -> None:
    assert {canonical_chromosome(c) for c in ("chr7", "7", "CHR7", " chr7 ")} == {"7"}
    assert {canonical_chromosome(c) for c in ("chrM", "M", "MT", "chrMT")} == {"MT"}
    assert {canonical_build(b) for b in ("37", "hg19", "GRCh37", "grch37")} == {"GRCh37"}
    assert {canonical_build(b) for b in ("38", "hg38", "GRCh38")} == {"GRCh38"}


def test_a_store_copied_elsewhere_keeps_its_annotations(tmp_path: Path) -> None:
    import_annotation(DATA / "GPL13534_family.soft", tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    loaded = AnnotationStore(tmp_path / "b").load("GPL13534")
    assert loaded.probe_ids[loaded.gene("genec")].astype(str).tolist() == ["cg00000005", "cg00000006"]
    assert CohortStore(tmp_path / "b").ids() == []
