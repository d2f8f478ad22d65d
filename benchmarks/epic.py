"""Simulated EPIC v2-sized inputs for the store and scale groups: a GEO series matrix, written fast.

The Infinium MethylationEPIC v2 array has about 936,000 probes, with ids such as ``cg00000029_TC21``
(the CpG name and a suffix for the probe design and copy). Ids here are made up in that shape:
``cg`` + 8 digits + one of five suffixes. Values: a per-probe mean from a U-shaped Beta(0.6, 0.6) (most
CpGs are nearly unmethylated or nearly fully methylated), each patient's value that mean plus normal
noise (sd 0.05), clipped to [0, 1], written with ``DECIMALS`` decimals; 0.2% missing (empty cells),
as in the 450K input of the store group. Deterministic for a seed.

A 936k x 1,000 matrix is about 7 GB of text, so the rows are formatted by a compiled kernel (numba)
rather than by Python or a CSV writer, and written in blocks; memory stays at one block.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

#: Probes on the EPIC v2 array (rounded: the manifest's count varies by version).
EPIC_V2_PROBES = 936_000
SUFFIXES = ("_TC21", "_TC11", "_BC21", "_BC11", "_TC12")
DECIMALS = 6
BLOCK_ROWS = 20_000
SD = 0.05
MISSING = 0.002

_SUFFIX_BYTES = np.frombuffer("".join(SUFFIXES).encode(), dtype=np.uint8).reshape(len(SUFFIXES), -1)


def probe_id(i: int) -> str:
    """The made-up EPIC v2-style id of probe ``i`` (as written in the file)."""
    return f"cg{i:08d}{SUFFIXES[i % len(SUFFIXES)]}"


@numba.njit(cache=True, nogil=True)
def _format(first: int, codes: np.ndarray, decimals: int, suffixes: np.ndarray, out: np.ndarray) -> int:
    """GEO rows ``"id"\\tv\\tv...\\n`` into ``out``; codes are value x 10**decimals, -1 missing."""
    scale = 10**decimals
    rows, cols = codes.shape
    pos = 0
    for r in range(rows):
        i = first + r
        out[pos] = 34
        out[pos + 1] = 99  # c
        out[pos + 2] = 103  # g
        pos += 3
        n = i
        for d in range(7, -1, -1):
            out[pos + d] = 48 + n % 10
            n //= 10
        pos += 8
        suffix = suffixes[i % suffixes.shape[0]]
        for k in range(suffix.size):
            out[pos + k] = suffix[k]
        pos += suffix.size
        out[pos] = 34
        pos += 1
        for c in range(cols):
            out[pos] = 9
            pos += 1
            v = codes[r, c]
            if v < 0:
                continue
            if v >= scale:
                out[pos] = 49  # 1
                pos += 1
                continue
            out[pos] = 48
            out[pos + 1] = 46
            pos += 2
            for d in range(decimals - 1, -1, -1):
                out[pos + d] = 48 + v % 10
                v //= 10
            pos += decimals
        out[pos] = 10
        pos += 1
    return pos


def probe_means(probes: int, seed: int) -> np.ndarray:
    """Each probe's population mean (the prior's means, and the centre of the cohort's values)."""
    return np.random.default_rng([seed, 0]).beta(0.6, 0.6, size=probes)  # noise-ok: benchmark input


def write_geo(path: Path, probes: int, patients: int, *, seed: int = 3) -> Path:
    """Write the simulated cohort as a GEO series matrix at ``path`` (via a temporary name)."""
    means = probe_means(probes, seed)
    rng = np.random.default_rng([seed, 1])  # noise-ok: benchmark input
    samples = [f"GSM{8_000_000 + j}" for j in range(patients)]
    scale = 10**DECIMALS
    tmp = path.with_name(path.name + ".part")
    with tmp.open("wb") as out:
        out.write(b'!Series_title\t"mbeacon benchmark EPIC v2 cohort (simulated)"\n')
        out.write(b'!Series_geo_accession\t"GSE0"\n!Series_platform_id\t"GPL33022"\n')
        out.write(("!Sample_geo_accession\t" + "\t".join(f'"{s}"' for s in samples) + "\n").encode())
        out.write(b"!series_matrix_table_begin\n")
        out.write(("\t".join(['"ID_REF"', *(f'"{s}"' for s in samples)]) + "\n").encode())
        buffer = np.empty(BLOCK_ROWS * (patients * (DECIMALS + 3) + 32), dtype=np.uint8)
        for start in range(0, probes, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, probes)
            noise = rng.standard_normal((stop - start, patients), dtype=np.float32)
            values = np.clip(means[start:stop, None].astype(np.float32) + np.float32(SD) * noise, 0, 1)
            codes = np.rint(values * scale).astype(np.int32)
            codes[rng.random(codes.shape, dtype=np.float32) < MISSING] = -1
            size = _format(start, codes, DECIMALS, _SUFFIX_BYTES, buffer)
            out.write(memoryview(buffer)[:size])
        out.write(b"!series_matrix_table_end\n")
    tmp.replace(path)
    return path
