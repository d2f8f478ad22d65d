"""The demo data set: a small, deterministic simulated cohort and its prior, built on first use.

``ensure_demo(data_dir)`` returns the demo store, building it in a few seconds if it is absent: a
simulated cohort (2,000 probes x 60 patients, ingested from its GEO series matrix exactly as an
operator would) and a prior built from an independent simulated reference sample of the general
population. Deterministic: the same seed gives the same cohort and prior on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mbeacon.store.cohorts import CohortStore, Metadata
from mbeacon.store.ingest import ingest
from mbeacon.store.priors import list_priors, prior_from_table_file, save_prior
from mbeacon.store.simulate import FILES, TRUTH_FILE, SimulationConfig, simulate

DEMO_DATASET = "demo-cohort"
DEMO_PRIOR = "demo-general-population"
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
    if DEMO_DATASET in store.ids() and have_prior:
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
    return demo
