"""Arrow float columns reach numpy as pyarrow's ``to_numpy`` gives them, without importing pandas.

The Arrow path of the table parser (mbeacon/store/readers/_table.py) reads beta and p-value columns
from their buffers: the same values bit for bit (nulls as NaN, sliced and multi-chunk columns), and an
ingest never pays for importing pandas, which pyarrow's own conversion of a column with nulls does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.store.readers._table import _floats

_value = st.one_of(st.none(), st.floats(width=32, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.lists(_value, max_size=40), min_size=1, max_size=4),
    cut=st.tuples(st.integers(0, 20), st.integers(0, 20)),
    wide=st.booleans(),
)
def test_buffers_give_what_to_numpy_gives(parts, cut, wide) -> None:
    kind, dtype = (pa.float64(), np.float64) if wide else (pa.float32(), np.float32)
    column = pa.chunked_array([pa.array(p, type=kind) for p in parts], type=kind)
    start = min(cut[0], len(column))
    column = column.slice(start, cut[1])  # offsets inside chunks
    expected = column.to_numpy().astype(dtype) if len(column) else np.empty(0, dtype)
    got = _floats(column, dtype)
    assert got.dtype == dtype
    assert got.tobytes() == expected.tobytes()  # bit for bit, NaN included
    if len(column.chunks) == 1:  # an Array as well as a ChunkedArray
        assert _floats(column.chunk(0), dtype).tobytes() == expected.tobytes()


def test_an_ingest_through_the_arrow_path_imports_no_pandas(tmp_path: Path) -> None:
    matrix = tmp_path / "m.txt"
    rows = "".join(f'"cg{i:08d}"\t0.5\t\t0.25\n' for i in range(50))
    matrix.write_text(f'"ID_REF"\t"GSM1"\t"GSM2"\t"GSM3"\n{rows}')
    script = (
        "import sys\n"
        "from mbeacon.store.readers import _fastpath\n"
        "_fastpath.ENABLED = False  # every chunk through Arrow\n"
        "from mbeacon.store.ingest import ingest\n"
        f"info = ingest({str(matrix)!r}, {str(tmp_path / 'store')!r}, 'd')\n"
        "assert info.probes == 50 and info.missing_fraction > 0.3, info\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
