"""Which pinned questions a literature entry's answers are, and the fetch of its pinned files.

:func:`fetch_offline_hint` fetches one pinned file (its "cannot reach" names the mirror
variable that audits offline); :func:`dataset_coverage` tells, for answers that carry their own
labels (DASH-B's), how many of their keys are the pinned version's questions;
:func:`check_own_draw` holds answers to the pinned question file of an authors' own draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from halluprobe.benchmarks.dataset_files import ENV_GITHUB_MIRROR, dashb_questions, fetch_source
from halluprobe.benchmarks.datasets import DATASETS
from halluprobe.benchmarks.download import Unreachable
from halluprobe.benchmarks.fingerprint import content_fingerprint
from halluprobe.benchmarks.question_file import read_questions
from halluprobe.benchmarks.versions import normalise_question
from halluprobe.errors import InputError
from halluprobe.literature.registry import Entry

if TYPE_CHECKING:
    from halluprobe.benchmarks.datasets import SourceFile
    from halluprobe.records import Sample

__all__ = ["fetch_offline_hint", "dataset_coverage", "check_own_draw"]


def fetch_offline_hint(source: SourceFile, *, cache_dir: Path | None, mirror: str | None) -> Path:
    """``fetch_source``, whose "cannot reach" names the mirror variable that audits offline."""

    try:
        return fetch_source(source, cache_dir=cache_dir, mirror=mirror)
    except Unreachable as e:
        raise Unreachable(
            f"{e}; to audit without the network, set {ENV_GITHUB_MIRROR} to a mirror laid out <repository>/<commit>/<path> "
            "(an http(s):// URL or a folder)"
        ) from e


def dataset_coverage(entry: Entry, samples: Sequence[Sample], *, cache_dir: Path | None = None, mirror: str | None = None) -> dict[str, list[str]]:
    """For an entry whose answers carry their own labels (no labels file to fingerprint) and
    that names a pinned dataset version: how many of its answered (label, object, image file)
    keys, per label, are questions of that version (its files fetched, sha256 checked). Split
    -> one line for the table; {} when the entry names no pinned version."""
    from pathlib import PurePosixPath


    version = DATASETS.get(entry.dataset, {}).get(entry.version or "")
    if version is None or version.shape == "popev2":
        return {}
    pinned: set[tuple[str, str | None, str]] = set()
    for sources in version.sources.values():
        cached = [fetch_offline_hint(src, cache_dir=cache_dir, mirror=mirror) for src in sources]
        questions = dashb_questions(*cached) if version.shape == "dashb" else [q for path in cached for q in read_questions(path)]
        pinned.update((q.label, q.object, PurePosixPath(q.image).name) for q in questions)
    out: dict[str, list[str]] = {}
    for split in sorted({s.split for s in samples}):
        parts = []
        for label, kind in (("no", "negatives"), ("yes", "positives")):
            keys = {(s.label, s.object, PurePosixPath(s.image).name) for s in samples if s.split == split and s.label == label}
            parts.append(f"{len(keys & pinned)} of {len(keys)} {kind}")
        out[split] = [f"{entry.dataset}@{entry.version}: {', '.join(parts)} are its (label, object, image file) keys"]
    return out


def check_own_draw(fingerprint: str, samples: Sequence[Sample], questions: Path, answers: Path) -> dict[str, list[str]]:
    """The pinned question file must have the registry's fingerprint, and every imported answer
    must be its question of that id (image, label, text as LLaVA normalises it): else the
    answers were made on other questions and the figure would be compared with the wrong thing.
    Split -> what the questions are, for the table."""
    from pathlib import PurePosixPath


    asked = read_questions(questions)
    found = content_fingerprint(asked)
    if found != fingerprint:
        raise InputError(f"the question file's content fingerprint is {found}, the registry pins {fingerprint}", questions)
    by_id = {q.question_id: q for q in asked}
    for s in samples:
        q = by_id.get(s.question_id)
        if q is None or (PurePosixPath(q.image).name, q.label, normalise_question(q.text)) != (
            PurePosixPath(s.image).name, s.label, normalise_question(s.prompt)
        ):
            what = "is not in it" if q is None else f"is {q.image} / {q.label} / {q.text!r} there, {s.image} / {s.label} / {s.prompt!r} here"
            raise InputError(f"answer to question_id {s.question_id} is not the pinned draw's ({questions.name}): its question {what}", answers)
    answered = {s.question_id for s in samples}
    splits = sorted({s.split for s in samples})
    shown = f"own draw {questions.name} (fingerprint {fingerprint[:12]}; {len(answered & by_id.keys())} of {len(by_id)} questions answered)"
    return {split: [shown] for split in splits}
