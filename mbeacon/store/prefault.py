"""Map every page of a memory-mapped cohort into the process at open (Linux ``MADV_POPULATE_READ``).

Without it, the first read of each probe row in a process takes a page fault (several microseconds,
page cache or not), so a batch of 1,000 new probes on a large cohort spends most of its count in the
kernel; with every page mapped up front the count only reads memory. It also takes away a timing
signal: a row's first read in a worker is no longer slower than a row some earlier query, perhaps
another user's, has already read.

Cost: one pass over the file per process that opens it (about a tenth of a second per GB from the page
cache; a file not in the page cache is read from disk). Pages of a file mapping are the page cache's,
shared by every worker and reclaimable, so the workers' resident sets count them but the machine holds
them once. A file larger than :data:`MAX_FRACTION` of the available memory is left to page faults:
populating it would only push other pages out.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import numpy as np

MADV_POPULATE_READ = 22  # linux/mman.h, Linux 5.14 and later
PAGE = 4096
MAX_FRACTION = 0.5  # of MemAvailable


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def populate(mapped: np.ndarray) -> bool:
    """Fault in every page of ``mapped`` (a read-only file mapping) if the system allows and the file
    fits; whether it was done. Never fails: where the call is missing or refused, reads fault as
    before."""
    if not sys.platform.startswith("linux") or mapped.nbytes == 0:
        return False
    available = _available_bytes()
    if available is None or mapped.nbytes > MAX_FRACTION * available:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return False
    address = mapped.ctypes.data
    start = address - address % PAGE
    length = mapped.nbytes + (address - start)
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), MADV_POPULATE_READ) == 0
