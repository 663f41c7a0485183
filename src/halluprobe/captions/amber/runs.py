"""That a run asked AMBER's queries: each sample's question id is an AMBER query's, about that
query's image, and its prompt holds that query's text. AMBER's ids are small integers any yes/no
run has, so the id alone would score a POPE run as AMBER."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

from halluprobe.captions.amber.data import AmberQuery
from halluprobe.errors import InputError
from halluprobe.records import Sample

__all__ = ["refuse_other_questions"]


def _words(text: str) -> str:
    return " ".join(text.split())


def _name(image: str) -> str:
    return PurePosixPath(image.replace("\\", "/")).name


def refuse_other_questions(samples: Sequence[Sample], queries: Sequence[AmberQuery], path: str) -> None:
    """One line naming the first sample (``samples.jsonl:line``) that is not the AMBER query its
    id says. The image is compared by file name (a run may name it inside a folder); the query's
    text must stand in the prompt (a template wraps it). AMBER's repeated queries (one image and
    text under two ids) are two queries here, each checked under its own id."""
    by_id = {q.id: q for q in queries}
    for line, sample in enumerate(samples, start=1):
        query = by_id.get(sample.question_id)
        if query is None:
            raise InputError(f"question_id {sample.question_id} is not one of AMBER's discriminative queries: "
                             "a run of `halluprobe amber questions` files is scored here", path, line)  # fmt: skip
        if _name(sample.image) != _name(query.image) or _words(query.query) not in _words(sample.prompt):
            raise InputError(f"question_id {sample.question_id} asked about {sample.image!r}, not AMBER's query {query.id} "
                             f"({query.query!r} about {query.image!r}): a run of `halluprobe amber questions` files is scored here",
                             path, line)  # fmt: skip
