"""POPE-format question files: read (JSON Lines, or a JSON array as POPE's A-OKVQA and GQA
files are) into :class:`~halluprobe.records.Question`, and written back as JSON Lines.

Every benchmark halluprobe runs is a file of this format (POPE, Auto-Probe, PROVE's open
questions, CHAIR's caption prompts, AMBER's questions); :mod:`halluprobe.benchmarks.pope`
builds POPE's splits on top of it and re-exports these readers.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, get_args

from halluprobe.errors import InputError
from halluprobe.files import escapes_root, write_atomic
from halluprobe.jsonl import iter_objects, loads, read_text, type_name
from halluprobe.records import Question, QuestionKind

__all__ = [
    "object_from_text",
    "question_line",
    "questions_bytes",
    "read_questions",
    "refuse_open_questions",
    "split_name",
    "write_questions",
]

logger = logging.getLogger(__name__)

# The line keys of the official files, in their order, plus the object we add.
_LINE_KEYS = ("question_id", "image", "text", "label", "object")
_REQUIRED_KEYS = ("question_id", "image", "text", "label")
_KINDS = get_args(QuestionKind)
# "imange": POPE 2023-08's misspelling (246 of LLaVA's released questions); its object is read the same
_OBJECT_RE = re.compile(r"^\s*is there (?:a|an) (.+?) in the ima?n?ge\s*\?\s*$", re.IGNORECASE)
_SPLIT_RE = re.compile(r"^.+_pope_(\w[\w-]*)\.jsonl?$")


def object_from_text(text: str) -> str | None:
    """The object of a standard POPE question ("Is there a/an X in the image?", or "imange" as
    POPE 2023-08 spells it), else None."""
    m = _OBJECT_RE.match(text)
    return m.group(1) if m else None



def question_line(q: Question, path: Path | None = None) -> str:
    rec: dict[str, Any] = {
        "question_id": q.question_id,
        "image": q.image,
        "text": q.text,
        "label": q.label,
        "object": q.object,
        **({"kind": q.kind} if q.kind != "yes_no" else {}),  # yes/no lines stay as POPE writes them
    }
    for key, value in q.metadata.items():
        if key in rec:
            raise InputError(f"question {q.question_id}: metadata key {key!r} clashes with a line key", path)
        rec[key] = value
    return json.dumps(rec, ensure_ascii=False)


def questions_bytes(questions: Iterable[Question], path: Path | None = None) -> bytes:
    return "".join(question_line(q, path) + "\n" for q in questions).encode("utf-8")


def split_name(path: str | Path) -> str:
    """``coco_pope_random.json`` -> ``random``; any other file -> its stem."""
    p = Path(path)
    m = _SPLIT_RE.match(p.name)
    return m.group(1) if m else p.stem


def _question_records(text: str, path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line, record) of JSON Lines, or of a JSON array (POPE's A-OKVQA and GQA files are
    pretty-printed arrays): there the line is where the record's ``{`` stands."""
    if not text.lstrip().startswith("["):
        yield from iter_objects(text, path)
        return
    decoder = json.JSONDecoder()
    try:
        data = loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON: {e.msg} (column {e.colno})", path, e.lineno) from e
    if not isinstance(data, list):
        raise InputError(f"expected a JSON array or JSON Lines, got {type_name(data)}", path)
    # line numbers for messages: walk the array's elements with the decoder
    pos = text.index("[") + 1
    for rec in data:
        while text[pos] in " \t\r\n,":
            pos += 1
        line = text.count("\n", 0, pos) + 1
        _, pos = decoder.raw_decode(text, pos)
        if not isinstance(rec, dict):
            raise InputError(f"expected a JSON object, got {type_name(rec)}", path, line)
        yield line, rec


def read_questions(path: str | Path, split: str | None = None) -> list[Question]:
    """Read a POPE-format file (JSON Lines or a JSON array) into questions of ``split`` (default: ``split_name``).

    Accepts the official files (CRLF or LF, last newline optional); ``object`` is optional and,
    when absent, derived from a standard question text; unknown keys go into ``metadata``.
    """
    p = Path(path)
    split = split if split is not None else split_name(p)
    _, text = read_text(p, "questions file")

    questions: list[Question] = []
    first_line: dict[int, int] = {}
    for lineno, rec in _question_records(text, p):
        for key in _REQUIRED_KEYS:
            if key not in rec:
                raise InputError(f"missing key {key!r}", p, lineno)
        qid, image, qtext, label = rec["question_id"], rec["image"], rec["text"], rec["label"]
        if isinstance(qid, bool) or not isinstance(qid, int):
            raise InputError(f"'question_id' must be an integer, got {type_name(qid)}", p, lineno)
        if not isinstance(image, str) or not image.strip():
            raise InputError(f"'image' must be a non-empty string, got {image!r}", p, lineno)
        if escapes_root(image):
            raise InputError(f"image path {image!r} escapes the images root", p, lineno)
        if not isinstance(qtext, str) or not qtext.strip():
            raise InputError(f"'text' must be a non-empty string, got {qtext!r}", p, lineno)
        if not isinstance(label, str):
            raise InputError(f"'label' must be a string, got {type_name(label)}", p, lineno)
        norm_label = label.strip().lower()
        if norm_label not in ("yes", "no"):
            raise InputError(f"unknown label {label!r} (expected yes or no)", p, lineno)
        if "object" in rec:
            obj = rec["object"]
            if obj is not None and (not isinstance(obj, str) or not obj.strip()):
                raise InputError(f"'object' must be a non-empty string or null, got {obj!r}", p, lineno)
        else:
            obj = object_from_text(qtext)
        if qid in first_line:
            raise InputError(f"duplicate question_id {qid} (first on line {first_line[qid]})", p, lineno)
        first_line[qid] = lineno
        kind = rec.get("kind", "yes_no")
        if kind not in _KINDS:
            raise InputError(f"unknown question kind {kind!r} (expected one of {', '.join(_KINDS)})", p, lineno)
        metadata = {k: v for k, v in rec.items() if k not in _LINE_KEYS and k != "kind"}
        questions.append(
            Question(
                split=split,
                question_id=qid,
                image=image,
                text=qtext,
                label=norm_label,  # type: ignore[arg-type]
                object=obj,
                kind=kind,
                metadata=metadata,
            )
        )
    if not questions:
        raise InputError("empty file: no questions", p)
    logger.debug("read %d questions (%s) from %s", len(questions), split, p)
    return questions


def refuse_open_questions(questions: Iterable[Question], path: str | Path) -> None:
    """InputError where yes/no labels are about to be scored and a question is open (PROVE):
    its label is a placeholder, so any yes/no metric from it would look plausible and mean nothing."""
    for q in questions:
        if q.is_open:
            raise InputError(
                f"question {q.question_id} is an open question (kind 'open'; its label is a placeholder): "
                "open questions are scored by `halluprobe prove score` (PROVE) or `halluprobe chair` (captions), not as yes/no",
                path,
            )


def write_questions(path: str | Path, questions: Iterable[Question]) -> Path:
    """Write questions as POPE-format JSON Lines (line keys, then metadata keys); atomic."""
    p = Path(path)
    data = questions_bytes(questions, p)
    write_atomic(p, data)
    return p
