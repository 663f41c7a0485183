"""Rescoring a run's stored answers against other label files (RePOPE, a corrected POPE).

Label files are POPE-format; ``*_pope_{split}.json`` and ``*_repope_{split}.json`` give
``{split}``, ``SPLIT=FILE`` names it explicitly. Questions are matched by split and id.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from halluprobe.audit.table import AuditedRun, score_readout, score_tables
from halluprobe.benchmarks.question_file import split_name
from halluprobe.metrics.binary import METRIC_NAMES
from halluprobe.records import Question, UnknownPolicy
from halluprobe.records_audit import MetricShift, ReadoutScores, Relabel, ScoreTables

__all__ = ["SHIFT_METRICS", "LabelsFile", "LabelsSpec", "labels_spec", "relabel"]

log = logging.getLogger(__name__)

# shift reports these (ratio metrics plus the p_yes ones)
SHIFT_METRICS: tuple[str, ...] = (*METRIC_NAMES, "auroc", "ece")
LABELS_SPLIT_RE = re.compile(r"^.+_(?:re)?pope_(\w[\w-]*)\.jsonl?$")


class LabelsSpec(NamedTuple):
    """One ``--labels`` item: the split it relabels, its file, and the item as given."""

    split: str
    path: Path
    name: str


class LabelsFile(NamedTuple):
    """A ``--labels`` item read: its questions by id."""

    split: str
    path: Path
    name: str
    questions: dict[int, Question]


def labels_spec(item: str | Path) -> LabelsSpec:
    """The split, path and name as given of ``FILE`` or ``SPLIT=FILE``."""
    text = str(item)
    if "=" in text and not Path(text).exists():
        split, _, file = text.partition("=")
        if split and file:
            return LabelsSpec(split, Path(file), text)
    path = Path(text)
    match = LABELS_SPLIT_RE.match(path.name)
    return LabelsSpec(match.group(1) if match else split_name(path), path, text)


def relabel(
    t: AuditedRun,
    files: list[LabelsFile],
    readouts: list[str],
    base: dict[str, ReadoutScores],
    *,
    policy: UnknownPolicy,
    n_resamples: int,
    seed: int,
    file: str | None = None,
    split: str | None = None,
    names: list[str] | None = None,
) -> Relabel:
    """Rescore the stored answers with the splits of ``files`` relabelled (other splits as stored).

    ``file`` and ``split`` name the one file of a per-file entry, ``names`` the files of the
    combined entry."""
    relabelled = {split: new for split, _, _, new in files}
    keep = np.ones(t.n, dtype=bool)
    labels = [s.label for s in t.samples]
    matched = removed = flipped = to_yes = to_no = images = 0
    for i, s in enumerate(t.samples):
        new = relabelled.get(s.split)
        if new is None:
            continue
        q = new.get(s.question_id)
        if q is None:
            keep[i] = False
            removed += 1
            continue
        matched += 1
        images += int(q.image != s.image)
        if q.label != s.label:
            flipped += 1
            to_yes += int(q.label == "yes")
            to_no += int(q.label == "no")
            labels[i] = q.label
    in_run = {s.key for s in t.samples}
    added = sum(1 for split, _, _, new in files for qid in new if (split, qid) not in in_run)
    if images:
        log.warning("%d relabelled questions name another image than the run's (matched by id anyway)", images)
    idx = np.flatnonzero(keep)
    kept_labels = [labels[i] for i in idx]
    metrics: dict[str, ScoreTables] = {}
    shift: dict[str, MetricShift] = {}
    if len(idx):
        for r in readouts:
            report = score_readout(t, r, policy=policy, n_resamples=n_resamples, seed=seed, rows=idx, labels=kept_labels)
            metrics[r] = score_tables(report)
            shift[r] = MetricShift(
                macro={m: _delta(getattr(report.macro, m), getattr(base[r].macro, m)) for m in SHIFT_METRICS},
                pooled={m: _delta(getattr(report.pooled, m), getattr(base[r].pooled, m)) for m in SHIFT_METRICS},
            )
    return Relabel(
        file=file,
        split=split,
        files=names,
        splits=sorted(relabelled),
        matched=matched,
        removed=removed,
        flipped=flipped,
        flipped_to_yes=to_yes,
        flipped_to_no=to_no,
        added=added,
        image_mismatches=images,
        metrics=metrics,
        shift=shift,
    )


def _delta(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None else new - old
