"""How numbers are written for people: one place for ratios, confidence intervals and tables.

The terminal table (rich) and the Markdown table of a :class:`~halluprobe.records.ScoreReport`
are built here, from the same rows, so a number reads the same wherever it is printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halluprobe.records import Metrics, ScoreReport

__all__ = [
    "MARKDOWN_COLUMNS",
    "format_ratio",
    "format_ci",
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


def score_rows_named(report: ScoreReport) -> list[tuple[str, Metrics]]:
    """Each split, then pooled and macro: the rows of every score table."""
    return [*report.splits.items(), ("pooled", report.pooled), ("macro", report.macro)]


def score_markdown(report: ScoreReport, title: str) -> str:
    """A table to paste into a paper or an issue: counts beside every ratio, F1 with its CI."""

    def cell(m: Metrics, col: str) -> str:
        value = getattr(m, col)
        if isinstance(value, int) or value is None:
            return "-" if value is None else str(value)
        return format_ratio(value, m.ci.get("f1") if col == "f1" else None, ci_digits=4)

    lines = [f"**{title}**", "", "| split | " + " | ".join(MARKDOWN_COLUMNS) + " |", "|---" * (len(MARKDOWN_COLUMNS) + 1) + "|"]
    for name, m in score_rows_named(report):
        lines.append(f"| {name} | " + " | ".join(cell(m, c) for c in MARKDOWN_COLUMNS) + " |")
    boot = report.bootstrap
    if boot:
        lines += ["", f"95% CIs: bootstrap over images, {boot.get('n_resamples')} resamples, seed {boot.get('seed')}."]
    return "\n".join(lines)


def score_table(report: ScoreReport, title: str) -> Any:
    """The terminal table (a rich Table) of a score report."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("split", "n", "TP", "FP", "TN", "FN", "unk", "err", "acc", "prec", "rec", "F1 [95% CI]", "yes", "HTR", "AUROC"):
        table.add_column(col, justify="right" if col != "split" else "left")
    for name, m in score_rows_named(report):
        table.add_row(
            name,
            *(str(v) for v in (m.n, m.tp, m.fp, m.tn, m.fn, m.unknown, m.errors)),
            format_ratio(m.accuracy),
            format_ratio(m.precision),
            format_ratio(m.recall),
            format_ratio(m.f1, m.ci.get("f1")),
            format_ratio(m.yes_ratio),
            format_ratio(m.htr),
            format_ratio(m.auroc),
        )
    return table
