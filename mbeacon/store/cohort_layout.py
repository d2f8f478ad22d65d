"""The cohort file's fixed dimensions and its id encoding, shared by the writer and the reader (the
layout itself is described in :mod:`mbeacon.store.cohorts`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mbeacon.store.errors import IngestError

FORMAT_VERSION = 1
#: Probes per row chunk of ``/beta``: a chunk is ``CHUNK_ROWS`` probes x all patients.
CHUNK_ROWS = 256
#: Chunks start on 4 KiB boundaries (page-aligned for the memory map).
ALIGNMENT = 4096
#: Probe and sample ids are stored as fixed-length byte strings of this many bytes.
ID_BYTES = 64


def encode_ids(ids: Iterable[str], what: str, path: str) -> np.ndarray:
    """``ids`` as fixed-length UTF-8 bytes; an id longer than ``ID_BYTES`` is refused, naming it."""
    ids = ids if isinstance(ids, list) else list(ids)
    try:  # ASCII ids in one vectorised step; one byte more than allowed shows an id that is too long
        fast = np.array(ids, dtype=f"S{ID_BYTES + 1}")
        if fast.ndim == 1 and not (np.char.str_len(fast) > ID_BYTES).any():
            return fast.astype(f"S{ID_BYTES}")
    except (UnicodeEncodeError, ValueError, TypeError):
        pass  # non-ASCII (UTF-8) ids, or not strings: one at a time, naming the one at fault
    encoded = []
    for i in ids:
        raw = str(i).encode("utf-8")
        if len(raw) > ID_BYTES:
            raise IngestError(f"{what} id {i!r} is longer than {ID_BYTES} bytes", path=path)
        encoded.append(raw)
    return np.array(encoded, dtype=f"S{ID_BYTES}")
