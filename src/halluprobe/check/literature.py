"""``literature.md`` (``halluprobe literature audit``) checked against the audit's stored results:
the ``literature.json`` written beside it, whose provenance must be the comment's (same
registry digest, bootstrap and version). Its entries are rendered again through
:func:`halluprobe.literature.table.literature_grid`, the writer's own grid, and every cell is
compared with the written table as text. Comments written by every earlier version read:
the ``key=value`` form is the form still written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from halluprobe.check.compare import compare_table
from halluprobe.check.findings import CheckResult, Finding
from halluprobe.check.parse import check_bounds, markdown_table_under
from halluprobe.check.sources import RunCache
from halluprobe.errors import InputError
from halluprobe.jsonl import loads, read_text
from halluprobe.literature.audit import EntryAudit, FigureCheck
from halluprobe.literature.table import LITERATURE_JSON, literature_grid
from halluprobe.provenance import LITERATURE_PROVENANCE_MARK, LiteratureProvenance, read_marked
from halluprobe.tables import Style

__all__ = ["LiteratureTable", "check_literature_table", "extract_literature_tables", "stored_audits"]


@dataclass(frozen=True)
class LiteratureTable:
    """literature.md's table as written under its comment."""

    path: str
    line: int
    provenance: LiteratureProvenance
    style: Style
    header: tuple[int, list[str]]
    rows: list[tuple[int, list[str]]]


def extract_literature_tables(path: str | Path, text: str) -> list[LiteratureTable]:
    """Every table under a literature provenance comment in ``text``; a malformed one is bad input."""
    lines = text.split("\n")
    found = []
    for index, line in enumerate(lines):
        parsed = read_marked(line, path, index + 1, (LITERATURE_PROVENANCE_MARK,))
        if parsed is None:
            continue
        provenance, syntax = parsed
        assert isinstance(provenance, LiteratureProvenance)  # the mark decides the kind
        if syntax != "markdown":
            raise InputError("a literature provenance comment is a Markdown comment", path, index + 1)
        check_bounds(provenance, path, index + 1, "literature")
        style, header, rows = markdown_table_under(lines, index, str(path))
        found.append(LiteratureTable(str(path), index + 1, provenance, style, header, rows))
    return found


def _entry(data: Any, where: Path) -> EntryAudit:
    """One ``literature.json`` entry as the audit made it (``EntryAudit.as_json`` read back)."""
    known = {f.name for f in fields(EntryAudit)}
    if not isinstance(data, dict) or not {"name", "status"} <= data.keys() or not data.keys() <= known:
        raise InputError("an entry is not an audit entry of this halluprobe (its keys differ)", where)
    try:
        figures = [FigureCheck(**f) for f in data.get("figures", [])]
        return EntryAudit(**{**data, "figures": figures})
    except TypeError as err:  # a figure with other keys
        raise InputError(f"an entry's figure is not one this halluprobe writes: {err}", where) from None


def stored_audits(path: Path) -> tuple[dict[str, Any], list[EntryAudit]]:
    """``literature.json``'s provenance and entries; bad input when it does not read."""
    text = read_text(path, "literature audit results")[1]
    try:
        data = loads(text)
    except (json.JSONDecodeError, ValueError, RecursionError) as err:
        raise InputError(f"not JSON: {str(err).splitlines()[0][:120]}", path) from None
    if not isinstance(data, dict) or not isinstance(data.get("provenance"), dict) or not isinstance(data.get("entries"), list):
        raise InputError("expected the literature audit's {provenance, entries}", path)
    return data["provenance"], [_entry(e, path) for e in data["entries"]]


def check_literature_table(table: LiteratureTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    """Compare every cell of a literature.md table with its ``literature.json``, rendered again."""
    where = (table.path, table.line)
    stored = Path(table.path).parent / LITERATURE_JSON
    if not stored.is_file():
        result.findings.append(Finding("file-missing", *where, f"{stored} is missing: the audit's results this table was written from"))
        return
    provenance, audits = stored_audits(stored)
    written = table.provenance.model_dump(mode="json", exclude={"table"})
    if provenance != written:
        result.findings.append(Finding("file-changed", *where, f"{stored} is another audit's (its provenance differs from this comment's)",
                                       json.dumps(written), json.dumps(provenance)))  # fmt: skip
        return
    findings, compared = compare_table(table, literature_grid(audits))
    result.findings.extend(findings)
    result.cells += compared
