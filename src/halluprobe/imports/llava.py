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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from halluprobe.benchmarks.versions import describe_versions, detect_versions, normalise_question
from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles, LabelIndex, as_int_id
from halluprobe.jsonl import iter_objects

__all__ = ["ANSWER_KEYS", "QUESTION_KEYS", "LLAVA_MAX_NEW_TOKENS", "SPLIT_ID_OFFSET", "read_llava"]

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
            labelled = labels.by_text(split, str(question["image"]), str(question["text"]))
            if labelled is None:
                raise InputError(
                    f"question_id {qid} ({question['image']}, {question['text']!r}) is not among the {split} labels "
                    f"({labels.files[split]}, POPE version {', '.join(label_versions[split]) or 'unpublished'}); "
                    f"the question file fits {describe_versions(fits)}",
                    path,
                    line,
                )
            if result.model == "unknown" and isinstance(obj.get("model_id"), str):
                result.model = obj["model_id"]
            result.answers.append(
                Imported(
                    split=split,
                    question_id=labelled.question_id,
                    image=labelled.image,
                    prompt=prompt,
                    text=obj["text"],
                    label=labelled.label,
                    object=labelled.object,
                    source=f"{path}:{line}",
                )
            )
    result.unanswered = labels.unanswered(result.answers)
    return result
