"""The generic answers format (``{"question", "answer"}`` lines, ``question_id`` optional) and
the original POPE ``evaluate.py`` answers file (``{"question", "answer"}`` lines, paired with a
labels file by order), paired with one or more POPE labels files (one per split).

Pairing, never silent:

- every line has a ``question_id`` (an integer; ``true`` or ``"3"`` is refused) or none has
  (mixed files are refused: an id on some lines would otherwise be ignored);
- with ids: each answer is paired with the labelled question of that id *and*, whenever the
  line has its question text, the text must be that question's (normalised: case, spacing,
  "imange"); with several splits, a line's ``split`` key (or the one split whose question of
  that id has that text) names the split; an answer that fits no split, or several, is refused;
- without ids: by order, the labels files concatenated in the order given, text checked;
- a duplicated answer, or a labelled question without an answer, is refused.

On a question mismatch the message names the POPE version the answers' questions fit, told
from their count and "imange" spelling per split (no image names in these files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from halluprobe.benchmarks.sources import POPE_VERSIONS
from halluprobe.benchmarks.versions import normalise_question
from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles, LabelIndex, as_int_id
from halluprobe.jsonl import iter_objects
from halluprobe.records import Question

__all__ = ["read_answers", "pair_answers", "read_answers_format", "versions_by_counts"]


def read_answers(path: Path, inputs: InputFiles | None = None) -> list[dict[str, Any]]:
    """Answer lines: ``{"question", "answer"}``, optionally ``question_id`` and ``split``.

    LLaVA's answer files (``question_id``, ``prompt``, ``text`` = the answer) are read too.
    """
    rows: list[dict[str, Any]] = []
    text = (inputs or InputFiles()).text(path, "answers file")
    for number, obj in iter_objects(text, path):
        if "prediction" in obj and ({"index", "category"} & set(obj)):
            # a VLMEvalKit sheet: its 'answer' is the label, so reading it as the answer scores the labels
            raise InputError("this is a VLMEvalKit sheet (index/category/prediction): its 'answer' is the label; import it as vlmevalkit", path, number)
        answer = obj.get("answer", obj.get("text") if "question_id" in obj else None)
        if not isinstance(answer, str):
            raise InputError("missing string key 'answer'", path, number)
        qid = obj.get("question_id")
        if qid is not None:
            qid = as_int_id(qid, "question_id", path, number)
        question = obj.get("question", obj.get("prompt"))
        if question is not None and not isinstance(question, str):
            raise InputError("'question' must be a string", path, number)
        split = obj.get("split")
        if split is not None and not isinstance(split, str):
            raise InputError("'split' must be a string", path, number)
        rows.append({"path": path, "line": number, "question_id": qid, "question": question, "answer": answer, "split": split})
    if not rows:
        raise InputError("empty answers file", path)
    with_id = sum(r["question_id"] is not None for r in rows)
    if 0 < with_id < len(rows):
        first = next(r for r in rows if r["question_id"] is None)
        raise InputError(
            f"only {with_id} of {len(rows)} lines have a question_id: give every line one, or none (then they pair by order)",
            path,
            first["line"],
        )
    return rows


def versions_by_counts(split: str, texts: list[str]) -> list[str]:
    """Published versions whose ``split`` has as many questions, as many spelled "imange"."""

    misspelled = sum("imange" in t for t in texts)
    return [n for n, v in POPE_VERSIONS.items() if v.counts.get(split) == len(texts) and v.misspelled.get(split) == misspelled]


def _mismatch(answer: dict[str, Any], what: str, labels: LabelIndex, answers: list[dict[str, Any]]) -> InputError:
    texts = [a["question"] for a in answers if a["question"] is not None]
    fits = {s: versions_by_counts(s, texts) for s in labels.splits}
    fit = "; ".join(f"{s}: {', '.join(v)}" for s, v in fits.items() if v) or "no published version (by count and spelling)"
    versions = "; ".join(f"{s}: {', '.join(v) or 'unpublished'}" for s, v in labels.versions().items())
    return InputError(f"{what} (labels are POPE version {versions}; the answers fit {fit})", answer["path"], answer["line"])


def _same_text(answer: dict[str, Any], q: Question) -> bool:
    return answer["question"] is None or normalise_question(answer["question"]) == normalise_question(q.text)


def pair_answers(answers: list[dict[str, Any]], labels: LabelIndex, *, by_order: bool = False) -> list[tuple[Question, dict[str, Any]]]:
    """Each answer with its labelled question (see the module docstring); every label answered."""
    pairs: list[tuple[Question, dict[str, Any]]] = []
    if by_order or answers[0]["question_id"] is None:
        ordered = [q for split in labels.splits for q in labels.questions[split]]
        if len(answers) != len(ordered):
            raise InputError(f"{len(answers)} answers for {len(ordered)} labelled questions (paired by order)", answers[0]["path"])
        for q, a in zip(ordered, answers):
            if not _same_text(a, q):
                what = f"question text differs from the {q.split} labels' question {q.question_id}: {a['question']!r}"
                raise _mismatch(a, what, labels, answers)
            pairs.append((q, a))
        return pairs
    seen: dict[tuple[str, int], int] = {}
    for a in answers:
        if a["split"] is not None:
            if a["split"] not in labels.files:
                raise InputError(f"split {a['split']!r} has no labels file (given: {', '.join(labels.splits)})", a["path"], a["line"])
            candidates = [a["split"]]
        else:
            candidates = labels.splits
        found = [q for q in (labels.by_id(s, a["question_id"]) for s in candidates) if q is not None and _same_text(a, q)]
        if not found:
            raise _mismatch(a, f"question_id {a['question_id']} with this question text is in no labels file", labels, answers)
        if len(found) > 1:
            raise InputError(
                f"question_id {a['question_id']} fits the splits {', '.join(q.split for q in found)}: "
                "add a 'split' key to each line, or score one split at a time",
                a["path"],
                a["line"],
            )
        q = found[0]
        if q.key in seen:
            raise InputError(f"duplicate answer to {q.split} question {q.question_id} (first on line {seen[q.key]})", a["path"], a["line"])
        seen[q.key] = a["line"]
        pairs.append((q, a))
    missing = sum(len(qs) for qs in labels.questions.values()) - len(seen)
    if missing:
        raise InputError(f"{missing} labelled questions have no answer", answers[0]["path"])
    return pairs


def read_answers_format(files: list[Path], labels: LabelIndex, fmt: str, *, inputs: InputFiles | None = None) -> ImportResult:
    """``answers`` or ``pope`` (paired by order) files as an import."""
    inputs = inputs or InputFiles()
    answers = [a for path in files for a in read_answers(path, inputs)]
    pairs = pair_answers(answers, labels, by_order=fmt == "pope")
    return ImportResult(
        format=fmt,
        answers=[
            Imported(
                split=q.split,
                question_id=q.question_id,
                image=q.image,
                prompt=a["question"] if a["question"] is not None else q.text,
                text=a["answer"],
                label=q.label,
                object=q.object,
                source=f"{a['path']}:{a['line']}",
            )
            for q, a in pairs
        ],
        sources=list(files),
        inputs=inputs,
        **labels.recorded(),
        notes=["POPE's evaluate.py parses answers with --readout text:pope"] if fmt == "pope" else [],
    )
