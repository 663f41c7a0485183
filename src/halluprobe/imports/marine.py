"""MARINE's POPE answers (Linxi-ZHAO/MARINE commit 9c66a6b7d027) with its separate labels file.

Answers (``output/llava2/answers/answer_repro_pope/*.jsonl``): one JSON line per question,
``{"question_id", "image_id", "prompt", "text", "answer_id", "model_id", "metadata"}``, the
prompt ``"<image>\\nIs there a keyboard in the image?"``. Labels
(``data/marine_qa/label/pope_coco_detr_th0.95_ram_th0.68_label.json``): a pretty-printed JSON
array of ``{"id", "image", "label"}``, no question text. MARINE's ``eval/eval_pope.py`` pairs
the two by position; here each answer is paired with the label of the same id, and the label's
image must be the answer's ``image_id`` (else the files do not belong together: refused).
A POPE labels file (``question_id``, ``image``, ``text``, ``label``) is read as well, and its
text must then be the prompt's question. Any other labels file is refused in one line.

The split is ``--split``, else the labels file's name (``coco_pope_adversarial.json`` ->
``adversarial``; MARINE's own file: its stem). MARINE's draw of adversarial questions is its
own (``data/org_qa/pope/coco/coco_pope_adversarial.json``); the version detected from the
questions is recorded. Its parse rule is ``text:marine``; the file stores no decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from halluprobe.benchmarks.question_file import object_from_text, split_name
from halluprobe.benchmarks.versions import detect_versions, normalise_question, versions_of_file
from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles, as_int_id
from halluprobe.imports.llava import LLAVA_MAX_NEW_TOKENS, question_of_prompt
from halluprobe.jsonl import iter_objects, read_records, type_name
from halluprobe.rundir import sha256_file

__all__ = ["MarineLabel", "read_id_labels", "read_marine"]

class MarineLabel(NamedTuple):
    """One labels-file entry, keyed by its id."""

    image: str
    label: str  # "yes" or "no"
    text: str | None  # the question, where the file has one (POPE's; MARINE's has none)


def read_id_labels(path: Path) -> dict[int, MarineLabel]:
    """Labels keyed by ``id`` (MARINE) or ``question_id`` (POPE), as {id: MarineLabel};
    a file keyed by neither is one :class:`InputError`."""
    records = read_records(path, "labels")
    first = records[0].value
    key = "question_id" if "question_id" in first else "id" if "id" in first else None
    if key is None:
        raise InputError(
            f"{records[0].where}labels must be keyed by 'question_id' (POPE) or 'id' (MARINE), got keys {', '.join(first) or 'none'}",
            path,
            records[0].line,
        )
    out: dict[int, MarineLabel] = {}
    for rec in records:
        obj = rec.value
        qid = as_int_id(obj.get(key), f"{rec.where}{key}", path, rec.line)
        image, label, text = obj.get("image"), obj.get("label"), obj.get("text")
        if not isinstance(image, str) or not image.strip():
            raise InputError(f"{rec.where}'image' must be a non-empty string, got {type_name(image)}", path, rec.line)
        if not isinstance(label, str) or label.strip().lower() not in ("yes", "no"):
            raise InputError(f"{rec.where}'label' must be yes or no, got {label!r}", path, rec.line)
        if key == "question_id" and not isinstance(text, str):
            raise InputError(f"{rec.where}a POPE labels line needs its question as a string 'text'", path, rec.line)
        if qid in out:
            raise InputError(f"{rec.where}duplicate {key} {qid}", path, rec.line)
        out[qid] = MarineLabel(image, label.strip().lower(), text if isinstance(text, str) else None)
    return out


def read_marine(
    files: Sequence[Path], labels_paths: Sequence[Path], split: str | None, *, inputs: InputFiles | None = None
) -> ImportResult:
    """Pair every MARINE answer with its label (see the module docstring)."""
    inputs = inputs or InputFiles()
    if len(labels_paths) != 1:
        raise InputError("the marine format takes one --labels file (MARINE's labels keyed 'id', or a POPE labels file)")
    labels_path = labels_paths[0]
    split = split or split_name(labels_path)
    labels = read_id_labels(labels_path)
    digest = sha256_file(labels_path)
    result = ImportResult(
        format="marine",
        answers=[],
        sources=list(files),
        inputs=inputs,
        labels={split: labels_path},
        label_sha256={split: digest},
        max_new_tokens=LLAVA_MAX_NEW_TOKENS,
        notes=["MARINE's eval/eval_pope.py parses answers with text:marine (a blank answer is left out: --unknown drop)"],
    )
    for path in files:
        text = inputs.text(path, "MARINE answers file")
        for line, obj in iter_objects(text, path):
            if not isinstance(obj.get("text"), str) or not isinstance(obj.get("prompt"), str):
                raise InputError("a MARINE answer line needs string 'prompt' and 'text'", path, line)
            qid = as_int_id(obj.get("question_id"), "question_id", path, line)
            label = labels.get(qid)
            if label is None:
                result.skipped.append({"source": f"{path}:{line}", "reason": f"question_id {qid} has no label in {labels_path}"})
                continue
            image, gold, label_text = label
            answer_image = obj.get("image_id", obj.get("image"))
            if isinstance(answer_image, str) and PurePosixPath(answer_image).name != PurePosixPath(image).name:
                raise InputError(f"question_id {qid} is about {answer_image} but its label in {labels_path} is for {image}", path, line)
            question = question_of_prompt(obj["prompt"])
            if label_text is not None and normalise_question(question) != normalise_question(label_text):
                raise InputError(f"question_id {qid} asks {question!r} but its label in {labels_path} is for {label_text!r}", path, line)
            result.note_model(obj)
            result.answers.append(
                Imported(
                    split=split,
                    question_id=qid,
                    image=image,
                    prompt=question,
                    text=obj["text"],
                    label=gold,  # type: ignore[arg-type]
                    object=object_from_text(question),
                    source=f"{path}:{line}",
                )
            )
    answered = {a.question_id for a in result.answers}
    result.unanswered = {split: sum(qid not in answered for qid in labels)}
    asked = [(a.image, a.prompt) for a in result.answers]
    result.versions = {"labels": {split: versions_of_file(digest) or detect_versions(split, asked)}}
    return result
