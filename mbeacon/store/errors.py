"""Errors of the data layer that a user can act on: they name the file, line and column."""

from __future__ import annotations


class DataError(Exception):
    """Bad input (a malformed file, an unknown dataset): reported as ``path:line:column: message``.

    The CLI prints it without a traceback and exits with status 2; nothing in the store has changed.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = [str(part) for part in (self.path, self.line) if part is not None]
        location = ":".join(where)
        if self.column is not None:
            location += f"{', ' if location else ''}column {self.column}"
        return f"{location}: {self.message}" if location else self.message


class IngestError(DataError):
    """A file that cannot be ingested as it is."""
