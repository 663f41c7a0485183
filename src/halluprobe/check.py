"""``halluprobe check``: every number a paper reports, recomputed from the run dirs it names.

Tables carry a provenance comment (:mod:`halluprobe.tables`); each is found in the given
``.tex`` / ``.md`` files, recomputed through :func:`halluprobe.scoring.score_rundir` (or
:func:`~halluprobe.scoring.score_answers_file` for a third-party answers file) with the same
readout, unknown policy, seed and resamples, and compared cell by cell at the precision each
cell is written with. Numbers in prose come from a claims file (:mod:`halluprobe.claims`).
A difference, a number that cannot be read, a run dir (or answers or labels file) that is
missing, incomplete or changed since the table was written: exit 1. A malformed comment or claims file, or a table whose
shape is not its source's: bad input, exit 2 with file:line. See ``docs/design/provenance.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from halluprobe.errors import InputError
from halluprobe.formatting import score_rows_named
from halluprobe.jsonl import loads, read_text
from halluprobe.records import ScoreReport
from halluprobe.tables import (
    Cell,
    FileSource,
    Grid,
    Provenance,
    RunSource,
    Style,
    corrections_grid,
    headline_grid,
    parse_provenance,
    readouts_grid,
    score_grid,
)

__all__ = [
    "Finding",
    "CheckResult",
    "FoundTable",
    "RunCache",
    "check_files",
    "compare_cell",
    "compare_number",
    "extract_tables",
    "file_findings",
    "locate_run",
]

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


@dataclass(frozen=True)
class FoundTable:
    """A table as written under its provenance comment: rows of cell texts with their lines
    (a terminal row is its label and the rest of the line, split by the source's shape)."""

    path: str
    line: int
    provenance: Provenance
    style: Style
    header: tuple[int, list[str]]
    rows: list[tuple[int, list[str]]]


# -- finding tables -------------------------------------------------------------------------

_LATEX_RULE = re.compile(r"^\\(toprule|midrule|bottomrule|hline|cmidrule|cline|addlinespace)\b")
_UNESCAPED_PERCENT = re.compile(r"(?<!\\)%.*$")
_UNESCAPED_AMP = re.compile(r"(?<!\\)&")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")  # a cell's own pipe is written \| (formatting.markdown_cell)
_BOX = str.maketrans({ch: " " for ch in "│┃┏┓┗┛┡┩┳┻╇╋━─└┘┴┬┼├┤╭╮╰╯║═╔╗╚╝╠╣╦╩╬|"})
_LOOKAHEAD = 8  # lines between a comment and its table (a title, a caption, blank lines)


def extract_tables(path: str | Path, text: str) -> list[FoundTable]:
    """Every table under a provenance comment in ``text``; a comment with no table under it,
    or a malformed one, is bad input."""
    lines = text.split("\n")
    tables = []
    for index, line in enumerate(lines):
        parsed = parse_provenance(line, path, index + 1)
        if parsed is None:
            continue
        provenance, syntax = parsed
        reader = _latex_table if syntax == "latex" else _markdown_table
        style, header, rows = reader(lines, index, str(path))
        tables.append(FoundTable(str(path), index + 1, provenance, style, header, rows))
    return tables


def _table_start(lines: list[str], index: int, path: str, starts: tuple[str, ...]) -> tuple[int, str]:
    """The line under the comment at ``index`` where a table begins, and which start it has."""
    seen = 0
    for j in range(index + 1, len(lines)):
        stripped = lines[j].strip()
        if "halluprobe-provenance" in stripped:
            break
        for start in starts:
            if stripped.startswith(start):
                return j, start
        seen += bool(stripped)
        if seen > _LOOKAHEAD:
            break
    raise InputError(f"no table under the provenance comment (expected a line starting with {' or '.join(starts)})", path, index + 1)


def _latex_table(lines: list[str], index: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    begin, _ = _table_start(lines, index, path, (r"\begin{tabular}",))
    rows: list[tuple[int, list[str]]] = []
    pending, first = "", 0
    for j in range(begin + 1, len(lines)):
        content = _UNESCAPED_PERCENT.sub("", lines[j]).strip()
        if content.startswith(r"\end{tabular}"):
            break
        if not content or _LATEX_RULE.match(content):
            continue
        first = first or j + 1
        pending = f"{pending} {content}".strip()
        if r"\\" in pending:
            row = pending.split(r"\\", 1)[0]
            rows.append((first, [c.strip() for c in _UNESCAPED_AMP.split(row)]))
            pending, first = "", 0
    else:
        raise InputError(r"the tabular under the provenance comment has no \end{tabular}", path, begin + 1)
    if not rows:
        raise InputError("the tabular under the provenance comment has no rows", path, begin + 1)
    return "latex", rows[0], rows[1:]


def _markdown_table(lines: list[str], index: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    start, kind = _table_start(lines, index, path, ("|", "```"))
    if kind == "```":
        return _terminal_table(lines, start, path)
    rows = []
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if not stripped.startswith("|"):
            break
        inner = stripped[1:-1] if stripped.endswith("|") and not stripped.endswith("\\|") else stripped[1:]
        cells = [c.strip().replace("\\|", "|") for c in _UNESCAPED_PIPE.split(inner)]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue  # the separator under the header
        rows.append((j + 1, cells))
    if not rows:
        raise InputError("the pipe table under the provenance comment has no rows", path, start + 1)
    return "markdown", rows[0], rows[1:]


def _terminal_table(lines: list[str], fence: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    """The rich table ``score`` and ``demo`` print, pasted in a code block (box lines or not):
    the header is the line that starts with ``split``; rows follow while a line reads
    ``LABEL NUMBER ...``."""
    header: tuple[int, list[str]] | None = None
    rows: list[tuple[int, list[str]]] = []
    for j in range(fence + 1, len(lines)):
        if lines[j].strip().startswith("```"):
            break
        tokens = lines[j].translate(_BOX).split()
        if header is None:
            if tokens[:1] == ["split"]:
                header = (j + 1, tokens)
            continue
        if not tokens:
            continue  # a rule line of the box
        if len(tokens) < 2 or tokens[1][0] not in "0123456789-−":
            break
        rows.append((j + 1, [tokens[0], " ".join(tokens[1:])]))
    if header is None:
        raise InputError("no table header (a line starting with 'split') in the code block under the provenance comment", path, fence + 1)
    return "terminal", header, rows


# -- comparing cells ------------------------------------------------------------------------

_NUMBER = re.compile(r"([-+−]?\d+(?:\.\d+)?)(\s*%)?")
_MISSING = {"-", "--", "---", "—", "–", "n/a"}
_ALLOWED_BETWEEN = set(" [](),;±")


def _strip_markup(text: str) -> str:
    """A cell without emphasis a writer may add (``\\textbf{}``, ``**``, ``$``)."""
    text = text.replace(r"\%", "%")
    text = re.sub(r"(?<=\d)\u202f(?=\d)", "", text)  # SI thousands (the report's counts): 9 000
    text = re.sub(r"\\[A-Za-z]+\*?", " ", text)
    text = re.sub(r"[{}$*]", " ", text)
    return " ".join(text.split())


def compare_number(value: float | int, token: str, percent: bool = False) -> bool:
    """Whether ``token`` (``"0.858"``, ``"84.5"`` with ``percent``) is ``value`` written at the
    token's own precision; a count must be written whole."""
    token = token.replace("−", "-").lstrip("+")
    if isinstance(value, int) and not isinstance(value, bool) and not percent:
        # ASCII digits only, and no more than a count can have: '²' passes isdigit() but not int(),
        # and int() refuses more than 4,300 digits; either is a cell that differs, not a traceback
        return re.fullmatch(r"-?[0-9]{1,30}", token) is not None and int(token) == value
    scaled = 100 * value if percent else value
    decimals = len(token.split(".", 1)[1]) if "." in token else 0
    written = f"{scaled:.{decimals}f}"
    return written == token or (written.lstrip("-") == token and float(written) == 0.0)


def compare_cell(expected: Cell, found: str) -> Literal["differs", "unparseable"] | None:
    """None when ``found`` shows the cell's numbers (at its own precision), else why not."""
    text = _strip_markup(found)
    if not expected.values:  # a label: compared as text
        return None if text == _strip_markup(expected.text) else "differs"
    if expected.values == (None,):
        return None if text in _MISSING else ("differs" if _NUMBER.search(text) or text == "" else "unparseable")
    tokens = _NUMBER.findall(text)
    between = _NUMBER.sub(" ", text)
    if not tokens or not set(between) <= _ALLOWED_BETWEEN:
        return "unparseable"
    if len(tokens) != len(expected.values):
        return "differs"
    for value, (token, percent) in zip(expected.values, tokens):
        if value is None or not compare_number(value, token, bool(percent)):
            return "differs"
    return None


def _cell_count_error(table: FoundTable, line: int, found: int, expected: int, what: str) -> InputError:
    return InputError(f"the table has {found} {what}, its source {expected}: not the table its provenance names", table.path, line)


def compare_table(table: FoundTable, grid: Grid) -> tuple[list[Finding], int]:
    """Findings for every cell that differs, and how many cells were compared; a table of
    another shape than its source is bad input."""
    if len(table.rows) != len(grid.rows):
        raise _cell_count_error(table, table.header[0], len(table.rows), len(grid.rows), "rows")
    findings: list[Finding] = []
    header_line, header = table.header
    expected_header = [h for cell in grid.header for h in cell.split()] if table.style == "terminal" else list(grid.header)
    if len(header) != len(expected_header):
        raise _cell_count_error(table, header_line, len(header), len(expected_header), "columns")
    for found, expected in zip(header, expected_header):
        if _strip_markup(found) != _strip_markup(expected):
            findings.append(Finding("differs", table.path, header_line, "a header differs from its source's", expected, found))
    compared = 0
    for (line, cells), expected_row in zip(table.rows, grid.rows):
        if table.style == "terminal":
            cells = _split_terminal_row(table, line, cells, expected_row)
        if len(cells) != len(expected_row):
            raise _cell_count_error(table, line, len(cells), len(expected_row), "cells in this row")
        row_name = _strip_markup(expected_row[0].text)
        for column, (found_text, cell) in enumerate(zip(cells, expected_row)):
            compared += 1
            problem = compare_cell(cell, found_text)
            if problem is not None:
                what = "cannot read the number" if problem == "unparseable" else "differs from the recomputed value"
                column_name = grid.header[column]
                findings.append(Finding(problem, table.path, line, f"{row_name} / {column_name}: {what}", cell.text, found_text))
    return findings, compared


def _split_terminal_row(table: FoundTable, line: int, cells: list[str], expected_row: tuple[Cell, ...]) -> list[str]:
    """A terminal row's tokens grouped as the source's cells (``0.8575 [0.832, 0.881]`` is one)."""
    tokens = cells[1].split()
    widths = [1 if cell.values in ((), (None,)) else len(cell.values) for cell in expected_row[1:]]
    if len(tokens) != sum(widths):
        raise _cell_count_error(table, line, len(tokens), sum(widths), "numbers in this row")
    grouped, at = [cells[0]], 0
    for width in widths:
        grouped.append(" ".join(tokens[at : at + width]))
        at += width
    return grouped


# -- run dirs -------------------------------------------------------------------------------


def locate_run(reference: str, runs: Sequence[Path]) -> Path:
    """The run dir a table or claim names: among ``--runs``, the one whose path ends with the
    most of the reference's trailing parts (``/tmp/x/halluprobe-demo/run`` serves
    ``halluprobe-demo/run``); without a match, the reference itself (from the current folder)."""
    ref_parts = [p for p in Path(reference).parts if p not in (".", "")]
    best: list[Path] = []
    best_len = 0
    for run in runs:
        run_parts = [p for p in Path(run).parts if p not in (".", "")]
        common = 0
        while common < min(len(ref_parts), len(run_parts)) and ref_parts[-1 - common] == run_parts[-1 - common]:
            common += 1
        if common > best_len:
            best, best_len = [run], common
        elif common == best_len and common > 0:
            best.append(run)
    if len(best) > 1:
        raise InputError(f"--runs: {len(best)} dirs match the run {reference!r} equally well: {', '.join(map(str, best))}")
    return best[0] if best else Path(reference)


class RunCache:
    """Recomputed score reports, one per (run, readout, policy, seed, resamples, forced)."""

    def __init__(self) -> None:
        self._reports: dict[tuple[str, str, str, int, int, bool], ScoreReport] = {}

    def report(self, path: Path, readout: str, policy: str, seed: int, resamples: int, force_invalid: bool = False) -> ScoreReport:
        from halluprobe.scoring import score_rundir

        key = (str(path.resolve()), readout, policy, seed, resamples, force_invalid)
        if key not in self._reports:
            self._reports[key] = score_rundir(
                path, readout=readout, policy=policy, n_resamples=resamples, seed=seed, write=False,  # type: ignore[arg-type]
                force_invalid=force_invalid,
            )  # fmt: skip
        return self._reports[key]

    def point_report(self, path: Path, readout: str, policy: str, force_invalid: bool = False) -> ScoreReport:
        """Point values only: any report already computed for the run serves, else one without bootstrap."""
        resolved = str(path.resolve())
        for (run, r, p, _, _, forced), report in self._reports.items():
            if (run, r, p, forced) == (resolved, readout, policy, force_invalid):
                return report
        return self.report(path, readout, policy, 0, 0, force_invalid=force_invalid)


def run_findings(source: RunSource, path: Path, readout: str, policy: str, where: tuple[str, int]) -> tuple[list[Finding], bool]:
    """What is wrong with a named run dir, and whether it can be recomputed at all."""
    from halluprobe.rundir import RunDir, sha256_file

    file, line = where
    rundir = RunDir(path)
    if not rundir.header_path.is_file() or not rundir.samples_path.is_file():
        return [Finding("run-missing", file, line, f"run dir {path} is missing (no run.json or samples.jsonl)")], False
    findings = []
    if not rundir.complete_path.exists():
        findings.append(Finding("run-incomplete", file, line, f"run dir {path} is not complete (no complete.json)"))
    if source.fingerprint is not None and rundir.read_header().fingerprint != source.fingerprint:
        findings.append(Finding("run-changed", file, line, f"run dir {path} is another run now (its fingerprint changed)"))
    elif source.samples_sha256 is not None and sha256_file(rundir.samples_path) != source.samples_sha256:
        findings.append(Finding("run-changed", file, line, f"samples of {path} changed since this was written (samples.jsonl sha256)"))
    if rundir.metrics_path.is_file():
        try:
            scored = loads(read_text(rundir.metrics_path, "metrics file")[1])
        except (InputError, json.JSONDecodeError):
            scored = {}
        if isinstance(scored, dict) and scored.get("readout") == readout and scored.get("unknown_policy") not in (None, policy):
            findings.append(
                Finding(
                    "policy", file, line,
                    f"{path}/metrics.json was scored with unknown={scored['unknown_policy']}; this is checked with unknown={policy}",
                )  # fmt: skip
            )
    return findings, True


# -- the check ------------------------------------------------------------------------------


def check_files(files: Sequence[str | Path], *, runs: Sequence[str | Path] = (), claims: str | Path | None = None) -> CheckResult:
    """Check every table with a provenance comment in ``files``, and every claim in ``claims``."""
    from halluprobe.claims import check_claims, read_claims

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
    if claims is not None:
        parsed = read_claims(claims)
        result.claims = len(parsed)
        result.findings.extend(check_claims(parsed, texts, run_paths, cache))
    return result


def file_findings(source: FileSource, runs: Sequence[Path], where: tuple[str, int]) -> tuple[list[Finding], Path | None]:
    """What is wrong with a named input file (an answers or labels file), and its path when it
    can be read at all. Located like a run dir: ``--runs`` may name it."""
    from halluprobe.rundir import sha256_file

    file, line = where
    path = locate_run(source.path, runs)
    if not path.is_file():
        return [Finding("file-missing", file, line, f"{path} is missing")], None
    if sha256_file(path) != source.sha256:
        return [Finding("file-changed", file, line, f"{path} changed since this was written (sha256)")], path
    return [], path


def _check_answers_table(table: FoundTable, answers: FileSource, runs: Sequence[Path], result: CheckResult) -> Grid | None:
    """The grid of a score table of a third-party answers file, recomputed from its files."""
    from halluprobe.scoring import score_answers_file

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


def _check_headline_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> Grid | None:
    """The report's headline table: every run it names recomputed with the headline readout."""
    prov = table.provenance
    names = prov.names or ()
    if len(prov.runs) > 1 and len(names) != len(prov.runs):
        raise InputError(f"a headline table of {len(prov.runs)} runs names each of them ('names')", table.path, table.line)
    paths = []
    for source in prov.runs:
        path = locate_run(source.path, runs)
        findings, usable = run_findings(source, path, prov.readout, prov.unknown, (table.path, table.line))
        result.findings.extend(findings)
        if not usable:
            return None
        paths.append(path)
    reports = [cache.report(p, prov.readout, prov.unknown, prov.seed, prov.resamples) for p in paths]
    return headline_grid([score_rows_named(r) for r in reports], names if len(paths) > 1 else ())


def _check_table(table: FoundTable, runs: Sequence[Path], cache: RunCache, result: CheckResult) -> None:
    prov = table.provenance
    if prov.answers is not None:
        grid = _check_answers_table(table, prov.answers, runs, result)
    elif prov.table == "headline":
        grid = _check_headline_table(table, runs, cache, result)
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
        from halluprobe.corrections_table import corrections_table

        report = corrections_table(path, prov.readouts, policy=prov.unknown, n_resamples=prov.resamples, seed=prov.seed)  # type: ignore[arg-type]
        return corrections_grid(report, table.style)
    if prov.table == "readouts":
        if not prov.readouts:
            raise InputError("a readouts table's provenance lists no readouts", table.path, table.line)
        reports = {
            r: cache.report(path, r, prov.unknown, prov.seed, prov.resamples, force_invalid=r in prov.forced) for r in prov.readouts
        }
        return readouts_grid(reports, prov.forced, table.style)
    return score_grid(cache.report(path, prov.readout, prov.unknown, prov.seed, prov.resamples), table.style)
