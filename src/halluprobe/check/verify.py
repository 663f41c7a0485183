"""``halluprobe check``: every number a paper reports, recomputed from the run dirs it names.

Tables carry a provenance comment (:mod:`halluprobe.tables`); each is found in the given
``.tex`` / ``.md`` files (:mod:`~halluprobe.check.parse`), recomputed through
:func:`halluprobe.scoring.score_rundir` (or :func:`~halluprobe.scoring.score_answers_file` for a
third-party answers file) with the same readout, unknown policy, seed and resamples, and
compared cell by cell at the precision each cell is written with
(:mod:`~halluprobe.check.compare`). Numbers in prose come from a claims file
(:mod:`~halluprobe.check.claims`). A difference, a number that cannot be read, a run dir (or
answers or labels file) that is missing, incomplete or changed since the table was written:
exit 1. A malformed comment or claims file, or a table whose shape is not its source's: bad
input, exit 2 with file:line. See ``docs/design/provenance.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe.check.chair import check_chair_table, extract_chair_tables
from halluprobe.check.claims import check_claims, read_claims
from halluprobe.check.compare import compare_table
from halluprobe.check.decoding import check_decoding_table, extract_decoding_tables
from halluprobe.check.findings import CheckResult
from halluprobe.check.parse import FoundTable, extract_tables
from halluprobe.check.sources import RunCache, file_findings, locate_run, run_findings
from halluprobe.corrections_table import corrections_table
from halluprobe.errors import InputError
from halluprobe.formatting import score_rows_named
from halluprobe.jsonl import read_text
from halluprobe.scoring import score_answers_file
from halluprobe.study_table import study_grid
from halluprobe.tables import FileSource, Grid, corrections_grid, headline_grid, readouts_grid, score_grid

__all__ = ["check_files"]


def check_files(files: Sequence[str | Path], *, runs: Sequence[str | Path] = (), claims: str | Path | None = None) -> CheckResult:
    """Check every table with a provenance comment in ``files``, and every claim in ``claims``."""
    run_paths = [Path(r) for r in runs]
    cache = RunCache()
    result = CheckResult()
    texts: dict[str, str] = {}
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise InputError("no such file", path)
        texts[str(path)] = read_text(path, "file to check")[1]  # one-line errors; a BOM is tolerated
    for name, text in texts.items():
        for table in extract_tables(name, text):
            result.tables += 1
            _check_table(table, run_paths, cache, result)
        for chair in extract_chair_tables(name, text):
            result.tables += 1
            check_chair_table(chair, run_paths, result)
        for decoding in extract_decoding_tables(name, text):
            result.tables += 1
            check_decoding_table(decoding, run_paths, result)
    if claims is not None:
        parsed = read_claims(claims)
        result.claims = len(parsed)
        result.findings.extend(check_claims(parsed, texts, run_paths, cache))
    return result


def _check_answers_table(table: FoundTable, answers: FileSource, runs: Sequence[Path], result: CheckResult) -> Grid | None:
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


def _check_headline_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> Grid | None:
    """The report's headline table: every run it names recomputed with the headline readout."""
    prov = table.provenance
    names = prov.names or ()
    if len(prov.runs) > 1 and len(names) != len(prov.runs):
        raise InputError(f"a headline table of {len(prov.runs)} runs names each of them ('names')", table.path, table.line)
    paths = _usable_runs(table, runs, result)
    if paths is None:
        return None
    reports = [cache.report(p, prov.readout, prov.unknown, prov.seed, prov.resamples) for p in paths]
    return headline_grid([score_rows_named(r) for r in reports], names if len(paths) > 1 else ())


def _check_study_table(table: FoundTable, runs: Sequence[Path], result: CheckResult) -> Grid | None:
    """The multi-model study table (``audit --table``): every run it names, recomputed through
    the same grid."""
    prov = table.provenance
    if table.style == "terminal":
        raise InputError("a study table is a Markdown or LaTeX table, not a terminal table", table.path, table.line)
    paths = _usable_runs(table, runs, result)
    if paths is None:
        return None
    return study_grid(paths, table.style, policy=prov.unknown, n_resamples=prov.resamples, seed=prov.seed)


def _check_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    prov = table.provenance
    if prov.answers is not None:
        grid = _check_answers_table(table, prov.answers, runs, result)
    elif prov.table == "headline":
        grid = _check_headline_table(table, runs, cache, result)
    elif prov.table == "study":
        grid = _check_study_table(table, runs, result)
    else:
        grid = _check_run_table(table, runs, cache, result)
    if grid is None:  # a source that cannot be read: reported, nothing to compare with
        return
    cell_findings, compared = compare_table(table, grid)
    result.findings.extend(cell_findings)
    result.cells += compared


def _check_run_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> Grid | None:
    """A score, readouts or corrections table of one run dir, recomputed."""
    prov = table.provenance
    if len(prov.runs) != 1:
        raise InputError(f"a {prov.table} table is computed from one run dir; this comment names {len(prov.runs)}", table.path, table.line)
    source = prov.runs[0]
    path = locate_run(source.path, runs)
    findings, usable = run_findings(source, path, prov.readout, prov.unknown, (table.path, table.line))
    result.findings.extend(findings)
    if not usable:
        return None
    if prov.table == "corrections":
        report = corrections_table(path, prov.readouts, policy=prov.unknown, n_resamples=prov.resamples, seed=prov.seed)
        return corrections_grid(report, table.style)
    if prov.table == "readouts":
        if not prov.readouts:
            raise InputError("a readouts table's provenance lists no readouts", table.path, table.line)
        reports = {
            r: cache.report(path, r, prov.unknown, prov.seed, prov.resamples, force_invalid=r in prov.forced) for r in prov.readouts
        }
        return readouts_grid(reports, prov.forced, table.style)
    return score_grid(cache.report(path, prov.readout, prov.unknown, prov.seed, prov.resamples), table.style)
