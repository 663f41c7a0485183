"""Tables that know their source: score tables for papers (Markdown, booktabs LaTeX, the
terminal's plain text) built from one grid of cells, and the provenance comment they carry.

A provenance comment is one line, ``% halluprobe-provenance {JSON}`` in LaTeX or
``<!-- halluprobe-provenance {JSON} -->`` in Markdown, placed just above the table. The JSON
names the run dirs (path, fingerprint, samples.jsonl sha256) or, for a third-party answers
file, that file and its labels files (path, sha256), the readout, the unknown policy, the
bootstrap seed and resamples, and the halluprobe version: everything ``halluprobe check``
needs to recompute every cell (see ``docs/design/provenance.md``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from halluprobe.errors import InputError
from halluprobe.formatting import MARKDOWN_COLUMNS, format_ratio, markdown_table, score_rows_named
from halluprobe.jsonl import loads
from halluprobe.records import FrozenRecord, Metrics, RunHeader, Sample, ScoreReport

if TYPE_CHECKING:
    from halluprobe.rundir import RunDir

__all__ = [
    "PROVENANCE_MARK",
    "Style",
    "RunSource",
    "FileSource",
    "Provenance",
    "Cell",
    "Grid",
    "run_source",
    "score_provenance",
    "answers_provenance",
    "headline_grid",
    "headline_provenance",
    "percent_cell",
    "provenance_comment",
    "parse_provenance",
    "score_grid",
    "render_markdown",
    "render_latex",
    "readouts_grid",
    "readouts_reports",
    "readouts_provenance",
    "render_readouts",
    "latex_escape",
]

PROVENANCE_MARK = "halluprobe-provenance"
PROVENANCE_SCHEMA = 1

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


class RunSource(FrozenRecord):
    """One run dir a table was computed from. Without ``fingerprint`` and ``samples_sha256``
    (a run anyone regenerates, such as the README's demo run) only the numbers are checked."""

    path: str
    fingerprint: str | None = None
    samples_sha256: str | None = None


class FileSource(FrozenRecord):
    """A file a table was computed from (``score --answers``: the answers and labels files),
    the path as given and the sha256 of its bytes."""

    path: str
    sha256: str


class Provenance(FrozenRecord):
    """What a table was computed from and how: enough to recompute every cell."""

    provenance: int = PROVENANCE_SCHEMA
    # score: one readout, a row per split; readouts: every readout side by side (the audit's
    # table), one row each, ``readout`` being the headline
    # corrections: the corrections table (halluprobe corrections), ``readouts`` being its corrections
    # headline: the report's headline metrics (report.md), a row per run and split, in %
    table: Literal["score", "readouts", "corrections", "headline"]
    runs: tuple[RunSource, ...] = ()  # empty for a score table of an answers file
    # score --answers: the answers file and its POPE labels files (one per split), instead of runs
    answers: FileSource | None = None
    labels: tuple[FileSource, ...] | None = None
    names: tuple[str, ...] | None = None  # headline of several runs: the report's name of each run
    readout: str
    readouts: tuple[str, ...] = ()
    forced: tuple[str, ...] = ()  # legacy readouts scored although invalid for the vocabulary
    unknown: Literal["wrong", "no", "yes", "drop"]
    seed: int
    resamples: int
    halluprobe: str


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


def run_source(path: str | Path) -> RunSource:
    """A run dir as a table names it: the path as given, its fingerprint and samples sha256."""
    from halluprobe.rundir import RunDir, sha256_file

    rundir = RunDir(path)
    header = rundir.read_header()
    return RunSource(path=str(path), fingerprint=header.fingerprint, samples_sha256=sha256_file(rundir.samples_path))


def score_provenance(rundir: str | Path, report: ScoreReport) -> Provenance:
    """The provenance of a score table of ``rundir`` (readout, policy and bootstrap from ``report``)."""
    from halluprobe import __version__

    return Provenance(
        table="score",
        runs=(run_source(rundir),),
        readout=report.readout,
        unknown=report.unknown_policy,
        seed=int(report.bootstrap.get("seed", 0)),
        resamples=int(report.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )


def answers_provenance(answers: str | Path, labels: Sequence[str | Path], report: ScoreReport) -> Provenance:
    """The provenance of a score table of a third-party answers file scored against ``labels``
    (``score --answers``): the files as given, with their sha256; the rule is the readout."""
    from halluprobe import __version__
    from halluprobe.rundir import sha256_file

    return Provenance(
        table="score",
        answers=FileSource(path=str(answers), sha256=sha256_file(answers)),
        labels=tuple(FileSource(path=str(p), sha256=sha256_file(p)) for p in labels),
        readout=report.readout,
        unknown=report.unknown_policy,
        seed=int(report.bootstrap.get("seed", 0)),
        resamples=int(report.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )


def provenance_comment(provenance: Provenance, syntax: Literal["markdown", "latex"]) -> str:
    """The one-line comment: ``% halluprobe-provenance {...}`` or ``<!-- ... -->``."""
    payload = json.dumps(provenance.model_dump(mode="json", exclude_none=True), ensure_ascii=True, separators=(", ", ": "))
    if syntax == "latex":
        return f"% {PROVENANCE_MARK} {payload}"
    # a path holding "-->" would end the comment early: JSON lets '>' be written escaped
    return f"<!-- {PROVENANCE_MARK} {payload.replace('>', chr(92) + 'u003e')} -->"


_LATEX_COMMENT = re.compile(r"^\s*%\s*" + PROVENANCE_MARK + r"\s+(.*?)\s*$")
_MARKDOWN_COMMENT = re.compile(r"^\s*<!--\s*" + PROVENANCE_MARK + r"\s+(.*?)\s*-->\s*$")


def parse_provenance(line: str, path: str | Path, number: int) -> tuple[Provenance, Literal["markdown", "latex"]] | None:
    """The provenance a line carries and its comment syntax; None for a line without the mark.
    A line that has the mark but not the form is bad input (file:line)."""
    if PROVENANCE_MARK not in line:
        return None
    for syntax, pattern in (("latex", _LATEX_COMMENT), ("markdown", _MARKDOWN_COMMENT)):
        match = pattern.match(line)
        if match:
            break
    else:
        forms = f"'% {PROVENANCE_MARK} {{...}}' or '<!-- {PROVENANCE_MARK} {{...}} -->'"
        raise InputError(f"malformed provenance comment: expected {forms}", path, number)
    try:
        data = loads(match.group(1))
    except json.JSONDecodeError as err:
        raise InputError(f"malformed provenance comment: {err.msg} at column {err.colno}", path, number) from None
    try:
        provenance = Provenance.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "comment"
        raise InputError(f"malformed provenance comment: {where}: {first.get('msg', 'invalid')}", path, number) from None
    if provenance.provenance != PROVENANCE_SCHEMA:
        raise InputError(
            f"provenance version {provenance.provenance} is not readable by this halluprobe (reads {PROVENANCE_SCHEMA})", path, number
        )
    if (provenance.answers is None) == (not provenance.runs):
        raise InputError("malformed provenance comment: it names run dirs or an answers file (one of the two)", path, number)
    if provenance.answers is not None and (provenance.table != "score" or not provenance.labels):
        raise InputError("malformed provenance comment: an answers file makes a score table, with its labels files", path, number)
    return provenance, syntax  # type: ignore[return-value]


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
    if not boot or not boot.get("n_resamples"):
        return None
    return f"95% CIs: bootstrap over images, {boot.get('n_resamples')} resamples, seed {boot.get('seed')}."


def render_markdown(report: ScoreReport, title: str, provenance: Provenance | None = None) -> str:
    """A pipe table to paste into a paper or an issue, under its provenance comment."""
    return _markdown(score_grid(report, "markdown"), title, _bootstrap_note(report), provenance)


def render_latex(report: ScoreReport, title: str, provenance: Provenance | None = None) -> str:
    """A booktabs table (``\\usepackage{booktabs}``), one row a line, under its provenance comment;
    pooled and macro under a rule of their own."""
    grid = score_grid(report, "latex")
    return _latex(grid, title, _bootstrap_note(report), provenance, rule_before=len(grid.rows) - 2)


def _markdown(grid: Grid, title: str, note: str | None, provenance: Provenance | None) -> str:
    lines = [provenance_comment(provenance, "markdown")] if provenance is not None else []
    lines += [f"**{title}**", "", *markdown_table(grid.header, [[c.text for c in row] for row in grid.rows])]
    if note:
        lines += ["", note]
    return "\n".join(lines)


def _latex(grid: Grid, title: str, note: str | None, provenance: Provenance | None, rule_before: int | None = None) -> str:
    lines = [provenance_comment(provenance, "latex")] if provenance is not None else []
    lines += [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(title)}}}",
        r"\begin{tabular}{l" + "r" * (len(grid.header) - 1) + "}",
        r"\toprule",
        " & ".join(grid.header) + r" \\",
        r"\midrule",
    ]
    for index, row in enumerate(grid.rows):
        if index == rule_before:
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


def readouts_reports(
    rundir: str | Path, *, readouts: Sequence[str] | None = None, policy: str = "wrong", n_resamples: int = 1000, seed: int = 0
) -> tuple[dict[str, ScoreReport], tuple[str, ...]]:
    """Every readout of a run (or those named) scored as ``score_rundir`` scores it (samples
    read once for all), and which of them are forced (legacy ids that are other words in this
    vocabulary)."""
    from halluprobe.readouts.apply import available_readouts
    from halluprobe.scoring import read_run_samples

    run, header, samples = read_run_samples(rundir)
    names = readouts if readouts is not None else available_readouts(header, samples)
    return _score_readouts(run, header, samples, names, policy=policy, n_resamples=n_resamples, seed=seed)


def _score_readouts(
    run: RunDir, header: RunHeader, samples: Sequence[Sample], readouts: Sequence[str], *, policy: str, n_resamples: int, seed: int
) -> tuple[dict[str, ScoreReport], tuple[str, ...]]:
    """``readouts`` of one run's samples through ``score_rundir``'s checks and rows (no
    metrics.json), and the forced ones among them."""
    from halluprobe.metrics.score import score_rows
    from halluprobe.readouts.apply import check_readout
    from halluprobe.readouts.logits import LEGACY_READOUTS
    from halluprobe.scoring import readout_rows

    names = list(dict.fromkeys(readouts))
    sets = header.token_sets
    forced = tuple(r for r in names if r in LEGACY_READOUTS and sets is not None and not sets.legacy_valid)
    reports = {}
    for r in names:
        check_readout(r, header, samples, force_invalid=r in forced, source=run.header_path)
        reports[r] = score_rows(readout_rows(r, header, samples), readout=r, policy=policy, n_resamples=n_resamples, seed=seed)  # type: ignore[arg-type]
    return reports, forced


def readouts_provenance(rundir: str | Path, reports: Mapping[str, ScoreReport], forced: Collection[str], headline: str) -> Provenance:
    """The provenance of a readouts table of ``rundir``."""
    from halluprobe import __version__

    first = reports[headline]
    return Provenance(
        table="readouts",
        runs=(run_source(rundir),),
        readout=headline,
        readouts=tuple(reports),
        forced=tuple(r for r in reports if r in forced),
        unknown=first.unknown_policy,
        seed=int(first.bootstrap.get("seed", 0)),
        resamples=int(first.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )


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
    return _markdown(grid, title, note, provenance) if syntax == "markdown" else _latex(grid, title, note, provenance)


# -- the report's headline metrics (report.md) ------------------------------------------------

_HEADLINE_COUNTS = (("n", "n"), ("tp", "TP"), ("fp", "FP"), ("tn", "TN"), ("fn", "FN"), ("unknown", "unk"))
_HEADLINE_RATIOS = (("accuracy", "acc"), ("precision", "prec"), ("recall", "rec"), ("f1", "F1"), ("yes_ratio", "yes"), ("htr", "HTR"))


def percent_cell(m: Metrics, field: str) -> Cell:
    """A ratio in % with its CI, as the report writes it: ``85.8 [83.2, 88.1]``; values in %."""
    from halluprobe.report.view import fmt_ci, fmt_pct

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
    from halluprobe.report.view import fmt_count, fmt_score

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


def headline_provenance(
    rundirs: Sequence[str | Path], names: Sequence[str], *, readout: str, policy: str, seed: int, resamples: int
) -> Provenance:
    """The provenance of the report's headline table: its run dirs (and their names when
    several), the headline readout, policy and bootstrap the audits used."""
    from halluprobe import __version__

    return Provenance(
        table="headline",
        runs=tuple(run_source(p) for p in rundirs),
        names=tuple(names) if len(rundirs) > 1 else None,
        readout=readout,
        unknown=policy,  # type: ignore[arg-type]
        seed=seed,
        resamples=resamples,
        halluprobe=__version__,
    )


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}  # fmt: skip


def latex_escape(text: str) -> str:
    """Text as LaTeX typesets it literally (paths and readout names hold ``_`` and ``:``)."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


# -- the study's multi-model table: model x split rows, one F1 column per readout -------------------

STUDY_READOUTS = ("legacy_2tok", "legacy_8tok", "dynamic", "text:pope", "text:exact", "text:yorn", "text:strict")
RECOMMENDED = "dynamic"  # read from the model's own yes/no sets: the column to report


def study_table(
    rundirs: Sequence[str | Path], syntax: Literal["markdown", "latex"], *, policy: str = "wrong", n_resamples: int = 0, seed: int = 0
) -> str:
    """F1 per model, split (and macro) and readout for several runs, as the token-set study
    tabulates it. A legacy readout whose ids are other words in a model's vocabulary is scored
    anyway and marked (†): it is what that evaluator would report, not the model's answer. The
    recommended column (the model's own yes/no sets) is marked (*). A readout a run cannot give
    (text rules on a logits-only run) is '-'."""
    from halluprobe.readouts.apply import available_readouts
    from halluprobe.scoring import read_run_samples

    header_cells = ["model", "split", *[f"{r}{' (*)' if r == RECOMMENDED else ''}" for r in STUDY_READOUTS]]
    rows: list[list[str]] = []
    for rundir in rundirs:
        run, header, samples = read_run_samples(rundir)
        names = [r for r in STUDY_READOUTS if r in available_readouts(header, samples)]
        reports, forced = _score_readouts(run, header, samples, names, policy=policy, n_resamples=n_resamples, seed=seed)
        model = Path(header.model).name or header.model
        splits = [*next(iter(reports.values())).splits, "macro"] if reports else []
        for split in splits:
            cells = [model, split]
            for name in STUDY_READOUTS:
                report = reports.get(name)
                metrics = None if report is None else (report.macro if split == "macro" else report.splits.get(split))
                value = format_ratio(None if metrics is None else metrics.f1, digits=4)
                cells.append(value + (" †" if name in forced and value != "-" else ""))
            rows.append(cells)
    note = (
        "F1 per split and macro (mean over splits), unknown answers counted "
        f"{policy}. (*): the model's own yes/no sets, the column to report. †: legacy ids that are "
        "other words in this model's vocabulary, scored anyway: what that evaluator would report."
    )
    if syntax == "latex":
        body = [" & ".join(latex_escape(c) for c in header_cells) + r" \\", r"\midrule"]
        body += [" & ".join(latex_escape(c).replace("†", r"$^\dagger$") for c in row) + r" \\" for row in rows]
        spec = "ll" + "r" * len(STUDY_READOUTS)
        return "\n".join([rf"\begin{{tabular}}{{{spec}}}", r"\toprule", *body, r"\bottomrule", r"\end{tabular}", f"% {note}"])
    return "\n".join([*markdown_table(header_cells, rows), "", note])


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
        ))  # fmt: skip
    return Grid(header=header, rows=tuple(rows))


def corrections_provenance(rundir: str | Path, report: Any, corrections: Sequence[str]) -> Provenance:
    """The provenance of a corrections table: the corrections named, policy and bootstrap."""
    from halluprobe import __version__

    return Provenance(
        table="corrections",
        runs=(run_source(rundir),),
        readout="dynamic",
        readouts=tuple(corrections),
        unknown=report.policy,
        seed=int(report.bootstrap.get("seed", 0)),
        resamples=int(report.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )


def render_corrections(report: Any, title: str, syntax: Literal["markdown", "latex"], provenance: Provenance | None) -> str:
    grid = corrections_grid(report, syntax)
    note = (
        f"Macro over splits. 95% CIs: bootstrap over images, {report.bootstrap.get('n_resamples')} resamples, "
        f"seed {report.bootstrap.get('seed')}; ΔF1 paired. F1 sampled: the expected counts at temperature 1."
    )
    return _markdown(grid, title, note, provenance) if syntax == "markdown" else _latex(grid, title, note, provenance)
