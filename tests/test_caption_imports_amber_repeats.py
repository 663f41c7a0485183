"""AMBER's own question files repeat 10 questions (one image and text under two ids). Answers
imported against them pair each answer with its own id; where an answer's id is neither repeat's,
the message names the repeats. Never refused outright."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.rundir import RunDir

runner = CliRunner()
QUESTIONS = [  # `amber questions` writes these (question_id, image, text, label); 3 and 4 are one question
    {"question_id": 1, "image": "AMBER_1.jpg", "text": "Is there a dog in this image?", "label": "yes"},
    {"question_id": 3, "image": "AMBER_3.jpg", "text": "Is there a car in this image?", "label": "no"},
    {"question_id": 4, "image": "AMBER_3.jpg", "text": "Is there a car in this image?", "label": "no"},
]


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_answers_to_repeated_questions_pair_by_their_own_id(tmp_path: Path) -> None:
    labels = _lines(tmp_path / "amber_existence.jsonl", QUESTIONS)
    answers = _lines(tmp_path / "answers.jsonl", [{"question_id": q["question_id"], "question": q["text"], "answer": a}
                                                  for q, a in zip(QUESTIONS, ("yes", "no", "yes"))])  # fmt: skip
    result = runner.invoke(app, ["import", "pope", str(answers), "--labels", str(labels), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    samples = RunDir(tmp_path / "run").read_samples()
    assert [(s.question_id, s.text) for s in samples] == [(1, "yes"), (3, "no"), (4, "yes")]


def test_llava_answers_to_repeated_questions_pair_by_their_own_id(tmp_path: Path) -> None:
    labels = _lines(tmp_path / "amber_existence.jsonl", QUESTIONS)
    llava_questions = _lines(tmp_path / "llava_questions.jsonl", [{**q, "category": "amber_existence"} for q in QUESTIONS])
    answers = _lines(tmp_path / "answers.jsonl", [{"question_id": q["question_id"], "prompt": q["text"], "text": a}
                                                  for q, a in zip(QUESTIONS, ("Yes", "No", "Yes"))])  # fmt: skip
    args = ["import", "llava", str(answers), "--questions", str(llava_questions), "--labels", str(labels)]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert [(s.question_id, s.text) for s in RunDir(tmp_path / "run").read_samples()] == [(1, "Yes"), (3, "No"), (4, "Yes")]
    # LLaVA's own numbering (ids not the labels'): which repeat an answer is cannot be told: named, one line
    renumbered = _lines(tmp_path / "llava_renumbered.jsonl", [{**q, "question_id": q["question_id"] + 100, "category": "amber_existence"}
                                                            for q in QUESTIONS])  # fmt: skip
    _lines(answers, [{"question_id": q["question_id"] + 100, "prompt": q["text"], "text": "No"} for q in QUESTIONS])
    refused = runner.invoke(app, [*args[:3], "--questions", str(renumbered), "--labels", str(labels), "--out", str(tmp_path / "r2")])
    assert refused.exit_code == 2, refused.output
    assert len(refused.output.strip().splitlines()) == 1 and f"{answers}:2: " in refused.output, refused.output
    assert "3, 4" in refused.output and "same image and text" in refused.output, refused.output
    assert not (tmp_path / "r2").exists()
