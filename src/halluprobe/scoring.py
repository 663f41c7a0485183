"""Scoring entry points: a run dir, or a third-party answers file, -> ScoreReport.

Both reduce to rows of (split, image, label, decision, p_yes, error) and the one metric code
path in ``halluprobe.metrics.score``: nothing here computes a metric itself.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError
from halluprobe.jsonl import iter_objects, read_text
from halluprobe.metrics.binary import UnknownPolicy
from halluprobe.metrics.score import ScoreRow, score_rows
from halluprobe.readouts.logits import LEGACY_READOUTS
from halluprobe.readouts.text import TEXT_RULES, parse_text
from halluprobe.records import ScoreReport
from halluprobe.rundir import RunDir

__all__ = ["score_rundir", "score_answers_file", "read_answers"]

log = logging.getLogger(__name__)


def score_rundir(
    path: str | Path,
    *,
    readout: str = "dynamic",
    policy: UnknownPolicy = "wrong",
    force_invalid: bool = False,
    n_resamples: int = 1000,
    seed: int = 0,
    write: bool = True,
) -> ScoreReport:
    """Recompute metrics from what ``run`` stored; writes ``RUNDIR/metrics.json``."""
    rundir = RunDir(path)
    header = rundir.read_yes_no_header()
    if readout not in header.readouts:
        raise InputError(f"readout {readout!r} is not in this run; it has: {', '.join(header.readouts)}", rundir.header_path)
    sets = header.token_sets
    if readout in LEGACY_READOUTS and sets is not None and not sets.legacy_valid and not force_invalid:
        raise InputError(
            f"readout {readout} reads LLaMA-2 ids that are not yes/no in this model's vocabulary "
            "(see `halluprobe tokens`); pass --force-invalid to see what it would score",
            rundir.header_path,
        )
    samples = rundir.read_samples()
    if not samples:
        raise InputError("the run has no samples yet", rundir.samples_path)
    if not rundir.complete_path.exists():
        log.warning("%s is not complete: scoring the %d samples present", rundir.path, len(samples))
    rows = [
        ScoreRow(
            split=s.split,
            question_id=s.question_id,
            image=s.image,
            label=s.label,
            decision=s.readouts[readout].decision if readout in s.readouts else "unknown",
            p_yes=s.readouts[readout].p_yes if readout in s.readouts else None,
            error=s.error is not None,
        )
        for s in samples
    ]
    report = score_rows(rows, readout=readout, policy=policy, n_resamples=n_resamples, seed=seed)
    if write:
        rundir.write_metrics(report)
    return report


def read_answers(path: Path) -> list[dict[str, Any]]:
    """Answer lines: ``{"question", "answer"}``, optionally with ``question_id``.

    LLaVA's answer files (``question_id``, ``prompt``, ``text`` = the answer) are read too.
    """
    rows: list[dict[str, Any]] = []
    _, text = read_text(path, "answers file")
    for number, obj in iter_objects(text, path):
        answer = obj.get("answer", obj.get("text") if "question_id" in obj else None)
        if not isinstance(answer, str):
            raise InputError("missing string key 'answer'", path, number)
        qid = obj.get("question_id")
        if qid is not None and not isinstance(qid, int):
            raise InputError("question_id must be an integer", path, number)
        question = obj.get("question", obj.get("prompt"))
        rows.append({"line": number, "question_id": qid, "question": question, "answer": answer})
    if not rows:
        raise InputError("empty answers file", path)
    return rows


def score_answers_file(
    answers_path: str | Path,
    labels_path: str | Path,
    *,
    rule: str = "pope",
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
) -> ScoreReport:
    """Score a third-party answers file against POPE-format labels with one text rule.

    Paired by ``question_id`` when every answer has one, else by order after checking that the
    question texts match.
    """
    from halluprobe.benchmarks.pope import read_questions, refuse_open_questions, split_name

    if rule not in TEXT_RULES:
        raise InputError(f"unknown text rule {rule!r}; known: {', '.join(TEXT_RULES)}")
    answers_path, labels_path = Path(answers_path), Path(labels_path)
    labels = read_questions(labels_path, split=split_name(labels_path))
    refuse_open_questions(labels, labels_path)
    answers = read_answers(answers_path)
    by_id = {q.question_id: q for q in labels}
    pairs = []
    if all(a["question_id"] is not None for a in answers):
        seen: set[int] = set()
        for a in answers:
            q = by_id.get(a["question_id"])
            if q is None:
                raise InputError(f"question_id {a['question_id']} is not in {labels_path}", answers_path, a["line"])
            if a["question_id"] in seen:
                raise InputError(f"duplicate question_id {a['question_id']}", answers_path, a["line"])
            seen.add(a["question_id"])
            pairs.append((q, a))
        missing = len(labels) - len(seen)
        if missing:
            raise InputError(f"{missing} labelled questions have no answer", answers_path)
    else:
        if len(answers) != len(labels):
            raise InputError(f"{len(answers)} answers for {len(labels)} labelled questions", answers_path)
        for q, a in zip(labels, answers):
            if a["question"] is not None and a["question"].strip() != q.text.strip():
                raise InputError(
                    f"question text differs from the labels file's line for question_id {q.question_id}: {a['question']!r}",
                    answers_path,
                    a["line"],
                )
            pairs.append((q, a))
    rows = [
        ScoreRow(
            split=q.split,
            question_id=q.question_id,
            image=q.image,
            label=q.label,
            decision=parse_text(rule, a["answer"]),
            p_yes=None,
            error=False,
        )
        for q, a in pairs
    ]
    return score_rows(rows, readout=f"text:{rule}", policy=policy, n_resamples=n_resamples, seed=seed)
