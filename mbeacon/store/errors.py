"""Errors of the data layer that a user can act on: they name the file, line and column."""

from __future__ import annotations


class DataError(Exception):
    """Bad input (a malformed file, an unknown dataset): ``path, line L, column C: message``.

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
        parts = [str(self.path)] if self.path is not None else []
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.column is not None:
            parts.append(f"column {self.column}")
        return f"{', '.join(parts)}: {self.message}" if parts else self.message


class IngestError(DataError):
    """A file that cannot be ingested as it is."""
