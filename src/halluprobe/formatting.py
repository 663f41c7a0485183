"""How numbers are written for people: one place for ratios, confidence intervals and tables.

The terminal table (rich) and the Markdown table of a :class:`~halluprobe.records.ScoreReport`
are built from the same grid of cells (:mod:`halluprobe.tables`, which also writes LaTeX), so a
number reads the same wherever it is printed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from halluprobe.records import Metrics, ScoreReport

__all__ = [
    "MARKDOWN_COLUMNS",
    "format_ratio",
    "format_ci",
    "markdown_cell",
    "markdown_table",
    "score_rows_named",
    "score_markdown",
    "score_table",
]

MARKDOWN_COLUMNS = ("n", "tp", "fp", "tn", "fn", "unknown", "errors", "accuracy", "precision", "recall", "f1", "yes_ratio", "htr")


def format_ci(ci: Sequence[float] | None, digits: int = 3, scale: float = 1.0) -> str:
    """`` [lo, hi]`` (leading space), or '' when there is no interval."""
    if not ci:
        return ""
    return f" [{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]"


def format_ratio(value: float | None, ci: Sequence[float] | None = None, *, digits: int = 4, ci_digits: int = 3, scale: float = 1.0, missing: str = "-") -> str:
    """A ratio with its CI: ``0.8575 [0.832, 0.881]``; ``missing`` when undefined."""
    if value is None:
        return missing
    return f"{scale * value:.{digits}f}" + format_ci(ci, ci_digits, scale)


def markdown_cell(text: object) -> str:
    """A pipe-table cell: ``|`` escaped as ``\\|`` (GitHub's rule, code spans included), a line
    break shown as ⏎ (a row is one line)."""
    return str(text).replace("|", "\\|").replace("\r", "").replace("\n", " ⏎ ")


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]], align: Sequence[str] | None = None) -> list[str]:
    """The lines of a Markdown pipe table, every cell through :func:`markdown_cell`. ``align``
    ("l" or "r" per column) writes ``:---`` / ``---:`` rules, else plain ``---``."""
    if align is None:
        rule = "|" + "---|" * len(header)
    else:
        rule = "| " + " | ".join("---:" if a == "r" else ":---" for a in align) + " |"
    lines = ["| " + " | ".join(markdown_cell(h) for h in header) + " |", rule]
    lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows]
    return lines


def score_rows_named(report: ScoreReport) -> list[tuple[str, Metrics]]:
    """Each split, then pooled and macro: the rows of every score table."""
    return [*report.splits.items(), ("pooled", report.pooled), ("macro", report.macro)]


def score_markdown(report: ScoreReport, title: str, provenance: Any = None) -> str:
    """A Markdown table to paste into a paper or an issue: counts beside every ratio, F1 with
    its CI, under a provenance comment when given (see :mod:`halluprobe.tables`)."""
    from halluprobe.tables import render_markdown

    return render_markdown(report, title, provenance)


def score_table(report: ScoreReport, title: str) -> Any:
    """The terminal table (a rich Table) of a score report: the cells of the "terminal" grid."""
    from rich.table import Table

    from halluprobe.tables import score_grid

    grid = score_grid(report, "terminal")
    table = Table(title=title)
    for col in grid.header:
        table.add_column(col, justify="right" if col != "split" else "left")
    for row in grid.rows:
        table.add_row(*(cell.text for cell in row))
    return table
