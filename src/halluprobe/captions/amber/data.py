"""AMBER's files, pinned, and its discriminative queries as POPE-format yes/no questions.

``data/annotations.json`` (15,220 records; record ``id`` is its position + 1) gives each query's
type and truth; ``data/query/query_discriminative.json`` (14,216 queries: ``id``, ``image``,
``query``) the questions. Every file is checked against the sha256 of AMBER commit
5e1fd52f8ea69150c70f0ba15de70af3a907a1fd; the images come from the user's folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, StrictInt, ValidationError

from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.records import FrozenRecord, Question
from halluprobe.rundir import sha256_file

__all__ = [
    "AMBER_COMMIT",
    "AMBER_PINS",
    "DIMENSIONS",
    "AmberAnnotation",
    "AmberQuery",
    "amber_generative_questions",
    "amber_questions",
    "dimension_of",
    "read_amber_annotations",
    "read_amber_queries",
]

AMBER_COMMIT = "5e1fd52f8ea69150c70f0ba15de70af3a907a1fd"
# path inside the repository -> sha256 at AMBER_COMMIT
AMBER_PINS: dict[str, str] = {
    "data/annotations.json": "db22a436c4836fbb295e60b4e80d519573077579fb7032f01b193c1bd022b797",
    "data/query/query_all.json": "127680ae61f7d4a92d2f7f07a8deaec07f0689b194d2c7c0f41ead7bd2c5bcf5",
    "data/query/query_discriminative.json": "1502887ac020f4bb7ea564af4e37bddcb030d61b78490d00f9da492a2307abb8",
    "data/query/query_generative.json": "b7e4c36596126ee36d2c3922638b7fa98743c26efda78fea2315f4425258d087",
    "data/relation.json": "c4c1491e9bbc3209abc1888c12a1bf8413bdbab8a0d8be04b990a2e7680cf23e",
    "data/safe_words.txt": "f92cf1123f4578a2630832fac3e6ac4de36212ea55859d3bed4fd233723f4043",
    "data/metrics.txt": "2fbe2ee584d10e7ce0a568a4902d3d2296727d45f761bf091dd35c4e4b5bc6ac",
}
# AMBER annotation type -> the split halluprobe runs it as ("relation" and
# "discriminative-relation" are both counted as relation by AMBER's inference.py)
DIMENSIONS: dict[str, str] = {
    "discriminative-hallucination": "existence",
    "discriminative-attribute-state": "attribute-state",
    "discriminative-attribute-number": "attribute-number",
    "discriminative-attribute-action": "attribute-action",
    "discriminative-relation": "relation",
    "relation": "relation",
}


class AmberAnnotation(FrozenRecord):
    """One record of AMBER's ``annotations.json``: its type and truth (``yes``/``no`` for a
    discriminative query; for a generative one the objects there, and ``hallu`` those a caption
    may invent). Keys AMBER adds beyond these are not read."""

    model_config = ConfigDict(extra="ignore")

    id: StrictInt
    type: str
    truth: str | list[str]
    hallu: list[str] = Field(default_factory=list)


class AmberQuery(FrozenRecord):
    """One query of AMBER's ``query_*.json``: the annotation id, the image file and the question."""

    model_config = ConfigDict(extra="ignore")

    id: Any  # checked against the annotations where it is used (an id out of range names the query)
    image: str
    query: str


def dimension_of(amber_type: str) -> str:
    return DIMENSIONS[amber_type]


def _pinned_json(path: Path, pin: str | None, check: bool) -> Any:
    if not path.is_file():
        raise InputError("AMBER file not found", path)
    if check and pin is not None:
        digest = sha256_file(path)
        if digest != pin:
            raise InputError(f"sha256 {digest[:12]}... differs from AMBER commit {AMBER_COMMIT[:12]}'s {pin[:12]}... (pass --no-check-sha256 to use it anyway)", path)
    try:
        return loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a JSON file: {err}", path) from None


def read_amber_annotations(path: Path, *, check_sha256: bool = True) -> list[AmberAnnotation]:
    """AMBER's annotations; record ``k`` must have ``id`` ``k + 1`` (AMBER indexes ``id - 1``)."""
    data = _pinned_json(path, AMBER_PINS["data/annotations.json"], check_sha256)
    if not isinstance(data, list):
        raise InputError("expected AMBER's annotations: a JSON array", path)
    records: list[AmberAnnotation] = []
    for k, rec in enumerate(data):
        try:
            record = AmberAnnotation.model_validate(rec)
        except ValidationError:
            record = None
        if record is None or record.id != k + 1:
            raise InputError(f"record {k}: expected {{'id': {k + 1}, 'type', 'truth', ...}}", path)
        records.append(record)
    return records


def read_amber_queries(path: Path, *, check_sha256: bool = True) -> list[AmberQuery]:
    pin = next((sha for name, sha in AMBER_PINS.items() if name.endswith("/" + path.name)), None)
    data = _pinned_json(path, pin, check_sha256)
    shape = 'expected AMBER queries: a JSON array of {"id", "image", "query"}'
    if not isinstance(data, list):
        raise InputError(shape, path)
    try:
        return [AmberQuery.model_validate(q) for q in data]
    except ValidationError:
        raise InputError(shape, path) from None


def amber_questions(annotations: list[AmberAnnotation], queries: list[AmberQuery], source: Path | None = None) -> dict[str, list[Question]]:
    """The discriminative queries as yes/no questions, by split (existence, attribute-state,
    attribute-number, attribute-action, relation); question_id = AMBER's id."""
    out: dict[str, list[Question]] = {}
    seen: set[int] = set()
    for q in queries:
        qid = q.id
        if isinstance(qid, bool) or not isinstance(qid, int) or not 1 <= qid <= len(annotations):
            raise InputError(f"query id {qid!r} is not an AMBER annotation id", source)
        if qid in seen:  # two questions with one question_id: `run` and `amber score` would refuse them later
            raise InputError(f"query id {qid} is given twice", source)
        seen.add(qid)
        ann = annotations[qid - 1]
        if ann.type == "generative":
            continue  # captioned, not asked yes/no
        if ann.type not in DIMENSIONS:  # a misspelt type would drop its query from every split
            raise InputError(f"query {qid}: annotation type {ann.type!r} is not one of AMBER's ({', '.join(['generative', *DIMENSIONS])})", source)
        if ann.truth not in ("yes", "no"):
            raise InputError(f"query {qid}: truth {ann.truth!r} is not yes/no", source)
        split = DIMENSIONS[ann.type]
        out.setdefault(split, []).append(
            Question(split=split, question_id=qid, image=q.image, text=q.query, label=ann.truth, metadata={"amber_type": ann.type})
        )
    return out


def amber_generative_questions(annotations: list[AmberAnnotation], queries: list[AmberQuery], source: Path | None = None) -> list[Question]:
    """The generative queries as open questions (split ``generative``; question_id = AMBER's id)
    for ``run --open-ended``."""
    out = []
    for q in queries:
        qid = q.id
        if isinstance(qid, bool) or not isinstance(qid, int) or not 1 <= qid <= len(annotations) or annotations[qid - 1].type != "generative":
            raise InputError(f"query id {qid!r} is not a generative AMBER annotation", source)
        out.append(Question(split="generative", question_id=qid, image=q.image, text=q.query, label="yes", kind="open"))
    return out
