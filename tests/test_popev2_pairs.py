"""POPEv2's pairs: why (split, file name) is POPEv2's own pairing, and that no row is lost silently.

POPEv2 (RUCAIBox/POPE @ 08d957b, ``POPEv2/dataset/annotations.json``) pairs its records by
``image_id``: every id has exactly two records, ``/coco/train2017/<id:012d>.jpg`` labelled Yes
and ``/images/<id:012d>.jpg`` (the copy edited to remove the object) labelled No, with one
target object (checked over all 1,000 records of the pinned file). The annotations below are
written in that shape by the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halluprobe.benchmarks.dataset_files import popev2_questions
from halluprobe.metrics.datasets import popev2_paired_drop
from halluprobe.metrics.score import ScoreRow
from halluprobe.records import Question

IDS_OBJECTS = ((46207, "remote"), (489255, "pizza"), (9, "cup"))


def _annotations(path: Path) -> list[Question]:
    records = [
        {"image_id": image_id, "image_name": f"{folder}/{image_id:012d}.jpg", "target_object": obj,
         "query": f"Is there a {obj} in the image?", "label": label}
        for image_id, obj in IDS_OBJECTS for folder, label in (("/images", "No"), ("/coco/train2017", "Yes"))
    ]  # fmt: skip
    path.write_text(json.dumps(records, indent=4))
    return popev2_questions(path)


def _rows(questions: list[Question], split: str, said_yes: set[str]) -> list[ScoreRow]:
    return [
        ScoreRow(split=split, question_id=q.question_id, image=q.image, label=q.label, decision="yes" if q.image in said_yes else "no")
        for q in questions
    ]


def test_the_file_name_key_is_popev2s_image_id(tmp_path: Path) -> None:
    questions = _annotations(tmp_path / "annotations.json")
    # both images of a record pair are named by its image_id, and nothing else shares that name
    by_name: dict[str, set[object]] = {}
    for q in questions:
        by_name.setdefault(q.image.partition("/")[2], set()).add(q.metadata["pair"])
    assert by_name == {f"{i:012d}.jpg": {i} for i, _ in IDS_OBJECTS}
    originals = {q.image for q in questions if q.metadata["variant"] == "original"}
    p = popev2_paired_drop(_rows(questions, "popev2", said_yes=originals), n_resamples=50)
    assert (p.pairs, p.unpaired, p.both_correct, p.mean_drop) == (3, 0, 3, 1.0)


def test_the_split_keeps_two_runs_of_the_file_apart_and_no_pair_spans_splits(tmp_path: Path) -> None:
    questions = _annotations(tmp_path / "annotations.json")
    everything = {q.image for q in questions}
    # the same questions under two names (two --benchmark files): one run says yes to all
    rows = _rows(questions, "popev2", set()) + _rows(questions, "popev2_again", everything)
    p = popev2_paired_drop(rows, n_resamples=50)
    assert (p.pairs, p.unpaired, p.yes_to_both, p.both_correct) == (6, 0, 3, 0)
    # originals in one file and edits in another are two splits: not pairs of one question file
    originals = [r for r in _rows(questions, "orig", everything) if r.image.startswith("train2017/")]
    edits = [r for r in _rows(questions, "edit", set()) if r.image.startswith("edited/")]
    split_apart = popev2_paired_drop(originals + edits, n_resamples=50)
    assert (split_apart.pairs, split_apart.unpaired, split_apart.mean_drop) == (0, 6, None)


def test_an_image_asked_twice_is_no_pair_rather_than_one_row_dropped() -> None:
    rows = [
        ScoreRow(split="popev2", question_id=1, image="train2017/1.jpg", label="yes", decision="yes", p_yes=0.9),
        ScoreRow(split="popev2", question_id=2, image="train2017/1.jpg", label="yes", decision="no", p_yes=0.1),  # again
        ScoreRow(split="popev2", question_id=3, image="edited/1.jpg", label="no", decision="no", p_yes=0.2),
        ScoreRow(split="popev2", question_id=4, image="train2017/2.jpg", label="yes", decision="yes", p_yes=0.8),
        ScoreRow(split="popev2", question_id=5, image="edited/2.jpg", label="no", decision="no", p_yes=0.3),
    ]
    p = popev2_paired_drop(rows, n_resamples=50)
    # which of questions 1 and 2 pairs with 3 is not knowable: neither (the last one used to win silently)
    assert (p.pairs, p.unpaired) == (1, 3)
    assert p.mean_drop == pytest.approx(0.5)


def test_a_row_in_neither_folder_is_counted_unpaired() -> None:
    rows = [
        ScoreRow(split="popev2", question_id=1, image="train2017/1.jpg", label="yes", decision="yes"),
        ScoreRow(split="popev2", question_id=2, image="edited/1.jpg", label="no", decision="no"),
        ScoreRow(split="popev2", question_id=3, image="/data/coco/train2017/3.jpg", label="yes", decision="yes"),
    ]
    p = popev2_paired_drop(rows, n_resamples=50)
    assert (p.pairs, p.unpaired) == (1, 1)  # every row is a pair's or counted, none vanishes
