"""Cells compared at the precision they are written with, and a found table against the grid
its source recomputes (:class:`halluprobe.tables.Grid`)."""

from __future__ import annotations

import re
from typing import Literal, Protocol

from halluprobe.check.findings import Finding
from halluprobe.errors import InputError
from halluprobe.tables import Cell, Grid, Style

__all__ = ["MAX_NUMBER_CHARS", "WrittenTable", "compare_cell", "compare_number", "compare_table"]


class WrittenTable(Protocol):
    """A table as written (``parse.FoundTable``, ``chair.ChairTable``): what a comparison reads."""

    @property
    def path(self) -> str: ...
    @property
    def style(self) -> Style: ...
    @property
    def header(self) -> tuple[int, list[str]]: ...
    @property
    def rows(self) -> list[tuple[int, list[str]]]: ...

MAX_NUMBER_CHARS = 64  # a number written longer than this is never one of ours: it differs

_NUMBER = re.compile(r"([-+−]?\d+(?:\.\d+)?)(\s*%)?")
_MISSING = {"-", "--", "---", "—", "–", "n/a"}
_ALLOWED_BETWEEN = set(" [](),;±")


def _strip_markup(text: str) -> str:
    """A cell without emphasis a writer may add (``\\textbf{}``, ``**``, ``$``)."""
    text = text.replace(r"\%", "%")
    text = re.sub(r"(?<=\d)\u202f(?=\d)", "", text)  # SI thousands (the report's counts): 9 000
    text = re.sub(r"\\[A-Za-z]+\*?", " ", text)
    text = re.sub(r"[{}$*]", " ", text)
    text = re.sub(r"[\^†‡]", " ", text)  # footnote marks (the study table's forced cells: † or $^\dagger$)
    return " ".join(text.split())


def compare_number(value: float | int, token: str, percent: bool = False) -> bool:
    """Whether ``token`` (``"0.858"``, ``"84.5"`` with ``percent``) is ``value`` written at the
    token's own precision; a count must be written whole."""
    token = token.replace("−", "-").lstrip("+")
    if len(token) > MAX_NUMBER_CHARS:  # no number halluprobe writes; int() would refuse it past 4300 digits
        return False
    if isinstance(value, int) and not isinstance(value, bool) and not percent:
        return token.lstrip("-").isdigit() and int(token) == value
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


def _cell_count_error(table: WrittenTable, line: int, found: int, expected: int, what: str) -> InputError:
    return InputError(f"the table has {found} {what}, its source {expected}: not the table its provenance names", table.path, line)


def compare_table(table: WrittenTable, grid: Grid) -> tuple[list[Finding], int]:
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


def _split_terminal_row(table: WrittenTable, line: int, cells: list[str], expected_row: tuple[Cell, ...]) -> list[str]:
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
