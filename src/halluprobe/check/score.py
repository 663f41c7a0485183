"""The score tables' checks (``halluprobe-provenance``): score (of a run dir or of an answers
file), readouts, corrections, headline and study, each recomputed through the grid its writer
renders and compared cell by cell (:func:`~halluprobe.check.compare.compare_table`). One
checker per table kind, registered in :mod:`halluprobe.check.registry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe.check.compare import compare_table
from halluprobe.check.findings import CheckResult
from halluprobe.check.parse import FoundTable
from halluprobe.check.sources import RunCache, file_findings, locate_run, run_findings
from halluprobe.corrections_table import corrections_table
from halluprobe.errors import InputError
from halluprobe.formatting import score_rows_named
from halluprobe.provenance_sources import FileSource
from halluprobe.scoring import score_answers_file
from halluprobe.study_table import study_grid
from halluprobe.tables import Grid, corrections_grid, headline_grid, readouts_grid, score_grid

__all__ = ["check_corrections_table", "check_headline_table", "check_readouts_table", "check_score_table", "check_study_table"]


def _compared(table: FoundTable, grid: Grid | None, result: CheckResult) -> None:
    if grid is None:  # a source that cannot be read: reported, nothing to compare with
        return
    findings, compared = compare_table(table, grid)
    result.findings.extend(findings)
    result.cells += compared


def _answers_grid(table: FoundTable, answers: FileSource, runs: Sequence[Path], result: CheckResult) -> Grid | None:
    """The grid of a score table of a third-party answers file, recomputed from its files."""
    prov = table.provenance
    if not prov.readout.startswith("text:"):
        raise InputError(f"an answers file is scored with a text rule (text:RULE), not {prov.readout!r}", table.path, table.line)
    sources = (answers, *(prov.labels or ()))
    paths: list[Path] = []
    for source in sources:
        findings, path = file_findings(source, runs, (table.path, table.line))
        result.findings.extend(findings)
        if path is not None:
            paths.append(path)
    if len(paths) < len(sources):  # a file is missing: reported, nothing to score
        return None
    report = score_answers_file(
        paths[0], paths[1:], rule=prov.readout.removeprefix("text:"), policy=prov.unknown,
        n_resamples=prov.resamples, seed=prov.seed,
    )  # fmt: skip
    return score_grid(report, table.style)


def _usable_runs(table: FoundTable, runs: Sequence[Path], result: CheckResult) -> list[Path] | None:
    """Every run dir a table's comment names, located; None (its findings recorded) when one
    cannot be recomputed (missing, or changed since the table was written)."""
    prov = table.provenance
    paths = []
    for source in prov.runs:
        path = locate_run(source.path, runs)
        findings, usable = run_findings(source, path, prov.readout, prov.unknown, (table.path, table.line))
        result.findings.extend(findings)
        if not usable:
            return None
        paths.append(path)
    return paths


def _one_run(table: FoundTable, runs: Sequence[Path], result: CheckResult) -> Path | None:
    """The one run dir a score, readouts or corrections table is computed from, located."""
    prov = table.provenance
    if len(prov.runs) != 1:
        raise InputError(f"a {prov.table} table is computed from one run dir; this comment names {len(prov.runs)}", table.path, table.line)
    paths = _usable_runs(table, runs, result)
    return None if paths is None else paths[0]


def check_score_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    """A score table: of a run dir, or of an answers file with its labels files."""
    prov = table.provenance
    if prov.answers is not None:
        _compared(table, _answers_grid(table, prov.answers, runs, result), result)
        return
    path = _one_run(table, runs, result)
    grid = None if path is None else score_grid(cache.report(path, prov.readout, prov.unknown, prov.seed, prov.resamples), table.style)
    _compared(table, grid, result)


def check_readouts_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    """Every readout of a run side by side (the audit's table)."""
    prov = table.provenance
    path = _one_run(table, runs, result)
    if path is None:
        return
    if not prov.readouts:
        raise InputError("a readouts table's provenance lists no readouts", table.path, table.line)
    reports = {r: cache.report(path, r, prov.unknown, prov.seed, prov.resamples, force_invalid=r in prov.forced) for r in prov.readouts}
    _compared(table, readouts_grid(reports, prov.forced, table.style), result)


def check_corrections_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    """The corrections table, recomputed whole with the comment's policy, seed and resamples."""
    prov = table.provenance
    path = _one_run(table, runs, result)
    if path is None:
        return
    report = corrections_table(path, prov.readouts, policy=prov.unknown, n_resamples=prov.resamples, seed=prov.seed)
    _compared(table, corrections_grid(report, table.style), result)


def check_headline_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    """The report's headline table: every run it names recomputed with the headline readout."""
    prov = table.provenance
    names = prov.names or ()
    if len(prov.runs) > 1 and len(names) != len(prov.runs):
        raise InputError(f"a headline table of {len(prov.runs)} runs names each of them ('names')", table.path, table.line)
    paths = _usable_runs(table, runs, result)
    if paths is None:
        return
    reports = [cache.report(p, prov.readout, prov.unknown, prov.seed, prov.resamples) for p in paths]
    _compared(table, headline_grid([score_rows_named(r) for r in reports], names if len(paths) > 1 else ()), result)


def check_study_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    """The multi-model study table (``audit --table``): every run it names, recomputed through
    the same grid."""
    prov = table.provenance
    if table.style == "terminal":
        raise InputError("a study table is a Markdown or LaTeX table, not a terminal table", table.path, table.line)
    paths = _usable_runs(table, runs, result)
    if paths is None:
        return
    _compared(table, study_grid(paths, table.style, policy=prov.unknown, n_resamples=prov.resamples, seed=prov.seed), result)
