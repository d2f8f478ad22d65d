"""Atomic publication of files in a store directory.

A file is written under ``STORE/.staging/`` and, only once it is complete and flushed to disk, renamed
into place. ``rename`` within one file system is atomic on POSIX: a reader sees either the old file or
the new one, never a half-written one, and a reader that already opened the old file keeps reading it
(its inode lives until closed). A failed or killed writer leaves at most a stray file in
``.staging/``, which nothing reads and :func:`clean_staging` removes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

STAGING = ".staging"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def publish(store: Path, destination: Path) -> Iterator[Path]:
    """Yield a staging path to write; on success fsync it and rename it to ``destination``.

    On any exception (or a kill) ``destination`` is untouched and the staging file is removed (or,
    after a kill, left in ``.staging`` for :func:`clean_staging`).
    """
    staging = Path(store) / STAGING
    staging.mkdir(parents=True, exist_ok=True)
    temp = staging / f"{destination.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        yield temp
        with open(temp, "rb+") as handle:
            handle.flush()
            os.fsync(handle.fileno())
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(temp, destination)
        _fsync_dir(destination.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def remove(store: Path, target: Path) -> None:
    """Atomically remove ``target``: it disappears from its directory in one rename."""
    staging = Path(store) / STAGING
    staging.mkdir(parents=True, exist_ok=True)
    doomed = staging / f"{target.name}.{secrets.token_hex(4)}.removed"
    os.replace(target, doomed)
    _fsync_dir(target.parent)
    doomed.unlink()


def clean_staging(store: Path, older_than_seconds: float = 3600.0) -> int:
    """Delete leftovers of killed writers; returns how many files were removed."""
    staging = Path(store) / STAGING
    if not staging.is_dir():
        return 0
    removed = 0
    now = time.time()
    for leftover in staging.iterdir():
        if now - leftover.stat().st_mtime >= older_than_seconds:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
                removed += 1
    return removed
