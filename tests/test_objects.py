"""ObjectIndex and read_objects: COCO instances JSON and POPE-style JSON Lines."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from halluprobe.benchmarks.coco import COCO_CATEGORIES, COCO_CATEGORY_NAMES
from halluprobe.benchmarks.objects import ObjectIndex, read_objects
from halluprobe.errors import InputError

# Equivalent data in both formats: image -> category names of its annotations, in order.
IMAGES: dict[str, list[str]] = {
    "COCO_val2014_000000000042.jpg": ["person", "dog", "person", "frisbee"],
    "COCO_val2014_000000000007.jpg": ["car", "truck", "car", "person", "traffic light"],
    "COCO_val2014_000000000013.jpg": [],
    "COCO_val2014_000000000099.jpg": ["dog", "person"],
}
EXPECTED = {
    "COCO_val2014_000000000042.jpg": ("person", "dog", "frisbee"),
    "COCO_val2014_000000000007.jpg": ("car", "truck", "person", "traffic light"),
    "COCO_val2014_000000000013.jpg": (),
    "COCO_val2014_000000000099.jpg": ("dog", "person"),
}
NAME_TO_ID = {name: cid for cid, name in COCO_CATEGORIES.items()}


def coco_doc(images: dict[str, list[str]] = IMAGES) -> dict[str, Any]:
    """A COCO instances document; annotations interleaved across images, like real files."""
    imgs = [{"id": 100 + i, "file_name": name, "width": 640, "height": 480} for i, name in enumerate(images)]
    anns: list[dict[str, Any]] = []
    longest = max(len(v) for v in images.values())
    for j in range(longest):
        for i, objs in enumerate(images.values()):
            if j < len(objs):
                anns.append({"id": len(anns) + 1, "image_id": 100 + i, "category_id": NAME_TO_ID[objs[j]]})
    cats = [{"id": cid, "name": name, "supercategory": "x"} for cid, name in COCO_CATEGORIES.items()]
    return {"info": {}, "images": imgs, "annotations": anns, "categories": cats}


def write_jsonl(path: Path, rows: list[Any], newline: str = "\n") -> Path:
    path.write_text(newline.join(json.dumps(r) for r in rows) + newline, encoding="utf-8")
    return path


def test_coco_names_are_the_80_categories() -> None:
    assert len(COCO_CATEGORY_NAMES) == len(set(COCO_CATEGORY_NAMES)) == 80
    assert COCO_CATEGORIES[1] == "person" and COCO_CATEGORIES[90] == "toothbrush"
    assert "dining table" in COCO_CATEGORY_NAMES and 12 not in COCO_CATEGORIES


def test_read_coco(tmp_path: Path) -> None:
    p = tmp_path / "instances_val2014.json"
    p.write_text(json.dumps(coco_doc()))
    idx = read_objects(p)
    assert idx.images == EXPECTED
    assert list(idx.images) == list(EXPECTED)  # image order of the file
    assert idx.source_format == "coco"
    assert idx.source_sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    assert idx.source_path == p


def test_read_jsonl_dedups_and_keeps_order(tmp_path: Path) -> None:
    rows = [{"image": k, "objects": v, "image_id": 1} for k, v in IMAGES.items()]
    idx = read_objects(write_jsonl(tmp_path / "objects.jsonl", rows))
    assert idx.images == EXPECTED
    assert idx.source_format == "jsonl"


def test_coco_and_jsonl_give_the_same_index(tmp_path: Path) -> None:
    coco = tmp_path / "coco.json"
    coco.write_text(json.dumps(coco_doc(), indent=2))  # pretty-printed COCO too
    jsonl = write_jsonl(tmp_path / "objects.json", [{"image": k, "objects": v} for k, v in IMAGES.items()], "\r\n")
    a, b = read_objects(coco), read_objects(jsonl)
    assert a == b
    assert a.source_sha256 != b.source_sha256
    assert a.frequencies() == b.frequencies()
    assert a.co_occurrence() == b.co_occurrence()


def test_single_line_jsonl(tmp_path: Path) -> None:
    p = tmp_path / "one.json"
    p.write_text(json.dumps({"image": "a.jpg", "objects": ["cat"]}))  # no newline, one line
    assert read_objects(p).images == {"a.jpg": ("cat",)}


def test_frequencies_and_co_occurrence() -> None:
    idx = ObjectIndex(images={k: v for k, v in EXPECTED.items()})
    freq = idx.frequencies()
    assert freq == {"person": 3, "dog": 2, "car": 1, "frisbee": 1, "traffic light": 1, "truck": 1}
    assert list(freq) == ["person", "dog", "car", "frisbee", "traffic light", "truck"]  # ties by name
    co = idx.co_occurrence()
    assert co["person"] == {"dog": 2, "car": 1, "frisbee": 1, "traffic light": 1, "truck": 1}
    assert list(co["person"]) == ["dog", "car", "frisbee", "traffic light", "truck"]
    assert co["dog"] == {"person": 2, "frisbee": 1}
    # symmetric, never self
    for o, row in co.items():
        assert o not in row
        for other, n in row.items():
            assert co[other][o] == n
    assert list(co) == sorted(co)
    assert idx.objects == sorted(freq)


def test_object_without_partner_is_in_co_occurrence() -> None:
    idx = ObjectIndex(images={"a": ("cat",), "b": ("dog", "cat")})
    assert idx.co_occurrence() == {"cat": {"dog": 1}, "dog": {"cat": 1}}
    assert ObjectIndex(images={"a": ("cat",)}).co_occurrence() == {"cat": {}}


def test_restrict() -> None:
    idx = ObjectIndex(images=dict(EXPECTED))
    sub = idx.restrict(["COCO_val2014_000000000099.jpg", "COCO_val2014_000000000042.jpg"])
    assert list(sub.images) == ["COCO_val2014_000000000099.jpg", "COCO_val2014_000000000042.jpg"]
    assert sub.frequencies() == {"dog": 2, "person": 2, "frisbee": 1}


# ------------------------------------------------------------------------------------------
# bad input: every class is an InputError with file and line


def _jsonl_text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


GOOD = json.dumps({"image": "a.jpg", "objects": ["cat", "dog"]})


@pytest.mark.parametrize(
    ("lines", "line", "words"),
    [
        ([GOOD, GOOD.replace("a.jpg", "b.jpg"), '{"image": "c.jpg", "objects": ["cat"'], 3, "malformed JSON"),
        ([GOOD, "[1, 2]"], 2, "expected a JSON object"),
        ([GOOD, '{"objects": ["cat"]}'], 2, "missing key 'image'"),
        ([GOOD, '{"image": "b.jpg"}'], 2, "missing key 'objects'"),
        ([GOOD, '{"image": "b.jpg", "objects": "cat"}'], 2, "'objects' must be a list"),
        ([GOOD, '{"image": 7, "objects": ["cat"]}'], 2, "'image' must be a non-empty string"),
        ([GOOD, '{"image": "b.jpg", "objects": ["cat", 3]}'], 2, "object names"),
        ([GOOD, '{"image": "b.jpg", "objects": [""]}'], 2, "object names"),
        ([GOOD, "", "", GOOD.replace("a.jpg", "b.jpg"), GOOD], 5, "duplicate image 'a.jpg' (first on line 1)"),
        (["", GOOD, "", "{broken"], 4, "malformed JSON"),  # blank lines still count
    ],
)
def test_jsonl_errors(tmp_path: Path, lines: list[str], line: int, words: str) -> None:
    p = tmp_path / "objects.jsonl"
    p.write_text(_jsonl_text(lines))
    with pytest.raises(InputError) as ei:
        read_objects(p)
    assert ei.value.line == line
    assert ei.value.path == str(p)
    assert words in ei.value.problem
    assert str(ei.value).startswith(f"{p}:{line}: ")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path: Path, content: str) -> None:
    p = tmp_path / "objects.jsonl"
    p.write_text(content)
    with pytest.raises(InputError, match="empty file") as ei:
        read_objects(p)
    assert ei.value.path == str(p)


def test_unreadable(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read") as ei:
        read_objects(tmp_path / "missing.json")
    assert ei.value.path == str(tmp_path / "missing.json")
    with pytest.raises(InputError, match="cannot read"):
        read_objects(tmp_path)  # a directory


def test_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "objects.jsonl"
    p.write_bytes(b'{"image": "\xff.jpg", "objects": []}\n')
    with pytest.raises(InputError, match="UTF-8"):
        read_objects(p)


def _coco_error(tmp_path: Path, doc: Any, words: str) -> InputError:
    p = tmp_path / "instances.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError) as ei:
        read_objects(p)
    assert words in ei.value.problem, ei.value.problem
    assert ei.value.path == str(p)
    return ei.value


def test_coco_unknown_category(tmp_path: Path) -> None:
    doc = coco_doc()
    doc["annotations"][3]["category_id"] = 12  # a gap in the COCO ids
    _coco_error(tmp_path, doc, "annotations[3]: unknown category id 12")


def test_coco_unknown_image(tmp_path: Path) -> None:
    doc = coco_doc()
    doc["annotations"][0]["image_id"] = 5
    _coco_error(tmp_path, doc, "annotations[0]: unknown image id 5")


def test_coco_missing_key(tmp_path: Path) -> None:
    doc = coco_doc()
    del doc["categories"]
    _coco_error(tmp_path, doc, "missing key 'categories'")
    doc = coco_doc()
    del doc["images"][1]["file_name"]
    _coco_error(tmp_path, doc, "images[1]: missing key 'file_name'")


def test_coco_wrong_types(tmp_path: Path) -> None:
    doc = coco_doc()
    doc["annotations"] = {}
    _coco_error(tmp_path, doc, "'annotations' must be a list")
    doc = coco_doc()
    doc["annotations"][2]["category_id"] = "1"
    _coco_error(tmp_path, doc, "annotations[2]: 'category_id' must be an integer")
    doc = coco_doc()
    doc["categories"][0]["name"] = None
    _coco_error(tmp_path, doc, "categories[0]: 'name' must be a non-empty string")


def test_coco_duplicates(tmp_path: Path) -> None:
    doc = coco_doc()
    doc["images"][2]["file_name"] = doc["images"][0]["file_name"]
    _coco_error(tmp_path, doc, "images[2]: duplicate image")
    doc = coco_doc()
    doc["images"][1]["id"] = doc["images"][0]["id"]
    _coco_error(tmp_path, doc, "images[1]: duplicate image id")
    doc = coco_doc()
    doc["categories"][1]["id"] = 1
    _coco_error(tmp_path, doc, "categories[1]: duplicate category id 1")


def test_coco_truncated_reports_line(tmp_path: Path) -> None:
    p = tmp_path / "instances.json"
    text = json.dumps(coco_doc(), indent=1)
    cut = text[: len(text) // 2]
    p.write_text(cut)
    with pytest.raises(InputError, match="malformed JSON") as ei:
        read_objects(p)
    # the JSON parser's own line: the end of the truncated text (or the line before)
    assert ei.value.line is not None and ei.value.line >= cut.count("\n")


def test_coco_without_images(tmp_path: Path) -> None:
    _coco_error(tmp_path, {"images": [], "annotations": [], "categories": []}, "no images")


def test_other_json_document(tmp_path: Path) -> None:
    p = tmp_path / "objects.json"
    p.write_text(json.dumps([{"image": "a.jpg", "objects": ["cat"]}], indent=2))
    with pytest.raises(InputError, match="neither a COCO instances file") as ei:
        read_objects(p)
    assert ei.value.path == str(p)
