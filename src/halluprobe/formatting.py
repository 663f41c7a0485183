"""How numbers are written for people: the one place for ratios, percentages, counts,
confidence intervals, p-values and Markdown tables.

A leaf module: it imports nothing of halluprobe but the records' types, so every layer (the
score tables of :mod:`halluprobe.tables`, the report, the CLI, the demo) writes a number the
same way. Two families live here: ``format_*`` (plain text: terminal, papers, CLI lines) and
``fmt_*`` (the report's look: ratios in %, a typographic minus, an en dash for a missing value,
SI thousands).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from halluprobe.records_scores import Metrics, ScoreReport

__all__ = [
    "MARKDOWN_COLUMNS",
    "MINUS",
    "format_ratio",
    "format_ci",
    "format_percent",
    "format_signed",
    "fmt_ci",
    "fmt_count",
    "fmt_delta",
    "fmt_p",
    "fmt_pct",
    "fmt_score",
    "markdown_cell",
    "markdown_table",
    "score_rows_named",
]

MARKDOWN_COLUMNS = ("n", "tp", "fp", "tn", "fn", "unknown", "errors", "accuracy", "precision", "recall", "f1", "yes_ratio", "htr")


def format_ci(ci: Sequence[float] | None, digits: int = 3, scale: float = 1.0, *, plus: bool = False) -> str:
    """`` [lo, hi]`` (leading space), or '' when there is no interval; ``plus`` signs both
    bounds (``[+0.012, -0.004]``, a difference's interval)."""
    if not ci:
        return ""
    sign = "+" if plus else ""
    return f" [{scale * ci[0]:{sign}.{digits}f}, {scale * ci[1]:{sign}.{digits}f}]"


def format_ratio(value: float | None, ci: Sequence[float] | None = None, *, digits: int = 4, ci_digits: int = 3, scale: float = 1.0, missing: str = "-") -> str:
    """A ratio with its CI: ``0.8575 [0.832, 0.881]``; ``missing`` when undefined."""
    if value is None:
        return missing
    return f"{scale * value:.{digits}f}" + format_ci(ci, ci_digits, scale)


def format_percent(value: float | None, ci: Sequence[float] | None = None, *, digits: int = 1, missing: str = "-") -> str:
    """A ratio in % with its CI, without the sign: ``86.29 [83.20, 88.10]``; ``missing`` when undefined."""
    return format_ratio(value, ci, digits=digits, ci_digits=digits, scale=100, missing=missing)


def format_signed(value: float | None, digits: int = 3, *, missing: str = "-") -> str:
    """A difference with its sign always written (ASCII ``+``/``-``): ``+0.012``."""
    return missing if value is None else f"{value:+.{digits}f}"


# -- the report's look (HTML and its Markdown twin) ----------------------------------------

MINUS = "\u2212"  # a typographic minus: the same width as '+' in tabular figures


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt_pct(value: Any, digits: int = 1) -> str:
    """A ratio as a percentage without the sign (the column header says %): 0.8629 -> 86.3.

    Ratios are shown in % because POPE tables report them so; AUROC and ECE stay on [0, 1].
    """
    return f"{100 * value:.{digits}f}" if _finite(value) else "–"


def fmt_score(value: Any, digits: int = 3) -> str:
    """A score on [0, 1] that is not a rate (AUROC, ECE, p_yes): 0.8455 -> 0.846."""
    return f"{value:.{digits}f}" if _finite(value) else "–"


def fmt_count(value: Any) -> str:
    """An integer count with SI thousands (a narrow no-break space): 9000 -> 9 000, never split
    across lines and never read as a decimal comma."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "–"
    return f"{value:,}".replace(",", "\u202f")


def fmt_ci(ci: Any, *, pct: bool = True, digits: int = 1, signed: bool = False) -> str:
    """``[lo, hi]`` formatted like its estimate (:func:`format_ci`, without its leading space);
    empty when there is no interval."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(_finite(v) for v in ci):
        return ""
    scale = 100 if pct else 1
    if signed:
        return f"[{_signed(scale * ci[0], digits)}, {_signed(scale * ci[1], digits)}]"
    return format_ci(ci, digits, scale).lstrip()


def _signed(value: float, digits: int) -> str:
    text = f"{abs(value):.{digits}f}"
    if float(text) == 0:
        return text
    return ("+" if value > 0 else MINUS) + text


def fmt_delta(value: Any, digits: int = 1) -> str:
    """A difference of ratios in percentage points, signed: 0.012 -> +1.2."""
    return _signed(100 * value, digits) if _finite(value) else "–"


def fmt_p(value: Any) -> str:
    """A p-value: two significant digits, floored at 0.001 (the resolution a reader needs)."""
    if not _finite(value):
        return "–"
    if value < 0.001:
        return "<0.001"
    if value >= 0.995:
        return "1.00"
    return f"{value:.2g}" if value < 0.01 else f"{value:.2f}"


# -- Markdown tables -------------------------------------------------------------------------


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
