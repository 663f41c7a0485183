"""The table kinds ``check`` knows: one line each, the provenance kinds it checks (the record's
``table``), the extractor that finds its tables in a file's text, and the checker that
recomputes one and compares it. A new table kind is one module (its extractor and checker)
and one line here; :func:`halluprobe.check.verify.check_files` dispatches on this list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluprobe.check.chair import check_chair_table, extract_chair_tables
from halluprobe.check.decoding import check_decoding_table, extract_decoding_tables
from halluprobe.check.findings import CheckResult
from halluprobe.check.hallusion import check_hallusion_table, extract_hallusion_tables
from halluprobe.check.literature import check_literature_table, extract_literature_tables
from halluprobe.check.mmhal import check_mmhal_table, extract_mmhal_tables
from halluprobe.check.parse import extract_tables
from halluprobe.check.score import (
    check_corrections_table,
    check_headline_table,
    check_readouts_table,
    check_score_table,
    check_study_table,
)
from halluprobe.check.sources import RunCache

__all__ = ["TABLE_KINDS", "TableKind", "Checker", "Extractor"]

# every table under the extractor's mark in a file's text: (path, text) -> tables
Extractor = Callable[[str, str], Sequence[Any]]
# recompute one table, its findings and compared cells added to the result
Checker = Callable[[Any, Sequence[Path], RunCache, CheckResult], None]


@dataclass(frozen=True)
class TableKind:
    kind: str  # the provenance record's ``table``
    extract: Extractor  # kinds under one mark share it: a file is read once per extractor
    check: Checker


TABLE_KINDS: tuple[TableKind, ...] = (
    TableKind("score", extract_tables, check_score_table),
    TableKind("readouts", extract_tables, check_readouts_table),
    TableKind("corrections", extract_tables, check_corrections_table),
    TableKind("headline", extract_tables, check_headline_table),
    TableKind("study", extract_tables, check_study_table),
    TableKind("chair", extract_chair_tables, lambda table, runs, cache, result: check_chair_table(table, runs, result)),
    TableKind("decoding", extract_decoding_tables, lambda table, runs, cache, result: check_decoding_table(table, runs, result)),
    TableKind("literature", extract_literature_tables, check_literature_table),
    TableKind("mmhal", extract_mmhal_tables, lambda table, runs, cache, result: check_mmhal_table(table, runs, result)),
    TableKind("hallusion", extract_hallusion_tables, lambda table, runs, cache, result: check_hallusion_table(table, runs, result)),
)
