"""Which patient each sample comes from, where the input says so, and the contribution bound recorded
with a cohort.

A cohort's columns are samples. Most cohorts have one sample per patient, but GEO series often hold
several per patient (tissues, time points, replicates) and a GDC download may hold a tumour and a
normal sample of one case. The service then counts at the sensitivity of the largest number of
samples one patient may contribute (docs/privacy.md), so the store records a patient id per sample
where the input has one:

* **GEO series matrix**: a ``!Sample_characteristics_ch1`` line whose values read ``KEY: value``,
  with KEY one of :data:`PATIENT_KEYS` (case and ``_``/``-``/space spelling ignored; the first key
  in that order that the samples have wins), or the key the operator names (``--patient-key``);
* **GDC download**: the sample sheet's ``Case ID`` column;
* **any format**: a table the operator gives (``--patients FILE``, CSV or TSV) with a sample column
  (``sample``, ``sample_id``, ``sample id``, ``gsm``) and a patient column (any of
  :data:`PATIENT_KEYS`).

An input with none of these is read as one sample per patient, the classic Beacon assumption. Every
sample must have a patient id once ids are used: a sample without one, or a table that misses a
sample or names one the matrix lacks, is refused with an :class:`IngestError` that names it.

This module only reads ids; learning a bound from them is a privacy mechanism
(:mod:`mbeacon.privacy.truncation`), which the caller of ingest passes in as a :data:`BoundRule`.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbeacon.store.errors import IngestError

if TYPE_CHECKING:
    from mbeacon.store.readers import MatrixSource

#: Characteristic keys (GEO) and column names (patient tables) read as a patient id, in order of
#: preference.
PATIENT_KEYS: tuple[str, ...] = (
    "patient id",
    "patient",
    "individual id",
    "individual",
    "subject id",
    "subject",
    "donor id",
    "donor",
    "participant id",
    "participant",
    "case id",
    "case",
)
SAMPLE_COLUMNS: tuple[str, ...] = ("sample", "sample id", "gsm", "geo accession", "sample geo accession")
GDC_CASES = "case_ids"  # the GDC reader's metadata key: the sheet's Case ID of each sample, tab-joined
MAX_ID_BYTES = 64


def normalise_key(text: str) -> str:
    """``Patient_ID`` and ``patient-id`` are ``patient id``."""
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


@dataclass(frozen=True)
class ContributionBound:
    """The most samples of one patient the service counts, where it came from, and what it cost.

    ``source`` is ``"declared"`` (the data custodian's, free), ``"learned"`` (by SVT from the patient
    ids at ingest, ``epsilon`` spent once for the dataset) or ``"one sample per patient"`` (no
    patient ids: each sample is its own patient).
    """

    bound: int
    source: str
    epsilon: float = 0.0


#: Given the samples-per-patient counts, the bound to record (``mbeacon.privacy.truncation`` learns
#: one; a declared bound ignores the counts).
BoundRule = Callable[[np.ndarray], ContributionBound]


def contributions(patient_ids: Sequence[str]) -> np.ndarray:
    """Samples per patient (in no particular order): what a :data:`BoundRule` is given."""
    if not len(patient_ids):
        return np.zeros(0, dtype=np.int64)
    ids = np.asarray(patient_ids, dtype=object).astype(str)
    return np.unique(ids, return_counts=True)[1].astype(np.int64)


def _check_id(value: str, sample: str, where: str, how: str) -> str:
    if not value:
        raise IngestError(f"sample {sample!r} has an empty patient id ({how})", path=where)
    if len(value.encode("utf-8")) > MAX_ID_BYTES:
        raise IngestError(
            f"patient id {value[:70]!r} of sample {sample!r} is longer than {MAX_ID_BYTES} bytes", path=where
        )
    return value


def geo_patient_ids(
    metadata: dict[str, str], samples: Sequence[str], *, key: str | None = None, where: str = ""
) -> list[str] | None:
    """Patient ids from a GEO series matrix's ``!Sample_characteristics_ch1`` lines, in ``samples``
    order; None if no sample has a patient key (and ``key`` was not given)."""
    lines = [line.split("\t") for line in metadata.get("Sample_characteristics_ch1", "").split("\n") if line]
    accessions = metadata.get("Sample_geo_accession", "")
    order = accessions.split("\t") if accessions else list(samples)
    if len(order) != len(samples) or sorted(order) != sorted(samples):
        if lines:
            raise IngestError(
                "the !Sample_geo_accession line does not list the table's samples: cannot tell whose "
                "characteristics are whose",
                path=where,
            )
        order = list(samples)
    per_sample: dict[str, dict[str, str]] = {sample: {} for sample in order}
    for values in lines:
        if len(values) != len(order):
            raise IngestError(
                f"a !Sample_characteristics_ch1 line has {len(values)} values for {len(order)} samples",
                path=where,
            )
        for sample, value in zip(order, values, strict=True):
            name, sep, text = value.partition(":")
            if sep:
                per_sample[sample].setdefault(normalise_key(name), text.strip())
    wanted = [normalise_key(key)] if key is not None else list(PATIENT_KEYS)
    for candidate in wanted:
        having = [sample for sample in order if candidate in per_sample[sample]]
        if not having and key is None:
            continue
        lacking = [sample for sample in samples if candidate not in per_sample[sample]]
        if lacking:
            shown = ", ".join(repr(s) for s in lacking[:5]) + (" ..." if len(lacking) > 5 else "")
            raise IngestError(
                f"{len(lacking)} of {len(samples)} samples have no {candidate!r} characteristic "
                f"(!Sample_characteristics_ch1 '{candidate}: ...'): {shown}; every sample needs a patient "
                "id, or give them in a table with --patients",
                path=where,
            )
        how = f"characteristic {candidate!r}"
        return [_check_id(per_sample[sample][candidate], sample, where, how) for sample in samples]
    return None


def gdc_patient_ids(metadata: dict[str, str], samples: Sequence[str], *, where: str = "") -> list[str] | None:
    """The GDC sample sheet's ``Case ID`` of each sample; None if the sheet has no such column."""
    text = metadata.get(GDC_CASES)
    if text is None:
        return None
    cases = text.split("\t")
    if len(cases) != len(samples):
        raise IngestError(f"{len(cases)} case ids for {len(samples)} samples", path=where)
    return [_check_id(case, sample, where, "Case ID") for case, sample in zip(cases, samples, strict=True)]


def read_patient_table(path: str | Path, samples: Sequence[str]) -> list[str]:
    """Patient ids from an operator's CSV/TSV table of sample and patient columns, in ``samples`` order."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise IngestError("patient table not found", path=where) from None
    except (OSError, UnicodeDecodeError) as error:
        raise IngestError(f"cannot read the patient table as UTF-8 text: {error}", path=where) from None
    first = text.split("\n", 1)[0]
    delimiter = "\t" if first.count("\t") > first.count(",") else ","
    try:
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    except csv.Error as error:
        raise IngestError(f"not a readable CSV/TSV table: {error}", path=where) from None
    if not rows:
        raise IngestError("the patient table is empty", path=where, line=1)
    header = [normalise_key(name) for name in rows[0]]
    sample_col = next((header.index(c) for c in SAMPLE_COLUMNS if c in header), None)
    patient_col = next((header.index(c) for c in PATIENT_KEYS if c in header), None)
    if sample_col is None or patient_col is None:
        raise IngestError(
            "the header needs a sample column (sample, sample_id, gsm) and a patient column "
            "(patient_id, patient, individual, subject, donor, participant, case_id)",
            path=where,
            line=1,
        )
    wanted = set(samples)
    found: dict[str, str] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) <= max(sample_col, patient_col):
            raise IngestError(f"row has {len(row)} fields, fewer than the header", path=where, line=line)
        sample, patient = row[sample_col].strip(), row[patient_col].strip()
        if sample not in wanted:
            raise IngestError(
                f"sample {sample[:70]!r} is not a sample of the matrix",
                path=where,
                line=line,
                column=sample_col + 1,
            )
        if sample in found:
            raise IngestError(
                f"sample {sample!r} is listed twice", path=where, line=line, column=sample_col + 1
            )
        if not patient:
            raise IngestError(
                f"sample {sample!r} has no patient id", path=where, line=line, column=patient_col + 1
            )
        found[sample] = _check_id(patient, sample, where, f"line {line}")
    missing = [s for s in samples if s not in found]
    if missing:
        shown = ", ".join(repr(s) for s in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise IngestError(f"{len(missing)} samples of the matrix have no row: {shown}", path=where)
    return [found[s] for s in samples]


def source_patient_ids(
    source: MatrixSource, *, key: str | None = None, table: str | Path | None = None
) -> list[str] | None:
    """The patient id of each of ``source``'s samples: from ``table`` if given, else from the input
    (GEO characteristics, GDC case ids); None if there are none (one sample per patient)."""
    samples = list(source.samples)
    if table is not None:
        if key is not None:
            raise IngestError("give either a patient key or a patient table, not both", path=str(table))
        return read_patient_table(table, samples)
    if source.format == "geo":
        return geo_patient_ids(source.metadata, samples, key=key, where=source.path)
    if key is not None:
        raise IngestError(
            f"a patient key names a GEO characteristic; this input is {source.format!r}: give a patient "
            "table instead",
            path=source.path,
        )
    if source.format == "gdc":
        return gdc_patient_ids(source.metadata, samples, where=source.path)
    return None
