"""Region and gene queries: ``referenceName`` + ``start`` (+ ``end``) or ``geneId`` expanded into the
single-probe queries they stand for, before anything is read or charged.

What a region or gene query answers: for every targeted dataset, the probes of its annotation that
lie in the region (0-based half-open ``[start, end)``; ``start`` alone is the one base ``[start,
start + 1)``) or are annotated to the gene, and that the dataset has. Each such probe becomes one
ordinary methylation query with the request's range, asked of the datasets that placed the probe
there: one result set per (probe, dataset), answered, cached and charged exactly as that many
single-probe queries in one batch (the engine's path is unchanged, so is the privacy accounting).
Probes are listed in genome order. A dataset is located by its own manifest (``ingest --manifest``)
for positions, else by its platform's annotation; genes always by the platform's annotation.

Refused with a 400 before the ledger (nothing read, nothing spent), naming the field: a region or
gene that no targeted dataset can locate (no annotation, another genome build than ``assemblyId``, or
no probe there), one that covers more than :data:`~mbeacon.beacon.wire.MAX_REGION_PROBES` probes, and
a request whose expansion exceeds the service's ``max_batch`` queries. Annotations are public, so a
refusal tells nothing about any patient.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from mbeacon.beacon.answers import AnswerSet
from mbeacon.beacon.query import MethylationQuery, QueryError
from mbeacon.beacon.wire import MAX_REGION_PROBES
from mbeacon.process import PROCESS
from mbeacon.store.annotation import AnnotationStore, ProbeAnnotation, canonical_build
from mbeacon.store.cohorts import Counts
from mbeacon.store.errors import DataError

_REFUSED_WHOLE = "; the batch is refused whole (nothing was answered or spent)"


class UnresolvedQuery(QueryError):
    """A region or gene query that none of its datasets can turn into probes (HTTP 400)."""


@dataclass(frozen=True)
class Located:
    """How one dataset's probes are found: by position, and by gene (None where it cannot be)."""

    positions: ProbeAnnotation | None
    genes: ProbeAnnotation | None
    platform: str = ""  # the platform the dataset is linked to ("" when none)


@dataclass(frozen=True)
class Expansion:
    """Single-probe queries and, for each, the index of the query it came from (None: unchanged)."""

    queries: list[MethylationQuery]
    origin: list[int] | None = None

    def restore(self, result: AnswerSet) -> AnswerSet:
        """``result`` with each answer's ``query_index`` that of the query the caller sent."""
        if self.origin is None:
            return result
        for answer in result.answers:
            answer.query_index = self.origin[answer.query_index]
        return result


class Locators:
    """Each dataset's :class:`Located`, loaded once per process and kept until the annotations or the
    cohort change (one ``stat`` of the annotations folder per expanded request)."""

    def __init__(self, store_root: Path) -> None:
        self.annotations = AnnotationStore(store_root)
        self._located: dict[str, tuple[tuple, Located]] = {}
        self._platforms: dict[str, tuple[tuple, ProbeAnnotation]] = {}

    def of(self, dataset: str, cohort: Counts) -> Located:
        info = cohort.info
        stamp = (PROCESS.pid, self.annotations.stamp(), info.checksum, id(cohort))
        hit = self._located.get(dataset)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        platform = self.annotations.links().get(dataset) or info.platform
        shared = self._platform(platform, stamp[:2]) if platform else None
        own = _from_manifest(cohort) if info.has_positions else None
        genes = shared if shared is not None and shared.has_genes else None
        located = Located(own or shared, genes, platform or "")
        self._located[dataset] = (stamp, located)
        return located

    def _platform(self, platform: str, stamp: tuple) -> ProbeAnnotation | None:
        hit = self._platforms.get(platform)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        try:
            annotation = self.annotations.load(platform)
        except DataError:
            return None  # linked, but not imported (yet): the dataset cannot be located
        self._platforms[platform] = (stamp, annotation)
        return annotation


def _from_manifest(cohort: Counts) -> ProbeAnnotation:
    """The positions ingested with the cohort (``--manifest``), searched as a platform's are."""
    with h5py.File(cohort.path, "r") as f:  # sealed and verified when the cohort was opened
        chromosome, position = f["chromosome"][...], f["position"][...]
    info = cohort.info
    return ProbeAnnotation.from_arrays(
        f"dataset:{info.id}", canonical_build(info.assembly), cohort.probe_ids, chromosome, position
    )


def expand(
    queries: list[MethylationQuery],
    *,
    visible: list[str],
    cohort: Callable[[str], Counts],
    locators: Locators,
    max_total: int,
) -> Expansion:
    """``queries`` with every region and gene query replaced by its single-probe queries (the module
    docstring has the rules); the queries themselves when there is none (no work at all)."""
    if all(q.probe is not None for q in queries):
        return Expansion(queries)
    visible_set = set(visible)
    out: list[MethylationQuery] = []
    origin: list[int] = []
    for i, q in enumerate(queries):
        targets = list(q.datasets) if q.datasets is not None else visible
        if q.probe is not None or not targets or not set(targets) <= visible_set:
            out.append(q)  # a dataset the caller may not see: the engine refuses it (403), as for a probe
            origin.append(i)
            continue
        for probe, datasets in _probes(queries, i, sorted(targets), cohort, locators):
            out.append(
                dataclasses.replace(
                    q,
                    probe=probe,
                    chromosome=None,
                    start=None,
                    end=None,
                    gene=None,
                    assembly=None,
                    datasets=datasets,
                )
            )
            origin.append(i)
    if len(out) > max_total:
        raise UnresolvedQuery(
            f"query.requestParameters: the request stands for {len(out)} single-probe queries (its regions "
            f"and genes expanded); at most {max_total} per request"
        )
    return Expansion(out, origin)


def _probes(
    queries: list[MethylationQuery],
    index: int,
    targets: list[str],
    cohort: Callable[[str], Counts],
    locators: Locators,
) -> list[tuple[str, tuple[str, ...]]]:
    """The probes query ``index`` covers, in genome order, each with the datasets that have it there."""
    q = queries[index]
    wanted = canonical_build(q.assembly) if q.assembly else None
    hits: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
    unlocated, other_builds = [], []
    for dataset in targets:
        data = cohort(dataset)
        located = locators.of(dataset, data)
        annotation = located.genes if q.gene is not None else located.positions
        if annotation is None:
            unlocated.append(dataset)
            continue
        if wanted is not None and annotation.build != wanted:
            other_builds.append(f"{dataset!r}: {annotation.build or 'not recorded'}")
            continue
        if q.gene is not None:
            rows = annotation.gene(q.gene)
        else:
            start = q.start or 0
            rows = annotation.region(q.chromosome or "", start, q.end if q.end is not None else start + 1)
        ids = annotation.probe_ids[rows]
        held = data.probe_index(ids) >= 0 if len(ids) else np.zeros(0, dtype=bool)
        hits.append((dataset, ids[held], annotation.chromosome[rows][held], annotation.position[rows][held]))
    # counted with numpy before any per-probe Python work: a chromosome-wide region costs no more than
    # its refusal
    covered = len(np.unique(np.concatenate([h[1] for h in hits]))) if hits else 0
    if not covered:
        raise UnresolvedQuery(_nothing(queries, index, targets, unlocated, other_builds))
    if covered > MAX_REGION_PROBES:
        raise UnresolvedQuery(
            f"{_field(queries, index)}: covers {covered} probes; at most {MAX_REGION_PROBES} per query "
            "(each is answered and charged as one query): ask a narrower region"
        )
    found: dict[str, tuple[tuple, list[str]]] = {}
    for dataset, ids, chromosomes, positions in hits:
        for probe, chrom, pos in zip(ids.astype(str), chromosomes, positions.tolist(), strict=True):
            found.setdefault(probe, ((chrom, pos, probe), []))[1].append(dataset)
    ordered = sorted(found.items(), key=lambda item: item[1][0])
    return [(probe, tuple(datasets)) for probe, (_, datasets) in ordered]


def _field(queries: list[MethylationQuery], index: int) -> str:
    q = queries[index]
    where = f"query.requestParameters[{index}]" if len(queries) > 1 else "query.requestParameters"
    if q.gene is not None:
        return f"{where}.geneId"
    return f"{where}.referenceName, start" + (", end" if q.end is not None else "")


def _nothing(
    queries: list[MethylationQuery],
    index: int,
    targets: list[str],
    unlocated: list[str],
    other_builds: list[str],
) -> str:
    """Why query ``index`` found no probe in any of ``targets``, naming the field as the parser does."""
    q = queries[index]
    shown = ", ".join(repr(d) for d in targets[:5]) + (
        f" and {len(targets) - 5} more" if len(targets) > 5 else ""
    )
    of = f"dataset {shown}" if len(targets) == 1 else f"any of the datasets {shown}"
    field = _field(queries, index)
    where = field.rsplit(".", 1)[0]
    if len(unlocated) == len(targets):
        if q.gene is not None:
            message = (
                f"{field}: {of} has no gene annotation (no platform annotation with genes is linked); "
                "name the probe by probeId"
            )
        else:
            message = (
                f"{field}: {of} has no probe positions (no manifest was ingested and no platform "
                "annotation is linked); name the probe by probeId"
            )
    elif other_builds and len(unlocated) + len(other_builds) == len(targets):
        message = (
            f"{where}.assemblyId: {q.assembly!r} is not the genome build of the annotation of "
            f"{of} ({'; '.join(other_builds)})"
        )
    elif q.gene is not None:
        message = f"{field}: no probe of {of} is annotated to gene {q.gene!r} (gene symbols, any letter case)"
    elif q.end is None:
        message = f"{field}: no probe of {of} is at {q.chromosome}:{q.start} (0-based start)"
    else:
        at = f"{q.chromosome}:[{q.start}, {q.end})"
        message = f"{field}: no probe of {of} is in {at} (0-based, half-open)"
    return message + (_REFUSED_WHOLE if len(queries) > 1 else "")


__all__ = ["Expansion", "Located", "Locators", "UnresolvedQuery", "expand"]
