"""Questions from detector verdicts: existence (POPE line format) and AttriBait (multiple choice).

- Existence: "Is there a/an {object} in the image?" with label yes for a present object and no
  for a hallucinated one, written by :func:`halluprobe.benchmarks.pope.write_questions` so
  ``halluprobe run / score / audit / report`` read it unchanged (split ``existence``). The
  detector score is kept on the line as ``detector_score``.
- AttriBait: for each hallucinated object, a language model writes an attribute question and
  two attribute answers (validated JSON, bounded retries); the question gets the options
  ``A`` and ``B`` (the model's), ``C. Others``, ``D. There is no {object} in the image``, and
  label ``D``. One JSON object per line (:class:`ChoiceQuestion`); :func:`read_choice_questions`
  reads it back with one-line errors.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from halluprobe.backends.base import Backend
from halluprobe.benchmarks.autoprobe.detector import Verdict
from halluprobe.benchmarks.autoprobe.generation import GenerationItem, generate_json, parse_json_object
from halluprobe.benchmarks.pope import DEFAULT_TEMPLATE, question_text
from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.jsonl import iter_objects, read_text
from halluprobe.records import SCHEMA_VERSION, FrozenRecord, Question

__all__ = [
    "EXISTENCE_SPLIT",
    "ATTRIBAIT_SPLIT",
    "ATTRIBAIT_PROMPT",
    "CHOICE_INSTRUCTION",
    "Letter",
    "LETTERS",
    "AttriBaitDraft",
    "ChoiceQuestion",
    "existence_questions",
    "parse_attribait",
    "attribait_question",
    "generate_attribait",
    "write_choice_questions",
    "read_choice_questions",
]

logger = logging.getLogger(__name__)

EXISTENCE_SPLIT = "existence"
ATTRIBAIT_SPLIT = "attribait"
Letter = Literal["A", "B", "C", "D"]
LETTERS: tuple[Letter, ...] = ("A", "B", "C", "D")
ATTRIBAIT_PROMPT = (
    "Write one question about an attribute (colour, material, shape, size, position or state) of "
    "the {object} in this image, and two different short plausible answers. Answer with a JSON "
    'object only, of the form {{"question": "...", "options": ["...", "..."]}}.'
)
CHOICE_INSTRUCTION = "Answer with the option's letter from the given choices directly."
_RESERVED_OPTIONS = ("other", "others", "none", "there is no")


class AttriBaitDraft(FrozenRecord):
    question: str
    options: tuple[str, str]


class ChoiceQuestion(FrozenRecord):
    """One multiple-choice line (AttriBait)."""

    schema_version: int = SCHEMA_VERSION
    split: str = ATTRIBAIT_SPLIT
    question_id: int
    image: str
    object: str
    question: str  # the attribute question alone
    options: dict[Letter, str]
    text: str  # question, options and instruction: what the model is asked
    label: Letter
    metadata: dict[str, Any] = Field(default_factory=dict)


def existence_questions(verdicts: Sequence[tuple[str, Verdict]], *, template: str = DEFAULT_TEMPLATE) -> list[Question]:
    """(image, verdict) pairs -> yes questions for present objects, no for hallucinated ones.

    Uncertain verdicts give no question. Ids count from 0 in the given order.
    """
    out: list[Question] = []
    for image, verdict in verdicts:
        if verdict.fate == "uncertain":
            continue
        out.append(
            Question(
                split=EXISTENCE_SPLIT,
                question_id=len(out),
                image=image,
                text=question_text(template, verdict.object),
                label="yes" if verdict.fate == "present" else "no",
                object=verdict.object,
                metadata={"detector_score": round(verdict.score, 6)},
            )
        )
    return out


def parse_attribait(text: str) -> AttriBaitDraft:
    """Validate a model's AttriBait answer; ValueError with the reason otherwise."""
    value = parse_json_object(text)
    question, options = value.get("question"), value.get("options")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the JSON object has no non-empty 'question' string")
    if not isinstance(options, list) or len(options) != 2 or not all(isinstance(o, str) and o.strip() for o in options):
        raise ValueError("'options' must be a list of exactly two non-empty strings")
    first, second = (o.strip() for o in options)
    if first.casefold() == second.casefold():
        raise ValueError("the two options are the same")
    for option in (first, second):
        if option.casefold().rstrip(".").startswith(_RESERVED_OPTIONS):
            raise ValueError(f"option {option!r} duplicates the fixed options C/D")
    return AttriBaitDraft(question=question.strip(), options=(first, second))


def attribait_question(question_id: int, image: str, obj: str, draft: AttriBaitDraft) -> ChoiceQuestion:
    """The multiple-choice question: the draft's two options, then C. Others, D. no such object."""
    options: dict[Letter, str] = {
        "A": draft.options[0],
        "B": draft.options[1],
        "C": "Others",
        "D": f"There is no {obj} in the image",
    }
    text = "\n".join([draft.question, *(f"{letter}. {option}" for letter, option in options.items()), CHOICE_INSTRUCTION])
    return ChoiceQuestion(question_id=question_id, image=image, object=obj, question=draft.question, options=options, text=text, label="D")


def generate_attribait(
    backend: Backend,
    targets: Sequence[tuple[str, str, str]],
    *,
    max_new_tokens: int = 128,
    max_retries: int = 2,
    template: str | None = None,
) -> tuple[list[ChoiceQuestion], dict[str, dict[str, Any]]]:
    """AttriBait questions for (image name, image path, object) triples, and the generation records.

    The record per ``"image#object"`` key holds the attempts, raw answers, last rendered prompt
    and the error when no answer was valid (that object then has no AttriBait question).
    """
    items = [GenerationItem(f"{image}#{obj}", path, ATTRIBAIT_PROMPT.format(object=obj)) for image, path, obj in targets]
    results = generate_json(backend, items, parse_attribait, max_new_tokens=max_new_tokens, max_retries=max_retries, template=template)
    questions: list[ChoiceQuestion] = []
    records: dict[str, dict[str, Any]] = {}
    for (image, _, obj), result in zip(targets, results):
        records[result.key] = {"attempts": result.attempts, "raw": result.raw, "error": result.error, "prompt": result.prompt}
        if result.value is not None:
            questions.append(attribait_question(len(questions), image, obj, result.value))
    return questions, records


def write_choice_questions(path: str | Path, questions: Sequence[ChoiceQuestion]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(p, "".join(q.model_dump_json() + "\n" for q in questions))


def read_choice_questions(path: str | Path) -> list[ChoiceQuestion]:
    """Read a multiple-choice file; a bad line is one InputError naming file:line."""
    p = Path(path)
    _, text = read_text(p, "multiple-choice questions file")
    out: list[ChoiceQuestion] = []
    seen: dict[int, int] = {}
    for lineno, rec in iter_objects(text, p):
        try:
            question = ChoiceQuestion.model_validate(rec)
        except ValidationError as err:
            first = err.errors()[0]
            raise InputError(f"{'.'.join(str(x) for x in first['loc'])}: {first['msg']}", p, lineno) from None
        if question.label not in question.options:
            raise InputError(f"label {question.label!r} is not one of the options", p, lineno)
        if question.question_id in seen:
            raise InputError(f"duplicate question_id {question.question_id} (first on line {seen[question.question_id]})", p, lineno)
        seen[question.question_id] = lineno
        out.append(question)
    if not out:
        raise InputError("empty file: no questions", p)
    return out
