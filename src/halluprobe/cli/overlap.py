"""The training-image overlap's part of the run-dir verbs (docs/design/training-overlap.md):
``score --images`` and the stderr notes of ``audit`` and ``report``; the logic is in
``halluprobe.audit.overlap``, imported inside the functions (``--help`` stays fast)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from halluprobe.cli._app import console
from halluprobe.errors import InputError

__all__ = ["ImagesOption", "say_notes", "score_part"]

ImagesOption = Annotated[
    str,
    typer.Option(help="COCO runs: score only the questions about held-out images (held-out: COCO val2017) or about "
                 "train2017 images (all: every question). Printed only: metrics.json is not written."),
]  # fmt: skip


# the flags of score's other modes, in the order score_part receives their values
_OTHER_MODES = ("--answers", "--labels", "--per-question", "--compat", "--markdown", "--latex")


def score_part(rundir: Path | None, images: str, readout: str, unknown: str, force_invalid: bool, resamples: int, seed: int,
               as_json: bool, others: tuple[Any, ...]) -> None:  # fmt: skip
    """``score --images held-out|train2017``: one COCO 2017 part of a run's images, printed only
    (metrics.json stays the whole run's; ``check`` recomputes whole runs, so no marked table)."""
    from halluprobe.audit.overlap import (
        IMAGE_PARTS,
        overlap_counts_line,
        score_image_part,
    )
    from halluprobe.tables import score_table

    if images not in IMAGE_PARTS:
        raise InputError(f"--images must be one of {', '.join(IMAGE_PARTS)}, got {images!r}")
    given = [flag for flag, value in zip(_OTHER_MODES, others) if value]
    if given or rundir is None:
        raise InputError(f"--images {images} scores part of a RUNDIR's images: give a run dir, without {', '.join(given) or 'the flags of another mode'}")
    report, counts = score_image_part(rundir, readout=readout, part=images, policy=unknown, force_invalid=force_invalid,  # type: ignore[arg-type]
                                      n_resamples=resamples, seed=seed)  # fmt: skip
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    console().print(score_table(report, f"{rundir}: {readout}, unknown={unknown}, images: {images}"))
    typer.echo(overlap_counts_line(counts))


def say_notes(rundir: Path, audit: Any, *, headline: bool = True) -> None:
    """On stderr: the headline note (where ``headline``: the summary says it otherwise) and, for a
    run of no COCO image, that its overlap is not counted (its outputs gain no line, never a 0)."""
    from halluprobe.audit.overlap import NOT_COCO

    if headline and audit.headline_note:
        typer.echo(f"{rundir}: {audit.headline_note}", err=True)
    if audit.training_overlap is None:
        typer.echo(f"{rundir}: {NOT_COCO}", err=True)
