"""The fastest tier of table parsing: a compiled scan of the plain, valid case (numba, no GIL).

Almost every real matrix is the plain case: tab- or comma-separated lines, the probe id optionally in
double quotes, beta values written as short decimals (``0.123456``) or a missing-value token. For such
a chunk :func:`convert_plain` reads the bytes once, straight into the row-major float32 block the
store writes, with no tokenising pass, no per-column arrays and no transpose; the worker threads of
:func:`._common.parsed_parts` run it on several chunks at once because the kernel releases the GIL.

It is deliberately narrow. Anything outside its grammar -- an exponent, a sign, blanks around a
value, a quoted value, more digits than a float32 holds exactly, a value above 1, a blank line, a
stray carriage return, a ragged row, an empty or missing-token probe id, invalid UTF-8 in an id --
makes it give up on the whole chunk (it returns None, having raised nothing), and the chunk goes
through the Arrow parse of :class:`._table.TableParser` exactly as if this tier did not exist. So the
error path, with its file/line/column messages, is unchanged, and on the chunks it accepts the
kernel must produce what Arrow produces: the same ids and bit-identical float32 values
(``tests/test_fastpath.py`` checks this on random inputs).

The kernel (:mod:`._kernel`) is loaded in a background thread when the first table parser is made
(:func:`start_loading`): importing numba and loading the machine code from its cache take about half
a second, in which the first chunks go through Arrow instead of waiting. The chunks' values are the
same either way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa

#: Whether tables try the kernel first. Tests turn it off to compare with the Arrow path alone.
ENABLED = True

#: What the kernel does with each field of a line: the beta column it fills (>= 0), or one of these
#: (the values of :mod:`._kernel`, which is not imported until it is needed).
PROBE, SKIP = -1, -2

_scan: Callable[..., int] | None = None
_loader: threading.Thread | None = None
_lock = threading.Lock()


def _load() -> None:
    global _scan
    try:
        from . import _kernel

        _kernel.warm()
    except Exception as error:  # numba cannot compile here: Arrow parses every chunk, only slower
        logging.getLogger(__name__).warning("the compiled table parser is unavailable: %s", error)
        return
    _scan = _kernel.scan


def start_loading() -> None:
    """Start loading the compiled kernel in a background thread (once per process)."""
    global _loader
    with _lock:
        if _loader is None:
            _loader = threading.Thread(target=_load, name="mbeacon-kernel", daemon=True)
            _loader.start()


def wait_loaded() -> bool:
    """Block until the kernel is loaded; whether it could be (without it, Arrow parses every chunk)."""
    start_loading()
    assert _loader is not None
    _loader.join()
    return _scan is not None


def plain_kinds(
    n_fields: int, probe: int, betas: tuple[int, ...], delimiter: str, pvals_used: bool
) -> np.ndarray | None:
    """The kernel's field plan for a layout, or None when the layout is never plain.

    Space-separated tables (runs of spaces, padded lines) and p-values that must be parsed are left
    to the Arrow path.
    """
    if not ENABLED or delimiter not in ("\t", ",") or pvals_used:
        return None
    kinds = np.full(n_fields, SKIP, dtype=np.int64)
    kinds[probe] = PROBE
    for column, field in enumerate(betas):
        kinds[field] = column
    return kinds


def convert_plain(
    chunk: bytes, delimiter: str, kinds: np.ndarray, n_betas: int
) -> tuple[pa.Array, np.ndarray] | None:
    """Probe ids (an Arrow string array) and float32 values of a chunk of whole lines, or None.

    None means "not the plain case": the caller parses the chunk the general way.
    """
    scan = _scan
    rows = chunk.count(b"\n")
    if scan is None or rows == 0:  # not loaded yet: this chunk goes through Arrow
        return None
    data = np.frombuffer(chunk, dtype=np.uint8)
    values = np.empty((rows, n_betas), dtype=np.float32)
    id_bytes = np.empty(len(chunk), dtype=np.uint8)
    id_offsets = np.empty(rows + 1, dtype=np.int32)
    if scan(data, ord(delimiter), kinds, values, id_bytes, id_offsets) != rows:
        return None
    size = int(id_offsets[rows])
    probes = pa.StringArray.from_buffers(rows, pa.py_buffer(id_offsets), pa.py_buffer(id_bytes[:size].copy()))
    try:
        probes.validate(full=True)  # UTF-8, as Arrow's check_utf8 does
    except pa.ArrowInvalid:
        return None
    return probes, values
