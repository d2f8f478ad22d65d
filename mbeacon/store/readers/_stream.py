"""Byte streams of input files: transparent gzip, and whole-line chunks that know their line numbers.

Every reader works on the decompressed bytes of a file, read in blocks of a few MiB so that memory does
not grow with the file. Errors must name the physical line (1-based, counting every ``\\n`` of the
decompressed text), so :class:`LineReader` counts lines as it hands out header lines and then chunks
that always end on a line boundary.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, Protocol

import pyarrow as pa

from ..errors import IngestError

GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"

#: Bytes of decompressed text handed to the parser at a time. The parse buffers (text, Arrow table,
#: float32 columns) are a small multiple of this, independent of the file size. Tests shrink it to
#: exercise chunk boundaries on small files.
CHUNK_BYTES = 4 << 20

#: Longest line accepted: a file without line breaks must not be read into memory whole.
MAX_LINE_BYTES = 64 << 20

#: Whether chunks are read (and gunzipped) ahead in a background thread.
PREFETCH = True

# Files that are recognisably not a text table: refused with a hint instead of a parse error on line 1.
_NOT_TEXT: tuple[tuple[bytes, str], ...] = (
    (b"PK\x03\x04", "a zip archive (an Excel .xlsx workbook?); export the sheet as CSV or unzip it"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file, not a text table"),
    (b"BZh", "bzip2-compressed; decompress it or recompress with gzip"),
    (b"\xfd7zXZ\x00", "xz-compressed; decompress it or recompress with gzip"),
    (b"(\xb5/\xfd", "zstd-compressed; decompress it or recompress with gzip"),
    (b"%PDF", "a PDF document, not a text table"),
)

# What a failing read or decompression can raise; all of them become an IngestError at the current line.
READ_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error, pa.ArrowException)


class StreamError(IngestError):
    """An IngestError found while reading ahead (a corrupt block, a missing end marker).

    Its line is relative to the lines consumed so far: ``line_offset`` 1 names the line after them
    (a read failure), 0 the last of them (a file that ends too early). A pipeline that parses chunks
    ahead first reports their errors, which come earlier in the file, then :meth:`relocate` s this
    one to the line count it has reached.
    """

    def __init__(self, message: str, *, path: str, lines_read: int, line_offset: int) -> None:
        super().__init__(message, path=path, line=max(lines_read + line_offset, 1))
        self.line_offset = line_offset

    def relocate(self, lines_read: int) -> StreamError:
        """Name the line relative to ``lines_read`` consumed lines."""
        self.line = max(lines_read + self.line_offset, 1)
        return self


class ByteStream(Protocol):
    """The part of a binary file object the readers use."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


def label(path: str | Path) -> str:
    """The file name shown in error messages (as the operator typed it)."""
    return os.fspath(path)


def open_bytes(path: str | Path) -> ByteStream:
    """Open ``path`` for reading its text as bytes, decompressing gzip (told by its magic, not its name).

    Raises IngestError for a missing or unreadable file, a folder, and for formats that are not text
    tables (zip, HDF5, bzip2, xz, zstd, PDF), so that no OSError reaches the operator.
    """
    where = label(path)
    try:
        with open(path, "rb") as probe:
            magic = probe.read(8)
    except FileNotFoundError:
        raise IngestError("no such file", path=where) from None
    except IsADirectoryError:
        raise IngestError(
            "is a folder, not a file (a GDC download is read with format 'gdc')", path=where
        ) from None
    except OSError as exc:
        raise IngestError(f"cannot read the file: {exc.strerror or exc}", path=where) from None
    for magic_prefix, what in _NOT_TEXT:
        if magic.startswith(magic_prefix):
            raise IngestError(f"unknown format: {what}", path=where)
    try:
        if magic.startswith(GZIP_MAGIC):
            return pa.input_stream(os.fspath(path), compression="gzip")
        return open(path, "rb")  # closed by the LineReader that owns it
    except READ_ERRORS as exc:
        raise IngestError(f"cannot read the file: {exc}", path=where) from None


class _Prefetcher:
    """Reads blocks of a stream in a background thread, so that I/O and decompression overlap parsing.

    Both gzip inflation (in Arrow) and file reads release the GIL, so on a multi-core machine the next
    block is ready when the parser asks for it. At most ``depth`` blocks wait in the queue. An
    exception of the reading thread is raised by :meth:`get` in the consumer's thread.
    """

    def __init__(self, stream: ByteStream, size: int, depth: int = 2) -> None:
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(stream, size), name="mbeacon-read", daemon=True
        )
        self._thread.start()

    def _run(self, stream: ByteStream, size: int) -> None:
        try:
            while not self._stop.is_set():
                block = stream.read(size)
                self._put(block)
                if not block:
                    return
        except BaseException as exc:  # handed over to the consumer, which turns it into an IngestError
            self._put(exc)

    def _put(self, item: bytes | BaseException) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def get(self) -> bytes:
        """The next block (``b""`` at the end); re-raises what the reading thread raised."""
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def stop(self) -> None:
        """Stop reading ahead and wait for the thread (it checks every 50 ms)."""
        self._stop.set()
        self._thread.join()


class LineReader:
    """Reads a byte stream as physical lines, then as chunks of whole lines, counting lines throughout.

    ``lines_read`` is the number of the last line handed out (0 before the first). A final line without
    a trailing newline still counts as a line. Decompression and I/O errors become IngestError naming
    the line being read.
    """

    def __init__(self, path: str | Path, chunk_bytes: int | None = None) -> None:
        self.path = label(path)
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self._stream = open_bytes(path)
        self._buf = b""
        self._pos = 0
        self._eof = False
        self._prefetch: _Prefetcher | None = None
        self.lines_read = 0
        try:
            self._skip_bom()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop reading ahead and release the file (idempotent)."""
        if self._prefetch is not None:
            self._prefetch.stop()
            self._prefetch = None
        with contextlib.suppress(*READ_ERRORS):
            self._stream.close()

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _skip_bom(self) -> None:
        """Drop a UTF-8 byte-order mark (Excel writes one): it is no part of the first field."""
        head = b""
        while len(head) < len(_BOM):
            block = self._read(len(_BOM) - len(head))
            if not block:
                break
            head += block
        self._buf = head[len(_BOM) :] if head.startswith(_BOM) else head

    def _read(self, size: int) -> bytes:
        if self._eof:
            return b""
        try:
            block = self._prefetch.get() if self._prefetch is not None else self._stream.read(size)
        except READ_ERRORS as exc:
            raise StreamError(
                f"cannot read past this line (corrupt or truncated file?): {exc}",
                path=self.path,
                lines_read=self.lines_read,
                line_offset=1,
            ) from None
        if not block:
            self._eof = True
        return block

    def readline(self) -> bytes | None:
        """The next physical line without its ``\\n`` (a ``\\r`` before it is kept), or None at the end."""
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end >= 0:
                line = self._buf[self._pos : end]
                self._pos = end + 1
                self.lines_read += 1
                return line
            if len(self._buf) - self._pos > MAX_LINE_BYTES:
                self._too_long()
            block = self._read(self.chunk_bytes)
            if not block:
                if self._pos < len(self._buf):
                    line = self._buf[self._pos :]
                    self._buf, self._pos = b"", 0
                    self.lines_read += 1
                    return line
                return None
            self._buf = self._buf[self._pos :] + block
            self._pos = 0

    def chunks(self) -> Iterator[bytes]:
        """The rest of the stream in pieces of about ``chunk_bytes`` of whole lines.

        Every chunk ends with ``\\n`` (one is added to a last line that lacks it). Counting the lines
        of every chunk would cost a pass over the data, so the consumer, which learns the count
        cheaply from its parse, reports it with :meth:`advance` before asking for the next chunk.
        """
        pending = self._buf[self._pos :]
        self._buf, self._pos = b"", 0
        if PREFETCH and not self._eof and self._prefetch is None:
            self._prefetch = _Prefetcher(self._stream, self.chunk_bytes)
        while True:
            block = self._read(self.chunk_bytes)
            if not block:
                if pending:
                    yield pending if pending.endswith(b"\n") else pending + b"\n"
                return
            cut = block.rfind(b"\n")
            if cut < 0:
                pending += block
                if len(pending) > MAX_LINE_BYTES:
                    self._too_long()
                continue
            view = memoryview(block)
            if pending:
                chunk = b"".join((pending, view[: cut + 1]))
            else:
                chunk = block if cut + 1 == len(block) else bytes(view[: cut + 1])
            pending = bytes(view[cut + 1 :])
            yield chunk

    def _too_long(self) -> NoReturn:
        raise StreamError(
            f"line longer than {MAX_LINE_BYTES >> 20} MiB: not a text table with line breaks",
            path=self.path,
            lines_read=self.lines_read,
            line_offset=1,
        )

    def advance(self, lines: int) -> None:
        """Record that the consumer has gone through ``lines`` more lines (of a chunk)."""
        self.lines_read += lines


def decode_line(raw: bytes, path: str, line: int) -> str:
    """One header line as text: ``\\r\\n`` and a UTF-8 byte-order mark removed, Latin-1 as a fallback.

    A carriage return inside the line means classic Mac OS line endings (or a corrupt file), which the
    line numbering cannot follow: refused.
    """
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if b"\r" in raw:
        raise IngestError(
            "carriage return inside the line (classic Mac OS line endings?): "
            "convert the file to \\n or \\r\\n line endings",
            path=path,
            line=line,
        )
    if b"\x00" in raw:
        raise IngestError("unknown format: binary data (NUL bytes), not a text table", path=path, line=line)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
