"""``halluprobe check``: every number a paper reports, recomputed from the run dirs it names.

Tables carry a provenance comment (:mod:`halluprobe.provenance`); each kind of table is found in
the given ``.tex`` / ``.md`` files by its extractor and recomputed by its checker, both named in
:mod:`~halluprobe.check.registry` (score tables through :func:`halluprobe.scoring.score_rundir`
with the same readout, unknown policy, seed and resamples: :mod:`~halluprobe.check.score`), and
compared cell by cell at the precision each cell is written with
(:mod:`~halluprobe.check.compare`); a table whose recomputation compared no cell is bad input. Numbers in prose come from a claims file
(:mod:`~halluprobe.check.claims`). A difference, a number that cannot be read, a run dir (or
answers or labels file) that is missing, incomplete or changed since the table was written:
exit 1. A malformed comment or claims file, or a table whose shape is not its source's: bad
input, exit 2 with file:line. See ``docs/design/provenance.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from halluprobe.check.claims import check_claims, read_claims
from halluprobe.check.findings import CheckResult
from halluprobe.check.registry import TABLE_KINDS, Checker, Extractor
from halluprobe.check.sources import RunCache
from halluprobe.errors import InputError
from halluprobe.jsonl import read_text

__all__ = ["check_files", "table_kind"]


def table_kind(table: Any) -> str:
    """The kind of a table as an extractor found it: its provenance record's ``table``."""
    return str(table.provenance.table)


def check_files(files: Sequence[str | Path], *, runs: Sequence[str | Path] = (), claims: str | Path | None = None) -> CheckResult:
    """Check every table with a provenance comment in ``files`` (each kind of
    :data:`~halluprobe.check.registry.TABLE_KINDS` by its checker), and every claim in ``claims``."""
    run_paths = [Path(r) for r in runs]
    cache = RunCache()
    result = CheckResult()
    texts: dict[str, str] = {}
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise InputError("no such file", path)
        texts[str(path)] = read_text(path, "file to check")[1]  # one-line errors; a BOM is tolerated
    checkers = {k.kind: k.check for k in TABLE_KINDS}
    extractors: list[Extractor] = []
    for k in TABLE_KINDS:
        if k.extract not in extractors:
            extractors.append(k.extract)
    for name, text in texts.items():
        for extract in extractors:
            for table in extract(name, text):
                result.tables += 1
                kind = table_kind(table)
                if kind not in checkers:
                    raise InputError(f"no check for a {kind} table in this halluprobe", table.path, table.line)
                _check_one(table, kind, checkers[kind], run_paths, cache, result)
    if claims is not None:
        parsed = read_claims(claims)
        result.claims = len(parsed)
        result.findings.extend(check_claims(parsed, texts, run_paths, cache))
    return result


def _check_one(table: Any, kind: str, check: Checker, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    """One table through its checker. A recomputation that compared no cell is bad input, never
    a match; one whose sources are missing or changed has said so in a failing finding."""
    cells, findings = result.cells, len(result.findings)
    check(table, runs, cache, result)
    if result.cells == cells and not any(f.fails for f in result.findings[findings:]):
        raise InputError(f"the {kind} table under this comment was recomputed but no cell was compared: nothing is checked", table.path, table.line)
