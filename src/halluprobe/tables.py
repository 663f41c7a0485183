"""Tables that know their source: every table for people (score, readouts side by side,
corrections, the report's headline, the multi-model study table; Markdown, booktabs LaTeX, the
terminal's rich table) built from one grid of cells, under the provenance comment of
:mod:`halluprobe.provenance`. Renderers only render:
numbers are written by :mod:`halluprobe.formatting`, reports scored by the scoring layer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from halluprobe.errors import InputError
from halluprobe.formatting import MARKDOWN_COLUMNS, fmt_ci, fmt_count, fmt_pct, fmt_score, format_ratio, markdown_table, score_rows_named
from halluprobe.provenance import AnyProvenance, Provenance, marked_comment
from halluprobe.records_scores import Metrics, ScoreReport

__all__ = [
    "Style",
    "Cell",
    "Grid",
    "headline_grid",
    "percent_cell",
    "score_grid",
    "render_score_markdown",
    "render_latex",
    "score_table",
    "readouts_grid",
    "render_readouts",
    "latex_escape",
    "corrections_grid",
    "render_corrections",
    "render_grid",
]

# markdown: a pipe table; latex: a booktabs tabular; terminal: the rich table `score` prints
Style = Literal["markdown", "latex", "terminal"]

_LATEX_HEADERS = {
    "n": "$n$", "tp": "TP", "fp": "FP", "tn": "TN", "fn": "FN", "unknown": "unk.", "errors": "err.",
    "accuracy": "Acc.", "precision": "Prec.", "recall": "Rec.", "f1": r"F1 [95\% CI]", "yes_ratio": "Yes ratio", "htr": "HTR",
}  # fmt: skip
_TERMINAL_COLUMNS = (
    ("n", "n"), ("tp", "TP"), ("fp", "FP"), ("tn", "TN"), ("fn", "FN"), ("unknown", "unk"), ("errors", "err"),
    ("accuracy", "acc"), ("precision", "prec"), ("recall", "rec"), ("f1", "F1 [95% CI]"), ("yes_ratio", "yes"),
    ("htr", "HTR"), ("auroc", "AUROC"),
)  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """A cell as printed, and the unrounded numbers it shows (none for a label or a header;
    ``None`` for an undefined ratio, printed as a dash)."""

    text: str
    values: tuple[float | int | None, ...] = ()


@dataclass(frozen=True)
class Grid:
    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


def _ratio_cell(m: Metrics, field: str, ci_digits: int, missing: str) -> Cell:
    value = getattr(m, field)
    ci = m.ci.get("f1") if field == "f1" else None
    text = format_ratio(value, ci, ci_digits=ci_digits, missing=missing)
    values: tuple[float | int | None, ...] = (value,) if value is None or not ci else (value, ci[0], ci[1])
    return Cell(text, values)


def score_grid(report: ScoreReport, style: Style) -> Grid:
    """The cells of a score table: each split, then pooled and macro; counts beside every ratio,
    F1 with its CI (4 digits in papers, 3 in the terminal)."""
    if style == "terminal":
        columns: Sequence[tuple[str, str]] = _TERMINAL_COLUMNS
    elif style == "latex":
        columns = [(c, _LATEX_HEADERS[c]) for c in MARKDOWN_COLUMNS]
    else:
        columns = [(c, c) for c in MARKDOWN_COLUMNS]
    missing = "--" if style == "latex" else "-"
    ci_digits = 3 if style == "terminal" else 4
    rows = []
    for name, m in score_rows_named(report):
        cells = [Cell(latex_escape(name) if style == "latex" else name)]
        for field, _ in columns:
            value = getattr(m, field)
            if isinstance(value, int):
                cells.append(Cell(str(value), (value,)))
            else:
                cells.append(_ratio_cell(m, field, ci_digits, missing))
        rows.append(tuple(cells))
    return Grid(header=("split", *(h for _, h in columns)), rows=tuple(rows))


def _bootstrap_note(report: ScoreReport) -> str | None:
    boot = report.bootstrap
    if boot is None or not boot.n_resamples:
        return None
    return f"95% CIs: bootstrap over images, {boot.n_resamples} resamples, seed {boot.seed}."


def render_score_markdown(report: ScoreReport, title: str, provenance: Provenance | None = None) -> str:
    """A score table as a pipe table to paste into a paper or an issue, under its provenance comment."""
    return render_grid(score_grid(report, "markdown"), title, _bootstrap_note(report), provenance, "markdown")


def render_latex(report: ScoreReport, title: str, provenance: Provenance | None = None) -> str:
    """A booktabs table (``\\usepackage{booktabs}``), one row a line, under its provenance comment;
    pooled and macro under a rule of their own."""
    grid = score_grid(report, "latex")
    return render_grid(grid, title, _bootstrap_note(report), provenance, "latex", rules_before={len(grid.rows) - 2})


def score_table(report: ScoreReport, title: str) -> Any:
    """The terminal table (a rich Table) of a score report: the cells of the "terminal" grid."""
    from rich.table import Table  # rich only where a terminal table is printed

    grid = score_grid(report, "terminal")
    table = Table(title=title)
    for col in grid.header:
        table.add_column(col, justify="right" if col != "split" else "left")
    for row in grid.rows:
        table.add_row(*(cell.text for cell in row))
    return table


def render_grid(
    grid: Grid,
    title: str,
    note: str | None,
    provenance: AnyProvenance | None,
    syntax: Literal["markdown", "latex"],
    *,
    columns: str | None = None,
    rules_before: Collection[int] = (),
) -> str:
    """A grid under its provenance comment: a bold title, the pipe table and the note
    (Markdown), or a booktabs table with caption (LaTeX: ``columns``, default a left column then
    right-aligned ones; a ``\\midrule`` above each row of ``rules_before``) and the note below."""
    lines = [marked_comment(provenance, syntax)] if provenance is not None else []
    if syntax == "markdown":
        lines += [f"**{title}**", "", *markdown_table(grid.header, [[c.text for c in row] for row in grid.rows])]
        return "\n".join(lines + (["", note] if note else []))
    lines += [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(title)}}}",
        r"\begin{tabular}{" + (columns or "l" + "r" * (len(grid.header) - 1)) + "}",
        r"\toprule",
        " & ".join(grid.header) + r" \\",
        r"\midrule",
    ]
    for index, row in enumerate(grid.rows):
        if index in rules_before:
            lines.append(r"\midrule")
        lines.append(" & ".join(c.text for c in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if note:
        lines.append(r"\par\smallskip{\footnotesize " + latex_escape(note) + "}")
    lines.append(r"\end{table}")
    return "\n".join(lines)


# -- every readout side by side (the audit's table) -----------------------------------------

_READOUT_MACRO = ("accuracy", "precision", "recall", "f1", "yes_ratio", "unknown_rate")
_READOUT_HEADERS = {
    "markdown": {"accuracy": "accuracy", "precision": "precision", "recall": "recall", "f1": "F1", "yes_ratio": "yes_ratio",
                 "unknown_rate": "unknown_rate"},
    "latex": {"accuracy": "Acc.", "precision": "Prec.", "recall": "Rec.", "f1": r"F1 [95\% CI]", "yes_ratio": "Yes ratio",
              "unknown_rate": "Unk. rate"},
}  # fmt: skip


def readouts_grid(reports: Mapping[str, ScoreReport], forced: Collection[str], style: Style) -> Grid:
    """A row per readout: F1 per split, then the macro ratios with the F1 CI; a legacy readout
    scored although invalid for the vocabulary is marked ``(forced)``."""
    if not reports:
        raise InputError("a readouts table needs at least one readout")
    headers = _READOUT_HEADERS["latex" if style == "latex" else "markdown"]
    splits = list(next(iter(reports.values())).splits)
    missing = "--" if style == "latex" else "-"
    rows = []
    for name, report in reports.items():
        label = name + (" (forced)" if name in forced else "")
        cells = [Cell(latex_escape(label) if style == "latex" else label)]
        for split in splits:
            m = report.splits.get(split)
            value = None if m is None else m.f1
            cells.append(Cell(format_ratio(value, missing=missing), (value,)))
        cells += [_ratio_cell(report.macro, field, 4, missing) for field in _READOUT_MACRO]
        rows.append(tuple(cells))
    split_headers = [f"F1 {latex_escape(s) if style == 'latex' else s}" for s in splits]
    macro_headers = [f"macro {headers[f]}" for f in _READOUT_MACRO]
    return Grid(header=("readout", *split_headers, *macro_headers), rows=tuple(rows))




def render_readouts(
    reports: Mapping[str, ScoreReport],
    title: str,
    syntax: Literal["markdown", "latex"],
    provenance: Provenance | None = None,
    forced: Collection[str] = (),
) -> str:
    """Every readout side by side, as Markdown or booktabs LaTeX, under its provenance comment."""
    grid = readouts_grid(reports, forced, syntax)
    note = _bootstrap_note(next(iter(reports.values())))
    return render_grid(grid, title, note, provenance, syntax)


# -- the report's headline metrics (report.md) ------------------------------------------------

_HEADLINE_COUNTS = (("n", "n"), ("tp", "TP"), ("fp", "FP"), ("tn", "TN"), ("fn", "FN"), ("unknown", "unk"))
_HEADLINE_RATIOS = (("accuracy", "acc"), ("precision", "prec"), ("recall", "rec"), ("f1", "F1"), ("yes_ratio", "yes"), ("htr", "HTR"))


def percent_cell(m: Metrics, field: str) -> Cell:
    """A ratio in % with its CI, as the report writes it: ``85.8 [83.2, 88.1]``; values in %."""
    value = getattr(m, field)
    ci = m.ci.get(field)
    interval = fmt_ci(ci)
    if value is None:
        return Cell(fmt_pct(None) + (f" {interval}" if interval else ""), (None,))
    values = (100 * value,) if not interval or ci is None else (100 * value, 100 * ci[0], 100 * ci[1])
    return Cell(fmt_pct(value) + (f" {interval}" if interval else ""), values)


def headline_grid(runs: Sequence[Sequence[tuple[str, Metrics]]], names: Sequence[str] = ()) -> Grid:
    """The report's headline table: for each run its rows (each split, pooled, macro in bold),
    ratios in % with their CIs, AUROC and ECE on [0, 1], counts with SI thousands; a first
    column ``N. name`` when ``names`` are given (several runs), the errors column when a run
    has errors."""
    show_errors = any(m.errors for rows in runs for _, m in rows)
    counts = [*_HEADLINE_COUNTS, *([("errors", "err")] if show_errors else [])]
    header = [*(["run"] if names else []), "split", *(h for _, h in counts), *(h for _, h in _HEADLINE_RATIOS), "AUROC", "ECE"]
    grid_rows = []
    for index, rows in enumerate(runs):
        for name, m in rows:
            cells = [Cell(f"{index + 1}. {names[index]}")] if names else []
            cells.append(Cell(f"**{name}**" if name == "macro" else name))
            cells += [Cell(fmt_count(getattr(m, f)), (getattr(m, f),)) for f, _ in counts]
            cells += [percent_cell(m, f) for f, _ in _HEADLINE_RATIOS]
            cells += [Cell(fmt_score(getattr(m, f)), (getattr(m, f),)) for f in ("auroc", "ece")]
            grid_rows.append(tuple(cells))
    return Grid(header=tuple(header), rows=tuple(grid_rows))


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}  # fmt: skip


def latex_escape(text: str) -> str:
    """Text as LaTeX typesets it literally (paths and readout names hold ``_`` and ``:``)."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


# -- the corrections table (halluprobe corrections) -------------------------------------------------

_CORRECTION_COLUMNS = ("F1 [95% CI]", "yes ratio", "ΔF1 vs greedy [95% CI]", "McNemar p", "F1 sampled", "Δ vs sampled")


def _signed(value: float | None, ci: Sequence[float] | None, missing: str) -> Cell:
    if value is None:
        return Cell(missing, (None,))
    text = ("+" if value >= 0 else "") + format_ratio(value, ci, ci_digits=4)
    return Cell(text, (value,) if not ci else (value, ci[0], ci[1]))


def corrections_grid(report: Any, style: Style) -> Grid:
    """The cells of a corrections table (a :class:`~halluprobe.corrections_table.CorrectionsReport`):
    a row per method, macro figures."""
    missing = "--" if style == "latex" else "-"
    header = ("method", *(latex_escape(c).replace("Δ", r"$\Delta$") if style == "latex" else c for c in _CORRECTION_COLUMNS))
    unknown = any(row.unknown for row in report.rows)  # a column only where some row has unknown answers
    header += ("unknown",) if unknown else ()
    rows = []
    for row in report.rows:
        name = row.name + ("" if row.kind == "correction" else f" ({row.kind})")
        rows.append((
            Cell(latex_escape(name) if style == "latex" else name),
            Cell(format_ratio(row.f1, row.f1_ci, ci_digits=4, missing=missing), (row.f1,) if row.f1 is None or not row.f1_ci else (row.f1, *row.f1_ci)),
            Cell(format_ratio(row.yes_ratio, missing=missing), (row.yes_ratio,)),
            _signed(row.delta_f1, row.delta_f1_ci, missing),
            Cell(missing if row.mcnemar_p is None else f"{row.mcnemar_p:.4f}", (row.mcnemar_p,)),
            Cell(format_ratio(row.f1_sampled, missing=missing), (row.f1_sampled,)),
            _signed(row.delta_sampled, None, missing),
            *((Cell(str(row.unknown), (row.unknown,)),) if unknown else ()),
        ))  # fmt: skip
    return Grid(header=header, rows=tuple(rows))


def render_corrections(report: Any, title: str, syntax: Literal["markdown", "latex"], provenance: Provenance | None) -> str:
    grid = corrections_grid(report, syntax)
    note = (
        f"Macro over splits. 95% CIs: bootstrap over images, {report.bootstrap.n_resamples} resamples, "
        f"seed {report.bootstrap.seed}; ΔF1 paired. F1 sampled: the expected counts at temperature 1."
    )
    if report.any_unknown:
        note += f" unknown: answers read as neither yes nor no, counted as {report.policy}; a row whose answers are all unknown reads nothing."
    return render_grid(grid, title, note, provenance, syntax)
