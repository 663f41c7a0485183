"""PROVE data: the released record format, one-line errors, the pinned downloader on a file URL."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from halluprobe.benchmarks.prove.data import fetch_prove, read_prove
from halluprobe.benchmarks.prove.scene_graph import AttributeTuple, RelationTuple
from halluprobe.errors import InputError

RECORD = {
    "question_id": "q1",
    "image": "img/dog.jpg",
    "caption": "A brown dog lies on a red sofa.",
    "question": "What is the dog lying on?",
    "answer": "The dog is lying on a red sofa.",
    "image_tuples": [["dog"], ["sofa"], ["dog", "brown"], ["sofa", "red"], ["dog", "lying on", "sofa"]],
    "qa_diff_tuples": json.dumps([["sofa", "red"], ["dog", "lying on", "sofa"]]),  # mirrors store strings
    "source": "docci",
}


def _write(path: Path, records: list[object], jsonl: bool = False) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n" if jsonl else json.dumps(records))
    return path


def test_reads_json_and_jsonl(tmp_path: Path) -> None:
    for jsonl in (False, True):
        items = read_prove(_write(tmp_path / f"p{jsonl}.json", [RECORD, {**RECORD, "question_id": "q2"}], jsonl))
        assert [i.question_id for i in items] == ["q1", "q2"]
        item = items[0]
        assert item.qa_diff_tuples == [
            AttributeTuple(entity="sofa", attribute="red"),
            RelationTuple(subject="dog", relation="lying on", object="sofa"),
        ]
        assert item.metadata == {"source": "docci"}
        assert item.graph().has_relation("dog", "lying on", "sofa")


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({k: v for k, v in RECORD.items() if k != "answer"}, "question q1: missing key(s) answer"),
        ({**RECORD, "image_tuples": "[[\"dog\""}, "question q1: image_tuples is a string but not JSON"),
        ({**RECORD, "image_tuples": [["a", "b", "c", "d"]]}, "question q1: image_tuples[0]: a tuple has 1"),
        ({**RECORD, "qa_diff_tuples": 5}, "question q1: qa_diff_tuples must be a list of tuples, not int"),
        ({**RECORD, "question": ""}, "question q1: question must be a non-empty string"),
        ({**RECORD, "image": {"bytes": "..."}}, "question q1: image (or image_url) must be a non-empty string"),
        ({k: v for k, v in RECORD.items() if k != "image"}, "question q1: missing key(s) image"),
        ([1, 2], "expected a JSON object, got list"),
    ],
)
def test_one_line_errors_name_file_and_record(tmp_path: Path, record: object, message: str) -> None:
    path = _write(tmp_path / "bad.json", [RECORD | {"question_id": "q0"}, record])
    with pytest.raises(InputError) as err:
        read_prove(path)
    text = str(err.value)
    assert text.startswith(f"{path}: record 1: ") and message in text and "\n" not in text
    jsonl = _write(tmp_path / "bad.jsonl", [RECORD | {"question_id": "q0"}, record], jsonl=True)
    with pytest.raises(InputError, match=rf"^{jsonl}:2: "):
        read_prove(jsonl)


def test_mirror_image_url(tmp_path: Path) -> None:
    mirror = {**RECORD, "image": {"bytes": None, "path": None}, "image_url": "https://example.org/dog.jpg"}
    [item] = read_prove(_write(tmp_path / "m.json", [mirror]))
    assert item.image == "https://example.org/dog.jpg" and "image_url" not in item.metadata and "image" not in item.metadata


def test_file_level_errors(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(InputError, match="empty file"):
        read_prove(tmp_path / "empty.json")
    with pytest.raises(InputError, match="duplicate question id 'q1'"):
        read_prove(_write(tmp_path / "dup.json", [RECORD, RECORD]))
    with pytest.raises(InputError, match=r"record 0: question q1: unsupported schema_version 99"):
        read_prove(_write(tmp_path / "future.json", [{**RECORD, "schema_version": 99}]))
    (tmp_path / "broken.jsonl").write_text(json.dumps(RECORD) + "\n{oops\n")
    with pytest.raises(InputError, match=r"broken.jsonl:2: malformed JSON"):
        read_prove(tmp_path / "broken.jsonl")


def _read_captions(path: Path) -> object:
    from halluprobe.benchmarks.prove.build import read_captions

    return read_captions(path)


def _read_responses(path: Path) -> object:
    from halluprobe.benchmarks.prove.evaluate import read_responses

    return read_responses(path, [read_prove(_write(path.with_name("items.json"), [RECORD]))[0]])


READERS = {
    "prove": (read_prove, RECORD),
    "captions": (_read_captions, {"image": "img/dog.jpg", "caption": "A dog\u2028on a sofa.", "tuples": [["dog"]]}),
    "responses": (_read_responses, {"question_id": "q1", "response": "A red sofa."}),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_json_lines_readers_share_one_reader(tmp_path: Path, reader: str) -> None:
    """PROVE file, captions and responses: one JSON-array-or-JSON-Lines reader (jsonl.read_records)."""
    read, record = READERS[reader]
    # U+2028 / U+2029 inside a JSON string are not line breaks of JSON Lines (str.splitlines says they are)
    sep = {**record, ("answer" if reader == "prove" else "caption" if reader == "captions" else "response"): "a red\u2028sofa\u2029."}
    path = tmp_path / "sep.jsonl"
    path.write_text(json.dumps(sep, ensure_ascii=False) + "\n", encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")
    assert len(read(path)) == 1  # type: ignore[arg-type]
    # a file that is not UTF-8 is one line naming it, not a UnicodeDecodeError
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(json.dumps(sep, ensure_ascii=False).replace("a red", "caf\u00e9 red").encode("latin-1", errors="replace"))
    with pytest.raises(InputError, match=rf"^{latin}:\d+: not UTF-8 text \(byte \d+\)$"):
        read(latin)


def test_fetch_from_file_url_is_verified_and_cached(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    src = _write(served / "prove.json", [RECORD])
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    got = fetch_prove(tmp_path / "out", cache_dir=cache, base_url=served.as_uri() + "/", pins={"prove.json": sha})
    assert got == [tmp_path / "out" / "prove.json"] and read_prove(got[0])[0].question_id == "q1"
    src.unlink()  # a second fetch needs no source: the verified cache answers
    again = fetch_prove(tmp_path / "out2", cache_dir=cache, base_url=served.as_uri() + "/", pins={"prove.json": sha})
    assert again[0].read_bytes() == got[0].read_bytes()
    _write(served / "prove.json", [RECORD, {**RECORD, "question_id": "q9"}])
    with pytest.raises(InputError, match="sha256 mismatch"):
        fetch_prove(tmp_path / "out3", cache_dir=tmp_path / "cache2", base_url=served.as_uri() + "/", pins={"prove.json": sha})
    with pytest.raises(InputError, match="no pinned sha256"):
        fetch_prove(tmp_path / "out4", cache_dir=cache, pins={})
