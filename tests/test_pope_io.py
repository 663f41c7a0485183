"""read_questions / write_questions / split_name on POPE-format JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halluprobe.benchmarks.question_file import object_from_text, read_questions, split_name, write_questions
from halluprobe.errors import InputError
from halluprobe.records import Question


def official_like(n_images: int = 4) -> list[dict[str, Any]]:
    """Lines shaped like the published COCO files (no object key)."""
    rows: list[dict[str, Any]] = []
    pairs = [("snowboard", "car"), ("umbrella", "orange"), ("person", "traffic light")]
    for i in range(n_images):
        for pos, neg in pairs:
            for obj, label in ((pos, "yes"), (neg, "no")):
                art = "an" if obj[0] in "aeiou" else "a"
                rows.append(
                    {
                        "question_id": len(rows) + 1,
                        "image": f"COCO_val2014_{i:012d}.jpg",
                        "text": f"Is there {art} {obj} in the image?",
                        "label": label,
                    }
                )
    return rows


def write_lines(path: Path, lines: list[str], newline: str = "\n", final_newline: bool = True) -> Path:
    path.write_bytes((newline.join(lines) + (newline if final_newline else "")).encode("utf-8"))
    return path


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("final_newline", [True, False])
def test_reads_official_shape(tmp_path: Path, newline: str, final_newline: bool) -> None:
    rows = official_like()
    p = write_lines(tmp_path / "coco_pope_popular.json", [json.dumps(r) for r in rows], newline, final_newline)
    qs = read_questions(p)
    assert len(qs) == len(rows) == 24
    assert all(q.split == "popular" for q in qs)
    assert [q.question_id for q in qs] == list(range(1, 25))
    assert qs[0].object == "snowboard" and qs[0].label == "yes"
    assert qs[3].object == "orange" and qs[3].text == "Is there an orange in the image?"
    assert qs[5].object == "traffic light"
    assert all(q.metadata == {} for q in qs)


def test_split_override(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "coco_pope_random.json", [json.dumps(r) for r in official_like(1)])
    assert {q.split for q in read_questions(p, split="mine")} == {"mine"}


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("coco_pope_random.json", "random"),
        ("coco_pope_adversarial.json", "adversarial"),
        ("aokvqa_pope_popular.jsonl", "popular"),
        ("my_set_pope_seen_2.json", "seen_2"),
        ("coco_repope_random.json", "coco_repope_random"),
        ("questions.jsonl", "questions"),
        ("pope_random.json", "pope_random"),
    ],
)
def test_split_name(name: str, split: str) -> None:
    assert split_name(Path("/some/dir") / name) == split


@pytest.mark.parametrize(
    ("text", "obj"),
    [
        ("Is there a dog in the image?", "dog"),
        ("Is there an apple in the image?", "apple"),
        ("is there a dining table in the image ?", "dining table"),
        ("Is there a skis in the image?", "skis"),
        ("Are there dogs in the image?", None),
        ("Is there a dog in this picture?", None),
    ],
)
def test_object_from_text(text: str, obj: str | None) -> None:
    assert object_from_text(text) == obj


def test_object_key_wins_and_null_is_kept(tmp_path: Path) -> None:
    lines = [
        json.dumps({"question_id": 1, "image": "a.jpg", "text": "Is there a dog in the image?", "label": "yes", "object": "puppy"}),
        json.dumps({"question_id": 2, "image": "a.jpg", "text": "Is there a dog in the image?", "label": "no", "object": None}),
        json.dumps({"question_id": 3, "image": "a.jpg", "text": "Do you see a dog?", "label": "no"}),
    ]
    qs = read_questions(write_lines(tmp_path / "q.jsonl", lines))
    assert [q.object for q in qs] == ["puppy", None, None]


@pytest.mark.parametrize("label", ["Yes", " yes ", "YES\t", "no", "No", " NO"])
def test_label_case_and_whitespace(tmp_path: Path, label: str) -> None:
    line = json.dumps({"question_id": 1, "image": "a.jpg", "text": "Is there a dog in the image?", "label": label})
    (q,) = read_questions(write_lines(tmp_path / "q.jsonl", [line]))
    assert q.label == label.strip().lower()


def test_metadata_kept_and_round_trip(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {"question_id": 7, "image": "sub/a.jpg", "text": "Is there a cat in the image?", "label": "no",
             "category": "animal", "extra": {"score": 0.5, "tags": ["x"]}}
        ),
        json.dumps({"question_id": 3, "image": "/abs/b.jpg", "text": "Any ünïcode ☃ here?", "label": "yes", "object": "☃"}),
    ]
    src = write_lines(tmp_path / "third_party_pope_random.json", lines)
    qs = read_questions(src)
    assert qs[0].metadata == {"category": "animal", "extra": {"score": 0.5, "tags": ["x"]}}
    assert qs[0].object == "cat" and qs[1].object == "☃"
    out = write_questions(tmp_path / "copy" / "third_party_pope_random.json", qs)
    back = read_questions(out)
    assert back == qs
    first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert list(first) == ["question_id", "image", "text", "label", "object", "category", "extra"]
    assert out.read_bytes().endswith(b"\n")


def test_write_questions_metadata_clash(tmp_path: Path) -> None:
    q = Question(split="s", question_id=1, image="a.jpg", text="t", label="yes", metadata={"label": "no"})
    with pytest.raises(InputError, match="clashes"):
        write_questions(tmp_path / "q.jsonl", [q])


# ------------------------------------------------------------------------------------------
# bad input

GOOD = {"question_id": 1, "image": "a.jpg", "text": "Is there a dog in the image?", "label": "yes"}


def _line(**changes: Any) -> str:
    rec = {**GOOD, "question_id": 2, **changes}
    return json.dumps({k: v for k, v in rec.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    ("lines", "line", "words"),
    [
        ([json.dumps(GOOD), '{"question_id": 2, "image": "a.jpg"', _line(question_id=3)], 2, "malformed JSON"),
        ([json.dumps(GOOD), "[1, 2, 3]"], 2, "expected a JSON object, got list"),
        ([json.dumps(GOOD), '"just a string"'], 2, "expected a JSON object, got str"),
        ([json.dumps(GOOD), _line(question_id=_DROP)], 2, "missing key 'question_id'"),
        ([json.dumps(GOOD), _line(image=_DROP)], 2, "missing key 'image'"),
        ([json.dumps(GOOD), _line(text=_DROP)], 2, "missing key 'text'"),
        ([json.dumps(GOOD), _line(label=_DROP)], 2, "missing key 'label'"),
        ([json.dumps(GOOD), _line(question_id="2")], 2, "'question_id' must be an integer, got str"),
        ([json.dumps(GOOD), _line(question_id=True)], 2, "'question_id' must be an integer, got bool"),
        ([json.dumps(GOOD), _line(question_id=2.0)], 2, "'question_id' must be an integer, got float"),
        ([json.dumps(GOOD), _line(image=5)], 2, "'image' must be a non-empty string"),
        ([json.dumps(GOOD), _line(image="")], 2, "'image' must be a non-empty string"),
        ([json.dumps(GOOD), _line(image="../../etc/x.jpg")], 2, "escapes the images root"),
        ([json.dumps(GOOD), _line(text=None)], 2, "'text' must be a non-empty string"),
        ([json.dumps(GOOD), _line(label=1)], 2, "'label' must be a string, got int"),
        ([json.dumps(GOOD), _line(label="maybe")], 2, "unknown label 'maybe'"),
        ([json.dumps(GOOD), _line(label="")], 2, "unknown label"),
        ([json.dumps(GOOD), _line(object=3)], 2, "'object' must be a non-empty string or null"),
        ([json.dumps(GOOD), _line(question_id=2), "", _line(question_id=1)], 4, "duplicate question_id 1 (first on line 1)"),
        (["", "  ", json.dumps(GOOD), "", "{oops}"], 5, "malformed JSON"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, lines: list[str], line: int, words: str) -> None:
    p = write_lines(tmp_path / "coco_pope_random.json", lines)
    with pytest.raises(InputError) as ei:
        read_questions(p)
    err = ei.value
    assert words in err.problem, err.problem
    assert (err.path, err.line) == (str(p), line)
    assert str(err) == f"{p}:{line}: {err.problem}"
    assert "\n" not in str(err)


@pytest.mark.parametrize("content", [b"", b"\n", b"\r\n  \n\n"])
def test_empty_file(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "coco_pope_random.json"
    p.write_bytes(content)
    with pytest.raises(InputError, match="empty file") as ei:
        read_questions(p)
    assert ei.value.path == str(p)


def test_unreadable_and_not_utf8(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read") as ei:
        read_questions(tmp_path / "nope.json")
    assert ei.value.path == str(tmp_path / "nope.json")
    p = tmp_path / "latin1.json"
    p.write_bytes(json.dumps(GOOD).replace("dog", "d\u00f8g").encode("latin-1"))
    with pytest.raises(InputError, match="UTF-8"):
        read_questions(p)


def test_bom_is_tolerated(tmp_path: Path) -> None:
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    assert read_questions(p)[0].question_id == 1
