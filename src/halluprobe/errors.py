"""Errors the CLI maps to exit codes: InputError -> 2 (bad input), RuntimeFailure -> 1."""

from __future__ import annotations

from pathlib import Path

__all__ = ["InputError", "RuntimeFailure"]


class InputError(ValueError):
    """Bad input: printed as one line ``file:line: problem`` and exit code 2."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.problem = message
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(f"{where}{message}")


class RuntimeFailure(RuntimeError):
    """A failure that is not the user's input (offline, download mismatch, model failure): exit 1."""
