"""The training-image overlap of a run on COCO images: how many of its images are COCO train2017
images (benchmarks/coco_split.py), and a readout scored over the held-out (val2017) part alone.

The audit, the report, ``score --images`` and ``literature audit`` all take their counts and
their wording from here, so the four say the same thing. A run with no COCO image name gets no
overlap record at all (never "0 in train2017"): ``NOT_COCO`` is what they say instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from halluprobe.audit.table import AuditedRun, score_readout, score_tables
from halluprobe.benchmarks.coco_split import (
    TRAIN2017_TRAINED,
    VAL2017_SHA256,
    CocoPart,
    ImageOverlap,
    coco_image,
    coco_part,
    image_overlap,
)
from halluprobe.captions.chair.held_out import ChairHeldOut
from halluprobe.captions.objhal.evaluate import ObjhalOverlap
from halluprobe.errors import InputError
from halluprobe.formatting import format_ci, format_ratio
from halluprobe.metrics.score import score_rows
from halluprobe.readouts.value import Readout
from halluprobe.records import UnknownPolicy
from halluprobe.records_audit import ScoreTables, TrainingOverlap
from halluprobe.records_scores import ScoreReport
from halluprobe.scoring import read_scored_run, readout_rows

__all__ = [
    "IMAGE_PARTS",
    "NOT_COCO",
    "ImagePart",
    "audit_overlap",
    "chair_overlap_lines",
    "held_out_line",
    "image_parts",
    "objhal_overlap_lines",
    "overlap_counts_line",
    "overlap_lines",
    "score_image_part",
    "trained_on_line",
]

ImagePart = Literal["all", "held-out", "train2017"]
IMAGE_PARTS: tuple[ImagePart, ...] = ("all", "held-out", "train2017")
_PART_OF: dict[str, CocoPart] = {"held-out": "val2017", "train2017": "train2017"}
NOT_COCO = "no image of this run has a COCO file name: its overlap with COCO train2017 is not counted"


def image_parts(images: Sequence[str]) -> list[CocoPart | None]:
    """Each image's COCO 2017 part (None: no COCO name), in order."""
    known: dict[str, CocoPart | None] = {}
    for name in images:
        if name not in known:
            image = coco_image(name)
            known[name] = None if image is None else coco_part(image)
    return [known[name] for name in images]


def audit_overlap(t: AuditedRun, readout: str, *, policy: UnknownPolicy, n_resamples: int, seed: int) -> TrainingOverlap | None:
    """The overlap record of an audited run (None: no COCO image name), ``readout`` scored over
    the questions about val2017 images and about train2017 images, image-clustered CIs as ``score``."""
    counts = image_overlap(s.image for s in t.samples)
    if not counts.is_coco:
        return None
    parts = np.array([p or "" for p in image_parts([s.image for s in t.samples])])

    def part_tables(part: str) -> ScoreTables | None:
        rows = np.flatnonzero(parts == part)
        if not len(rows):
            return None
        return score_tables(score_readout(t, readout, policy=policy, n_resamples=n_resamples, seed=seed, rows=rows))

    return TrainingOverlap(
        images=counts.images, coco_images=counts.coco_images, val2017=counts.val2017, train2017=counts.train2017,
        unplaced=counts.unplaced, val2017_ids_sha256=VAL2017_SHA256, readout=readout,
        held_out=part_tables("val2017"), in_train2017=part_tables("train2017"),
    )  # fmt: skip


def overlap_counts_line(counts: ImageOverlap | TrainingOverlap) -> str:
    """One sentence: how many of the images are COCO train2017 images (and held out)."""
    share = format_ratio(counts.train2017 / counts.images, digits=1, scale=100) if counts.images else "n/a"
    line = (
        f"COCO train2017 images: {counts.train2017} of {counts.images} images ({share}%; a val2014 image outside val2017 "
        f"went to train2017 in COCO's 2017 re-split); held out (val2017): {counts.val2017}"
    )
    if counts.unplaced:
        line += f"; {counts.unplaced} COCO images of no train/val 2014 name outside val2017 (split not known)"
    if counts.coco_images < counts.images:
        line += f"; {counts.images - counts.coco_images} images have no COCO name"
    return line


def _tables_line(name: str, tables: ScoreTables | None, readout: str) -> str:
    if tables is None:
        return f"{name}: no questions"
    macro = tables.macro
    return f"{name} ({macro.n} questions): {readout} macro F1 {format_ratio(macro.f1, missing='n/a')}{format_ci(macro.ci.get('f1'), 4)}"


def trained_on_line() -> str:
    """Which models' published training data uses train2017, each with its source."""
    return "train2017 is in the published training data of: " + "; ".join(
        f"{f.model} ({f.data}; {f.source})" for f in TRAIN2017_TRAINED
    )


def overlap_lines(overlap: TrainingOverlap) -> list[str]:
    """The audit's terminal lines (and the report's): counts, the two parts' scores, the source."""
    return [
        overlap_counts_line(overlap),
        _tables_line("held out, val2017 images", overlap.held_out, overlap.readout),
        _tables_line("train2017 images", overlap.in_train2017, overlap.readout),
        trained_on_line(),
    ]


def held_out_line(what: str, n: int | None, rates: Sequence[tuple[str, float | None, Sequence[float] | None]], *, digits: int = 1) -> str:
    """The held-out part's rates in % with their CIs, one line (``n`` None: the part is empty)."""
    if n is None:
        return f"held out, val2017 images: no {what}"
    cells = ", ".join(f"{name} {format_ratio(v, ci, digits=digits, ci_digits=digits, scale=100, missing='n/a')}" for name, v, ci in rates)
    return f"held out, val2017 images ({n} {what}): {cells}"


def chair_overlap_lines(overlap: ChairHeldOut) -> list[str]:
    """``chair``'s lines and the CHAIR page's: counts, each family's CHAIR over val2017 images, the source."""
    held = [held_out_line("captions", s.n, [(f"{family} CHAIR_s", s.chair_s, s.ci.chair_s), ("CHAIR_i", s.chair_i, s.ci.chair_i)])
            for family, s in overlap.held_out.items()] or [held_out_line("captions", None, [])]  # fmt: skip
    return [overlap_counts_line(overlap.counts), *held, trained_on_line()]


def objhal_overlap_lines(overlap: ObjhalOverlap) -> list[str]:
    """``objhal``'s lines: counts, the response- and mention-level rates over val2017 images, the source."""
    s = overlap.held_out
    rates = [] if s is None else [("response hallucination", s.response_hallucination, s.ci.response_hallucination),
                                  ("mention hallucination", s.mention_hallucination, s.ci.mention_hallucination)]  # fmt: skip
    return [overlap_counts_line(overlap.counts), held_out_line("answers", None if s is None else s.n_responses, rates, digits=2), trained_on_line()]


def score_image_part(
    path: str | Path,
    *,
    readout: Readout | str,
    part: ImagePart,
    policy: UnknownPolicy,
    force_invalid: bool = False,
    n_resamples: int = 1000,
    seed: int = 0,
) -> tuple[ScoreReport, ImageOverlap]:
    """``readout`` scored over the questions about one COCO 2017 part of the run's images
    (``held-out``: val2017; ``train2017``), with image-clustered CIs; the run's image counts beside.
    A run with no COCO image name, or none in the part, is bad input (naming its run.json)."""
    parsed = Readout.of(readout)
    rundir, header, samples = read_scored_run(path, parsed, force_invalid=force_invalid)
    counts = image_overlap(s.image for s in samples)
    if not counts.is_coco:
        raise InputError(f"--images {part}: {NOT_COCO}", rundir.header_path)
    wanted = _PART_OF[part]
    keep = [p == wanted for p in image_parts([s.image for s in samples])]
    rows = [row for row, kept in zip(readout_rows(parsed, header, samples), keep) if kept]
    if not rows:
        raise InputError(f"--images {part}: none of the run's {counts.coco_images} COCO images is a {wanted} image", rundir.header_path)
    return score_rows(rows, readout=str(parsed), policy=policy, n_resamples=n_resamples, seed=seed), counts
