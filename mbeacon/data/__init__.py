"""Reference tables shipped with the package (see README.md here for provenance)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

POPULATION_MEANS = "450k_population_means.csv.gz"
BLOOD_REFERENCE = "GSE41169_blood_20k_probes_x_10_samples.csv.gz"


def path(name: str) -> Path:
    """Filesystem path of a shipped reference table."""
    return Path(str(resources.files(__package__).joinpath(name)))
