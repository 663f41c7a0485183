"""What ``check`` reports: one finding per file:line, and the result of a whole check.

The primitives every checker of the package shares (tables, claims); they import nothing of
halluprobe, so the parsers, comparisons and claims sit above them as peers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["FindingKind", "Finding", "CheckResult"]

FindingKind = Literal[
    "differs", "unparseable", "run-missing", "run-incomplete", "run-changed", "file-missing", "file-changed", "text-not-found", "policy"
]


@dataclass(frozen=True)
class Finding:
    """One thing check reports at file:line. Every kind fails the check but ``policy``, a note
    (the numbers are recomputed under the table's or claim's own policy, and compared)."""

    kind: FindingKind
    path: str
    line: int
    message: str
    expected: str | None = None
    found: str | None = None

    @property
    def fails(self) -> bool:
        return self.kind != "policy"

    def describe(self) -> str:
        values = f" (expected {self.expected}, found {self.found})" if self.expected is not None or self.found is not None else ""
        return f"{self.path}:{self.line}: {self.kind}: {self.message}{values}"


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    tables: int = 0
    cells: int = 0
    claims: int = 0

    @property
    def exit_code(self) -> int:
        return 1 if any(f.fails for f in self.findings) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "tables": self.tables,
            "cells": self.cells,
            "claims": self.claims,
            "findings": [{**asdict(f), "fails": f.fails} for f in self.findings],
        }
