"""The sensitivity a dataset is served at: its per-patient contribution bound, and truncation to it.

A count of samples in a range changes by up to ``b`` when one patient with ``b`` samples is added or
removed, so a cohort with several samples per patient cannot be answered at sensitivity 1. The bound
``b`` in effect for a dataset is, in order:

1. ``contribution_bound`` in the dataset's configuration table (declared by the operator, free);
2. the bound recorded with the cohort at ingest: declared (``--contribution-bound``) or learned by
   AboveThreshold from the patient ids (PrivateSQL, :mod:`mbeacon.privacy.truncation`; its epsilon
   is spent once, at ingest, and recorded in the cohort file, so no worker or restart learns again);
3. 1 for a cohort without patient ids (each sample is its own patient).

A cohort whose patient ids repeat and that has no bound (neither recorded nor declared) is refused at
start-up (:class:`ContributionBoundMissing`): it is never served at sensitivity 1 by default.

With patient ids, the service counts only the samples that truncation keeps (each patient's first
``b`` in sample order, :func:`mbeacon.privacy.truncation.keep_mask`), and SVT² and noisy counts use
``b`` as their sensitivity. Without patient ids a declared bound is the operator's statement about the
cohort (nothing can be truncated) and is used as the sensitivity as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mbeacon.beacon.config import DatasetPolicy
from mbeacon.privacy.truncation import DEFAULT_MAX_BOUND, keep_mask, learn_bound
from mbeacon.privacy.validation import integer, positive
from mbeacon.store.cohorts import Cohort, DatasetInfo
from mbeacon.store.patients import BoundRule, ContributionBound

#: Epsilon spent, once per ingest, to learn a bound when none is declared (docs/privacy.md).
DEFAULT_LEARN_EPSILON = 0.5


class ContributionBoundMissing(ValueError):
    """A cohort whose patients give several samples has no contribution bound: it cannot be served."""


@dataclass(frozen=True)
class Sensitivity:
    """The bound a dataset is served at and its provenance (all of it public)."""

    bound: int
    source: str  # "configuration", "declared", "learned" or "one sample per patient"
    epsilon: float  # what learning it cost, once for the dataset (0 unless learned)
    truncated: bool  # whether samples beyond the bound are dropped (needs patient ids)
    patients: int  # distinct patients (the number of samples without patient ids)

    def to_json(self) -> dict[str, Any]:
        """The API's spelling (``/api/datasets``)."""
        return {
            "bound": self.bound,
            "source": self.source,
            "learningEpsilon": self.epsilon,
            "truncated": self.truncated,
            "patients": self.patients,
        }


def bound_rule(declared: int | None = None, epsilon: float = DEFAULT_LEARN_EPSILON) -> BoundRule:
    """What ingest records with patient ids: the ``declared`` bound, else one learned at ``epsilon``.

    Privacy cost: ``epsilon`` when learned (AboveThreshold over the candidates ``1..256``), 0 when
    declared.
    """
    if declared is not None:
        bound = integer(declared, "contribution bound")
        return lambda counts: ContributionBound(bound, "declared", 0.0)
    epsilon = positive(epsilon, "epsilon")

    def learned(counts: np.ndarray) -> ContributionBound:
        bound = learn_bound(counts, epsilon, max_bound=DEFAULT_MAX_BOUND)
        return ContributionBound(bound, "learned", epsilon)

    return learned


def sensitivity_of(dataset: str, info: DatasetInfo, policy: DatasetPolicy) -> Sensitivity:
    """The bound ``dataset`` is served at (see the module); :class:`ContributionBoundMissing` if none."""
    ids = info.has_patient_ids
    patients = info.patient_count if ids else info.patients
    if policy.contribution_bound is not None:
        return Sensitivity(policy.contribution_bound, "configuration", 0.0, ids, patients)
    if not ids:
        return Sensitivity(1, "one sample per patient", 0.0, False, patients)
    if info.contribution_bound >= 1:
        return Sensitivity(info.contribution_bound, info.bound_source, info.bound_epsilon, True, patients)
    if info.max_samples_per_patient <= 1:
        # ids recorded without a bound, none repeated: truncating at 1 keeps every sample
        return Sensitivity(1, "one sample per patient", 0.0, True, patients)
    raise ContributionBoundMissing(
        f"dataset {dataset!r}: some patients give several samples and no contribution bound was "
        f"recorded at ingest; set contribution_bound = N in its [datasets.{dataset}] table, or ingest "
        "it again letting mbeacon learn one (see docs/service.md)"
    )


class TruncatedCohort:
    """A cohort as the service counts it: only the samples truncation at the bound keeps.

    Everything but the counts is the cohort's own (probe lookups, metadata); ``n_patients`` is the
    number of kept samples, the public N of the prior's expected count.
    """

    def __init__(self, cohort: Cohort, keep: np.ndarray) -> None:
        self._cohort = cohort
        self._keep = np.flatnonzero(keep)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cohort, name)

    @property
    def n_patients(self) -> int:
        return int(self._keep.size)

    def count_one(self, row: int, lo: float, hi: float) -> int:
        values = self._cohort.row_values(row)[self._keep]
        return int(np.count_nonzero((values >= np.float32(lo)) & (values <= np.float32(hi))))

    def count_in_range(self, index: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return self._cohort.count_in_range(index, lo, hi, columns=self._keep)


def serving_cohort(cohort: Cohort, sensitivity: Sensitivity) -> Cohort | TruncatedCohort:
    """``cohort`` truncated at its bound when it has patient ids, else as it is."""
    if not sensitivity.truncated:
        return cohort
    ids = cohort.patient_ids
    assert ids is not None  # truncated only with patient ids
    keep = keep_mask(ids, sensitivity.bound)
    # every sample kept: the plain cohort counts the same, on its faster path
    return cohort if keep.all() else TruncatedCohort(cohort, keep)
