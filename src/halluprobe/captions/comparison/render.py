"""The decoding table for people: Markdown (per run, paired differences, CHAIR by length bin,
PROVE), booktabs LaTeX and the terminal's lines, every table rendered from one grid of cells
(:class:`halluprobe.tables.Grid`, :func:`decoding_grids`, which ``check`` compares against),
under a provenance comment.

The comment (``halluprobe-decoding-provenance {JSON}``) names every run (path, role, name,
fingerprint, samples sha256), the CHAIR family and ground truth, the PROVE score files (sha256)
and the bootstrap: every count and metric is recomputable from those run dirs
(``halluprobe decoding`` again, or by hand from samples.jsonl); ``halluprobe check`` recomputes
every table under it (:mod:`halluprobe.check.decoding`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from halluprobe import __version__
from halluprobe.captions.comparison.records import (
    ChairComparison,
    ComparisonResult,
    Interval,
    MetricDifferences,
    ProveComparison,
    ProveDifference,
)
from halluprobe.formatting import format_ratio, markdown_table
from halluprobe.provenance import DecodingProvenance, ProveScores, marked_comment
from halluprobe.provenance import DecodingRun as ProvenanceRun
from halluprobe.records_scores import BootstrapSettings
from halluprobe.rundir import sha256_file
from halluprobe.tables import Cell, Grid, latex_escape

__all__ = ["decoding_grids", "decoding_latex", "decoding_markdown", "decoding_provenance", "decoding_text"]

# (key, label, scale): rates in %, length in words, hallucinations per 100 words as they are
COLUMNS = (("chair_s", "CHAIR_s", 100), ("chair_i", "CHAIR_i", 100), ("recall", "Recall", 100), ("length", "Len", 1),
           ("halluc_per_100_words", "Hall/100w", 1))  # fmt: skip
PAIRED = (*COLUMNS, ("chair_s_at_baseline_length", "CHAIR_s at baseline length", 100))
TableStyle = Literal["markdown", "latex"]
_LATEX_RUN_HEADER = ("Run", "Role", "$n$", "CHAIR$_s$", "CHAIR$_i$", "Recall", "Len", "Hall/100w")
_LATEX_PAIRED_HEADER = ("Method", "Against", r"$\Delta$CHAIR$_s$", r"$\Delta$CHAIR$_i$", r"$\Delta$Recall", r"$\Delta$Len",
                        r"$\Delta$Hall/100w", r"$\Delta$CHAIR$_s$ (matched length)")  # fmt: skip
_LATEX_PROVE_HEADER = ("Run", "Role", "$n$", "hscore", "tscore")


def decoding_provenance(result: ComparisonResult, prove_scores: Sequence[Path] = ()) -> DecodingProvenance:
    """What the tables of ``result`` were computed from: every run, the CHAIR family, its ground
    truth and options (all null with ``--no-chair``), the PROVE score folders and the bootstrap."""

    chair = result.chair
    optional = {"tokenizer": chair.tokenizer} if chair is not None and chair.tokenizer != "punkt" else {}  # punkt's (and older) name none
    return DecodingProvenance(
        table="decoding",
        runs=tuple(ProvenanceRun.model_validate(r.model_dump(include={"path", "role", "name", "fingerprint", "samples_sha256"}))
                   for r in result.runs),
        family=None if chair is None else chair.family,
        ground_truth=None if chair is None else chair.ground_truth.model_dump(mode="json"),
        truncate_incomplete=None if chair is None else chair.truncate_incomplete,
        prove_scores=tuple(ProveScores(path=str(p), scores_sha256=sha256_file(p / "scores.jsonl")) for p in prove_scores),
        bootstrap=BootstrapSettings(n_resamples=result.bootstrap.n_resamples, seed=result.bootstrap.seed), halluprobe=__version__,
        **optional,
    )  # fmt: skip


def _comment(provenance: DecodingProvenance, syntax: Literal["markdown", "latex"]) -> str:
    return marked_comment(provenance, syntax)


def _value(value: float | None, ci: Interval | None, scale: float, signed: bool = False) -> str:
    cell = format_ratio(value, ci, digits=1, ci_digits=1, scale=scale, missing="n/a")
    return ("+" + cell) if signed and value is not None and value >= 0 else cell


def _number(value: float | None, ci: Interval | None, scale: float, signed: bool = False) -> Cell:
    """A metric as written (one decimal, scaled) and the scaled numbers it shows, for ``check``."""
    text = _value(value, ci, scale, signed)
    if value is None:
        return Cell(text, (None,))
    return Cell(text, (scale * value,) if not ci else (scale * value, scale * ci[0], scale * ci[1]))


def _label(text: object, style: TableStyle) -> Cell:
    return Cell(latex_escape(str(text)) if style == "latex" else str(text))


def _count(n: int) -> Cell:
    return Cell(str(n), (n,))


def run_grid(chair: ChairComparison, style: TableStyle) -> Grid:
    """CHAIR per run: n and each metric with its CI."""
    header = _LATEX_RUN_HEADER if style == "latex" else ("run", "role", "n", *(label for _, label, _ in COLUMNS))
    rows = tuple((_label(r.name, style), _label(r.role, style), _count(r.n), *(_number(getattr(r, k), getattr(r.ci, k), s) for k, _, s in COLUMNS))
                 for r in chair.per_run)  # fmt: skip
    return Grid(header, rows)


def _against(entry_name: str, sampling_matches: bool | None, vs_greedy: MetricDifferences, vs_sampled: MetricDifferences | None) -> list[tuple[str, str, MetricDifferences]]:
    rows = [(entry_name, "greedy", vs_greedy)]
    if vs_sampled is not None:
        rows.append((entry_name, "sampled" + (" (other sampling)" if sampling_matches is False else ""), vs_sampled))
    return rows


def paired_grid(chair: ChairComparison, style: TableStyle) -> Grid:
    """Each method minus each baseline, per image: every metric's difference with its CI."""
    header = _LATEX_PAIRED_HEADER if style == "latex" else ("method", "against", *(f"Δ {label}" for _, label, _ in PAIRED))
    rows = []
    for entry in chair.paired:
        for name, against, d in _against(entry.name, entry.sampling_matches, entry.vs_greedy, entry.vs_sampled):
            diffs = [getattr(d, k) for k, _, _ in PAIRED]
            rows.append((_label(name, style), _label(against, style), *(_number(x.diff, x.ci, s, signed=True) for x, (_, _, s) in zip(diffs, PAIRED))))
    return Grid(header, tuple(rows))


def bins_grid(chair: ChairComparison) -> Grid:
    """CHAIR per bin of the greedy baseline's length quartiles, every run."""
    rows = []
    for run in chair.length_bins:
        for b in run.bins:
            low, high = b.lengths
            span = f"<= {high}" if low is None else (f">= {low}" if high is None else f"{low}-{high}")
            rows.append((Cell(run.name), Cell(span), _count(b.n), _number(b.chair_s, None, 100), _number(b.chair_i, None, 100)))
    return Grid(("run", "length (words)", "captions", "CHAIR_s", "CHAIR_i"), tuple(rows))


def prove_run_grid(prove: ProveComparison, style: TableStyle) -> Grid:
    header = _LATEX_PROVE_HEADER if style == "latex" else ("run", "role", "n", "hscore", "tscore")
    rows = tuple((_label(r.name, style), _label(r.role, style), _count(r.n), _number(r.hscore, r.ci.hscore, 100), _number(r.tscore, r.ci.tscore, 100))
                 for r in prove.per_run)  # fmt: skip
    return Grid(header, rows)


def _prove_difference(d: ProveDifference) -> Cell:
    # compared as text: the "(n=...)" beside the number is no form compare_cell reads
    return Cell(f"{_value(d.diff, d.ci, 100, signed=True)} (n={d.n})")


def prove_paired_grid(prove: ProveComparison) -> Grid:
    rows = []
    for entry in prove.paired:
        for label, d in (("greedy", entry.vs_greedy), ("sampled", entry.vs_sampled)):
            if d is not None:
                rows.append((Cell(entry.name), Cell(label), _prove_difference(d.hscore), _prove_difference(d.tscore)))
    return Grid(("method", "against", "Δ hscore", "Δ tscore"), tuple(rows))


def decoding_grids(result: ComparisonResult, style: TableStyle) -> list[Grid]:
    """Every table of the comparison in the order it is written (``check`` compares them in turn):
    Markdown: per run, paired differences (where any), length bins, PROVE per run and paired
    (where any); LaTeX: per run, paired differences (where any), PROVE per run."""
    grids = []
    if result.chair is not None:
        grids.append(run_grid(result.chair, style))
        paired = paired_grid(result.chair, style)
        grids += [paired] if paired.rows else []
        grids += [bins_grid(result.chair)] if style == "markdown" else []
    if result.prove is not None:
        grids.append(prove_run_grid(result.prove, style))
        prove_paired = prove_paired_grid(result.prove)
        grids += [prove_paired] if style == "markdown" and prove_paired.rows else []
    return grids


def _markdown(grid: Grid) -> list[str]:
    return markdown_table(grid.header, [[c.text for c in row] for row in grid.rows])


def _tabular(grid: Grid, spec: str) -> list[str]:
    """A booktabs tabular of ``grid`` (cells already escaped)."""
    return [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(grid.header) + r" \\", r"\midrule",
            *(" & ".join(c.text for c in row) + r" \\" for row in grid.rows), r"\bottomrule", r"\end{tabular}"]  # fmt: skip


def _prove_lines(prove: ProveComparison) -> list[str]:
    lines = ["### PROVE", "", *_markdown(prove_run_grid(prove, "markdown"))]
    paired = prove_paired_grid(prove)
    lines += ["", *_markdown(paired)] if paired.rows else []
    return lines + ["", "hscore, tscore in % (PROVE's scores of `prove score`); differences over the questions both runs score, resampled by image.", ""]


def _counted_by(chair: ChairComparison) -> str:
    """The family, and the tokenizer where it is not punkt's."""
    return chair.family if chair.tokenizer == "punkt" else f"{chair.family}, tokenizer {chair.tokenizer}"


def decoding_markdown(result: ComparisonResult, provenance: DecodingProvenance) -> str:
    lines = ["## Decoding methods on free-form answers", "", _comment(provenance, "markdown")]
    chair = result.chair
    if chair is not None:
        lines += _markdown(run_grid(chair, "markdown"))
        gt = chair.ground_truth
        year = " " + str(gt.year) if gt.year else ""
        note = (f"CHAIR ({_counted_by(chair)}) on the {chair.images} images every run captioned ({chair.images_dropped} left out: a failed "
                f"sample in some run); ground truth: {gt.source}{year}. CHAIR_s, CHAIR_i, Recall in %, "
                "Len in words per caption, Hall/100w = hallucinated objects per 100 words; 95% image-bootstrap CIs.")  # fmt: skip
        lines += ["", note, ""]
        paired = paired_grid(chair, "markdown")
        if paired.rows:
            lines += ["### Paired differences (method - baseline, per image)", "", *_markdown(paired)]
            matched = ("CHAIR_s at baseline length: the method's CHAIR_s per length bin, weighted as the baseline's captions "
                       "fall in those bins (matched length). A method that only shortens captions lowers CHAIR_s but not this.")  # fmt: skip
            lines += ["", matched, ""]
        lines += ["### CHAIR by caption length (bins at the greedy baseline's length quartiles)", "", *_markdown(bins_grid(chair)), ""]
    if result.prove is not None:
        lines += _prove_lines(result.prove)
    return "\n".join(lines) + "\n"


def decoding_latex(result: ComparisonResult, provenance: DecodingProvenance) -> str:
    """Per-run CHAIR and the paired differences, booktabs, the provenance comment above."""
    body = [_comment(provenance, "latex")]
    if result.chair is not None:
        body += _tabular(run_grid(result.chair, "latex"), "llr" + "r" * len(COLUMNS))
        paired = paired_grid(result.chair, "latex")
        body += ["", *_tabular(paired, "ll" + "r" * len(PAIRED))] if paired.rows else []
    if result.prove is not None:
        body += ["", *_tabular(prove_run_grid(result.prove, "latex"), "llrrr")]
    return "\n".join(body) + "\n"


def decoding_text(result: ComparisonResult) -> str:
    """The terminal view: one line per run, one per paired difference (the Markdown grids' cells)."""
    lines = []
    chair = result.chair
    if chair is not None:
        lines.append(f"CHAIR ({_counted_by(chair)}), {chair.images} images ({chair.images_dropped} left out)")
        for row in run_grid(chair, "markdown").rows:
            lines.append(f"  {row[0].text} [{row[1].text}] n={row[2].text}: " + "  ".join(f"{label} {cell.text}" for (_, label, _), cell in zip(COLUMNS, row[3:])))
        for row in paired_grid(chair, "markdown").rows:
            lines.append(f"  {row[0].text} - {row[1].text}: " + "  ".join(f"Δ{label} {cell.text}" for (_, label, _), cell in zip(PAIRED, row[2:])))
    if result.prove is not None:
        for r in prove_run_grid(result.prove, "markdown").rows:
            lines.append(f"PROVE {r[0].text} [{r[1].text}]: hscore {r[3].text}  tscore {r[4].text}")
    return "\n".join(lines)
