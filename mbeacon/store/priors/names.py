"""Prior names: what a valid name is.

A prior's name becomes a directory name in the store (``STORE/priors/<name>/``), so it is restricted to
a safe alphabet. The rule lives apart from the storage code because a :class:`~.model.Prior` checks its
own name when it is created, and storage needs the same pattern to recognise prior directories.
"""

from __future__ import annotations

import re

from mbeacon.store.errors import DataError

__all__ = ["check_name"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(name: str) -> None:
    """DataError unless ``name`` is a valid prior name (it becomes a directory name)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise DataError(
            f"invalid prior name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
