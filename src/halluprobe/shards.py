"""Shards of one run, and merging their run dirs back into one.

``--shard I/N`` (0 <= I < N) keeps the questions whose image falls into part I of N. The part
is a stable hash of the image path as the benchmark file writes it (sha256, not Python's
salted ``hash``), so every machine computes the same partition, all of one image's questions
(across splits) stay in one shard (a server's prefix cache sees the image once), and the parts
are disjoint and cover every question. ``--limit`` is applied first: the union of the shards
is exactly the unsharded run.

:func:`merge_rundirs` checks that the shards belong to one run (identical header fingerprints:
the shard spec is not part of the fingerprint), that every question of the benchmark files
named in the header (with the header's ``limit``) is answered exactly once, and writes one run
dir that ``score``, ``audit`` and ``report`` read like any other.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from halluprobe.benchmarks.question_file import read_questions
from halluprobe.errors import InputError
from halluprobe.records import Question, QuestionKey, Sample
from halluprobe.rundir import RunDir, differ_phrase, sha256_file

__all__ = ["Shard", "limit_questions", "parse_shard", "shard_of", "select_shard", "MergeSummary", "merge_rundirs"]

log = logging.getLogger(__name__)

Q = TypeVar("Q", bound=Question)


def limit_questions(questions: Sequence[Q], limit: int | None) -> list[Q]:
    """The first ``limit`` questions of each split, in file order (all of them when None)."""
    if limit is None:
        return list(questions)
    kept: list[Q] = []
    per_split: dict[str, int] = {}
    for q in questions:
        if per_split.get(q.split, 0) < limit:
            per_split[q.split] = per_split.get(q.split, 0) + 1
            kept.append(q)
    return kept


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(spec: str) -> Shard:
    """``"I/N"`` with integers 0 <= I < N; InputError otherwise."""
    index_text, sep, count_text = spec.strip().partition("/")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        index, count = -1, 0
    if not sep or count < 1 or not 0 <= index < count:
        raise InputError(f"--shard must be I/N with 0 <= I < N (e.g. 0/4), not {spec!r}")
    return Shard(index, count)


def shard_of(image: str, count: int) -> int:
    """The shard (0 .. count-1) that an image's questions belong to."""
    digest = hashlib.sha256(image.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def select_shard(questions: Sequence[Q], shard: Shard | None) -> list[Q]:
    if shard is None:
        return list(questions)
    return [q for q in questions if shard_of(q.image, shard.count) == shard.index]


@dataclass(frozen=True)
class MergeSummary:
    out: Path
    questions: int
    errors: int
    shards: int


def _expected(rundir: RunDir) -> list[Question]:
    """Every question the run was asked for: the header's benchmark files, checked, with its limit."""

    header = rundir.read_header()
    questions: list[Question] = []
    for split, path_text in header.benchmark_paths.items():
        path = Path(path_text)
        if not path.is_file():
            raise InputError(f"benchmark file of split {split!r} named in the run header is missing", path)
        if sha256_file(path) != header.benchmarks.get(split):
            raise InputError(f"benchmark file of split {split!r} changed since the run (sha256 differs)", path)
        questions.extend(read_questions(path, split=split))
    return limit_questions(questions, header.limit)


def merge_rundirs(paths: Sequence[str | Path], out: str | Path, *, overwrite: bool = False) -> MergeSummary:
    """Merge shard run dirs into ``out``; InputError (nothing written) on any inconsistency."""
    if not paths:
        raise InputError("merge needs at least one run dir")
    dirs = [RunDir(p) for p in paths]
    target = RunDir(out)
    if any(d.path.resolve() == target.path.resolve() for d in dirs):
        raise InputError("--out must not be one of the run dirs being merged", target.path)
    headers = [d.read_header() for d in dirs]
    first = headers[0]
    for d, h in zip(dirs[1:], headers[1:]):
        if h.fingerprint != first.fingerprint:
            raise InputError(
                f"not a shard of the same run as {dirs[0].path}: header fingerprints differ ({differ_phrase(first, h)})",
                d.header_path,
            )
    expected = _expected(dirs[0])
    order = {q.key: i for i, q in enumerate(expected)}

    found: dict[QuestionKey, tuple[Sample, Path]] = {}
    for d in dirs:
        for sample in d.read_samples():
            if sample.key in found:
                raise InputError(
                    f"question {sample.key[0]}/{sample.key[1]} is answered in both {found[sample.key][1]} and {d.path}",
                    d.samples_path,
                )
            if sample.key not in order:
                raise InputError(
                    f"question {sample.key[0]}/{sample.key[1]} is not in the run's benchmark files", d.samples_path
                )
            found[sample.key] = (sample, d.path)
    missing = [q.key for q in expected if q.key not in found]
    if missing:
        example = ", ".join(f"{s}/{i}" for s, i in missing[:3])
        raise InputError(
            f"{len(missing)} of {len(expected)} questions are answered by no shard (e.g. {example}): "
            "finish the shards (run --resume) or merge them all"
        )

    header = first.model_copy(update={"shard": None})
    target.start(header, resume=False, force=False, overwrite=overwrite)
    samples = sorted((s for s, _ in found.values()), key=lambda s: order[s.key])
    target.append(samples)
    sessions = []
    for d, h in zip(dirs, headers):
        for session in d.read_request_stats().get("sessions", []):
            sessions.append({**session, "shard": h.shard, "rundir": str(d.path)})
    if sessions:
        target.write_request_stats(sessions)
    errors = sum(1 for s in samples if s.error)
    target.mark_complete(
        {
            "questions": len(samples),
            "errors": errors,
            "merged_from": [str(d.path) for d in dirs],
            "shards": [h.shard for h in headers],
            "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
    )
    log.info("merged %d run dirs into %s: %d questions, %d errors", len(dirs), target.path, len(samples), errors)
    return MergeSummary(out=target.path, questions=len(samples), errors=errors, shards=len(dirs))
