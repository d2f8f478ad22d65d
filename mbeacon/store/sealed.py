"""A cohort file's checksum, sealed into the file's HDF5 user block and checked before HDF5 reads it.

The HDF5 library trusts the bytes it reads: a damaged cohort file mostly opens without complaint and
serves wrong values (with 8 bytes flipped at one of 73 places of the demo cohort, 72 of the files
opened; one was refused by its signature). So a cohort file begins with a user block, a region that
HDF5 sets aside for its users and never reads, holding a SHA-256 hash of every byte after it. The seal
is part of the file and is published with it in one rename: a reader never meets a file paired with
another file's checksum, as it could with a checksum file beside it (a second rename, and a window
between the two). A file without a seal (written before seals existed, or by another tool) is read
unchecked; a file that begins with neither a seal nor the HDF5 signature is refused.

Hashing takes about 0.4 s per GB on two cores, so a verified file is remembered by its identity (device,
inode, size, modification time) for the life of the process and of the processes it forks: the
gunicorn master checks each cohort at start-up and its workers inherit the result. Damage that
happens to a file after it was verified goes unseen until the next start.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mbeacon.store.errors import DataError

USERBLOCK = 4096  # bytes before the HDF5 superblock (HDF5 wants a power of two, at least 512)
MAGIC = b"MBEACON-SEAL sha256/64MiB "  # the hash: SHA-256 of the SHA-256s of 64 MiB segments
SEGMENT = 64 << 20
_READ = 8 << 20
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

_verified: set[tuple[int, int, int, int]] = set()


def _identity(fd: int) -> tuple[int, int, int, int]:
    """What a verified file is remembered by: device, inode, size, modification time."""
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _segment(fd: int, start: int, end: int) -> bytes:
    digest = hashlib.sha256()
    for offset in range(start, end, _READ):
        digest.update(os.pread(fd, min(_READ, end - offset), offset))
    return digest.digest()


def _digest(fd: int) -> str:
    """The seal's hash of everything after the user block: the SHA-256 of the SHA-256s of its 64 MiB
    segments, hashed on every core (hashlib lets go of the GIL), so a multi-GB cohort takes a
    fraction of a second per GB."""
    size = os.fstat(fd).st_size
    starts = range(USERBLOCK, max(size, USERBLOCK + 1), SEGMENT)
    with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1)) as pool:
        parts = pool.map(lambda start: _segment(fd, start, min(start + SEGMENT, size)), starts)
        return hashlib.sha256(b"".join(parts)).hexdigest()


def seal(path: Path) -> None:
    """Write the hash of everything after the user block (:func:`_digest`) into it. ``path`` is a
    closed HDF5 file created with ``userblock_size=USERBLOCK``.

    The file's bulk is flushed to disk while it is hashed (the flush waits on the disk, the hash on
    a core), so sealing a fresh ingest costs little more than the flush that publishing it needs
    anyway; afterwards only the user block's page is left to flush. The sealed file counts as verified
    in this process (an ingest reads it back at once)."""
    with open(path, "r+b") as handle, ThreadPoolExecutor(1) as pool:
        flushed = pool.submit(os.fsync, handle.fileno())
        digest = _digest(handle.fileno())
        flushed.result()
        handle.seek(0)
        handle.write((MAGIC + digest.encode("ascii") + b"\n").ljust(USERBLOCK, b"\0"))
        handle.flush()
        identity = _identity(handle.fileno())
    _verified.add(identity)


def verify(path: Path) -> None:
    """Refuse (:class:`DataError`) a sealed file whose bytes differ from its seal, and a file that
    starts with neither a seal nor the HDF5 signature; an unsealed HDF5 file passes."""
    try:
        with open(path, "rb") as handle:
            identity = _identity(handle.fileno())
            if identity in _verified:
                return
            head = handle.read(len(MAGIC) + 64)
            if head.startswith(HDF5_SIGNATURE):
                return  # written before seals existed
            if not head.startswith(MAGIC):
                raise DataError(
                    "not a cohort file, or a damaged one: it starts with neither a seal nor the HDF5"
                    " signature",
                    path=str(path),
                )
            actual = _digest(handle.fileno())
    except OSError as error:
        raise DataError(f"cannot read the cohort file: {error.strerror or error}", path=str(path)) from None
    if actual.encode("ascii") != head[len(MAGIC) :]:
        raise DataError(
            "cohort file is damaged: its bytes differ from the SHA-256 sealed into it when it was"
            " written; restore it from a backup or ingest it again",
            path=str(path),
        )
    _verified.add(identity)
