"""Probe annotation in memory, laid out for lookups by region and by gene.

Rows are in *region order* (sorted by chromosome, then 1-based position, then probe id), so the probes
of a region are one contiguous slice found with two binary searches, whatever the platform's size
(936k EPIC v2 probes take microseconds). Genes are an index in CSR form: the sorted upper-case gene
names, and for gene ``k`` the rows ``members[offsets[k]:offsets[k + 1]]`` (ascending, so in region
order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbeacon.store.annotation.reader import AnnotationTable, canonical_chromosome


@dataclass(frozen=True)
class ProbeAnnotation:
    """Where each probe of a platform (or of one cohort's manifest) is, and which genes it is in."""

    platform: str
    build: str
    probe_ids: np.ndarray  # bytes, region order
    chromosome: np.ndarray  # bytes, canonical (canonical_chromosome), b"" unknown
    position: np.ndarray  # int64, 1-based, -1 unknown
    island: np.ndarray  # bytes, b"" where the table has none
    gene_names: np.ndarray  # bytes, sorted, upper case
    gene_offsets: np.ndarray  # int64, len(gene_names) + 1
    gene_members: np.ndarray  # int64 rows

    @property
    def has_genes(self) -> bool:
        return len(self.gene_names) > 0

    @classmethod
    def from_arrays(
        cls,
        platform: str,
        build: str,
        probe_ids: np.ndarray,
        chromosome: np.ndarray,
        position: np.ndarray,
        island: np.ndarray | None = None,
        genes: tuple[list[str], list[int]] = ([], []),
    ) -> ProbeAnnotation:
        """Sort rows into region order and build the gene index; ``genes`` pairs (gene, row) by the
        rows of the arrays as given. Chromosome names are made canonical here."""
        chrom = np.array([canonical_chromosome(c) for c in chromosome.astype(str)], dtype="S")
        chrom = chrom if len(chrom) else np.empty(0, dtype="S1")
        ids = np.asarray(probe_ids).astype("S")
        pos = np.asarray(position, dtype=np.int64)
        isl = np.asarray(island if island is not None else np.full(len(ids), b""), dtype="S")
        order = np.lexsort((ids, pos, chrom))
        new_row = np.empty(len(order), dtype=np.int64)
        new_row[order] = np.arange(len(order))
        names, rows = genes
        if names:
            gene = np.array(names, dtype="S")
            member = new_row[np.asarray(rows, dtype=np.int64)]
            by = np.lexsort((member, gene))
            gene, member = gene[by], member[by]
            keep = np.ones(len(gene), dtype=bool)
            keep[1:] = (gene[1:] != gene[:-1]) | (member[1:] != member[:-1])  # a gene named twice in a row
            gene, member = gene[keep], member[keep]
            starts = np.flatnonzero(np.r_[True, gene[1:] != gene[:-1]])
            gene_names = gene[starts]
            offsets = np.r_[starts, len(gene)].astype(np.int64)
        else:
            gene_names, offsets, member = (
                np.empty(0, dtype="S1"),
                np.zeros(1, np.int64),
                np.empty(0, np.int64),
            )
        return cls(
            platform, build, ids[order], chrom[order], pos[order], isl[order], gene_names, offsets, member
        )

    @classmethod
    def from_table(cls, table: AnnotationTable, platform: str, build: str) -> ProbeAnnotation:
        return cls.from_arrays(
            platform,
            build,
            table.probe_ids,
            table.chromosome,
            table.position,
            table.island,
            (table.gene_names, table.gene_rows),
        )

    def region(self, chromosome: str, start: int, end: int) -> np.ndarray:
        """Rows of the probes in the 0-based half-open ``[start, end)`` of ``chromosome`` (any
        spelling), i.e. at 1-based positions ``start + 1 .. end``; in position order."""
        wanted = canonical_chromosome(chromosome).encode("ascii", "replace")
        lo = int(np.searchsorted(self.chromosome, wanted, "left"))
        hi = int(np.searchsorted(self.chromosome, wanted, "right"))
        positions = self.position[lo:hi]
        first = lo + int(np.searchsorted(positions, start + 1, "left"))
        last = lo + int(np.searchsorted(positions, end, "right"))
        return np.arange(first, max(first, last), dtype=np.int64)

    def gene(self, name: str) -> np.ndarray:
        """Rows of the probes annotated to gene ``name`` (case-insensitive); in position order."""
        wanted = name.upper().encode("ascii", "replace")
        k = int(np.searchsorted(self.gene_names, wanted))
        if k >= len(self.gene_names) or self.gene_names[k] != wanted:
            return np.empty(0, dtype=np.int64)
        return self.gene_members[self.gene_offsets[k] : self.gene_offsets[k + 1]]

    def genes_of(self, row: int) -> list[str]:
        """The genes of one row (a linear scan: for reports, not for the query path)."""
        hits = np.flatnonzero(self.gene_members == row)
        ks = np.searchsorted(self.gene_offsets, hits, "right") - 1
        return sorted(self.gene_names[ks].astype(str).tolist())
