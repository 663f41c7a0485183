"""PROVE's released question file: reader, validation, and a pinned, cached downloader.

Accepted format (the fields of the released ``prove.json`` and of its public mirrors): a JSON
array of records, or JSON Lines, one record each::

    {"question_id": "q1",            # optional: also "qid" or "id"; else the record's index
     "image": "docci/test_01.jpg",   # path (relative to an images root) or URL; when it is
                                     # not a string (the parquet mirror's picture), image_url
     "caption": "A brown dog ...",   # optional: the detailed caption the graph came from
     "question": "What is the dog lying on?",
     "answer": "The dog is lying on a red sofa.",
     "image_tuples": [...],          # the whole image's scene graph
     "qa_diff_tuples": [...]}        # the answer's tuples minus those already in the question

Each tuple list is a JSON array, or a string holding one (the mirrors store them as strings),
of tuples that :func:`~halluprobe.benchmarks.prove.scene_graph.parse_tuple` reads: ``[e]``,
``[e, a]``, ``[s, r, o]``, typed dicts, ``"a | b | c"`` or ``"(a, b, c)"``. Every problem is an
:class:`~halluprobe.errors.InputError` of one line naming the file, the line (JSON Lines) or the
record index, and the question id when known. Unknown keys go to ``metadata``. A
``schema_version`` (written by ``halluprobe prove build``) is checked, not kept.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import Field

from halluprobe.benchmarks.prove.scene_graph import AttributeTuple, EntityTuple, RelationTuple, SceneGraph, parse_tuple
from halluprobe.benchmarks.sources import fetch_pope
from halluprobe.errors import InputError
from halluprobe.files import escapes_root
from halluprobe.jsonl import loads, read_records
from halluprobe.records import SCHEMA_VERSION, FrozenRecord, Question

__all__ = ["ProveItem", "PROVE_FILES", "PROVE_BASE_URL", "read_prove", "fetch_prove", "open_questions"]

log = logging.getLogger(__name__)

# The authors' dataset repository (Salesforce/PROVE on the Hugging Face hub), raw files.
PROVE_BASE_URL = "https://huggingface.co/datasets/Salesforce/PROVE/resolve/main/"
# file name -> pinned sha256. Empty: the released file was not reachable from where this was
# written, so no digest could be checked; fetch_prove refuses to download without a pin.
PROVE_FILES: dict[str, str] = {}

_ID_KEYS = ("question_id", "qid", "id")
_REQUIRED = ("question", "answer", "image_tuples", "qa_diff_tuples")

AnyTuple = EntityTuple | AttributeTuple | RelationTuple


class ProveItem(FrozenRecord):
    """One PROVE question with its graphs."""

    question_id: str
    image: str
    caption: str | None = None
    question: str
    answer: str
    image_tuples: list[EntityTuple | AttributeTuple | RelationTuple]
    qa_diff_tuples: list[EntityTuple | AttributeTuple | RelationTuple]
    metadata: dict[str, Any] = Field(default_factory=dict)

    def graph(self) -> SceneGraph:
        return SceneGraph(self.image_tuples)


def _tuples(value: Any, field: str) -> list[AnyTuple]:
    if isinstance(value, str):
        try:
            value = loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"{field} is a string but not JSON: {err.msg} at column {err.colno}") from None
    if not isinstance(value, list):
        raise ValueError(f"{field} must be a list of tuples, not {type(value).__name__}")
    out = []
    for i, raw in enumerate(value):
        try:
            out.append(parse_tuple(raw))
        except ValueError as err:
            raise ValueError(f"{field}[{i}]: {err}") from None
    return out


def _item(raw: Any, index: int) -> ProveItem:
    if not isinstance(raw, dict):
        raise ValueError(f"a record must be a JSON object, not {type(raw).__name__}")
    qid = next((raw[k] for k in _ID_KEYS if k in raw), index)
    missing = [k for k in _REQUIRED if k not in raw]
    if "image" not in raw and "image_url" not in raw:
        missing.insert(0, "image")
    if missing:
        raise ValueError(f"question {qid}: missing key(s) {', '.join(missing)}")
    # the parquet mirror's "image" is the picture itself (bytes): its image_url names it instead
    image = raw["image"] if isinstance(raw.get("image"), str) else raw.get("image_url")
    if not isinstance(image, str) or not image.strip():
        raise ValueError(f"question {qid}: image (or image_url) must be a non-empty string")
    for key in ("question", "answer"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise ValueError(f"question {qid}: {key} must be a non-empty string")
    caption = raw.get("caption")
    if caption is not None and not isinstance(caption, str):
        raise ValueError(f"question {qid}: caption must be a string")
    try:
        image_tuples = _tuples(raw["image_tuples"], "image_tuples")
        diff = _tuples(raw["qa_diff_tuples"], "qa_diff_tuples")
    except ValueError as err:
        raise ValueError(f"question {qid}: {err}") from None
    version = raw.get("schema_version", SCHEMA_VERSION)  # `prove build` writes it; the released file has none
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
        raise ValueError(f"question {qid}: unsupported schema_version {version!r} (this halluprobe reads 1..{SCHEMA_VERSION})")
    known = set(_ID_KEYS) | set(_REQUIRED) | {"caption", "image", "schema_version"} | ({"image_url"} if image == raw.get("image_url") else set())
    return ProveItem(
        question_id=str(qid),
        image=image,
        caption=caption,
        question=raw["question"],
        answer=raw["answer"],
        image_tuples=image_tuples,
        qa_diff_tuples=diff,
        metadata={k: v for k, v in raw.items() if k not in known},
    )


def read_prove(path: str | Path) -> list[ProveItem]:
    """Read and validate a PROVE file (JSON array or JSON Lines); question ids must be unique."""

    path = Path(path)
    items: list[ProveItem] = []
    seen: set[str] = set()
    for rec in read_records(path, "PROVE"):
        try:
            item = _item(rec.value, rec.index)
        except ValueError as err:
            raise InputError(f"{rec.where}{err}", path, rec.line) from None
        if item.question_id in seen:
            raise InputError(f"{rec.where}duplicate question id {item.question_id!r}", path, rec.line)
        seen.add(item.question_id)
        items.append(item)
    return items


def fetch_prove(
    out_dir: str | Path,
    *,
    cache_dir: str | Path | None = None,
    base_url: str | None = None,
    pins: dict[str, str] | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Download the PROVE file(s) into ``out_dir`` through the same verified, cached path as POPE's.

    ``pins`` (file name -> sha256) replaces :data:`PROVE_FILES`; the cache is content-keyed
    (``<cache>/pope/<sha256>/<name>``: the folder name is sources.py's), so a second call needs
    no network. Without a pin there is nothing to verify against, so it refuses.
    """

    pins = dict(pins if pins is not None else PROVE_FILES)
    if not pins:
        raise InputError("no pinned sha256 is known for the PROVE files yet; pass pins={'prove.json': '<sha256>'}")
    return fetch_pope(out_dir, cache_dir=cache_dir, base_url=base_url or PROVE_BASE_URL, pins=pins, overwrite=overwrite)


def open_questions(items: list[ProveItem], source: str | Path | None = None) -> list[Question]:
    """PROVE's questions as benchmark questions for ``halluprobe run --open-ended``: kind
    ``open`` (the yes/no label is a placeholder nothing scores), question_id = the record's
    index, ``prove_id`` = PROVE's own id. An image path that leaves the images root
    (``../x.png``, absolute paths aside) is refused, naming ``source``."""
    questions = []
    for index, item in enumerate(items):
        if escapes_root(item.image):
            raise InputError(f"record {item.question_id}: image path {item.image!r} escapes the images root", source)
        questions.append(
            Question(split="prove", question_id=index, image=item.image, text=item.question, label="yes",
                     kind="open", metadata={"prove_id": item.question_id})  # fmt: skip
        )
    return questions
