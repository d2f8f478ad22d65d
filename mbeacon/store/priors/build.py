"""Building priors: from a reference cohort (per-probe statistics) or from published means only.

* :func:`prior_from_blocks` and its front ends :func:`prior_from_matrix`, :func:`prior_from_cohort`,
  :func:`prior_from_table_file`: a reference cohort (probes x samples beta values), e.g. healthy blood.
  Mean, sd, Beta by moments and a quantile sketch per probe, streamed block by block.
* :func:`prior_from_means` / :func:`import_means_file`: published per-probe means only (the shipped 450K
  means). The sd is predicted from the mean by an :class:`~.sd_model.SdModel`.

Every builder ends in :func:`_assemble`, which drops unknown probes, fills missing sds, sorts and fits the
Betas. The builders return an unsaved prior (``version`` None); :mod:`.storage` saves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mbeacon.store.errors import DataError
from mbeacon.store.priors.beta_distribution import beta_moments
from mbeacon.store.priors.model import Prior, _now
from mbeacon.store.priors.quantile_sketch import DEFAULT_QUANTILES, _levels, _row_quantiles
from mbeacon.store.priors.sd_model import SdModel, learn_sd_model
from mbeacon.store.priors.table_files import READ_ERRORS, _header, iter_table_file
from mbeacon.store.probe_ids import representatives

__all__ = [
    "import_means_file",
    "prior_from_blocks",
    "prior_from_cohort",
    "prior_from_matrix",
    "prior_from_means",
    "prior_from_table_file",
]


def _sort_order(probe_ids: np.ndarray) -> tuple[np.ndarray | None, tuple[int, int] | None]:
    """(argsort of ``probe_ids`` or None when already strictly increasing, the rows of a duplicate)."""
    if probe_ids.size < 2 or np.all(probe_ids[1:] > probe_ids[:-1]):
        return None, None
    order = np.argsort(probe_ids, kind="stable")
    dup = np.flatnonzero(probe_ids[order][1:] == probe_ids[order][:-1])
    if dup.size:
        return order, (int(order[dup[0]]), int(order[dup[0] + 1]))
    return order, None


def _sorted_unique(probe_ids: np.ndarray, what: str) -> np.ndarray | None:
    """The argsort of ``probe_ids`` (None: already sorted); DataError naming a duplicate."""
    order, dup = _sort_order(probe_ids)
    if dup is not None:
        raise DataError(f"{what}: probe {probe_ids[dup[0]]} appears more than once")
    return order


def _matrix_stats(
    block: np.ndarray, levels: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(counts, mean, sd with NaN for < 2 values, quantiles) of each row of a probes x samples block."""
    counts = np.count_nonzero(~np.isnan(block), axis=1)
    with np.errstate(all="ignore"):
        total = np.nansum(block, axis=1)
        mean = total / counts
        dev = np.where(np.isnan(block), 0.0, block - mean[:, None])
        sd = np.sqrt(np.einsum("ij,ij->i", dev, dev) / (counts - 1))
    sd[counts < 2] = np.nan
    quant = None
    if levels is not None:
        quant = np.full((block.shape[0], levels.size), np.nan, dtype=np.float32)
        has = counts > 0
        if np.any(has):
            quant[has] = _row_quantiles(block[has], counts[has], levels)
    return counts, mean, sd, quant


def _check_range(matrix: np.ndarray, what: str, first_line: int | None = None) -> None:
    bad = (matrix < 0) | (matrix > 1)
    if np.any(bad):
        row, col = np.argwhere(bad)[0]
        where = f"row {row + 1}" if first_line is None else f"line {first_line + row}"
        raise DataError(
            f"{what}: beta value {matrix[row, col]:g} at {where}, sample {col + 1} is outside [0, 1] "
            "(M-values? convert with beta = 2^M / (1 + 2^M))"
        )


def _assemble(
    name: str,
    ids: np.ndarray,
    counts: np.ndarray,
    mean: np.ndarray,
    sd: np.ndarray,
    quant: np.ndarray | None,
    *,
    n_reference: int,
    sd_model: SdModel | None,
    source: str,
    what: str,
) -> Prior:
    """Drop probes without any value, fill missing sds from the sd model, sort, fit the Betas.

    The prior is keyed by CpG (:mod:`mbeacon.store.probe_ids`): an EPIC v2 id is stored as its locus
    (``cg00000029_TC21`` as ``cg00000029``), and of a locus's replicate probes the one with the
    smallest id keeps its statistics, the rule a cohort uses to pick the probe that answers, so the
    prior describes the probe the beacon reads. Exact duplicate ids are refused.
    """
    keep = counts > 0
    ids, mean, sd = ids[keep], mean[keep], sd[keep]
    quant = None if quant is None else quant[keep]
    missing_sd = np.isnan(sd)
    if np.any(missing_sd):
        sd = sd.copy()
        sd[missing_sd] = (sd_model or learn_sd_model()).predict(mean[missing_sd])
    order = _sorted_unique(ids, what)
    if order is not None:
        ids = ids[order]
    names, first = representatives(ids, presorted=True)  # one row per CpG (the docstring has the rule)
    rows = first if order is None else order[first]
    ids, mean, sd = names, mean[rows], sd[rows]
    quant = None if quant is None else quant[rows]
    a, b = beta_moments(mean, sd)
    return Prior(name, None, ids, mean, sd, a, b, quant, n_reference, source, _now())


def prior_from_blocks(
    blocks: Iterable[tuple[Any, Any]],
    *,
    name: str,
    quantiles: int | None = DEFAULT_QUANTILES,
    source: str = "",
    sd_model: SdModel | None = None,
    what: str = "reference matrix",
    first_line: int | None = None,
) -> Prior:
    """A prior from a reference cohort streamed as ``(probe_ids, values)`` blocks of rows.

    Per probe: mean and sample sd (``ddof = 1``) of its non-missing values, Beta by moments
    (:func:`beta_moments`), and a quantile sketch of ``quantiles`` levels (0 or None: no sketch).
    Probes with a single value get their sd from the sd model (``sd_model``, default
    :func:`learn_sd_model`); probes with no value at all are left out (unknown to the prior).
    ``n_reference`` is the number of samples (columns). Values outside [0, 1] and duplicate probe ids
    raise :class:`DataError`. Memory: one block plus the prior (the statistics are per probe).
    """
    levels = _levels(quantiles)
    parts, ids_parts = [], []
    n_samples = 0
    line = first_line
    for ids, block in blocks:
        ids = np.asarray(ids).astype(str)
        block = np.asarray(block, dtype=np.float64)
        if block.ndim != 2 or block.shape[0] != ids.shape[0]:
            raise DataError(f"matrix of shape {block.shape} does not match {ids.shape[0]} probe ids")
        _check_range(block, what, first_line=line)
        if line is not None:
            line += block.shape[0]
        n_samples = block.shape[1]
        ids_parts.append(ids)
        for start in range(0, block.shape[0], 50_000):  # bounded temporaries (sort, deviations)
            parts.append(_matrix_stats(block[start : start + 50_000], levels))
    if not parts:
        raise DataError("no probe rows", path=what)
    quant = None if levels is None else np.concatenate([p[3] for p in parts])
    return _assemble(
        name,
        np.concatenate(ids_parts),
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
        quant,
        n_reference=n_samples,
        sd_model=sd_model,
        source=source,
        what=what,
    )


def prior_from_matrix(
    probe_ids: Any,
    matrix: Any,
    *,
    name: str,
    quantiles: int | None = DEFAULT_QUANTILES,
    source: str = "",
    sd_model: SdModel | None = None,
) -> Prior:
    """A prior from an in-memory probes x samples matrix (see :func:`prior_from_blocks`)."""
    return prior_from_blocks(
        [(probe_ids, matrix)],
        name=name,
        quantiles=quantiles,
        source=source,
        sd_model=sd_model,
        what=source or "reference matrix",
    )


def prior_from_cohort(cohort: Any, *, name: str, quantiles: int | None = DEFAULT_QUANTILES) -> Prior:
    """A prior from a cohort already in the store (``Cohort.blocks`` streams it)."""
    return prior_from_blocks(
        cohort.blocks(),
        name=name,
        quantiles=quantiles,
        source=f"dataset {cohort.info.id}",
        what=f"dataset {cohort.info.id}",
    )


def prior_from_table_file(
    path: Any,
    *,
    name: str,
    quantiles: int | None = DEFAULT_QUANTILES,
    source: str = "",
    sd_model: SdModel | None = None,
    chunk_rows: int = 50_000,
) -> Prior:
    """:func:`prior_from_blocks` from a plain probes x samples CSV/TSV, streamed in blocks of rows."""
    path = Path(path)
    return prior_from_blocks(
        iter_table_file(path, chunk_rows=chunk_rows),
        name=name,
        quantiles=quantiles,
        source=source or path.name,
        sd_model=sd_model,
        what=str(path),
        first_line=2,
    )


def prior_from_means(
    probe_ids: Any, means: Any, *, name: str, sd_model: SdModel | None = None, source: str = ""
) -> Prior:
    """A prior from per-probe population means only: sd predicted by ``sd_model`` (default
    :func:`learn_sd_model`, the real blood table), Beta by moments, no quantile sketch, n_reference 0.

    NaN means are left out (unknown probes); means outside [0, 1] and duplicate ids raise
    :class:`DataError`.
    """
    ids = np.asarray(probe_ids).astype(str)
    m = np.asarray(means, dtype=np.float64)
    if m.shape != ids.shape or m.ndim != 1:
        raise DataError(f"{m.shape[0] if m.ndim else 1} means for {ids.size} probe ids")
    bad = np.flatnonzero((m < 0) | (m > 1))
    if bad.size:
        raise DataError(f"mean {m[bad[0]]:g} of probe {ids[bad[0]]} is outside [0, 1]")
    model = sd_model or learn_sd_model()
    counts = (~np.isnan(m)).astype(np.int64)
    text = source or "population means"
    return _assemble(
        name,
        ids,
        counts,
        m,
        np.full(m.shape, np.nan),
        None,
        n_reference=0,
        sd_model=model,
        source=f"{text}; {model.describe()}",
        what=text,
    )


def import_means_file(path: Any = None, *, name: str, sd_model: SdModel | None = None) -> Prior:
    """:func:`prior_from_means` from a ``probe_id,mean_beta`` CSV or TSV (gz ok).

    ``path`` None: the shipped 450K population means (485,577 probes). Empty or NA means are left out;
    a mean that is not a number or lies outside [0, 1], a duplicate probe or a missing column raise
    :class:`DataError` with the line.
    """
    if path is None:
        from mbeacon import data

        path = data.path(data.POPULATION_MEANS)
    path = Path(path)
    sep, header = _header(path)
    if header[:2] != ["probe_id", "mean_beta"]:
        raise DataError(
            f"expected the columns probe_id,mean_beta; found {','.join(header[:2]) or 'nothing'}",
            path=str(path),
            line=1,
        )
    try:
        # Only the id column as strings: pandas infers floats for a clean mean column (fast) and falls
        # back to strings when a cell is not a number, which is then located below.
        frame = pd.read_csv(path, sep=sep, usecols=[0, 1], dtype={header[0]: str})
    except (pd.errors.ParserError, ValueError, *READ_ERRORS) as exc:
        raise DataError(f"cannot parse: {exc}", path=str(path)) from None
    ids = frame.iloc[:, 0]
    if ids.isna().any():
        row = int(np.flatnonzero(ids.isna().to_numpy())[0])
        raise DataError("missing probe id", path=str(path), line=row + 2, column="probe_id")
    column = frame.iloc[:, 1]
    if column.dtype.kind in "fiu":
        means = column.to_numpy(dtype=np.float64)
        not_number = np.zeros(0, dtype=np.int64)
    else:
        means = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
        not_number = np.flatnonzero(np.isnan(means) & column.notna().to_numpy())
    if not_number.size:
        row = int(not_number[0])
        raise DataError(
            f"not a number: {frame.iat[row, 1]!r}", path=str(path), line=row + 2, column="mean_beta"
        )
    out_of_range = np.flatnonzero((means < 0) | (means > 1))
    if out_of_range.size:
        row = int(out_of_range[0])
        raise DataError(
            f"mean {means[row]:g} is outside [0, 1]", path=str(path), line=row + 2, column="mean_beta"
        )
    id_array = ids.to_numpy().astype(str)
    _, dup = _sort_order(id_array)
    if dup is not None:
        raise DataError(
            f"probe {id_array[dup[0]]} appears again (first on line {dup[0] + 2})",
            path=str(path),
            line=dup[1] + 2,
            column="probe_id",
        )
    return prior_from_means(id_array, means, name=name, sd_model=sd_model, source=path.name)
