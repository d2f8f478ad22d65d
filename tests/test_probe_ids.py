"""Illumina probe ids of every array meet at their CpG: the rule (mbeacon.store.probe_ids), the cohort
lookup that picks one probe per CpG, and priors keyed by CpG.

Property tests check the vectorised forms against the one-id form on arbitrary text, and that the
representative of a CpG depends on the probe list only (never on the values).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.store.cohorts import CohortStore
from mbeacon.store.errors import DataError
from mbeacon.store.priors import import_means_file, prior_from_cohort, prior_from_matrix, prior_from_means
from mbeacon.store.probe_ids import case_hint, loci, locus, representatives, split, suffix_mask

SUFFIXES = [f"{s}{c}{d}{r}" for s in "TB" for c in "CO" for d in "12" for r in "0123456789"]
ID_ALPHABET = st.characters(min_codepoint=33, max_codepoint=126)
suffix = st.sampled_from(SUFFIXES)
any_id = st.text(ID_ALPHABET, min_size=1, max_size=40)
# ids built to exercise the rule: a name, maybe a suffix (or a near miss of one)
near_suffix = st.sampled_from(["_TC2", "_tc21", "_XC21", "_TX21", "_TC31", "_TC2x", "TC21", "__TC21"])
crafted = st.builds(
    lambda name, tail: name + tail,
    st.text(ID_ALPHABET, min_size=0, max_size=12),
    st.one_of(st.just(""), suffix.map(lambda s: "_" + s), near_suffix),
).filter(bool)
probe_id = st.one_of(any_id, crafted)


# --- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        ("cg00000029_TC21", ("cg00000029", "TC21")),
        ("cg00000109_BC21", ("cg00000109", "BC21")),
        ("cg00004963_TC12", ("cg00004963", "TC12")),
        ("rs1019916_BO11", ("rs1019916", "BO11")),
        ("ch.1.1099029F_BC21", ("ch.1.1099029F", "BC21")),
        ("nv-GRCh38-chr17-7675160-7675160-G-A_TC11", ("nv-GRCh38-chr17-7675160-7675160-G-A", "TC11")),
        ("cg00000029", ("cg00000029", None)),  # 450K and EPIC v1: bare
        ("ch.1.1099029F", ("ch.1.1099029F", None)),
        ("ctl-Bisulfite-Conversion-I-1", ("ctl-Bisulfite-Conversion-I-1", None)),
        ("cg00000029_tc21", ("cg00000029_tc21", None)),  # case-sensitive: not a suffix
        ("cg00000029_TC2", ("cg00000029_TC2", None)),
        ("cg00000029_TC31", ("cg00000029_TC31", None)),  # Infinium designs are 1 and 2
        ("_TC21", ("_TC21", None)),  # nothing left before the suffix
        ("a_TC21_TC22", ("a_TC21", "TC22")),  # one suffix only
    ],
)
def test_the_locus_of_real_and_edge_ids(probe: str, expected: tuple[str, str | None]) -> None:
    assert split(probe) == expected
    assert locus(probe) == expected[0]


@settings(max_examples=500, deadline=None)
@given(st.text(ID_ALPHABET, min_size=1, max_size=40), suffix)
def test_a_suffixed_id_names_its_bare_locus(name: str, tail: str) -> None:
    assert locus(f"{name}_{tail}") == name
    assert split(f"{name}_{tail}") == (name, tail)


@settings(max_examples=500, deadline=None)
@given(probe_id)
def test_locus_agrees_with_the_documented_pattern(probe: str) -> None:
    import re

    has = re.search(r".(_[TB][CO][12][0-9])$", probe) is not None
    assert (locus(probe) != probe) == has
    assert locus(probe) == (probe[:-5] if has else probe)


@settings(max_examples=300, deadline=None)
@given(st.lists(probe_id, min_size=0, max_size=30))
def test_the_vectorised_forms_agree_with_the_one_id_form(ids: list[str]) -> None:
    expected = [locus(p) for p in ids]
    as_text = np.array(ids, dtype=str) if ids else np.array([], dtype="U1")
    assert loci(as_text).tolist() == expected
    assert suffix_mask(as_text).tolist() == [e != p for e, p in zip(expected, ids, strict=True)]
    ascii_ids = [p for p in ids if p.isascii()]
    if ascii_ids:
        as_bytes = np.array([p.encode() for p in ascii_ids], dtype="S64")
        assert loci(as_bytes).tolist() == [locus(p).encode() for p in ascii_ids]
        assert loci(as_bytes).dtype == as_bytes.dtype


def test_loci_keeps_the_input_when_nothing_has_a_suffix() -> None:
    ids = np.array([b"cg00000029", b"rs10"], dtype="S64")
    assert loci(ids) is ids
    suffixed = np.array([b"cg00000029_TC21"], dtype="S64")
    assert loci(suffixed).tolist() == [b"cg00000029"] and suffixed.tolist() == [b"cg00000029_TC21"]


@settings(max_examples=300, deadline=None)
@given(st.lists(probe_id, min_size=1, max_size=40, unique=True), st.randoms(use_true_random=False))
def test_the_representative_is_the_smallest_id_of_its_locus_in_any_order(ids: list[str], rnd) -> None:
    shuffled = list(ids)
    rnd.shuffle(shuffled)
    names, index = representatives(np.array(shuffled))
    groups: dict[str, list[str]] = {}
    for p in ids:
        groups.setdefault(locus(p), []).append(p)
    assert names.tolist() == sorted(groups)
    chosen = [shuffled[i] for i in index]
    assert chosen == [min(groups[n], key=lambda p: p.encode("utf-32-be")) for n in names.tolist()]


def test_replicates_pick_by_name_only() -> None:
    ids = np.array(["cg2_TC21", "cg1_TC12", "cg1_BC11", "cg1_TC11", "cg3", "cg3_BC21"])
    names, index = representatives(ids)
    assert names.tolist() == ["cg1", "cg2", "cg3"]
    assert ids[index].tolist() == ["cg1_BC11", "cg2_TC21", "cg3"]  # B before T; a bare id first


def test_case_hint_suggests_illumina_spelling() -> None:
    assert case_hint("CG00000029_tc21") == "cg00000029_TC21"
    assert case_hint("CG00000029") == "cg00000029"


# --- cohorts: one probe answers for each CpG -------------------------------------------------

EPIC_V2 = ["cg00000029_TC21", "cg00000109_BC21", "cg00004963_TC11", "cg00004963_TC12", "rs1019916_BO11"]
PATIENTS = 6


@pytest.fixture
def cohorts(tmp_path: Path) -> CohortStore:
    store = CohortStore(tmp_path / "store", create=True)
    values = np.linspace(0.05, 0.95, len(EPIC_V2) * PATIENTS, dtype=np.float32).reshape(len(EPIC_V2), -1)
    samples = [f"s{i}" for i in range(PATIENTS)]
    store.write("epic2", samples, [(EPIC_V2, values)])
    store.write("k450", samples, [(["cg00000029", "cg00000109", "cg99999999"], values[:3])])
    return store


def test_every_spelling_of_a_cpg_finds_one_row(cohorts: CohortStore) -> None:
    epic = cohorts.open("epic2")
    for spelling in ("cg00004963", "cg00004963_TC11", "cg00004963_TC12", "cg00004963_BO21"):
        assert epic.probe_row(spelling) == 2, spelling  # the replicate with the smaller id: _TC11
    assert epic.probe_name(2) == "cg00004963_TC11"
    assert epic.probe_row("cg00000029") == 0 and epic.probe_row("cg00000029_BC11") == 0
    assert epic.probe_row("cg00000029_tc21") == -1  # not a suffix: an unknown id
    assert epic.probe_row("cg99999999") == -1
    k450 = cohorts.open("k450")
    assert k450.probe_row("cg00000029_TC21") == 0 and k450.probe_row("cg00000109_BC21") == 1
    assert k450.probe_row("cg00004963_TC11") == -1


def test_the_vectorised_lookup_agrees_with_the_one_id_lookup(cohorts: CohortStore) -> None:
    wanted = ["cg00004963_TC12", "cg00004963", "rs1019916", "cg00000029_TC21", "nope", "cg00000109_TO21", ""]
    for dataset in ("epic2", "k450"):
        cohort = cohorts.open(dataset)
        assert cohort.probe_index(wanted).tolist() == [cohort.probe_row(p) for p in wanted]
        assert cohort.probe_index(np.array(wanted)).tolist() == cohort.probe_index(wanted).tolist()


@pytest.fixture(scope="module")
def epic_cohort(tmp_path_factory: pytest.TempPathFactory):
    store = CohortStore(tmp_path_factory.mktemp("epic") / "store", create=True)
    values = np.linspace(0.05, 0.95, len(EPIC_V2) * PATIENTS, dtype=np.float32).reshape(len(EPIC_V2), -1)
    store.write("epic2", [f"s{i}" for i in range(PATIENTS)], [(EPIC_V2, values)])
    return store.open("epic2")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["cg00000029", "cg00000109", "cg00004963", "rs1019916", "cg55555555"]), suffix)
def test_any_suffix_of_a_cpg_finds_the_row_its_bare_name_finds(epic_cohort, cpg: str, tail: str) -> None:
    row = epic_cohort.probe_row(cpg)
    assert epic_cohort.probe_row(f"{cpg}_{tail}") == row
    assert epic_cohort.probe_index([f"{cpg}_{tail}", cpg]).tolist() == [row, row]
    assert (row >= 0) == (cpg != "cg55555555")


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_answering_replicate_does_not_depend_on_the_values(tmp_path_factory, seed: int) -> None:
    root = tmp_path_factory.mktemp("values")
    store = CohortStore(root, create=True)
    rng = np.random.default_rng(seed)  # noise-ok: test data, not privacy noise
    values = rng.random((len(EPIC_V2), PATIENTS), dtype=np.float32)
    values[rng.random(values.shape) < 0.3] = np.nan
    order = rng.permutation(len(EPIC_V2))
    store.write("c", [f"s{i}" for i in range(PATIENTS)], [([EPIC_V2[i] for i in order], values)])
    cohort = store.open("c")
    assert cohort.probe_name(cohort.probe_row("cg00004963")) == "cg00004963_TC11"


# --- priors keyed by CpG ---------------------------------------------------------------------


def test_a_prior_built_on_epic_v2_ids_is_keyed_by_cpg_and_keeps_the_representative() -> None:
    values = np.array([[0.1, 0.2, 0.3], [0.7, 0.8, 0.9], [0.4, 0.5, 0.6], [0.2, 0.2, 0.3]])
    prior = prior_from_matrix(
        ["cg00004963_TC12", "cg00004963_TC11", "cg00000029_TC21", "cg00000029"], values, name="p"
    )
    assert prior.probe_ids.tolist() == ["cg00000029", "cg00004963"]
    assert prior.mean.tolist() == pytest.approx([0.7 / 3, 0.8])  # the bare id, then _TC11
    for spelling in ("cg00004963", "cg00004963_TC12", "cg00004963_BC21"):
        assert prior.index([spelling]).tolist() == [1]
        assert prior.probability_one(spelling, 0.0, 0.85) == prior.probability(["cg00004963"], 0.0, 0.85)[0]
    with pytest.raises(DataError, match="appears more than once"):
        prior_from_matrix(["cg1_TC21", "cg1_TC21"], values[:2], name="p")


def test_a_450k_prior_serves_epic_v2_ids_and_the_reverse() -> None:
    k450 = prior_from_means(["cg00000029", "cg00000109"], [0.2, 0.8], name="k450")
    epic = prior_from_means(["cg00000029_TC21", "cg00000109_BC21"], [0.2, 0.8], name="epic")
    assert epic.probe_ids.tolist() == k450.probe_ids.tolist()
    asked = ["cg00000109_BC21", "cg00000029", "cg00000029_TC11", "cg77777777_TC21"]
    assert k450.index(asked).tolist() == epic.index(asked).tolist() == [1, 0, 0, -1]
    assert np.array_equal(
        k450.probability(asked, 0.5, 1.0), epic.probability(asked, 0.5, 1.0), equal_nan=True
    )
    many = np.array(asked * 20_000)  # the hash lookup path
    assert k450.index(many).tolist() == [1, 0, 0, -1] * 20_000


def test_importing_epic_v2_means_collapses_replicates(tmp_path: Path) -> None:
    path = tmp_path / "means.csv"
    path.write_text("probe_id,mean_beta\ncg00004963_TC12,0.9\ncg00004963_TC11,0.1\ncg00000029_TC21,0.5\n")
    prior = import_means_file(path, name="epic-means")
    assert prior.probe_ids.tolist() == ["cg00000029", "cg00004963"]
    assert prior.mean.tolist() == [0.5, 0.1]  # _TC11: the replicate the cohort lookup answers from
    path.write_text("probe_id,mean_beta\ncg1_TC21,0.9\ncg1_TC21,0.1\n")
    with pytest.raises(DataError, match="appears again"):
        import_means_file(path, name="epic-means")


def test_a_prior_built_from_an_epic_v2_cohort_answers_for_the_probe_it_reads(cohorts: CohortStore) -> None:
    cohort = cohorts.open("epic2")
    prior = prior_from_cohort(cohort, name="from-epic", quantiles=11)
    assert prior.probe_ids.tolist() == ["cg00000029", "cg00000109", "cg00004963", "rs1019916"]
    row = cohort.probe_row("cg00004963")
    expected = cohort.rows([row])[0].astype(np.float64)
    assert prior.mean[prior.index(["cg00004963_TC12"])[0]] == pytest.approx(expected.mean())


def test_the_cli_ingests_an_epic_v2_matrix_and_builds_and_imports_priors_by_cpg(tmp_path: Path) -> None:
    """``mbeacon ingest`` keeps the ids as given; ``mbeacon prior build --from-dataset`` and
    ``mbeacon prior import-means`` of EPIC v2 ids give priors that any spelling of a CpG reads."""
    import json

    from click.testing import CliRunner

    from mbeacon.cli import main

    matrix = tmp_path / "epic.csv"
    matrix.write_text(
        "ID_REF,s1,s2,s3\n"
        "cg00004963_TC12,0.9,0.8,0.85\n"
        "cg00004963_TC11,0.1,0.2,0.15\n"
        "cg00000029_TC21,0.5,0.6,\n"
    )
    store = tmp_path / "store"
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), prog_name="mbeacon", catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    run("ingest", str(matrix), "--store", str(store), "--dataset", "epic", "--format", "matrix")
    cohort = CohortStore(store).open("epic")
    assert sorted(cohort.probe_ids.tolist()) == ["cg00000029_TC21", "cg00004963_TC11", "cg00004963_TC12"]
    run(
        "prior", "build", "--store", str(store), "--name", "ref", "--from-dataset", "epic", "--quantiles", "5"
    )

    def show(name: str, *probes: str) -> list[float]:
        asked = [arg for probe in probes for arg in ("--probe", probe)]
        out = run("prior", "show", "--store", str(store), "--name", name, *asked, "--lo", "0", "--json")
        return [row["mean"] for row in json.loads(out)["results"]]

    # the replicate that answers, _TC11, gives the prior its statistics
    assert show("ref", "cg00004963_TC12", "cg00004963") == pytest.approx([0.15, 0.15])
    means = tmp_path / "means.tsv"
    means.write_text(
        "probe_id\tmean_beta\ncg00004963_TC12\t0.9\ncg00004963_TC11\t0.1\ncg00000029_TC21\t0.5\n"
    )
    run("prior", "import-means", str(means), "--store", str(store), "--name", "imported")
    assert show("imported", "cg00000029", "cg00004963_BC21") == [0.5, 0.1]


def test_a_stored_prior_of_epic_v2_ids_loads_keyed_by_cpg(tmp_path: Path) -> None:
    """A prior file whose ids still carry EPIC v2 suffixes (written by hand, or by a tool that does
    not key by CpG) loads keyed by CpG, with the representative's statistics, like a built one."""
    import dataclasses

    from mbeacon.store.priors import load_prior, save_prior

    built = prior_from_means(["cg1", "cg2"], [0.2, 0.9], name="suffixed")
    raw = dataclasses.replace(
        built,
        probe_ids=np.array(["cg1_TC11", "cg1_TC12"]),
        mean=np.array([0.2, 0.9]),
        sd=built.sd,
        a=built.a,
        b=built.b,
    )
    save_prior(tmp_path, raw)
    loaded = load_prior(tmp_path, "suffixed")
    assert loaded.probe_ids.tolist() == ["cg1"]
    assert loaded.mean.tolist() == [0.2] and loaded.index(["cg1_TC12"]).tolist() == [0]


@settings(max_examples=200, deadline=None)
@given(st.lists(probe_id, min_size=1, max_size=40, unique=True))
def test_presorted_ids_give_the_same_representatives(ids: list[str]) -> None:
    arr = np.sort(np.array(ids))
    names, index = representatives(arr)
    fast_names, fast_index = representatives(arr, presorted=True)
    assert names.tolist() == fast_names.tolist() and index.tolist() == fast_index.tolist()
