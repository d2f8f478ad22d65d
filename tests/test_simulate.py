"""``mbeacon simulate``: realistic simulated cohorts, their files, their ground truth and the realism report.

Statistical checks run on fixed seeds, so they are deterministic; each tolerance is stated next to the
check with the reason for its size.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import special

from mbeacon.cli.simulate import simulate as simulate_command
from mbeacon.store import simulate as sim

SMALL = sim.SimulationConfig(probes=3000, patients=40, nonmembers=30, reference=60, seed=7)
VALUE = re.compile(r"^(0\.\d{6}|1\.000000)$")


@pytest.fixture(scope="module")
def default_run() -> sim.SimulatedCohorts:
    """The default setting (20,000 probes; 100 members, 100 non-members, 200 reference samples)."""
    return sim.simulate_arrays(sim.SimulationConfig())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, sim.SimulationResult]:
    out = tmp_path_factory.mktemp("simulated")
    return out, sim.simulate(out, SMALL)


def _csv(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    with gzip.open(path, "rt") as handle:
        header = handle.readline().rstrip("\n").split(",")
        ids, rows = [], []
        for line in handle:
            fields = line.rstrip("\n").split(",")
            ids.append(fields[0])
            rows.append([float(v) if v else np.nan for v in fields[1:]])
    return header, ids, np.array(rows)


# --- the model ---------------------------------------------------------------------------------------


def test_deterministic_for_a_seed() -> None:
    config = replace(SMALL, probes=500)
    first, again = sim.simulate_arrays(config), sim.simulate_arrays(config)
    other = sim.simulate_arrays(replace(config, seed=8))
    for name in ("members", "nonmembers", "reference", "members_remeasured", "nonmembers_remeasured"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    np.testing.assert_array_equal(first.probe_ids, again.probe_ids)
    np.testing.assert_array_equal(first.population.delta, again.population.delta)
    assert not np.array_equal(first.probe_ids, other.probe_ids)


def test_files_are_byte_identical_for_a_seed(tmp_path: Path, files) -> None:
    out, _ = files
    sim.simulate(tmp_path, SMALL)
    for name in [*sim.FILES.values(), sim.TRUTH_FILE]:
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


def test_shapes_ids_and_disjoint_groups(default_run: sim.SimulatedCohorts) -> None:
    run, config = default_run, default_run.config
    p = config.probes
    assert run.members.shape == (p, config.patients) == run.members_remeasured.shape
    assert run.nonmembers.shape == (p, config.nonmembers) == run.nonmembers_remeasured.shape
    assert run.reference.shape == (p, config.reference)
    ids = run.sample_ids
    groups = [set(ids["members"]), set(ids["nonmembers"]), set(ids["reference"])]
    assert [len(g) for g in groups] == [config.patients, config.nonmembers, config.reference]
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])
    real_ids, _ = sim.load_population_means()
    probes = run.probe_ids
    assert np.all(probes[1:] > probes[:-1]), "probes keep the order of the id list"
    assert np.all(np.isin(probes, real_ids)), "probes keep their real 450K ids"


def test_values_in_unit_interval(default_run: sim.SimulatedCohorts) -> None:
    for name in ("members", "nonmembers", "reference"):
        values = getattr(default_run, name)
        finite = values[~np.isnan(values)]
        assert finite.min() > 0 and finite.max() < 1, name
    for name in ("members_remeasured", "nonmembers_remeasured"):
        values = getattr(default_run, name)
        assert not np.isnan(values).any()
        assert values.min() >= 0 and values.max() <= 1, name


def test_missing_fraction(default_run: sim.SimulatedCohorts) -> None:
    rate = default_run.config.missing
    for name in ("members", "nonmembers", "reference"):
        values = getattr(default_run, name)
        n = values.size
        # Binomial: 5 standard errors (2e-4 at 2 million cells) is out of reach of chance.
        assert abs(np.isnan(values).mean() - rate) < 5 * np.sqrt(rate * (1 - rate) / n), name


def test_dmps_differ_and_other_probes_do_not(default_run: sim.SimulatedCohorts) -> None:
    pop, config = default_run.population, default_run.config
    dmp = pop.dmp
    assert dmp.sum() == round(config.dmp_fraction * config.probes)
    effect = np.abs(pop.delta[dmp])
    assert effect.min() >= 0.1 and effect.max() <= 0.3
    assert np.all((pop.disease_mean[dmp] >= 0.01) & (pop.disease_mean[dmp] <= 0.99))
    assert np.all(pop.delta[~dmp] == 0)
    members = np.nanmean(default_run.members, axis=1)
    reference = np.nanmean(default_run.reference, axis=1)
    # The members' mean is that of the disease population: within 5 standard errors at every DMP.
    standard_error = pop.disease_sd[dmp] / np.sqrt(config.patients)
    assert np.all(np.abs(members[dmp] - pop.disease_mean[dmp]) < 5 * standard_error)
    # ... and differs from the general population by about delta at every DMP ...
    observed = members - reference
    np.testing.assert_allclose(observed[dmp], pop.delta[dmp], atol=0.04)
    assert np.all(np.abs(observed[dmp]) > 0.06)
    # ... while elsewhere members and reference differ by sampling noise only.
    assert np.mean(np.abs(observed[~dmp])) < 0.006
    assert np.percentile(np.abs(observed[~dmp]), 99.9) < 0.04


#: The real blood table's median per-probe sd by mean (data/README.md), 10 samples.
README_SD = {
    (0.0, 0.1): 0.015,
    (0.2, 0.3): 0.046,
    (0.4, 0.5): 0.063,
    (0.6, 0.7): 0.052,
    (0.8, 0.9): 0.026,
    (0.9, 1.0): 0.011,
}


def test_sd_versus_mean_matches_the_real_table() -> None:
    """Simulate the real table's own 20,000 probes (same mean distribution within each bin) for 300
    general-population samples: the per-bin median sd must match the real medians within 15%. The
    expected gap is +4% (the real medians come from 10 samples, whose sd is 4% low at the median; the
    model corrects for that) plus a few % of sampling noise of a median over 600-4,000 probes."""
    real_ids, _ = sim.load_blood_reference()
    ids, means = sim.load_population_means()
    keep = np.isin(ids, real_ids)
    config = sim.SimulationConfig(probes=int(keep.sum()), patients=1, nonmembers=0, reference=300, seed=11)
    sd_distribution = sim.learn_sd_distribution(sim.load_blood_reference()[1])
    population = sim.draw_population(config, ids[keep], means[keep], sd_distribution)
    general = np.concatenate([b.values[:, 1:] for b in sim.iter_blocks(population, config)])
    mean, sd = general.mean(axis=1), general.std(axis=1, ddof=1)
    for (lo, hi), expected in README_SD.items():
        median = np.median(sd[(mean >= lo) & (mean < hi)])
        assert abs(median / expected - 1) < 0.15, f"[{lo}, {hi}): simulated {median:.4f}, real {expected}"


def test_neighbour_correlation_near_the_chosen_value(default_run: sim.SimulatedCohorts) -> None:
    config = default_run.config
    stats = sim.RealismStats(config.probes)
    stats.add(0, default_run.values[:, config.patients + config.nonmembers :])
    lag1 = stats.lag1[np.isfinite(stats.lag1)]
    # Target 0.3 for the latent values; the Beta transform lowers it a little (0.295 measured).
    assert 0.25 < lag1.mean() < 0.33
    independent = sim.simulate_arrays(replace(SMALL, neighbour_correlation=0.0))
    stats = sim.RealismStats(SMALL.probes)
    stats.add(0, independent.values[:, SMALL.patients + SMALL.nonmembers :])
    assert abs(np.nanmean(stats.lag1)) < 0.02


def test_intermediate_probes_can_be_bimodal() -> None:
    """Bimodal probes: two clusters with the drawn weights; in 10-sample sets the fraction of probes
    whose values split with a gap is like the real table's (0.78% of probes with mean in [0.2, 0.8])."""
    config = sim.SimulationConfig(probes=20_000, patients=1, nonmembers=0, reference=400, missing=0.0, seed=3)
    run = sim.simulate_arrays(config)
    pop = run.population
    candidates = (pop.mean >= 0.2) & (pop.mean <= 0.8)
    assert not pop.bimodal[~candidates].any()
    assert 0.005 < pop.bimodal[candidates].mean() < 0.015  # 1% of about 5,500 candidates
    mid = (pop.low_mean + pop.high_mean)[pop.bimodal] / 2
    high_share = (run.reference[pop.bimodal] > mid[:, None]).mean(axis=1)
    # 400 draws per probe: the share of the high component is within 0.1 of its weight.
    assert np.abs(high_share - pop.weight[pop.bimodal]).max() < 0.1
    gapped = []
    for window in range(0, 400, 10):
        stats = sim.RealismStats(config.probes)
        stats.add(0, run.reference[:, window : window + 10])
        middle = (stats.mean10 >= 0.2) & (stats.mean10 <= 0.8)
        gapped.append(stats.gap10[middle].mean())
    assert 0.004 < np.mean(gapped) < 0.015


def test_remeasurement_noise(default_run: sim.SimulatedCohorts) -> None:
    noise = default_run.config.noise
    true = default_run.values[:, : default_run.config.patients]
    error = default_run.members_remeasured - true
    inside = (true > 0.1) & (true < 0.9)  # away from the clipping at 0 and 1
    assert abs(error[inside].std() / noise - 1) < 0.02  # 1.5 million draws: 0.06% standard error
    assert abs(error[inside].mean()) < 1e-3


def test_beta_quantile_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 3000, 400), rng.uniform(0.5, 3000, 400)
    z = rng.standard_normal((400, 300))
    exact = special.betaincinv(a[:, None], b[:, None], special.ndtr(z))
    assert np.abs(sim.beta_quantile_of_normal(z, a, b) - exact).max() < 1e-4


# --- the files ---------------------------------------------------------------------------------------


def test_geo_series_matrix_is_valid(files) -> None:
    out, _ = files
    truth = json.loads((out / sim.TRUTH_FILE).read_text())
    members = truth["samples"]["members"]
    with gzip.open(out / sim.FILES["members"], "rt", encoding="utf-8", newline="") as handle:
        lines = handle.read().split("\n")
    assert lines[-1] == "" and lines[-2] == "!series_matrix_table_end"
    lines = lines[:-1]
    assert lines[0].startswith('!Series_title\t"')
    begin = lines.index("!series_matrix_table_begin")
    header = {}
    for line in lines[:begin]:
        if not line:
            continue
        key, _, rest = line.partition("\t")
        assert key.startswith(("!Series_", "!Sample_")), line
        fields = rest.split("\t")
        assert all(f.startswith('"') and f.endswith('"') for f in fields), line
        header.setdefault(key, []).append([f[1:-1] for f in fields])
    assert re.fullmatch(r"GSE\d+", header["!Series_geo_accession"][0][0])
    assert header["!Series_platform_id"] == [["GPL13534"]]
    assert header["!Sample_geo_accession"] == [members]
    assert all(re.fullmatch(r"GSM\d+", s) for s in members)
    assert len(header["!Sample_title"][0]) == SMALL.patients
    assert all(len(row) == SMALL.patients for row in header["!Sample_characteristics_ch1"])
    assert header["!Series_sample_id"][0][0].split() == members
    assert lines[begin + 1] == "\t".join(['"ID_REF"', *(f'"{s}"' for s in members)])
    rows = lines[begin + 2 : -1]
    assert len(rows) == SMALL.probes
    probe_ids, missing = [], 0
    for row in rows:
        fields = row.split("\t")
        assert len(fields) == SMALL.patients + 1
        assert re.fullmatch(r'"(cg|ch|rs)[\w.]+"', fields[0]), fields[0]
        probe_ids.append(fields[0][1:-1])
        missing += sum(1 for f in fields[1:] if f == "")
        assert all(VALUE.match(f) for f in fields[1:] if f)
    assert probe_ids == sorted(probe_ids)
    assert 0 < missing < 3 * SMALL.missing * SMALL.probes * SMALL.patients


def test_csv_matrices_and_truth(files) -> None:
    out, result = files
    truth = json.loads((out / sim.TRUTH_FILE).read_text())
    assert truth["seed"] == SMALL.seed and truth["parameters"]["probes"] == SMALL.probes
    listed = {f["name"] for f in truth["files"]}
    assert listed == set(sim.FILES.values())
    assert set(result.files) == listed | {sim.TRUTH_FILE}
    assert not (out / ".staging").exists()
    geo_ids = None
    for key, ids_key in (
        ("nonmembers", "nonmembers"),
        ("reference", "reference"),
        ("members_remeasured", "members"),
        ("nonmembers_remeasured", "nonmembers"),
    ):
        header, ids, values = _csv(out / sim.FILES[key])
        assert header == ["ID_REF", *truth["samples"][ids_key]], key
        assert values.shape == (SMALL.probes, len(truth["samples"][ids_key]))
        geo_ids = geo_ids or ids
        assert ids == geo_ids
        assert np.nanmin(values) >= 0 and np.nanmax(values) <= 1
        assert np.isnan(values).any() == (not key.endswith("remeasured")), key
    dmps = truth["dmps"]
    assert len(dmps) == round(SMALL.dmp_fraction * SMALL.probes)
    for dmp in dmps:
        assert dmp["probe_id"] in geo_ids
        assert 0.1 - 1e-6 <= abs(dmp["delta"]) <= 0.3 + 1e-6
        assert dmp["disease_mean"] == pytest.approx(dmp["general_mean"] + dmp["delta"], abs=2e-6)


def test_written_values_match_the_simulation(files) -> None:
    out, _ = files
    run = sim.simulate_arrays(SMALL)
    _, ids, values = _csv(out / sim.FILES["nonmembers"])
    assert ids == run.probe_ids.tolist()
    np.testing.assert_array_equal(np.isnan(values), np.isnan(run.nonmembers))
    np.testing.assert_allclose(values, run.nonmembers, atol=5.1e-7)


def test_round_trip_through_the_reader(files) -> None:
    readers = pytest.importorskip("mbeacon.store.readers")
    if not hasattr(readers, "open_matrix"):
        pytest.skip("mbeacon.store.readers.open_matrix is not available")
    out, _ = files
    run = sim.simulate_arrays(SMALL)
    for name, expected, format_ in (
        ("members", run.members, "geo"),
        ("reference", run.reference, "matrix"),
        ("members_remeasured", run.members_remeasured, "matrix"),
    ):
        source = readers.open_matrix(out / sim.FILES[name])
        assert source.format == format_
        assert source.samples == run.sample_ids[name.removesuffix("_remeasured")]
        batches = list(source.batches())
        assert [p for b in batches for p in b.probe_ids] == run.probe_ids.tolist()
        values = np.concatenate([b.values for b in batches])
        np.testing.assert_array_equal(np.isnan(values), np.isnan(expected))
        np.testing.assert_allclose(values, expected, atol=1e-6, equal_nan=True)


def test_write_geo_series_matrix_on_its_own(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    probes = [f"cg{k:08d}" for k in range(25)]
    samples = ["GSM1", "GSM2", "GSM3"]
    values = rng.random((25, 3))
    values[3, 1] = np.nan
    path = tmp_path / "GSE1_series_matrix.txt"
    blocks = (values[i : i + 10] for i in range(0, 25, 10))
    metadata = {"Series_title": "a test", "Sample_title": ["a", "b", "c"]}
    assert sim.write_geo_series_matrix(path, probes, samples, blocks, metadata) == 25
    lines = path.read_text().splitlines()
    assert lines[0] == '!Series_title\t"a test"'
    assert '!Series_platform_id\t"GPL13534"' in lines
    title = lines.index('!Sample_title\t"a"\t"b"\t"c"')
    assert lines[title + 1] == '!Sample_geo_accession\t"GSM1"\t"GSM2"\t"GSM3"'
    begin = lines.index("!series_matrix_table_begin")
    assert lines[begin + 1] == '"ID_REF"\t"GSM1"\t"GSM2"\t"GSM3"'
    assert lines[begin + 5] == f'"cg00000003"\t{values[3, 0]:.6f}\t\t{values[3, 2]:.6f}'
    assert len(lines) == begin + 2 + 25 + 1 and lines[-1] == "!series_matrix_table_end"

    # Too few rows for the probe ids: refused, and no file appears.
    broken = tmp_path / "broken.txt.gz"
    with pytest.raises(ValueError, match="25 probe ids"):
        sim.write_geo_series_matrix(broken, probes, samples, [values[:10]])
    assert not broken.exists()
    with pytest.raises(ValueError, match="3 samples"):
        sim.write_geo_series_matrix(broken, probes, samples, [values[:, :2]])
    assert not broken.exists()


# --- the command -------------------------------------------------------------------------------------


def test_cli_writes_every_file_and_the_report(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--out", str(out), "--probes", "400", "--patients", "6", "--nonmembers", "5"]
    result = CliRunner().invoke(simulate_command, [*args, "--reference", "12", "--seed", "5", "--report"])
    assert result.exit_code == 0, result.output
    for name in [*sim.FILES.values(), sim.TRUTH_FILE, sim.REPORT_FILE, sim.REPORT_NUMBERS_FILE]:
        assert (out / name).stat().st_size > 0, name
        assert name in result.output or name[:20] in result.output
    assert (out / sim.REPORT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    numbers = json.loads((out / sim.REPORT_NUMBERS_FILE).read_text())
    assert numbers["neighbour_correlation"]["latent_target"] == 0.3
    truth = json.loads((out / sim.TRUTH_FILE).read_text())
    assert truth["parameters"]["seed"] == 5 and len(truth["samples"]["reference"]) == 12
    assert "400 probes" in result.output


def test_cli_refuses_bad_parameters(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(simulate_command, ["--out", str(tmp_path), "--report", "--reference", "1"])
    assert result.exit_code == 2 and "--reference" in result.output
    result = runner.invoke(simulate_command, ["--out", str(tmp_path), "--probes", "485578"])
    assert result.exit_code == 2
    result = runner.invoke(simulate_command, ["--out", str(tmp_path), "--missing", "1"])
    assert result.exit_code == 2
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_whole_array(tmp_path: Path) -> None:
    """All 485,577 probes, streamed: every probe row is written once, in order."""
    config = sim.SimulationConfig(probes=485_577, patients=20, nonmembers=0, reference=0)
    result = sim.simulate(tmp_path, config)
    assert result.files[sim.FILES["members"]]["rows"] == 485_577
    with gzip.open(tmp_path / sim.FILES["members"], "rt") as handle:
        rows = [
            line.partition("\t")[0]
            for line in handle
            if line.startswith('"') and not line.startswith('"ID_REF')
        ]
    ids, _ = sim.load_population_means()
    assert rows == [f'"{p}"' for p in ids]
