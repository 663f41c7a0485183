"""LLaVA's POPE answers (``llava/eval/model_vqa_loader.py``) with its question file.

Answers: one JSON line per answer, ``{"question_id", "prompt", "text", "answer_id",
"model_id", "metadata"}``, the three splits in one file. The question file
(``llava_pope_test.jsonl``): ``{"question_id", "image", "text", "category"}``, the category
naming the split; its ids are offset per split (1.. adversarial, 10000001.. random, 20000001..
popular in LLaVA-1.5's file). LLaVA's own ``eval_pope.py`` pairs answers with a labels file by
position within each category; here each answer is paired with its labelled question by split
and image + normalised question text (the "imange" spelling and the short-answer instruction
do not matter), so answers made on another POPE version are refused, not mis-scored. Its
parse rule is POPE's, i.e. ``text:pope``.

Without a question file (:func:`read_llava_by_labels`): the answer lines that VCD and its
successors write, one split per file (``{"question_id", "prompt", "text", "model_id", "image",
"metadata"}``, ``prompt`` the labels' question text, maybe after ``<image>\n``), are paired with
the labels files alone: each line with the question of the same id whose normalised text (and
image, where the line names one) is the prompt's; the file's split is the labels file that
pairs with most of its lines, and a line that does not pair there is listed with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from halluprobe.benchmarks.versions import describe_versions, detect_versions, normalise_question
from halluprobe.errors import InputError
from halluprobe.imports.common import ImportResult, InputFiles, LabelIndex, as_int_id, labelled_answer
from halluprobe.jsonl import iter_objects
from halluprobe.records import Question

__all__ = ["ANSWER_KEYS", "QUESTION_KEYS", "LLAVA_MAX_NEW_TOKENS", "SPLIT_ID_OFFSET", "question_of_prompt", "read_llava", "read_llava_by_labels"]

ANSWER_KEYS = ("question_id", "prompt", "text", "answer_id", "model_id")
QUESTION_KEYS = ("question_id", "image", "text", "category")
# model_vqa_loader.py's default --max_new_tokens
LLAVA_MAX_NEW_TOKENS = 128
# LLaVA-1.5's llava_pope_test.jsonl numbers each split from these (export writes the same)
SPLIT_ID_OFFSET = {"adversarial": 0, "random": 10_000_000, "popular": 20_000_000}


def _read_question_file(path: Path, inputs: InputFiles) -> dict[int, dict[str, Any]]:
    text = inputs.text(path, "LLaVA question file")
    questions: dict[int, dict[str, Any]] = {}
    for line, obj in iter_objects(text, path):
        for key in QUESTION_KEYS:
            if not isinstance(obj.get(key), (str, int)) or isinstance(obj.get(key), bool):
                raise InputError(f"LLaVA question line needs {key!r} (keys: {', '.join(QUESTION_KEYS)})", path, line)
        qid = as_int_id(obj["question_id"], "question_id", path, line)
        if qid in questions:
            raise InputError(f"duplicate question_id {qid}", path, line)
        questions[qid] = {**obj, "line": line}
    if not questions:
        raise InputError("empty LLaVA question file", path)
    return questions


def read_llava(
    answer_files: list[Path], questions_path: Path, labels: LabelIndex, *, inputs: InputFiles | None = None
) -> ImportResult:
    """Pair every LLaVA answer with its labelled question (see the module docstring)."""
    inputs = inputs or InputFiles()
    questions = _read_question_file(questions_path, inputs)
    by_split: dict[str, list[tuple[str, str]]] = {}
    for q in questions.values():
        by_split.setdefault(str(q["category"]), []).append((str(q["image"]), str(q["text"])))
    fits = {split: detect_versions(split, pairs) for split, pairs in by_split.items()}
    label_versions = labels.versions()
    result = ImportResult(
        format="llava",
        answers=[],
        sources=[*answer_files, questions_path],
        inputs=inputs,
        labels=dict(labels.files),
        label_sha256=dict(labels.sha256),
        versions={"questions": fits, "labels": label_versions},
        max_new_tokens=LLAVA_MAX_NEW_TOKENS,
        notes=["LLaVA's eval_pope.py parses answers with POPE's rule: score with --readout text:pope"],
    )
    for path in answer_files:
        text = inputs.text(path, "LLaVA answers file")
        for line, obj in iter_objects(text, path):
            if not isinstance(obj.get("text"), str):
                raise InputError("LLaVA answer line needs a string 'text' (the answer)", path, line)
            qid = as_int_id(obj.get("question_id"), "question_id", path, line)
            question = questions.get(qid)
            if question is None:
                raise InputError(f"question_id {qid} is not in the question file {questions_path}", path, line)
            prompt = obj.get("prompt", question["text"])
            if not isinstance(prompt, str) or normalise_question(prompt) != normalise_question(str(question["text"])):
                raise InputError(
                    f"prompt differs from the question file's text for question_id {qid}: {prompt!r}", path, line
                )
            split = str(question["category"])
            if split not in labels.files:
                result.skipped.append({"source": f"{path}:{line}", "reason": f"no labels file for split {split!r} was given"})
                continue
            labelled = labels.by_text(split, str(question["image"]), str(question["text"]), qid)
            repeats = labels.repeats(split, str(question["image"]), str(question["text"]))
            if labelled is None and repeats:  # AMBER's repeated queries: the answer's id must be one of them
                raise InputError(
                    f"question_id {qid} asks what the {split} labels' questions {', '.join(str(q.question_id) for q in repeats)} "
                    f"ask (same image and text, {labels.files[split]}): its id is neither, so which it answers cannot be told; "
                    "use the labels' question ids in the question file",
                    path,
                    line,
                )
            if labelled is None:
                raise InputError(
                    f"question_id {qid} ({question['image']}, {question['text']!r}) is not among the {split} labels "
                    f"({labels.files[split]}, POPE version {', '.join(label_versions[split]) or 'unpublished'}); "
                    f"the question file fits {describe_versions(fits)}",
                    path,
                    line,
                )
            result.note_model(obj)
            result.answers.append(labelled_answer(labelled, prompt=prompt, text=obj["text"], source=f"{path}:{line}"))
    result.unanswered = labels.unanswered(result.answers)
    return result


_IMAGE_TOKEN = "<image>"


def question_of_prompt(prompt: str) -> str:
    """The question a prompt asks: without a leading ``<image>`` token (MARINE and LLaVA's
    ``<image>\n`` prefix); the short-answer suffix and spelling are left to normalise_question."""
    stripped = prompt.lstrip()
    return stripped[len(_IMAGE_TOKEN):].lstrip() if stripped.startswith(_IMAGE_TOKEN) else prompt


def _pairs(labelled: Question | None, prompt: str, image: str | None) -> bool:
    if labelled is None or normalise_question(question_of_prompt(prompt)) != normalise_question(labelled.text):
        return False
    return image is None or PurePosixPath(image).name == PurePosixPath(labelled.image).name


class _AnswerLine(NamedTuple):
    """One answer line of a file read without a question file."""

    line: int
    question_id: int
    prompt: str
    text: str
    image: str | None  # the line's image name, where it gives one
    obj: dict[str, Any]


_SPLIT_WORD = re.compile(r"(?:^|[^a-z])(random|popular|adversarial)(?:[^a-z]|$)")


def _split_of_file(path: Path, lines: list[_AnswerLine], labels: LabelIndex) -> str:
    """The one split every pairing line of the file pairs with. POPE's splits share their yes
    questions (same image, text and id), so a line may pair with several; a line pairing with
    one split only decides, and lines deciding for different splits are refused."""
    fits = [(line, [s for s in labels.splits if _pairs(labels.by_id(s, qid), prompt, image)]) for line, qid, prompt, _, image, _ in lines]
    common = [s for s in labels.splits if all(s in f for _, f in fits if f)]
    first = lines[0][0] if lines else None
    if not any(f for _, f in fits):
        raise InputError(
            f"no answer pairs with the labels ({', '.join(labels.splits)}) by question_id and question text: "
            "give the labels file of this file's split and POPE version",
            path,
            first,
        )
    if not common:
        only = {f[0]: line for line, f in fits if len(f) == 1}
        raise InputError(f"answers of several splits in one file ({', '.join(f'{s} at line {n}' for s, n in only.items())}): one split per file", path)
    if len(common) > 1:
        raise InputError(f"every answer pairs with the {' and '.join(common)} labels alike: give only this file's split", path)
    named = _SPLIT_WORD.findall(path.name.lower())
    if len(set(named)) == 1 and named[0] != common[0]:
        raise InputError(f"the file is named for the {named[0]} split but its answers pair with the {common[0]} labels: give the {named[0]} labels", path)
    return common[0]


def read_llava_by_labels(answer_files: list[Path], labels: LabelIndex, *, inputs: InputFiles | None = None) -> ImportResult:
    """LLaVA-style answer lines, one split per file, paired with the labels alone (see the
    module docstring)."""
    inputs = inputs or InputFiles()
    result = ImportResult(
        format="llava",
        answers=[],
        sources=list(answer_files),
        inputs=inputs,
        **labels.recorded(),
        max_new_tokens=LLAVA_MAX_NEW_TOKENS,
        notes=[
            (
                "paired with the labels alone (no LLaVA question file): by question_id and question text; "
                "VCD's eval_pope.py scores such files with text:vcd, LLaVA's with text:pope"
            )
        ],
    )
    for path in answer_files:
        text = inputs.text(path, "LLaVA-style answers file")
        lines: list[_AnswerLine] = []
        for line, obj in iter_objects(text, path):
            if not isinstance(obj.get("text"), str):
                raise InputError("LLaVA answer line needs a string 'text' (the answer)", path, line)
            if not isinstance(obj.get("prompt"), str):
                raise InputError("without --questions, each answer line needs its question as a string 'prompt'", path, line)
            image = obj.get("image", obj.get("image_id"))
            qid = as_int_id(obj.get("question_id"), "question_id", path, line)
            lines.append(_AnswerLine(line, qid, obj["prompt"], obj["text"], image if isinstance(image, str) else None, obj))
        pooled = next((a for a in lines if a.question_id >= SPLIT_ID_OFFSET["random"]), None)
        if pooled is not None:  # LLaVA's offsets: three splits in one file, paired only through its question file
            raise InputError(
                f"question_id {pooled.question_id} is LLaVA's pooled numbering (three splits in one file, ids offset by "
                "10,000,000): --questions is missing (LLaVA's llava_pope_test.jsonl, whose 'category' names each split)",
                path, pooled.line,
            )  # fmt: skip
        split = _split_of_file(path, lines, labels)
        for line, qid, prompt, answer, image, obj in lines:
            labelled = labels.by_id(split, qid)
            if labelled is None or not _pairs(labelled, prompt, image):
                why = "has no question" if labelled is None else f"is {labelled.image}, {labelled.text!r}, not this line's question"
                result.skipped.append({"source": f"{path}:{line}", "reason": f"pairs with no labels file: {split} question_id {qid} {why}"})
                continue
            result.note_model(obj)
            result.answers.append(labelled_answer(labelled, prompt=prompt, text=answer, source=f"{path}:{line}"))
    result.unanswered = labels.unanswered(result.answers)
    return result
