"""Parsed chunks regrouped into the blocks the store writes: fixed-size batches, or blocks of a
multiple of the store's chunk rows (passed on as views where they can be)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from ._model import MatrixBatch


def rebatch(
    parts: Iterable[tuple[list[str], np.ndarray]], n_samples: int, batch_rows: int
) -> Iterator[MatrixBatch]:
    """Regroup parsed chunks into batches of exactly ``batch_rows`` rows (the last may be shorter).

    Each chunk's rows are copied (contiguously) into the batch's C-ordered float32 block.
    """
    block: np.ndarray | None = None
    ids: list[str] = []
    fill = 0
    for part_ids, values in parts:
        rows = len(part_ids)
        start = 0
        while start < rows:
            if block is None:
                block = np.empty((batch_rows, n_samples), dtype=np.float32)
                ids, fill = [], 0
            take = min(rows - start, batch_rows - fill)
            block[fill : fill + take] = values[start : start + take]
            ids.extend(part_ids[start : start + take])
            fill += take
            start += take
            if fill == batch_rows:
                yield MatrixBatch(ids, block)
                block = None
    if block is not None and fill:
        yield MatrixBatch(ids, block[:fill].copy())


def align(parts: Iterable[tuple[list[str], np.ndarray]], multiple: int) -> Iterator[MatrixBatch]:
    """Parsed chunks as blocks of a multiple of ``multiple`` rows (the last may be shorter).

    Unlike :func:`rebatch`, the bulk of each chunk is passed on as a view: only the rows that straddle
    two chunks (fewer than ``multiple``) are copied.
    """
    carry_ids: list[str] = []
    carry: np.ndarray | None = None
    for ids, values in parts:
        start = 0
        if carry is not None:
            start = min(multiple - len(carry_ids), len(ids))
            carry = np.concatenate((carry, values[:start]))
            carry_ids = carry_ids + ids[:start]
            if len(carry_ids) < multiple:
                continue
            yield MatrixBatch(carry_ids, carry)
            carry_ids, carry = [], None
        stop = start + (len(ids) - start) // multiple * multiple
        if stop > start:
            yield MatrixBatch(ids[start:stop], values[start:stop])
        if stop < len(ids):
            carry_ids, carry = ids[stop:], values[stop:]
    if carry is not None:
        yield MatrixBatch(carry_ids, np.ascontiguousarray(carry))
