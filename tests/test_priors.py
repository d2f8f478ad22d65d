"""Population priors: Beta by moments, P_prior (beta and empirical), the sd model, the store, the CLI."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from mbeacon import data
from mbeacon.cli.prior import prior as prior_group
from mbeacon.store.errors import DataError
from mbeacon.store.priors import (
    Prior,
    SdModel,
    beta_distribution,
    beta_moments,
    import_means_file,
    learn_sd_model,
    list_priors,
    load_prior,
    model,
    prior_from_matrix,
    prior_from_means,
    prior_from_table_file,
    prior_names,
    save_prior,
    storage,
)

# The data README's table: mean bin -> (probes, median sd), measured on the shipped 20k x 10 blood table.
README_SD = {
    (0.0, 0.1): (647, 0.015),
    (0.2, 0.3): (1789, 0.046),
    (0.4, 0.5): (1641, 0.063),
    (0.6, 0.7): (1975, 0.052),
    (0.8, 0.9): (4140, 0.026),
    (0.9, 1.0): (2186, 0.011),
}


@pytest.fixture(scope="module")
def blood() -> pd.DataFrame:
    return pd.read_csv(data.path(data.BLOOD_REFERENCE), index_col=0)


@pytest.fixture(scope="module")
def blood_prior(blood: pd.DataFrame) -> Prior:
    return prior_from_matrix(blood.index, blood.to_numpy(), name="blood", source="GSE41169")


@pytest.fixture(scope="module")
def means_prior() -> Prior:
    return import_means_file(name="pop450k")


def random_prior(n: int = 50, seed: int = 0, quantiles: bool = False) -> Prior:
    rng = np.random.default_rng(seed)
    ids = np.array([f"cg{i:08d}" for i in range(n)])
    mean = rng.uniform(0.01, 0.99, n)
    sd = rng.uniform(0.001, 0.2, n) * np.sqrt(mean * (1 - mean)) * 2
    a, b = beta_moments(mean, sd)
    q = None
    if quantiles:
        q = np.sort(rng.random((n, 11)), axis=1)
    return Prior("random", None, ids, mean, sd, a, b, q, 0, "test", "")


# --- Beta by moments ---------------------------------------------------------------------------------


@pytest.mark.parametrize("a,b", [(0.5, 0.5), (2.0, 5.0), (30.0, 3.0), (0.3, 8.0), (200.0, 150.0)])
def test_beta_by_moments_recovers_known_parameters(a: float, b: float) -> None:
    rng = np.random.default_rng(7)
    sample = rng.beta(a, b, size=(1, 200_000))
    fitted = prior_from_matrix(["cg1"], sample, name="fit", quantiles=0)
    # The moment estimator's sd over 200k samples is a few 0.1% of (a, b); 3% is a wide margin.
    assert fitted.a[0] == pytest.approx(a, rel=0.03)
    assert fitted.b[0] == pytest.approx(b, rel=0.03)
    # And the inverse map is exact: the fitted Beta has the sample's mean and sd.
    a_hat, b_hat = fitted.a[0], fitted.b[0]
    assert stats.beta.mean(a_hat, b_hat) == pytest.approx(sample.mean(), rel=1e-12)
    assert stats.beta.std(a_hat, b_hat) == pytest.approx(sample.std(ddof=1), rel=1e-9)


def test_beta_by_moments_edge_cases_are_clipped() -> None:
    m = np.array([0.0, 1.0, 0.5, 0.3, 0.3, -0.1, 1.2, 0.5])
    sd = np.array([0.01, 0.01, 0.0, 0.6, np.sqrt(0.21), 0.01, 0.01, np.nan])
    a, b = beta_moments(m, sd)
    assert np.all(np.isfinite(a[:-1])) and np.all(a[:-1] > 0) and np.all(b[:-1] > 0)
    assert np.isnan(a[-1]) and np.isnan(b[-1])
    mean = a / (a + b)
    assert mean[0] == pytest.approx(1e-4) and mean[5] == pytest.approx(1e-4)
    assert mean[1] == pytest.approx(1 - 1e-4) and mean[6] == pytest.approx(1 - 1e-4)
    var = a * b / ((a + b) ** 2 * (a + b + 1))
    assert var[2] == pytest.approx(1e-8)  # v = 0 -> the floor
    # v >= m (1 - m) -> 0.999 m (1 - m): the widest Beta with that mean
    assert var[3] == pytest.approx(0.999 * 0.21) and var[4] == pytest.approx(0.999 * 0.21)
    assert a[3] + b[3] == pytest.approx(1 / 999)


# --- P_prior, beta method ----------------------------------------------------------------------------


def scipy_reference(prior: Prior, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    a, b = prior.a[idx], prior.b[idx]
    ref = stats.beta.cdf(np.clip(hi, 0, 1), a, b) - stats.beta.cdf(np.clip(lo, 0, 1), a, b)
    return np.where(lo > hi, 0.0, ref)


@settings(max_examples=200, deadline=None)
@given(
    mean=st.floats(0.0, 1.0),
    sd=st.floats(0.0, 0.6),
    lo=st.floats(-0.5, 1.5),
    hi=st.floats(-0.5, 1.5),
)
def test_beta_probability_matches_scipy(mean: float, sd: float, lo: float, hi: float) -> None:
    a, b = beta_moments([mean], [sd])
    p = Prior("h", None, np.array(["cg1"]), [mean], [sd], a, b, None, 0)
    got = p.probability(np.array([0]), lo, hi, method="beta")
    want = scipy_reference(p, np.array([0]), np.array([lo]), np.array([hi]))
    # Exact up to rounding, and the tail shortcut's bound (4.2e-18).
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_beta_probability_matches_scipy_in_bulk(means_prior: Prior) -> None:
    rng = np.random.default_rng(3)
    n = 3 * model.CHUNK + 17  # several chunks, the last one short, on two threads
    idx = rng.integers(0, len(means_prior), n)
    centre, half = rng.random(n), rng.uniform(0.0, 0.3, n)
    lo, hi = centre - half, centre + half
    got = means_prior.probability(idx, lo, hi, method="beta", threads=2)
    np.testing.assert_allclose(got, scipy_reference(means_prior, idx, lo, hi), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(got, means_prior.probability(idx, lo, hi, method="beta", threads=1))


def test_threads_do_not_change_empirical_answers(blood_prior: Prior) -> None:
    rng = np.random.default_rng(8)
    n = 2 * model.CHUNK + 3
    idx, lo = rng.integers(0, len(blood_prior), n), rng.random(n)
    hi = lo + rng.uniform(0, 0.5, n)
    one = blood_prior.probability(idx, lo, hi, method="empirical", threads=1)
    np.testing.assert_array_equal(one, blood_prior.probability(idx, lo, hi, method="empirical", threads=3))


def test_tail_shortcut_is_within_its_bound() -> None:
    """Beta(a, b) is 1/(4(a+b+1))-sub-Gaussian: the tail beyond mean -/+ t is below exp(-2(a+b+1)t^2).
    Checked on random Betas (a + b from 0.01 to 1e5), then the shortcut against betainc itself."""
    rng = np.random.default_rng(9)
    n = 20_000
    s, m = 10 ** rng.uniform(-2, 5, n), rng.uniform(0, 1, n)
    a, b = m * s, (1 - m) * s
    mean, exponent = a / (a + b), rng.uniform(0, 80, n)
    side = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    x = mean + side * np.sqrt(exponent / (2 * (a + b + 1)))
    inside = (x > 0) & (x < 1)
    tail = np.where(
        side < 0, special.betainc(a, b, np.clip(x, 0, 1)), special.betaincc(a, b, np.clip(x, 0, 1))
    )
    assert np.all(tail[inside] <= np.exp(-exponent[inside]) * (1 + 1e-9))
    x = np.clip(x, 0, 1)
    got = beta_distribution._beta_cdf(a, b, mean, 2 * (a + b + 1), x)
    np.testing.assert_allclose(
        got, special.betainc(a, b, x), rtol=1e-12, atol=np.exp(-beta_distribution.TAIL_EXPONENT)
    )
    assert np.count_nonzero(exponent > beta_distribution.TAIL_EXPONENT) > n // 4  # the shortcut was exercised


@pytest.mark.parametrize("method", ["beta", "empirical"])
def test_probability_edges(blood_prior: Prior, method: str) -> None:
    idx = np.arange(0, 20_000, 997)
    p = blood_prior.probability
    np.testing.assert_allclose(p(idx, 0.0, 1.0, method=method), 1.0)
    np.testing.assert_allclose(p(idx, -3.0, 7.0, method=method), 1.0)
    np.testing.assert_array_equal(p(idx, 0.6, 0.4, method=method), 0.0)  # lo > hi
    np.testing.assert_array_equal(p(idx, 1.0, 1.0, method=method), 0.0)
    np.testing.assert_array_equal(p(idx, 1.5, 2.0, method=method), 0.0)
    np.testing.assert_array_equal(p(idx, -1.0, 0.0, method=method), 0.0)
    # [lo, hi] and its complement add up to one
    lo_part, hi_part = p(idx, 0.0, 0.37, method=method), p(idx, 0.37, 1.0, method=method)
    np.testing.assert_allclose(lo_part + hi_part, 1.0, atol=1e-12)
    assert np.all(np.isnan(p(idx, np.nan, 0.5, method=method)))
    assert np.all(np.isnan(p(idx, 0.1, np.nan, method=method)))
    got = p(idx, 0.2, 0.8, method=method)
    assert np.all((got >= 0) & (got <= 1))


def test_point_queries_have_zero_beta_probability(means_prior: Prior) -> None:
    assert means_prior.probability(np.arange(100), 0.5, 0.5) == pytest.approx(np.zeros(100))


def test_broadcast_shapes_and_id_input(blood_prior: Prior) -> None:
    ids = blood_prior.probe_ids[[5, 50, 500]]
    probes = np.array(ids).reshape(3, 1)
    lo = np.array([0.0, 0.2, 0.5, 0.9])
    out = blood_prior.probability(probes, lo, 0.95)
    assert out.shape == (3, 4)
    for i, probe in enumerate(ids):
        for j, low in enumerate(lo):
            single = blood_prior.probability(np.array([probe]), low, 0.95)
            assert out[i, j] == single[0]
    by_index = blood_prior.probability(np.array([5, 50, 500])[:, None], lo, 0.95)
    np.testing.assert_array_equal(out, by_index)
    scalar = blood_prior.probability(str(ids[0]), 0.2, 0.6)
    assert scalar.shape == () and 0 <= float(scalar) <= 1
    assert blood_prior.probability([], 0.2, 0.6).shape == (0,)
    matrix = blood_prior.probability(np.zeros((2, 3), dtype=int), np.zeros((2, 3)), np.ones((2, 3)))
    assert matrix.shape == (2, 3)


def test_unknown_probes(blood_prior: Prior) -> None:
    known = str(blood_prior.probe_ids[10])
    names = np.array([known, "cgNOPE", "", "zz99999999", "cg00000000"])
    index = blood_prior.index(names)
    assert index.tolist() == [10, -1, -1, -1, -1]
    assert blood_prior.index(known) == 10 and blood_prior.index(known).shape == ()
    assert blood_prior.index(np.array([known.encode()]))[0] == 10
    for method in ("beta", "empirical"):
        p = blood_prior.probability(names, 0.0, 1.0, method=method)
        assert p[0] == pytest.approx(1.0) and np.all(np.isnan(p[1:]))
        p = blood_prior.probability(np.array([0, -1, 20_000, 10**9]), 0.0, 1.0, method=method)
        assert p[0] == pytest.approx(1.0) and np.all(np.isnan(p[1:]))
    # large inputs take the hash lookup: same answers as the binary search
    rng = np.random.default_rng(4)
    many = np.where(
        rng.random(model.HASH_LOOKUP_MIN + 4) < 0.9,
        blood_prior.probe_ids[rng.integers(0, len(blood_prior), model.HASH_LOOKUP_MIN + 4)],
        "cgMISSING",
    ).reshape(-1, 4)
    by_hash = blood_prior.index(many)
    by_search = np.array([blood_prior.index(row) for row in many])
    assert by_hash.shape == many.shape and by_hash.dtype == np.int64
    np.testing.assert_array_equal(by_hash, by_search)
    assert np.count_nonzero(by_hash < 0) == np.count_nonzero(many == "cgMISSING")
    empty = prior_from_means(np.array([], dtype=str), np.array([]), name="empty")
    assert empty.index(["cg1"]).tolist() == [-1]
    assert np.isnan(empty.probability(["cg1"], 0, 1)[0])


def test_method_choice(blood_prior: Prior, means_prior: Prior) -> None:
    assert blood_prior.resolve_method("auto") == "empirical"
    assert means_prior.resolve_method("auto") == "beta"
    with pytest.raises(ValueError, match="no quantile sketch"):
        means_prior.probability([0], 0, 1, method="empirical")
    with pytest.raises(ValueError, match="unknown method"):
        blood_prior.probability([0], 0, 1, method="normal")
    with pytest.raises(TypeError):
        blood_prior.probability(np.array([0.5]), 0, 1)


# --- P_prior, empirical method -----------------------------------------------------------------------


def interval_frequency(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    inside = (values >= lo[:, None]) & (values <= hi[:, None]) & ~np.isnan(values)
    return inside.sum(axis=1) / (~np.isnan(values)).sum(axis=1)


def test_sketch_matches_numpy_quantiles(blood: pd.DataFrame) -> None:
    values = blood.to_numpy()[:2000].copy()
    values[np.random.default_rng(0).random(values.shape) < 0.2] = np.nan  # missing values ignored
    built = prior_from_matrix(blood.index[:2000], values, name="q", quantiles=11)
    want = np.nanquantile(values, np.linspace(0, 1, 11), axis=1).T
    np.testing.assert_allclose(built.quantiles, want, atol=1e-7)  # float32 storage


def test_empirical_probability_matches_reference_frequency(blood: pd.DataFrame, blood_prior: Prior) -> None:
    """The piecewise-linear CDF through the sorted values is within 1/(n-1) of the ECDF, and the sketch
    adds at most 1/(Q-1): an interval's probability is within 2 (1/(n-1) + 1/(Q-1)) of the observed
    frequency (0.24 for n = 10, Q = 101), plus float32 rounding."""
    rng = np.random.default_rng(11)
    n = 5000
    idx = rng.integers(0, len(blood_prior), n)
    values = blood.loc[blood_prior.probe_ids[idx]].to_numpy()
    lo = rng.uniform(-0.05, 1.0, n)
    hi = lo + rng.uniform(0.0, 0.4, n)
    got = blood_prior.probability(idx, lo, hi, method="empirical")
    freq = interval_frequency(values, lo, hi)
    bound = 2 * (1 / 9 + 1 / 100) + 1e-6
    assert np.max(np.abs(got - freq)) <= bound
    assert np.mean(np.abs(got - freq)) < 0.03


def test_empirical_probability_converges_with_many_samples() -> None:
    rng = np.random.default_rng(5)
    n_probes, n_samples = 200, 4000
    a, b = rng.uniform(0.3, 30, (2, n_probes))
    values = rng.beta(a[:, None], b[:, None], (n_probes, n_samples))
    built = prior_from_matrix([f"cg{i:04d}" for i in range(n_probes)], values, name="big")
    lo = rng.uniform(0, 1, n_probes)
    hi = np.minimum(lo + rng.uniform(0, 0.3, n_probes), 1.0)
    got = built.probability(np.arange(n_probes), lo, hi, method="empirical")
    bound = 2 * (1 / (n_samples - 1) + 1 / 100) + 1e-6  # 0.0205
    assert np.max(np.abs(got - interval_frequency(values, lo, hi))) <= bound
    # and both methods agree with the true Beta within the sketch's and the sampling's error
    truth = stats.beta.cdf(hi, a, b) - stats.beta.cdf(lo, a, b)
    assert np.max(np.abs(got - truth)) < 0.05
    assert np.max(np.abs(built.probability(np.arange(n_probes), lo, hi, method="beta") - truth)) < 0.05


def test_empirical_point_mass_and_ties() -> None:
    values = np.array(
        [[0.5] * 6, [0.2, 0.2, 0.2, 0.8, 0.8, 0.8], [0.3, np.nan, np.nan, np.nan, np.nan, np.nan]]
    )
    built = prior_from_matrix(["cgA", "cgB", "cgC"], values, name="ties", quantiles=11)
    p = built.probability
    assert p(["cgA"], 0.5, 0.5)[0] == 1.0
    assert p(["cgA"], 0.5, 1.0)[0] == 1.0 and p(["cgA"], 0.0, 0.5)[0] == 1.0
    assert p(["cgA"], 0.0, 0.4999)[0] == 0.0 and p(["cgA"], 0.5001, 1.0)[0] == 0.0
    # cgB: two point masses of 1/2 each ("linear" quantiles put the middle level between them)
    assert p(["cgB"], 0.2, 0.2)[0] == pytest.approx(0.5, abs=0.1)
    assert p(["cgB"], 0.0, 1.0)[0] == 1.0
    assert p(["cgB"], 0.0, 0.2)[0] + p(["cgB"], 0.2000001, 1.0)[0] == pytest.approx(1.0)
    # cgC: a single value -> a point mass, sd from the sd model
    assert p(["cgC"], 0.3, 0.3)[0] == 1.0 and p(["cgC"], 0.31, 1)[0] == 0.0
    assert built.sd[2] == pytest.approx(learn_sd_model().predict(0.3))


# --- the sd model ------------------------------------------------------------------------------------


def test_sd_model_reproduces_the_readme_table(blood: pd.DataFrame) -> None:
    """Per README bin, the median predicted sd over the bin's probes is within 10% of the README's
    median (itself rounded to 3 decimals), and the knots are the exact medians of 0.05-wide bins."""
    model = learn_sd_model()
    means = blood.mean(axis=1).to_numpy()
    sds = blood.std(axis=1, ddof=1).to_numpy()
    for (lo, hi), (count, median_sd) in README_SD.items():
        sel = (means >= lo) & (means < hi)
        assert np.count_nonzero(sel) == count
        assert np.median(sds[sel]) == pytest.approx(median_sd, abs=0.0006)  # the README's measurement
        assert np.median(model.predict(means[sel])) == pytest.approx(median_sd, rel=0.10)
    assert model.knot_mean.size == 20
    sel = (means >= 0.4) & (means < 0.45)
    assert model.knot_sd[8] == pytest.approx(np.median(sds[sel]))
    assert model.predict(np.array([0.0, 1.0, np.nan]))[:2].tolist() == [0.0, 0.0]
    assert np.isnan(model.predict(np.array([np.nan]))[0])
    # shape preserved; the peak is in the middle, the ends are narrow
    grid = model.predict(np.linspace(0, 1, 101).reshape(1, 101))
    assert grid.shape == (1, 101) and 0.4 < np.argmax(grid) / 100 < 0.5


def test_sd_model_from_a_table_file(tmp_path: Path, blood: pd.DataFrame) -> None:
    path = tmp_path / "ref.tsv"
    blood.iloc[:4000].to_csv(path, sep="\t")
    from_file = learn_sd_model(path)
    from_frame = learn_sd_model(blood.iloc[:4000])
    np.testing.assert_allclose(from_file.knot_sd, from_frame.knot_sd)
    np.testing.assert_allclose(learn_sd_model(blood.iloc[:4000].to_numpy()).knot_sd, from_frame.knot_sd)
    with pytest.raises(DataError):
        learn_sd_model(np.full((10, 2), 0.5))  # no probe with 3 values
    with pytest.raises(ValueError):
        SdModel(np.array([0.5, 0.2]), np.array([0.1, 0.1]))


def test_prior_from_means(means_prior: Prior) -> None:
    assert len(means_prior) == 485_577 and means_prior.n_reference == 0 and means_prior.quantiles is None
    table = pd.read_csv(data.path(data.POPULATION_MEANS))
    assert np.array_equal(means_prior.probe_ids, table.probe_id.to_numpy().astype(str))
    np.testing.assert_array_equal(means_prior.mean, table.mean_beta.to_numpy())
    np.testing.assert_allclose(means_prior.sd, learn_sd_model().predict(means_prior.mean))
    np.testing.assert_allclose(means_prior.a / (means_prior.a + means_prior.b), means_prior.mean)
    assert "sd model" in means_prior.source
    # a custom sd model, NaN means left out, unsorted input sorted
    model = SdModel(np.array([0.5]), np.array([0.05]))
    custom = prior_from_means(["cgB", "cgA", "cgC"], [0.5, 0.25, np.nan], name="c", sd_model=model)
    assert custom.probe_ids.tolist() == ["cgA", "cgB"] and custom.mean.tolist() == [0.25, 0.5]
    np.testing.assert_allclose(custom.sd, [0.025, 0.05])
    with pytest.raises(DataError, match="outside"):
        prior_from_means(["cgA"], [1.5], name="c")
    with pytest.raises(DataError, match="more than once"):
        prior_from_means(["cgA", "cgA"], [0.5, 0.5], name="c")


def test_prior_from_matrix_details() -> None:
    values = np.array([[0.1, 0.2, 0.3], [np.nan] * 3, [0.9, np.nan, np.nan], [0.4, 0.5, np.nan]])
    built = prior_from_matrix(["cgD", "cgC", "cgB", "cgA"], values, name="m", source="unit")
    assert built.probe_ids.tolist() == ["cgA", "cgB", "cgD"]  # cgC (no values) is unknown
    np.testing.assert_allclose(built.mean, [0.45, 0.9, 0.2])
    assert built.sd[0] == pytest.approx(np.std([0.4, 0.5], ddof=1))
    assert built.sd[1] == pytest.approx(learn_sd_model().predict(0.9))
    assert built.n_reference == 3 and built.quantiles.shape == (3, 101)
    with pytest.raises(DataError, match="outside"):
        prior_from_matrix(["cgA"], [[0.5, 1.2]], name="m")
    with pytest.raises(DataError, match="more than once"):
        prior_from_matrix(["cgA", "cgA"], [[0.5], [0.4]], name="m")
    with pytest.raises(DataError, match="invalid prior name"):
        prior_from_matrix(["cgA"], [[0.5]], name="../evil")
    with pytest.raises(ValueError, match="sorted"):
        Prior("x", None, np.array(["b", "a"]), [0.5, 0.5], [0.1, 0.1], [1, 1], [1, 1], None, 0)
    assert not built.mean.flags.writeable


def test_table_file_streaming_matches_in_memory(tmp_path: Path, blood: pd.DataFrame) -> None:
    part = blood.iloc[:3000].copy()
    part.iloc[5, 2] = np.nan
    path = tmp_path / "ref.csv.gz"
    part.to_csv(path)
    streamed = prior_from_table_file(path, name="s", chunk_rows=700)
    direct = prior_from_matrix(part.index, part.to_numpy(), name="s")
    for field in ("mean", "sd", "a", "b", "quantiles"):
        np.testing.assert_allclose(getattr(streamed, field), getattr(direct, field), rtol=1e-12, atol=1e-7)
    assert streamed.source == "ref.csv.gz" and streamed.n_reference == 10


@pytest.mark.parametrize(
    "content,match,line",
    [
        ("probe\ts1\ts2\ncg1\t0.5\t0.6\ncg2\t0.5\tabc\n", "not a number", 3),
        ("probe,s1\ncg1,0.5\ncg2,1.5\n", "outside", 3),
        ("probe,s1\ncg1,0.5\ncg1,0.4\n", "more than once", None),
        ("", "empty file", 1),
        ("probe\ncg1\n", "at least one sample", 1),
    ],
)
def test_table_file_errors(tmp_path: Path, content: str, match: str, line: int | None) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(DataError, match=match) as info:
        prior_from_table_file(path, name="bad")
    if line is not None:
        assert f"line {line}" in str(info.value) or info.value.line == line


# --- importing means ---------------------------------------------------------------------------------


def test_import_means_file_variants(tmp_path: Path) -> None:
    path = tmp_path / "means.tsv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("probe_id\tmean_beta\ncg3\t0.7\ncg1\t0.2\ncg2\tNA\ncg4\t\n")
    imported = import_means_file(path, name="tiny")
    assert imported.probe_ids.tolist() == ["cg1", "cg3"] and imported.mean.tolist() == [0.2, 0.7]
    assert imported.source.startswith("means.tsv.gz")


@pytest.mark.parametrize(
    "content,match,line",
    [
        ("probe,mean\ncg1,0.5\n", "probe_id,mean_beta", 1),
        ("probe_id,mean_beta\ncg1,0.5\ncg2,high\n", "not a number", 3),
        ("probe_id,mean_beta\ncg1,0.5\ncg2,-0.5\n", "outside", 3),
        ("probe_id,mean_beta\ncg1,0.5\ncg2,0.1\ncg1,0.4\n", "appears again", 4),
    ],
)
def test_import_means_errors(tmp_path: Path, content: str, match: str, line: int) -> None:
    path = tmp_path / "means.csv"
    path.write_text(content)
    with pytest.raises(DataError, match=match) as info:
        import_means_file(path, name="bad")
    assert info.value.line == line and info.value.path == str(path)


# --- the store ---------------------------------------------------------------------------------------


def assert_same_prior(x: Prior, y: Prior) -> None:
    for field in ("probe_ids", "mean", "sd", "a", "b"):
        np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
        assert getattr(x, field).dtype == getattr(y, field).dtype
    if x.quantiles is None:
        assert y.quantiles is None
    else:
        np.testing.assert_array_equal(x.quantiles, y.quantiles)
    for field in ("name", "n_reference", "source", "created"):
        assert getattr(x, field) == getattr(y, field)


def test_save_load_round_trip_and_versions(tmp_path: Path, blood_prior: Prior, means_prior: Prior) -> None:
    first = save_prior(tmp_path, blood_prior)
    assert first.version == 1 and blood_prior.version is None
    assert (tmp_path / "priors" / "blood" / "v1.h5").is_file()
    loaded = load_prior(tmp_path, "blood")
    assert loaded.version == 1
    assert_same_prior(loaded, blood_prior)
    assert loaded.probe_ids.dtype.kind == "U"
    second = save_prior(tmp_path, dataclass_replace(blood_prior, source="again"))
    assert second.version == 2
    assert load_prior(tmp_path, "blood").source == "again"
    assert load_prior(tmp_path, "blood", 1).source == "GSE41169"
    means = save_prior(tmp_path, means_prior)
    assert_same_prior(load_prior(tmp_path, "pop450k"), means_prior)
    assert means.version == 1
    listing = list_priors(tmp_path)
    assert [(e["name"], e["version"], e["latest"]) for e in listing] == [
        ("blood", 1, False),
        ("blood", 2, True),
        ("pop450k", 1, True),
    ]
    assert listing[0]["probes"] == 20_000 and listing[0]["n_reference"] == 10 and listing[0]["sketch"] == 101
    assert listing[2]["sketch"] == 0 and listing[2]["source"] == means_prior.source
    assert prior_names(tmp_path) == ["blood", "pop450k"]
    (tmp_path / "priors" / "empty").mkdir()  # a folder without a version is no prior
    assert prior_names(tmp_path) == ["blood", "pop450k"] and prior_names(tmp_path / "nowhere") == []
    # the loaded prior answers exactly like the original
    idx = np.arange(0, 20_000, 7)
    np.testing.assert_array_equal(loaded.probability(idx, 0.3, 0.7), blood_prior.probability(idx, 0.3, 0.7))


def dataclass_replace(prior: Prior, **changes: object) -> Prior:
    import dataclasses

    return dataclasses.replace(prior, **changes)


def test_unknown_names_and_versions(tmp_path: Path, blood_prior: Prior) -> None:
    with pytest.raises(DataError, match="the store has no priors"):
        load_prior(tmp_path, "blood")
    save_prior(tmp_path, blood_prior)
    with pytest.raises(DataError, match="known: blood"):
        load_prior(tmp_path, "other")
    with pytest.raises(DataError, match="no version 3; versions: 1"):
        load_prior(tmp_path, "blood", 3)
    with pytest.raises(DataError, match="invalid prior name"):
        load_prior(tmp_path, "../blood")
    assert list_priors(tmp_path / "nowhere") == []


def test_failed_save_leaves_no_new_version(tmp_path: Path, blood_prior: Prior, monkeypatch) -> None:
    save_prior(tmp_path, blood_prior)

    write = storage._write_h5

    def write_then_fail(temp: Path, prior: Prior, version: int) -> None:
        write(temp, prior, version)
        assert temp.stat().st_size > 0  # the file was (completely) written, not yet published
        raise OSError("disk full")

    monkeypatch.setattr(storage, "_write_h5", write_then_fail)
    with pytest.raises(OSError, match="disk full"):
        save_prior(tmp_path, blood_prior)
    monkeypatch.setattr(storage, "_write_h5", write)
    assert sorted(p.name for p in (tmp_path / "priors" / "blood").glob("v*")) == ["v1.h5", "v1.sha256"]
    assert list((tmp_path / ".staging").iterdir()) == []
    assert [e["version"] for e in list_priors(tmp_path)] == [1]
    assert save_prior(tmp_path, blood_prior).version == 2  # the next save takes the next number


def test_a_damaged_prior_file_is_refused_by_its_checksum(tmp_path: Path, blood_prior: Prior) -> None:
    path = save_prior(tmp_path, blood_prior) and tmp_path / "priors" / "blood" / "v1.h5"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of the values: HDF5 itself would read it without complaint
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"damaged.*v1\.sha256"):
        load_prior(tmp_path, "blood")
    with pytest.raises(DataError, match="damaged"):
        list_priors(tmp_path)
    path.with_suffix(".sha256").unlink()  # a version saved before checksums: read unchecked
    assert load_prior(tmp_path, "blood").version == 1


def test_concurrent_saves_get_distinct_versions(tmp_path: Path) -> None:
    small = prior_from_means(["cg1", "cg2"], [0.2, 0.8], name="race")
    versions: list[int] = []
    lock = threading.Lock()

    def save() -> None:
        saved = save_prior(tmp_path, small)
        with lock:
            versions.append(saved.version)

    threads = [threading.Thread(target=save) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(versions) == [1, 2, 3, 4, 5, 6]


# --- the CLI -----------------------------------------------------------------------------------------


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


def test_cli_import_build_list_show(tmp_path: Path, runner: CliRunner, blood: pd.DataFrame) -> None:
    store = tmp_path / "store"
    means = tmp_path / "means.csv"
    means.write_text("probe_id,mean_beta\ncg00000029,0.41525\ncg00000108,0.93554\n")
    result = runner.invoke(prior_group, ["import-means", str(means), "--store", str(store), "--name", "pop"])
    assert result.exit_code == 0, result.output
    assert "saved prior pop version 1: 2 probes" in result.output

    ref = tmp_path / "ref.tsv"
    blood.iloc[:500].to_csv(ref, sep="\t")
    args = ["build", "--store", str(store), "--name", "blood", "--from-file", str(ref), "--json"]
    result = runner.invoke(prior_group, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["version"] == 1 and summary["probes"] == 500 and summary["sketch"] == 101
    result = runner.invoke(prior_group, [*args[:-1], "--quantiles", "0"])
    assert result.exit_code == 0 and "version 2" in result.output and "no sketch" in result.output

    result = runner.invoke(prior_group, ["list", "--store", str(store), "--json"])
    assert result.exit_code == 0
    assert [(e["name"], e["version"]) for e in json.loads(result.output)] == [
        ("blood", 1),
        ("blood", 2),
        ("pop", 1),
    ]
    result = runner.invoke(prior_group, ["list", "--store", str(store)])
    assert result.exit_code == 0 and "pop" in result.output and "blood" in result.output

    probe = str(blood.index[3])
    show = ["show", "--store", str(store), "--name", "blood", "--version", "1", "--probe", probe]
    result = runner.invoke(prior_group, [*show, "--lo", "0.2", "--hi", "0.6", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)["results"][0]
    expected = load_prior(store, "blood", 1).probability([probe], 0.2, 0.6)[0]
    assert row["p"] == pytest.approx(expected) and row["method"] == "empirical"
    result = runner.invoke(prior_group, [*show, "--lo", "0.2", "--method", "beta"])
    assert result.exit_code == 0 and f"{probe}  P[0.2, 1] = " in result.output and "(beta;" in result.output
    result = runner.invoke(prior_group, ["show", "--store", str(store), "--name", "pop"])
    assert result.exit_code == 0 and "probes: 2" in result.output


def test_cli_import_means_default_file(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(prior_group, ["import-means", "--store", str(tmp_path), "--name", "pop", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["probes"] == 485_577


def test_cli_sd_reference(tmp_path: Path, runner: CliRunner) -> None:
    ref = tmp_path / "ref.csv"
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.beta(2, 2, (200, 5)), index=[f"cg{i}" for i in range(200)])
    frame.to_csv(ref)
    means = tmp_path / "m.csv"
    means.write_text("probe_id,mean_beta\ncg1,0.5\n")
    args = ["import-means", str(means), "--store", str(tmp_path), "--name", "p", "--sd-reference", str(ref)]
    result = runner.invoke(prior_group, args)
    assert result.exit_code == 0, result.output
    assert "ref.csv" in load_prior(tmp_path, "p").source


@pytest.mark.parametrize(
    "args,message",
    [
        (["show", "--name", "nope", "--probe", "cg1", "--lo", "0.1"], "no prior named 'nope'"),
        (["show", "--name", "pop", "--probe", "cgXX", "--lo", "0.1"], "does not know probe(s) cgXX"),
        (["show", "--name", "pop", "--probe", "cg1", "--lo", "0", "--method", "empirical"], "no quantile"),
        (["show", "--name", "pop", "--version", "9"], "no version 9"),
        (["build", "--name", "bad", "--from-file", "{bad}"], "not a number"),
        (["import-means", "{bad}", "--name", "bad"], "probe_id,mean_beta"),
        (["build", "--name", "a/b", "--from-file", "{bad}"], "invalid prior name"),
    ],
)
def test_cli_data_errors_exit_2(tmp_path: Path, runner: CliRunner, args: list[str], message: str) -> None:
    save_prior(tmp_path, prior_from_means(["cg1"], [0.5], name="pop"))
    bad = tmp_path / "bad.csv"
    bad.write_text("probe,s1\ncg1,0.5\ncg2,oops\n")
    args = [a.replace("{bad}", str(bad)) for a in args]
    result = runner.invoke(prior_group, [*args, "--store", str(tmp_path)])
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    "args",
    [
        ["show", "--name", "pop", "--probe", "cg1"],  # no range
        ["show", "--name", "pop", "--lo", "0.2"],  # range without probe
        ["build", "--name", "x"],  # no source
        ["import-means", "/does/not/exist.csv", "--name", "x"],
    ],
)
def test_cli_usage_errors(tmp_path: Path, runner: CliRunner, args: list[str]) -> None:
    save_prior(tmp_path, prior_from_means(["cg1"], [0.5], name="pop"))
    result = runner.invoke(prior_group, [*args, "--store", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_cli_help_texts(runner: CliRunner) -> None:
    result = runner.invoke(prior_group, ["--help"])
    assert result.exit_code == 0
    for command in ("import-means", "build", "list", "show"):
        assert command in result.output
        sub = runner.invoke(prior_group, [command, "--help"])
        assert sub.exit_code == 0 and "--store" in sub.output


def test_build_from_a_dataset_in_the_store(tmp_path):
    from click.testing import CliRunner

    from mbeacon.cli import main
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.priors import load_prior

    rng = np.random.default_rng(3)
    values = rng.beta(2, 5, size=(40, 30)).astype(np.float32)
    ids = [f"cg{i:08d}" for i in range(40)]
    CohortStore(tmp_path, create=True).write("ref", [f"S{j}" for j in range(30)], iter([(ids, values)]))
    runner = CliRunner()
    result = runner.invoke(
        main, ["prior", "build", "--store", str(tmp_path), "--name", "blood", "--from-dataset", "ref"]
    )
    assert result.exit_code == 0, result.output
    built = load_prior(tmp_path, "blood")
    assert built.n_reference == 30 and built.source == "dataset ref"
    np.testing.assert_allclose(built.mean, values.astype(np.float64).mean(axis=1), rtol=1e-6)
    both = runner.invoke(
        main,
        [
            "prior",
            "build",
            "--store",
            str(tmp_path),
            "--name",
            "x",
            "--from-dataset",
            "ref",
            "--from-file",
            __file__,
        ],
    )
    assert both.exit_code == 2 and "exactly one reference" in both.output
    unknown = runner.invoke(
        main, ["prior", "build", "--store", str(tmp_path), "--name", "x", "--from-dataset", "nope"]
    )
    assert unknown.exit_code == 2 and "no dataset 'nope'" in unknown.output


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.integers(0, 19_999), min_size=1, max_size=8),
    bounds=st.lists(
        st.tuples(
            st.one_of(st.floats(-0.5, 1.5), st.sampled_from([0.0, 0.2, 0.5, 1.0])),
            st.one_of(st.floats(-0.5, 1.5), st.sampled_from([0.0, 0.2, 0.5, 1.0])),
        ),
        min_size=8,
        max_size=8,
    ),
)
def test_small_queries_give_bit_identical_answers(blood_prior: Prior, rows: list[int], bounds) -> None:
    """The plain-Python path for a few queries equals the vectorised one exactly, so a query's beta
    (and so its released prior answer) does not depend on whether it came alone or in a batch."""
    pos = np.array(rows) % len(blood_prior)
    lo = np.array([b[0] for b in bounds[: len(rows)]])
    hi = np.array([b[1] for b in bounds[: len(rows)]])
    small = blood_prior.probability(pos, lo, hi, method="empirical")
    padded = blood_prior.probability(
        np.concatenate([pos, np.zeros(20, dtype=np.int64)]),
        np.concatenate([lo, np.zeros(20)]),
        np.concatenate([hi, np.ones(20)]),
        method="empirical",
    )[: len(rows)]
    assert np.array_equal(small, padded, equal_nan=True)
    sample = blood_prior.quantiles[pos[0]]
    at_reference = blood_prior.probability(
        pos[:1], sample[3:4].astype(np.float64), sample[7:8].astype(np.float64)
    )
    vector = blood_prior.probability(
        np.repeat(pos[:1], 9), np.repeat(sample[3:4].astype(np.float64), 9), np.repeat(sample[7:8], 9)
    )
    assert np.array_equal(at_reference, vector[:1])


_BOUND = st.one_of(
    st.floats(-0.5, 1.5, allow_nan=False),
    st.sampled_from([0.0, 1.0, 0.5, -np.inf, np.inf, np.nan]),
)


@settings(max_examples=400, deadline=None)
@given(row=st.integers(-1, 2_000), lo=_BOUND, hi=_BOUND, empirical=st.booleans())
def test_probability_one_is_the_array_path_bit_for_bit(
    blood_prior: Prior, means_prior: Prior, row: int, lo: float, hi: float, empirical: bool
) -> None:
    """The single-query path gives the very float of :meth:`Prior.probability` (NaN where it does),
    for known and unknown probes, reversed, open and non-finite bounds, with and without a sketch."""
    prior = blood_prior if empirical else means_prior
    probe = str(prior.probe_ids[row]) if 0 <= row < len(prior) else f"cgUNKNOWN{row}"
    one = prior.probability_one(probe, lo, hi)
    array = float(prior.probability(np.array([probe]), lo, hi)[0])
    assert one == array or (np.isnan(one) and np.isnan(array))
