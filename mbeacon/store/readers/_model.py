"""What every reader produces: a stream of probe-row blocks of float32 beta values, and its samples."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import IngestError


@dataclass(frozen=True)
class MatrixBatch:
    """Consecutive probe rows of a matrix, in file order.

    ``values`` is float32 of shape ``(len(probe_ids), n_samples)``, C-contiguous, NaN for a missing
    value; its columns follow :attr:`MatrixSource.samples`.
    """

    probe_ids: list[str]
    values: np.ndarray


@dataclass
class MatrixSource:
    """An opened input: its sample ids and metadata (read from the header), and a way to stream rows.

    Opening reads only the header, so that a wrong file is refused before any work; :meth:`batches`
    then streams the rows, validating as it goes. Each call of :meth:`batches` reads the file again
    from the start, and no file stays open between calls.
    """

    path: str
    format: str
    samples: list[str]
    metadata: dict[str, str]
    batch_rows: int = 65_536
    _stream: Callable[[int], Iterator[MatrixBatch]] | None = field(default=None, repr=False, compare=False)
    _blocks: Callable[[int], Iterator[MatrixBatch]] | None = field(default=None, repr=False, compare=False)
    #: What reading the rows found, for the operator: ``pvalue_columns`` (detection p-value columns in
    #: the header) and, once the rows are read, ``masked`` (values the p-value cut turned missing).
    tally: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def batches(self) -> Iterator[MatrixBatch]:
        """Stream the probe rows as :class:`MatrixBatch` es of ``batch_rows`` rows (the last may be shorter).

        Raises IngestError, naming file, line and column, at the first invalid cell, ragged row,
        duplicate probe id or missing file; a file with no data rows is refused. Peak memory is about
        two batches plus a few MiB of parse buffers (GDC folders: the whole float32 matrix, once).
        """
        if self._stream is None:
            raise IngestError("this source has no reader (build it with open_matrix)", path=self.path)
        return self._stream(self.batch_rows)

    def blocks(self, multiple: int = 1) -> Iterator[MatrixBatch]:
        """Stream the probe rows in blocks as the parser produces them, without regrouping them.

        Every block but the last has a multiple of ``multiple`` rows (a writer passes its chunk height,
        so that no chunk is written twice); the sizes are otherwise the parser's, so no block is copied
        into a batch of fixed size as :meth:`batches` does. Same validation, errors and file order as
        :meth:`batches`. Formats without a streaming parser (GDC folders) give their batches.
        """
        if multiple < 1:
            raise ValueError(f"multiple must be at least 1, not {multiple}")
        if self._blocks is None:
            return self.batches()
        return self._blocks(multiple)
