"""Evaluation of AttriBait multiple-choice questions, and the existence/AttriBait consistency table.

Two readouts per question, from one generation:

- ``logit``: the first token's log-probabilities over the option letters A-D. A letter's score
  is the logsumexp over the ids whose single-token text is that letter
  (:func:`halluprobe.readouts.tokensets.derive_letter_sets`, the same vocabulary walk and edge
  stripping as the yes/no sets, case-sensitive), read from the response's top-k first-token
  alternatives: a letter none of whose ids is in the top-k has no score (``None``). For a
  backend that reports pieces instead of ids, each returned piece is classified by
  :func:`~halluprobe.readouts.tokensets.classify_letter`. The decision is the best-scoring
  letter; none scored -> unknown.
- ``text``: :func:`parse_choice` of the greedy continuation: a leading option letter ("D",
  "D.", "(D)", "Answer: D"); else an answer that denies the object ("there is no ...", "no
  {object}", "not in the image") is D, unless it also names option A, B or C (ambiguous:
  unknown); else the one option whose text occurs in the answer as whole words (case folded:
  "blurred" does not name "Red"); none or several -> unknown.

Both readouts make a tie unknown (:func:`halluprobe.readouts.logits.top_choice`, the rule of
the yes/no readouts), never the earliest letter.

The right answer of every AttriBait question is D (the object is not in the image); choosing A
or B means the model answered an attribute of an object it should not see.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from halluprobe.ask import ask
from halluprobe.backends.base import Backend
from halluprobe.benchmarks.autoprobe.questions import LETTERS, ChoiceQuestion, Letter, read_choice_questions
from halluprobe.errors import InputError
from halluprobe.files import resolve_image, write_atomic
from halluprobe.readouts.apply import apply, apply_run
from halluprobe.readouts.logits import logsumexp, top_choice
from halluprobe.readouts.tokensets import classify_letter
from halluprobe.readouts.value import Readout
from halluprobe.records import SCHEMA_VERSION, FrozenRecord, GenerateConfig, Request, RunHeader, Sample, TokenLogprob
from halluprobe.rundir import RunDir

__all__ = [
    "ChoiceSample",
    "letter_scores",
    "logit_choice",
    "parse_choice",
    "evaluate_choices",
    "run_choice",
    "choice_metrics",
    "consistency_table",
]

# "D", "D.", "(D)", "D) ...", "Answer: D", "The answer is D." (a bare "A " is the article)
_LEADING_LETTER = re.compile(r"^\s*(?:the\s+)?(?:answer|option)?\s*(?:is)?\s*[:\-]?\s*\(?([ABCD])(?:[.):,]|\s*$)", re.IGNORECASE)
# an answer that denies the object exists (matched on case-folded text; "no {object}" is added per question)
_DENIAL = (
    r"\bthere\s+(?:is|are|'s|’s)\s+no\b|\bthere\s+(?:is|are)\s+not\b|\bthere\s+(?:isn't|aren't|isn’t|aren’t)\b"
    r"|\bno\s+such\b|\bnot\s+(?:visible|present|shown|in\s+the\s+(?:image|picture|photo))\b"
)


class ChoiceSample(FrozenRecord):
    schema_version: int = SCHEMA_VERSION
    question_id: int
    image: str
    object: str
    label: Letter
    prompt: str
    first_token: list[TokenLogprob] = Field(default_factory=list)  # top-k: letter scores recomputable offline
    letter_scores: dict[str, float | None] = Field(default_factory=dict)
    decisions: dict[str, Letter | None] = Field(default_factory=dict)  # readout -> letter (None: unknown)
    text: str | None = None
    latency_s: float | None = None
    error: str | None = None


def letter_scores(first_token: Sequence[TokenLogprob], letter_ids: dict[str, list[int]] | None) -> dict[str, float | None]:
    """Letter -> logsumexp of its ids' log-probabilities among ``first_token`` (None: absent).

    ``letter_ids`` None: classify each returned piece instead (backends without ids).
    """
    found: dict[str, list[float]] = {letter: [] for letter in LETTERS}
    id_to_letter = {i: letter for letter, ids in (letter_ids or {}).items() for i in ids}
    for token in first_token:
        if letter_ids is None:
            letter = classify_letter(token.piece, LETTERS)
        else:
            letter = id_to_letter.get(token.id) if token.id is not None else None
        if letter is not None:
            found[letter].append(token.logprob)
    return {letter: (logsumexp(values) if values else None) for letter, values in found.items()}


def logit_choice(scores: dict[str, float | None]) -> Letter | None:
    """The best-scoring letter; none scored or an exact tie at the top -> None (unknown)."""
    return top_choice({letter: value for letter, value in scores.items() if value is not None})  # type: ignore[return-value]


def _phrase(phrase: str) -> str:
    """A regex for ``phrase`` case folded, final '.' dropped, any whitespace between its words."""
    return r"\s+".join(re.escape(word) for word in phrase.casefold().rstrip(".").split())


def _says(phrase: str, lowered: str) -> bool:
    """Whether the case-folded answer holds ``phrase`` as whole words ("blurred" does not say "red")."""
    return bool(phrase.strip()) and re.search(rf"(?<!\w){_phrase(phrase)}(?!\w)", lowered) is not None


def parse_choice(text: str | None, options: dict[Letter, str], obj: str | None = None) -> Letter | None:
    """The option a free-text answer picks (see the module docstring); None: unknown.

    ``obj`` is the object asked about (:attr:`ChoiceQuestion.object`); without it "no {object}"
    is not recognised, the other denials and option D's own text are.
    """
    if not text or not text.strip():
        return None
    match = _LEADING_LETTER.match(text)
    if match and (match.group(1).isupper() or text.strip()[:1] == "("):
        return match.group(1).upper()  # type: ignore[return-value]
    lowered = text.casefold()
    denial = _DENIAL
    if obj:  # "no umbrella", "no red umbrella", "no umbrellas"
        denial += rf"|\bno\s+(?:\w+\s+){{0,2}}?{_phrase(obj)}(?:e?s)?(?!\w)"
    denied = re.search(denial, lowered) is not None or _says(options.get("D", ""), lowered)
    hits = [letter for letter, option in options.items() if letter != "D" and _says(option, lowered)]
    if denied:
        return "D" if not hits else None  # "there is no red umbrella": not A, but B, C or D?
    return hits[0] if len(hits) == 1 else None


def evaluate_choices(
    backend: Backend,
    questions: Sequence[ChoiceQuestion],
    images: Path,
    *,
    letter_ids: dict[str, list[int]] | None,
    template: str | None = None,
    top_k: int = 50,
    max_new_tokens: int = 16,
    source: str | Path | None = None,
) -> list[ChoiceSample]:
    """Ask every question once (greedy, first-token top-k kept); both readouts per sample.

    An image path that leaves ``images`` (``../x.png``) is refused (``source``: the questions file)."""
    requests = [
        Request(
            split=q.split,
            question_id=q.question_id,
            image_path=str(resolve_image(q.image, images, source=source)),
            prompt=backend.render_prompt(q.text, template),
        )
        for q in questions
    ]
    by_id = {q.question_id: q for q in questions}
    prompts = {r.question_id: r.prompt for r in requests}
    samples: list[ChoiceSample] = []
    for batch in ask(backend, requests, GenerateConfig(max_new_tokens=max_new_tokens, top_k=top_k)):
        for response in batch:
            q = by_id[response.question_id]
            scores = letter_scores(response.first_token, letter_ids) if response.error is None else {}
            decisions: dict[str, Letter | None] = {}
            if response.error is None:
                decisions = {"logit": logit_choice(scores), "text": parse_choice(response.text, q.options, q.object)}
            samples.append(
                ChoiceSample(question_id=q.question_id, image=q.image, object=q.object, label=q.label,
                             prompt=prompts[q.question_id], first_token=response.first_token, letter_scores=scores,
                             decisions=decisions, text=response.text, latency_s=response.latency_s,
                             error=response.error)  # fmt: skip
            )
    return sorted(samples, key=lambda s: s.question_id)


def choice_metrics(samples: Sequence[ChoiceSample]) -> dict[str, dict[str, Any]]:
    """Per readout: n, errors, unknown, correct, accuracy, and how often each letter was chosen.

    ``attribute_rate`` = share of answered-or-not questions where the model picked A or B: it
    described an attribute of an object that is not there. Errors count in n and are never correct.
    """
    out: dict[str, dict[str, Any]] = {}
    for readout in ("logit", "text"):
        chosen = {letter: 0 for letter in LETTERS}
        unknown = errors = correct = 0
        for s in samples:
            if s.error is not None:
                errors += 1
                continue
            decision = s.decisions.get(readout)
            if decision is None:
                unknown += 1
                continue
            chosen[decision] += 1
            correct += decision == s.label
        n = len(samples)
        out[readout] = {
            "n": n, "errors": errors, "unknown": unknown, "correct": correct, "chosen": chosen,
            "accuracy": correct / n if n else None,
            "attribute_rate": (chosen["A"] + chosen["B"]) / n if n else None,
        }  # fmt: skip
    return out


def consistency_table(
    existence: Sequence[Sample],
    choices: Sequence[ChoiceSample],
    *,
    header: RunHeader | None = None,
    existence_readout: str = "dynamic",
    choice_readout: str = "logit",
) -> dict[str, Any]:
    """For each hallucinated object asked both ways: existence answer (yes/no/unknown) x AttriBait
    answer (D = "not there", attribute = A or B, other = C, unknown).

    An object answered "no" to existence but given an attribute in AttriBait is inconsistent:
    the bait worked where the plain question did not. The existence readout is applied to the
    stored samples of the whole run (``header``: the existence run's run.json; None: only the
    decisions the samples store, or their text, can be read).
    """
    readout = Readout.parse(existence_readout)
    if header is not None:
        results = apply_run(readout, header, existence)
    else:
        results = [apply(readout, s, None) for s in existence]
    existence_by_object: dict[tuple[str, str], str] = {}
    for s, result in zip(existence, results):
        if s.label != "no" or s.object is None:
            continue
        existence_by_object[(s.image, s.object)] = "error" if s.error else (result.decision if result else "unknown")
    rows = ("yes", "no", "unknown", "error")
    cols = ("D", "attribute", "other", "unknown", "error")
    table = {r: {c: 0 for c in cols} for r in rows}
    pairs = 0
    for c in choices:
        row = existence_by_object.get((c.image, c.object))
        if row is None:
            continue
        pairs += 1
        decision = c.decisions.get(choice_readout)
        col = "error" if c.error else "unknown" if decision is None else "D" if decision == "D" else "other" if decision == "C" else "attribute"
        table[row][col] += 1
    return {
        "existence_readout": existence_readout,
        "choice_readout": choice_readout,
        "pairs": pairs,
        "table": table,
        "inconsistent": table["no"]["attribute"] + table["no"]["other"],
    }


def run_choice(
    load: Callable[[], tuple[Backend, dict[str, list[int]] | None]],
    questions_path: Path,
    images: Path,
    out: Path,
    *,
    template: str | None = None,
    top_k: int = 50,
    existence_run: Path | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """``halluprobe probe choice``: answer an AttriBait file, write the answered lines to ``out``
    (atomic; refused if it exists unless ``overwrite``), and return the metrics, the letter ids
    and, with ``existence_run``, the consistency table against that run's existence answers.

    ``load`` gives the backend and its letter ids (None: letters are read from pieces); it is
    called after every input has been checked, so bad input never waits for a model to load."""

    questions = read_choice_questions(questions_path)
    if not images.is_dir():
        raise InputError("images root is not a directory", images)
    if out.exists() and not overwrite:
        raise InputError("exists; pass --overwrite to replace it", out)
    existence = RunDir(existence_run) if existence_run is not None else None
    existence_samples = existence.read_samples() if existence is not None else None
    backend, letter_ids = load()
    samples = evaluate_choices(backend, questions, images, letter_ids=letter_ids, template=template, top_k=top_k, source=questions_path)
    write_atomic(out, "".join(s.model_dump_json() + "\n" for s in samples))
    result: dict[str, Any] = {"metrics": choice_metrics(samples), "letter_ids": letter_ids}
    if existence is not None and existence_samples is not None:
        result["consistency"] = consistency_table(existence_samples, samples, header=existence.read_header())
    return result
