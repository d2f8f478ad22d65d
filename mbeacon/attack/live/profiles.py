"""The victims' and non-members' methylation profiles the attacker holds: read strictly, then stacked."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mbeacon.attack.live.errors import LiveAttackError


@dataclass(frozen=True)
class Profiles:
    """The people the attacker holds a methylation profile of, people x probes.

    ``labels``: True for victims (the suspected members), False for the non-members; the probe order
    is the victims file's.
    """

    probe_ids: np.ndarray
    values: np.ndarray
    samples: list[str]
    labels: np.ndarray

    @property
    def people(self) -> int:
        return int(self.values.shape[0])

    @property
    def has_nonmembers(self) -> bool:
        return bool(np.any(~self.labels)) and bool(np.any(self.labels))

    def group(self, i: int) -> str:
        return "victim" if self.labels[i] else "nonmember"


def read_profiles(path: str | Path) -> pd.DataFrame:
    """A probes x samples table of beta values (CSV, or TSV for ``.tsv``/``.txt``; gz ok), probe ids first.

    Why strict: a table with M-values, duplicated probes or no numeric column would plan nonsense
    queries silently.
    """
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    sep = "\t" if suffixes and suffixes[-1] in (".tsv", ".txt") else ","
    try:
        table = pd.read_csv(path, sep=sep, index_col=0)
    except (OSError, ValueError, EOFError, zlib.error) as error:  # EOFError, zlib.error: a damaged gzip
        raise LiveAttackError(f"{path}: cannot read the profiles: {error}") from None
    if table.shape[1] == 0 or table.shape[0] == 0:
        raise LiveAttackError(f"{path}: expected probes x samples (probe ids in the first column)")
    table.index = table.index.astype(str)
    if table.index.has_duplicates:
        raise LiveAttackError(f"{path}: probe {table.index[table.index.duplicated()][0]} appears twice")
    try:
        values = table.to_numpy(dtype=np.float64)
    except ValueError:
        raise LiveAttackError(f"{path}: every column after the probe ids must hold numbers") from None
    bad = np.isfinite(values) & ((values < 0) | (values > 1))
    if bad.any():
        raise LiveAttackError(f"{path}: values outside [0, 1] (M-values? convert with 2^M / (1 + 2^M))")
    return table.astype(np.float64)


def stack_profiles(victims: pd.DataFrame, nonmembers: pd.DataFrame | None = None) -> Profiles:
    """Victims then non-members, on the victims' probes (a probe a non-member lacks is NaN)."""
    frames = [victims] if nonmembers is None else [victims, nonmembers.reindex(victims.index)]
    values = np.vstack([f.T.to_numpy(dtype=np.float64) for f in frames])
    samples = [str(s) for f in frames for s in f.columns]
    labels = np.r_[
        np.ones(victims.shape[1], bool), np.zeros(0 if nonmembers is None else nonmembers.shape[1], bool)
    ]
    return Profiles(victims.index.to_numpy().astype(str), values, samples, labels)
