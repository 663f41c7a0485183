"""Auto-Probe questions: existence lines from verdicts, AttriBait validation and its line format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halluprobe.benchmarks.autoprobe.detector import Verdict
from halluprobe.benchmarks.autoprobe.questions import (
    AttriBaitDraft,
    attribait_question,
    existence_questions,
    parse_attribait,
    read_choice_questions,
    write_choice_questions,
)
from halluprobe.benchmarks.question_file import read_questions, write_questions
from halluprobe.errors import InputError


def _verdict(obj: str, fate: str, score: float) -> Verdict:
    return Verdict(object=obj, fate=fate, score=score, query=obj, box=(0, 0, 1, 1), t_high=0.5, t_low=0.1)  # type: ignore[arg-type]


def test_existence_questions_round_trip_through_the_pope_reader(tmp_path: Path) -> None:
    verdicts = [("a.jpg", _verdict("cat", "present", 0.9)), ("a.jpg", _verdict("umbrella", "hallucinated", 0.01)),
                ("b.jpg", _verdict("dog", "uncertain", 0.3))]  # fmt: skip
    questions = existence_questions(verdicts)
    assert [(q.question_id, q.text, q.label) for q in questions] == [
        (0, "Is there a cat in the image?", "yes"),
        (1, "Is there an umbrella in the image?", "no"),
    ]
    path = write_questions(tmp_path / "autoprobe_pope_existence.jsonl", questions)
    back = read_questions(path)
    assert [q.split for q in back] == ["existence", "existence"]
    assert back[1].object == "umbrella" and back[1].metadata == {"detector_score": 0.01}


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ('{"question": "What colour is the umbrella?", "options": ["Red", "Blue"]}', None),
        ('{"question": "", "options": ["Red", "Blue"]}', "non-empty 'question'"),
        ('{"question": "Colour?", "options": ["Red"]}', "exactly two"),
        ('{"question": "Colour?", "options": ["Red", "red"]}', "the same"),
        ('{"question": "Colour?", "options": ["Red", "Others"]}', "duplicates the fixed options"),
        ('{"question": "Colour?", "options": ["Red", "There is no umbrella"]}', "duplicates the fixed options"),
        ("Red or blue", "no JSON object"),
    ],
)
def test_attribait_answers_are_validated(answer: str, error: str | None) -> None:
    if error is None:
        assert parse_attribait(answer) == AttriBaitDraft(question="What colour is the umbrella?", options=("Red", "Blue"))
    else:
        with pytest.raises(ValueError, match=error):
            parse_attribait(answer)


def test_attribait_line_format_round_trips_and_rejects_bad_lines(tmp_path: Path) -> None:
    q = attribait_question(0, "a.jpg", "umbrella", AttriBaitDraft(question="What colour is the umbrella?", options=("Red", "Blue")))
    assert q.text == (
        "What colour is the umbrella?\nA. Red\nB. Blue\nC. Others\nD. There is no umbrella in the image\n"
        "Answer with the option's letter from the given choices directly."
    )
    assert q.label == "D"
    path = write_choice_questions(tmp_path / "autoprobe_attribait.jsonl", [q])
    assert read_choice_questions(path) == [q]
    line = json.loads(path.read_text())
    path.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(InputError, match=r"autoprobe_attribait.jsonl:2: duplicate question_id 0"):
        read_choice_questions(path)
    path.write_text(json.dumps({**line, "label": "E"}) + "\n")
    with pytest.raises(InputError, match=r":1: label: "):
        read_choice_questions(path)
    path.write_text("")
    with pytest.raises(InputError, match="empty file"):
        read_choice_questions(path)
