"""This process's id without a system call, kept current across ``fork``.

HDF5 handles, memory maps, database connections and Redis clients are opened again in a forked
child (gunicorn's workers). The checks for that run on every request, several times: asking
``os.getpid()`` each time was a system call each time (glibc no longer caches the id).
"""

from __future__ import annotations

import os


class _Process:
    def __init__(self) -> None:
        self.pid = os.getpid()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.pid = os.getpid()


#: ``PROCESS.pid`` is this process's id (an attribute read).
PROCESS = _Process()
