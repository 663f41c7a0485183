"""MMHal-Bench's judged table: a row per question type and overall, the average score (0-6) and
hallucination rate with their CIs, the unparseable and errored verdicts counted, and the ledger
(judge, prompt sha256) beside every number; rendered as Markdown or booktabs LaTeX through one
:class:`~halluprobe.tables.Grid` under a ``halluprobe-mmhal-provenance`` comment, the grid
``check`` recomputes (:mod:`halluprobe.check.mmhal`). Renders only: the scores come from
:func:`halluprobe.judging.mmhal_score.score_mmhal`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe import __version__
from halluprobe.benchmarks.mmhal import MMHalFile
from halluprobe.formatting import format_ratio
from halluprobe.judging.ledger import JudgeHeader, Judgment
from halluprobe.judging.mmhal_score import MMHalScore, UnparseablePolicy
from halluprobe.judging.store import JudgmentDir
from halluprobe.provenance import Syntax
from halluprobe.provenance_judged import MMHalProvenance
from halluprobe.provenance_sources import FileSource
from halluprobe.records_scores import BootstrapSettings
from halluprobe.rundir import sha256_file
from halluprobe.tables import Cell, Grid, latex_escape, render_grid

__all__ = ["mmhal_grid", "mmhal_provenance", "render_mmhal"]

_HEADERS = {
    "markdown": ("type", "n", "unparseable", "errors", "average score [95% CI]", "hallucination rate [95% CI]", "judge", "prompt sha256"),
    "latex": ("Type", "$n$", "Unparse.", "Err.", r"Avg. score [95\% CI]", r"Halluc. rate [95\% CI]", "Judge", "Prompt sha256"),
}  # fmt: skip
_HASH_CHARS = 12  # the prompt's sha256 as the terminal ledger prints it; the comment holds it whole
_OFFICIAL_TYPES = 8  # the official summarizer's types: index % 8


def _ratio(value: float | None, ci: tuple[float, float] | None, digits: int, missing: str) -> Cell:
    text = format_ratio(value, ci, digits=digits, ci_digits=digits, missing=missing)
    return Cell(text, (value,) if value is None or ci is None else (value, ci[0], ci[1]))


def mmhal_grid(score: MMHalScore, mmhal: MMHalFile, judged: Sequence[Judgment], header: JudgeHeader, *, compat: bool, syntax: Syntax) -> Grid:
    """The table's cells. ``judged``: one judgment per template item, in template order
    (:func:`~halluprobe.judging.mmhal_score.ordered_judgments`). ``compat``: the official
    summarizer's figures (unparseable and errors scored 0, types by position, no CIs)."""
    missing = "--" if syntax == "latex" else "-"
    judge = f"{header.backend}:{header.model}"
    ledger = (Cell(latex_escape(judge) if syntax == "latex" else judge), Cell(header.template_sha256[:_HASH_CHARS]))
    index = range(len(judged))

    def counts(rows: Sequence[int]) -> tuple[Cell, ...]:
        bad = [sum(judged[i].status == s for i in rows) for s in ("unparseable", "error")]
        return (Cell(str(len(rows)), (len(rows),)), Cell(str(bad[0]), (bad[0],)), Cell(str(bad[1]), (bad[1],)))

    def label(text: str) -> Cell:
        return Cell(latex_escape(text) if syntax == "latex" else text)

    rows: list[tuple[Cell, ...]] = []
    if compat:
        scores = score.compat.scores
        for t in range(min(_OFFICIAL_TYPES, len(judged))):
            at = [i for i in index if i % _OFFICIAL_TYPES == t]
            rate = sum(scores[i] < 3 for i in at) / len(at)
            rows.append((label(mmhal.items[t].question_type), *counts(at), _ratio(score.compat.per_position_type[t], None, 2, missing),
                         _ratio(rate, None, 3, missing), *ledger))  # fmt: skip
        overall = (_ratio(score.compat.average, None, 2, missing), _ratio(score.compat.hallucination_rate, None, 3, missing))
    else:
        for t in score.per_type:
            at = [i for i in index if mmhal.items[i].question_type == t.question_type]
            rows.append((label(t.question_type), *counts(at), _ratio(t.average, t.average_ci, 2, missing),
                         _ratio(t.hallucination_rate, t.hallucination_rate_ci, 3, missing), *ledger))  # fmt: skip
        overall = (_ratio(score.average, score.average_ci, 2, missing), _ratio(score.hallucination_rate, score.hallucination_rate_ci, 3, missing))
    rows.append((label("overall"), *counts(list(index)), *overall, *ledger))
    # the official figures have no CIs: the headers do not promise one
    headers = tuple(h.split(" [")[0] for h in _HEADERS[syntax]) if compat else _HEADERS[syntax]
    return Grid(header=headers, rows=tuple(rows))


def mmhal_provenance(template: str | Path, judgments: str | Path, header: JudgeHeader, *, policy: UnparseablePolicy, compat: bool,
                     n_resamples: int, seed: int) -> MMHalProvenance:  # fmt: skip
    """The table's comment: the template and the judgments (paths as given, their sha256), the
    ledger, and the settings that recompute it."""
    return MMHalProvenance(
        table="mmhal",
        template=FileSource(path=str(template), sha256=sha256_file(template)),
        judgments=FileSource(path=str(judgments), sha256=sha256_file(JudgmentDir(judgments).judgments_path)),
        judge=f"{header.backend}:{header.model}",
        prompt_sha256=header.template_sha256,
        unparseable=policy,
        compat=compat,
        bootstrap=BootstrapSettings(n_resamples=n_resamples, seed=seed),
        halluprobe=__version__,
    )


def render_mmhal(grid: Grid, provenance: MMHalProvenance, syntax: Syntax) -> str:
    """The table under its comment, with a title naming the aggregation and a note on the CIs."""
    prov = provenance
    if prov.compat:
        title = "MMHal-Bench, the official summarizer's aggregation (unparseable = 0, types by position)"
    else:
        title = f"MMHal-Bench, halluprobe's score (--unparseable {prov.unparseable})"
    boot = prov.bootstrap
    note = None if prov.compat or not boot.n_resamples else f"95% CIs: bootstrap over images, {boot.n_resamples} resamples, seed {boot.seed}."
    # the overall row under a rule of its own
    return render_grid(grid, title, note, prov, syntax, columns="l" + "r" * 5 + "ll", rules_before={len(grid.rows) - 1})
