"""The demo data set: a small, deterministic simulated cohort and its prior, built on first use.

``ensure_demo(data_dir)`` returns the demo store, building it in a few seconds if it is absent: a
simulated cohort (2,000 probes x 60 patients, ingested from its GEO series matrix exactly as an
operator would), a prior built from an independent simulated reference sample of the general
population, and a small MADE-UP probe annotation (invented positions and gene names ``DEMO1``...,
imported from a generated table as an operator imports a platform table, and linked to the cohort) so
the demo answers queries by region and by gene. Deterministic: the same seed gives the same cohort,
prior and annotation on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbeacon.store.annotation import AnnotationStore, import_annotation
from mbeacon.store.cohorts import CohortStore, Metadata
from mbeacon.store.ingest import ingest
from mbeacon.store.priors import list_priors, prior_from_table_file, save_prior
from mbeacon.store.simulate import FILES, TRUTH_FILE, SimulationConfig, simulate

DEMO_DATASET = "demo-cohort"
DEMO_PRIOR = "demo-general-population"
DEMO_PLATFORM = "demo-made-up-annotation"
DEMO_ANNOTATION_FILE = "made_up_annotation.tsv"
DEMO_PROBES_PER_GENE = 5
DEMO_CONFIG = SimulationConfig(probes=2_000, patients=60, nonmembers=60, reference=120, seed=2019)


@dataclass(frozen=True)
class Demo:
    """Where the demo data live."""

    store: Path
    dataset: str
    prior: str
    simulation: Path  # the simulated files, incl. non-members and re-measurements for attacks


def ensure_demo(data_dir: str | Path) -> Demo:
    """Build the demo store under ``data_dir`` unless it is already there; return where it is."""
    root = Path(data_dir)
    demo = Demo(root / "store", DEMO_DATASET, DEMO_PRIOR, root / "simulation")
    store = CohortStore(demo.store, create=True)
    have_prior = any(p["name"] == DEMO_PRIOR for p in list_priors(demo.store))
    annotations = AnnotationStore(demo.store)
    have_annotation = DEMO_PLATFORM in annotations.platforms() and annotations.links().get(DEMO_DATASET)
    if DEMO_DATASET in store.ids() and have_prior and have_annotation:
        return demo
    if not (demo.simulation / TRUTH_FILE).exists():  # written last: the simulation is complete
        simulate(demo.simulation, DEMO_CONFIG)
    if DEMO_DATASET not in store.ids():
        ingest(
            demo.simulation / FILES["members"],
            demo.store,
            DEMO_DATASET,
            format="geo",
            metadata=Metadata(
                name="MBeacon demo cohort (simulated)",
                description="Simulated disease cohort: 60 patients, 2,000 450K probes, 2% DMPs",
                tissue="whole blood (simulated)",
                disease="simulated disease",
            ),
        )
    if not have_prior:
        reference = demo.simulation / FILES["reference"]
        save_prior(
            demo.store,
            prior_from_table_file(reference, name=DEMO_PRIOR, source="simulated general population"),
        )
    if not have_annotation:
        table = write_made_up_annotation(
            store.open(DEMO_DATASET).probe_ids, demo.simulation / DEMO_ANNOTATION_FILE
        )
        import_annotation(table, demo.store, platform=DEMO_PLATFORM, replace=True)
        annotations.link(DEMO_DATASET, DEMO_PLATFORM)
    return demo


def write_made_up_annotation(probe_ids: np.ndarray, path: Path) -> Path:
    """A MADE-UP annotation table of ``probe_ids`` (for the demo only: nothing in it is real).

    Probes in sorted order are spread over chromosomes 1-22, 250 bases apart from position 100,001
    (1-based, as Illumina's MAPINFO); each run of :data:`DEMO_PROBES_PER_GENE` probes is gene
    ``DEMO<k>``, except every fourth run (intergenic), and the last probe of a gene also belongs to the
    next (genes overlap, as real ones do).
    """
    ids = sorted(str(p) for p in probe_ids)
    per_chromosome = -(-len(ids) // 22)
    lines = ["# MADE-UP probe annotation for the MBeacon demo: positions and genes are invented",
             "probe_id\tCHR\tMAPINFO\tUCSC_RefGene_Name\tGenome_Build"]  # fmt: skip
    for k, probe in enumerate(ids):
        chromosome, offset = 1 + k // per_chromosome, k % per_chromosome
        run = k // DEMO_PROBES_PER_GENE
        genes = [] if run % 4 == 3 else [f"DEMO{run + 1}"]
        if k % DEMO_PROBES_PER_GENE == DEMO_PROBES_PER_GENE - 1 and genes and (run + 1) % 4 != 3:
            genes.append(f"DEMO{run + 2}")
        lines.append(f"{probe}\t{chromosome}\t{100_001 + 250 * offset}\t{';'.join(genes)}\t37")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
