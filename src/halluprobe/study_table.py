"""The token-set study's multi-model table (``audit --table``): a row per model and split (and
macro), one F1 column per readout, rendered through the same :class:`~halluprobe.tables.Grid` as
every other table, so ``check`` recomputes it under its provenance comment."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from halluprobe import __version__
from halluprobe.formatting import format_ratio, markdown_table
from halluprobe.provenance import Provenance, marked_comment
from halluprobe.provenance_sources import run_source
from halluprobe.readouts.apply import available_readouts
from halluprobe.records import UnknownPolicy
from halluprobe.scoring import read_run_samples, score_readouts
from halluprobe.tables import Cell, Grid, latex_escape

__all__ = ["RECOMMENDED", "STUDY_READOUTS", "study_grid", "study_provenance", "study_table"]

STUDY_READOUTS = ("legacy_2tok", "legacy_8tok", "dynamic", "text:pope", "text:exact", "text:yorn", "text:strict")
RECOMMENDED = "dynamic"  # read from the model's own yes/no sets: the column to report


def study_grid(
    rundirs: Sequence[str | Path],
    style: Literal["markdown", "latex"],
    *,
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 0,
    seed: int = 0,
) -> Grid:
    """The cells of the study table: a row per model and split (and macro), F1 per readout; a
    forced legacy readout's cell is marked †, a readout the run cannot give is a dash."""

    latex = style == "latex"
    header = ["model", "split", *[f"{r}{' (*)' if r == RECOMMENDED else ''}" for r in STUDY_READOUTS]]
    rows: list[tuple[Cell, ...]] = []
    for rundir in rundirs:
        run, run_header, samples = read_run_samples(rundir)
        names = [r for r in STUDY_READOUTS if r in available_readouts(run_header, samples)]
        reports, forced = score_readouts(run, run_header, samples, names, policy=policy, n_resamples=n_resamples, seed=seed)
        model = Path(run_header.model).name or run_header.model
        splits = [*next(iter(reports.values())).splits, "macro"] if reports else []
        for split in splits:
            cells = [Cell(latex_escape(model) if latex else model), Cell(latex_escape(split) if latex else split)]
            for name in STUDY_READOUTS:
                report = reports.get(name)
                metrics = None if report is None else (report.macro if split == "macro" else report.splits.get(split))
                value = None if metrics is None else metrics.f1
                text = format_ratio(value, digits=4)
                mark = name in forced and text != "-"
                cells.append(Cell(text + ((r" $^\dagger$" if latex else " †") if mark else ""), (value,)))
            rows.append(tuple(cells))
    return Grid(header=tuple(latex_escape(h) if latex else h for h in header), rows=tuple(rows))


def study_table(
    rundirs: Sequence[str | Path],
    syntax: Literal["markdown", "latex"],
    *,
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 0,
    seed: int = 0,
    provenance: Provenance | None = None,
) -> str:
    """F1 per model, split (and macro) and readout for several runs, as the token-set study
    tabulates it (:func:`study_grid`). A legacy readout whose ids are other words in a model's
    vocabulary is scored anyway and marked (†): it is what that evaluator would report, not the
    model's answer. The recommended column (the model's own yes/no sets) is marked (*). A
    readout a run cannot give (text rules on a logits-only run) is '-'. Under ``provenance``
    (:func:`study_provenance`), ``check`` recomputes it."""
    grid = study_grid(rundirs, syntax, policy=policy, n_resamples=n_resamples, seed=seed)
    note = (
        "F1 per split and macro (mean over splits), unknown answers counted "
        f"{policy}. (*): the model's own yes/no sets, the column to report. †: legacy ids that are "
        "other words in this model's vocabulary, scored anyway: what that evaluator would report."
    )
    texts = [[c.text for c in row] for row in grid.rows]
    if syntax == "latex":
        lines = [marked_comment(provenance, "latex")] if provenance is not None else []
        body = [" & ".join(grid.header) + r" \\", r"\midrule", *(" & ".join(row) + r" \\" for row in texts)]
        spec = "ll" + "r" * len(STUDY_READOUTS)
        return "\n".join([*lines, rf"\begin{{tabular}}{{{spec}}}", r"\toprule", *body, r"\bottomrule", r"\end{tabular}", f"% {note}"])
    lines = [marked_comment(provenance, "markdown")] if provenance is not None else []
    return "\n".join([*lines, *markdown_table(grid.header, texts), "", note])


def study_provenance(rundirs: Sequence[str | Path], *, policy: UnknownPolicy, seed: int, resamples: int) -> Provenance:
    """The provenance of a study table: its run dirs, readouts, policy and bootstrap."""
    return Provenance(
        table="study",
        runs=tuple(run_source(p) for p in rundirs),
        readout=RECOMMENDED,
        readouts=STUDY_READOUTS,
        unknown=policy,
        seed=seed,
        resamples=resamples,
        halluprobe=__version__,
    )
