"""Noise: the secure discrete Laplace sampler against numpy's non-secure Laplace, plus the candidates.

Rows:

* vectorised ``discrete_laplace(scale, size=N)`` from the OS CSPRNG (the service's only source)
  against ``np.random.default_rng().laplace`` (PCG64, not secure, float): the ceiling for a
  one-word-per-sample inverse-CDF sampler in numpy;
* for the record, the candidate secure sources (``docs/noise.md``): randomgen's ChaCha20 bit
  generator feeding mbeacon's own transform (``rng=numpy.random.Generator(ChaCha(...))``) and
  OpenDP's exact discrete Laplace sampler, each against the OS-CSPRNG sampler in the same run;
* one scalar draw ``discrete_laplace(scale)`` (the per-query path of the service) against numpy's
  scalar ``Generator.laplace``.

Every sampler uses the same scale: the SVT² query noise at eps = 1, c = 5 (about 24.3).
"""

from __future__ import annotations

import secrets

import numpy as np

from benchmarks.common import Result, skipped, speed_ratio, time_interleaved
from mbeacon.privacy import discrete_laplace, svt2_allocate
from mbeacon.privacy.noise import GeneratorSource, as_source

GROUP = "noise"
C = 5
_, _EPS2 = svt2_allocate(1.0, C, redraw=False)
SCALE = 2 * C / _EPS2  # SVT² query-noise scale at eps = 1, c = 5
VECTOR_TARGET = 10e6  # samples/s
SCALAR_TARGET_US = 5.0  # microseconds per call


def _vector_rows(quick: bool) -> list[Result]:
    n = 500_000 if quick else 10_000_000
    repeats = 3 if quick else 5
    pcg = np.random.default_rng()
    fns = {
        "ours": lambda: discrete_laplace(SCALE, size=n),
        "numpy": lambda: pcg.laplace(0.0, SCALE, size=n),
    }
    chacha_note = ""
    try:
        from randomgen import ChaCha

        chacha = np.random.Generator(ChaCha(key=secrets.randbits(256), rounds=20))
        source = as_source(chacha)
        if not isinstance(source, GeneratorSource):  # pragma: no cover - depends on mbeacon
            raise TypeError(f"as_source returned {source!r}")
        chacha_note = f"as_source accepts it: {source.__class__.__name__} (flagged secure={source.secure})."
        fns["chacha"] = lambda: discrete_laplace(SCALE, size=n, rng=chacha)
    except ImportError:
        chacha = None
    timings = time_interleaved(fns, repeats=repeats, warmup=1)
    ours = n / timings["ours"].median
    numpy_rate = n / timings["numpy"].median
    rows = [
        Result(
            "noise: discrete Laplace, vectorised, OS CSPRNG",
            ours,
            numpy_rate,
            "samples/s",
            speed_ratio(ours, numpy_rate, "samples/s"),
            ">= 10 M samples/s",
            ours >= VECTOR_TARGET,
            baseline_name="np.random.default_rng().laplace (PCG64, not secure, float), the ceiling",
            note=f"N = {n:,} per call, scale {SCALE:.1f}, median of {repeats} interleaved rounds; "
            "one 64-bit os.urandom word per sample.",
            detail={"n": n, **{k: t.to_dict() for k, t in timings.items()}},
        )
    ]
    if chacha is None:
        rows.append(skipped("noise: candidate randomgen ChaCha20 + our transform", "randomgen not installed"))
    else:
        rate = n / timings["chacha"].median
        rows.append(
            Result(
                "noise: candidate randomgen ChaCha20 + our transform",
                rate,
                ours,
                "samples/s",
                speed_ratio(rate, ours, "samples/s"),
                "for the record",
                None,
                baseline_name="our OS-CSPRNG sampler (row above, same rounds)",
                note="ChaCha(key=secrets.randbits(256), rounds=20) wrapped in numpy.random.Generator, "
                f"passed as rng= to mbeacon's discrete_laplace; {chacha_note}",
                detail={"n": n, "chacha": timings["chacha"].to_dict()},
            )
        )
    rows.append(_opendp_row(quick))
    return rows


def _opendp_row(quick: bool) -> Result:
    name = "noise: candidate OpenDP exact discrete Laplace"
    try:
        import opendp.prelude as dp
    except ImportError:
        return skipped(name, "opendp not installed")
    n = 20_000 if quick else 200_000
    repeats = 2 if quick else 3
    # Our sampler at the same (smaller) N, in the same rounds, so the ratio is like for like.
    dp.enable_features("contrib")
    meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=SCALE)
    zeros = [0] * n
    timings = time_interleaved(
        {"opendp": lambda: meas(zeros), "ours": lambda: discrete_laplace(SCALE, size=n)},
        repeats=repeats,
        warmup=1,
    )
    rate = n / timings["opendp"].median
    ours = n / timings["ours"].median
    return Result(
        name,
        rate,
        ours,
        "samples/s",
        speed_ratio(rate, ours, "samples/s"),
        "for the record",
        None,
        baseline_name=f"our OS-CSPRNG sampler at the same N = {n:,}",
        note="dp.m.make_laplace(vector_domain(atom_domain(T=int)), l1_distance(T=int), scale) on a list of "
        f"{n:,} zeros (exact sampler, returns a Python list); median of {repeats} rounds.",
        detail={"n": n, **{k: t.to_dict() for k, t in timings.items()}},
    )


def _scalar_row(quick: bool) -> Result:
    calls = 20_000 if quick else 200_000
    repeats = 3 if quick else 5
    pcg = np.random.default_rng()

    def ours() -> None:
        f, s = discrete_laplace, SCALE
        for _ in range(calls):
            f(s)

    def numpy_scalar() -> None:
        f, s = pcg.laplace, SCALE
        for _ in range(calls):
            f(0.0, s)

    timings = time_interleaved({"ours": ours, "numpy": numpy_scalar}, repeats=repeats, warmup=1)
    ours_us = timings["ours"].median / calls * 1e6
    numpy_us = timings["numpy"].median / calls * 1e6
    return Result(
        "noise: one scalar draw discrete_laplace(scale)",
        ours_us,
        numpy_us,
        "us/call",
        speed_ratio(ours_us, numpy_us, "us/call"),
        "<= 5 us/call",
        ours_us <= SCALAR_TARGET_US,
        baseline_name="numpy Generator.laplace(0, scale), scalar call (PCG64, not secure)",
        note=f"{calls:,} calls in a Python loop per round (loop overhead included on both sides); "
        "ours reads 8 bytes from os.urandom per call.",
        detail={"calls": calls, **{k: t.to_dict() for k, t in timings.items()}},
    )


def run(quick: bool) -> list[Result]:
    rows = _vector_rows(quick)
    rows.append(_scalar_row(quick))
    return rows
