"""Probe annotations at EPIC v2 scale: importing a platform table, and finding the probes of a region
or a gene.

Input: a synthetic GEO platform table (SOFT framing, tab-separated, the columns the reader uses plus
a few it skips) of 936,990 probes, the size of EPIC v2 (GPL33022), seeded: probes spread over the 24
chromosomes in genome order, about 60% in one to three of 25,000 genes (``;``-joined with repeats, as
UCSC_RefGene_Name writes them).

* ``import``: :func:`read_annotation` plus building the region and gene indexes, against
  ``pandas.read_csv`` of the same rows (C parser, the columns only, no validation, no index): the cost of
  line and column errors and of the framing, as a ratio. Target: the whole EPIC v2 table in under 60 s.
* ``region lookup``: :meth:`ProbeAnnotation.region` (two binary searches) against a boolean mask over the
  chromosome and position arrays (what a lookup without the sorted index costs), on 2,000 seeded
  regions of 1-5 kb. Target: under 100 us per region.
* ``gene lookup``: :meth:`ProbeAnnotation.gene` (binary search into the CSR index) against a mask over
  the (gene, probe) pairs, on 2,000 seeded genes. Target: under 100 us per gene.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import Result, speed_ratio, time_interleaved
from mbeacon.store.annotation import ProbeAnnotation, read_annotation

GROUP = "annotation"
PROBES = 936_990
GENES = 25_000
SEED = 33_022
CHROMOSOMES = [str(c) for c in range(1, 23)] + ["X", "Y"]


def write_table(path: Path, probes: int, seed: int = SEED) -> None:
    """The synthetic platform table (module docstring)."""
    rng = np.random.default_rng(seed)
    per = -(-probes // len(CHROMOSOMES))
    chrom = np.repeat(CHROMOSOMES, per)[:probes]
    pos = (
        np.tile(np.arange(per), len(CHROMOSOMES))[:probes] * 2_000 + rng.integers(1, 1_000, probes)
    ).astype(int)
    gene_of = np.minimum(np.arange(probes) * GENES // probes + rng.integers(0, 2, probes), GENES - 1)
    has = rng.random(probes) < 0.6
    lines = [
        "^PLATFORM = GPL33022",
        "!Platform_geo_accession = GPL33022",
        "!platform_table_begin",
        "ID\tName\tGenome_Build\tCHR\tMAPINFO\tStrand\tUCSC_RefGene_Name\tRelation_to_UCSC_CpG_Island",
    ]
    for i in range(probes):
        genes = f"G{gene_of[i]};G{gene_of[i]}" if has[i] else ""
        lines.append(f"cg{i:08d}\tcg{i:08d}\t38\tchr{chrom[i]}\t{pos[i]}\tF\t{genes}\tIsland")
    lines.append("!platform_table_end")
    path.write_text("\n".join(lines) + "\n")


def run(quick: bool) -> list[Result]:
    probes = 100_000 if quick else PROBES
    repeats = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="mbeacon-bench-annotation-") as folder:
        table = Path(folder) / "GPL33022_family.soft"
        write_table(table, probes)

        def ours() -> ProbeAnnotation:
            parsed = read_annotation(table)
            return ProbeAnnotation.from_table(parsed, parsed.platform, parsed.build)

        timing = time_interleaved({"ours": ours, "pandas": _pandas(table)}, repeats=repeats, warmup=0)
        annotation = ours()
    results = [
        _row(
            "import EPIC v2-size platform table",
            timing["ours"].median,
            timing["pandas"].median,
            "s",
            "< 60 s",
            timing["ours"].median < 60,
            "pandas.read_csv, 4 columns, no checks",
            f"{probes:,} probes",
        )
    ]
    rng = np.random.default_rng(SEED)
    queries = []
    for _ in range(2_000):
        row = int(rng.integers(0, len(annotation.probe_ids)))
        start = int(annotation.position[row]) - int(rng.integers(0, 1_000))
        queries.append(
            (
                annotation.chromosome[row].decode(),
                max(start, 0),
                max(start, 0) + int(rng.integers(1_000, 5_000)),
            )
        )
    chrom, pos = annotation.chromosome, annotation.position

    def region_ours() -> int:
        return sum(len(annotation.region(c, s, e)) for c, s, e in queries)

    def region_mask() -> int:
        return sum(
            int(np.count_nonzero((chrom == c.encode()) & (pos > s) & (pos <= e))) for c, s, e in queries[:200]
        )

    t = time_interleaved({"ours": region_ours, "mask": region_mask}, repeats=3)
    assert region_ours() > 0
    us_ours, us_mask = t["ours"].median / len(queries) * 1e6, t["mask"].median / 200 * 1e6
    results.append(
        _row(
            "region lookup (1-5 kb)",
            us_ours,
            us_mask,
            "us/call",
            "< 100 us",
            us_ours < 100,
            "boolean mask over chromosome and position",
            f"{len(annotation.probe_ids):,} probes",
        )
    )
    pair_gene = np.repeat(annotation.gene_names, np.diff(annotation.gene_offsets))
    names = [
        annotation.gene_names[int(k)].decode() for k in rng.integers(0, len(annotation.gene_names), 2_000)
    ]

    def gene_ours() -> int:
        return sum(len(annotation.gene(n)) for n in names)

    def gene_mask() -> int:
        return sum(int(np.count_nonzero(pair_gene == n.encode())) for n in names[:200])

    t = time_interleaved({"ours": gene_ours, "mask": gene_mask}, repeats=3)
    us_ours, us_mask = t["ours"].median / len(names) * 1e6, t["mask"].median / 200 * 1e6
    results.append(
        _row(
            "gene lookup",
            us_ours,
            us_mask,
            "us/call",
            "< 100 us",
            us_ours < 100,
            "mask over the (gene, probe) pairs",
            f"{len(annotation.gene_names):,} genes",
        )
    )
    return results


def _pandas(table: Path):
    def read() -> pd.DataFrame:
        return pd.read_csv(
            table,
            sep="\t",
            skiprows=3,
            usecols=["ID", "CHR", "MAPINFO", "UCSC_RefGene_Name"],
            comment="!",
            dtype=str,
        )

    return read


def _row(
    name: str, ours: float, baseline: float, unit: str, target: str, met: bool, baseline_name: str, note: str
) -> Result:
    return Result(
        name,
        ours,
        baseline,
        unit,
        speed_ratio(ours, baseline, unit),
        target,
        met,
        baseline_name=baseline_name,
        note=note,
    )


if __name__ == "__main__":
    from benchmarks.common import machine_info, print_table

    print_table(run(quick=False), machine_info(), title="annotation")
