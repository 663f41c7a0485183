"""HallusionBench's judged table: per slice (VD, VS, Overall) the judged aAcc / fAcc / qAcc (in %,
with their CIs) above each rule-based reading's, the judge's unparseable and errored verdicts and
each reading's disagreement with the judge on the Overall rows; rendered as Markdown or booktabs
LaTeX through one :class:`~halluprobe.tables.Grid` under a ``halluprobe-hallusion-provenance``
comment, the grid ``check`` recomputes (:mod:`halluprobe.check.hallusion`). Renders only: the
scores come from :func:`halluprobe.judging.hallusion_score.score_judged`.
"""

from __future__ import annotations

from pathlib import Path

from halluprobe import __version__
from halluprobe.formatting import format_percent
from halluprobe.judging.hallusion_score import JudgedHallusion
from halluprobe.judging.store import JudgmentDir
from halluprobe.metrics.hallusionbench import HallusionSlice
from halluprobe.provenance import Syntax
from halluprobe.provenance_judged import HallusionProvenance
from halluprobe.provenance_sources import FileSource
from halluprobe.records_scores import BootstrapSettings
from halluprobe.rundir import sha256_file
from halluprobe.tables import Cell, Grid, latex_escape, render_grid

__all__ = ["hallusion_grid", "hallusion_provenance", "render_hallusion"]

_HEADERS = {
    "markdown": ("slice", "reading", "questions", "unparseable", "errors", "aAcc [95% CI]", "fAcc [95% CI]", "qAcc [95% CI]",
                 "verdicts differ", "correctness differs"),
    "latex": ("Slice", "Reading", "Questions", "Unparse.", "Err.", r"aAcc [95\% CI]", r"fAcc [95\% CI]", r"qAcc [95\% CI]",
              "Verdicts differ", "Correct. differs"),
}  # fmt: skip
_HASH_CHARS = 12  # the prompt's sha256 as the terminal ledger prints it; the comment holds it whole
_OVERALL = "Overall"


def _percent(value: float | None, ci: tuple[float, float] | None, missing: str) -> Cell:
    """A ratio in % with its CI, as the terminal prints it (2 decimals); values in %."""
    text = format_percent(value, ci, digits=2, missing=missing)
    if value is None:
        return Cell(text, (None,))
    return Cell(text, (100 * value,) if ci is None else (100 * value, 100 * ci[0], 100 * ci[1]))


def _count(value: int) -> Cell:
    return Cell(str(value), (value,))


def hallusion_grid(result: JudgedHallusion, *, syntax: Syntax) -> Grid:
    """The table's cells: a row per slice and reading (the judge's first, named by backend:model
    and prompt sha256). Unparseable and errored verdicts (the run's) on the judge's Overall row,
    each reading's disagreement with the judge (over all questions) on its Overall row."""
    missing = "--" if syntax == "latex" else "-"
    blank = Cell("")

    def label(text: str) -> Cell:
        return Cell(latex_escape(text) if syntax == "latex" else text)

    judge = f"judge {result.judge_backend}:{result.judge_model} sha256 {result.template_sha256[:_HASH_CHARS]}"
    disagreements = {d.readout: d for d in result.disagreements}
    readings = [(judge, None, result.judged), *((f"{name} (rule-based)", name, scores) for name, scores in result.rules)]
    rows: list[tuple[Cell, ...]] = []
    for sl in result.judged.slices:
        overall = sl.name == _OVERALL
        for text, name, scores in readings:
            t: HallusionSlice | None = next((x for x in scores.slices if x.name == sl.name), None)
            if t is None:
                continue
            if name is None:
                ledger = (_count(result.unparseable), _count(result.errors)) if overall else (blank, blank)
                differ = (blank, blank)
            else:
                d = disagreements[name]
                ledger = (blank, blank)
                differ = (_count(d.verdicts), _count(d.correctness)) if overall else (blank, blank)
            rows.append((label(sl.name), label(text), _count(t.questions), *ledger, _percent(t.a_acc, t.a_ci, missing),
                         _percent(t.f_acc, t.f_ci, missing), _percent(t.q_acc, t.q_ci, missing), *differ))  # fmt: skip
    return Grid(header=_HEADERS[syntax], rows=tuple(rows))


def hallusion_provenance(rundir: str | Path, samples_sha256: str, judgments: str | Path, result: JudgedHallusion, *,
                         n_resamples: int, seed: int) -> HallusionProvenance:  # fmt: skip
    """The table's comment: the run's samples and the judgments (paths as given, their sha256),
    the ledger, the readings shown and the bootstrap that recompute it."""
    return HallusionProvenance(
        table="hallusion",
        samples=FileSource(path=str(rundir), sha256=samples_sha256),
        judgments=FileSource(path=str(judgments), sha256=sha256_file(JudgmentDir(judgments).judgments_path)),
        judge=f"{result.judge_backend}:{result.judge_model}",
        prompt_sha256=result.template_sha256,
        readouts=tuple(name for name, _ in result.rules),
        bootstrap=BootstrapSettings(n_resamples=n_resamples, seed=seed),
        halluprobe=__version__,
    )


def render_hallusion(grid: Grid, provenance: HallusionProvenance, syntax: Syntax, *, without_figure: bool = True) -> str:
    """The table under its comment, with a title naming the judge and a note on the CIs and counts;
    ``without_figure``: whether the run holds questions asked without a figure (noted when not)."""
    prov = provenance
    title = f"HallusionBench, judged by {prov.judge} (official prompt and grouping) beside rule-based readings"
    boot = prov.bootstrap
    note = "aAcc, fAcc, qAcc in %."
    if boot.n_resamples:
        note += f" 95% CIs: bootstrap over question sets, {boot.n_resamples} resamples, seed {boot.seed}."
    note += " Unparseable and errored verdicts are scored unclear, as the official script does. Disagreement with the judge over all questions."
    if not without_figure:
        note += " No question asked without a figure is in this run; the official aAcc and qAcc include them."
    slices = {index for index in range(1, len(grid.rows)) if grid.rows[index][0].text != grid.rows[index - 1][0].text}
    return render_grid(grid, title, note, prov, syntax, columns="ll" + "r" * 8, rules_before=slices)  # a rule between slices
