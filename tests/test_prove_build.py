"""`halluprobe prove build` end to end with scripted model outputs (sandbox, answer check, dedup)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.benchmarks.prove.build import CaptionRecord, build_prove, parse_qa_output, same_answer
from halluprobe.benchmarks.prove.extraction import Extraction
from halluprobe.benchmarks.prove.data import read_prove
from halluprobe.benchmarks.prove.scene_graph import parse_tuple, tuple_key
from halluprobe.cli import app

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

pytest.importorskip("sentence_transformers")
pytest.importorskip("spacy")

CAT = [["cat"], ["chair"], ["cat", "black"], ["chair", "wooden"], ["cat", "sitting on", "chair"]]


def _pair(question: str, answer: str, program: str) -> dict[str, str]:
    return {"question": question, "answer": answer, "program": program}


PAIRS = [
    _pair("What is the chair made of?", "The chair is wooden.", "def verify(graph):\n    return 'The chair is ' + graph.attributes_of('chair')[0] + '.'"),
    _pair("What is the chair made from?", "wooden", "result = graph.attributes_of('chair')[0]"),  # near-duplicate
    _pair("How many cats are there?", "2", "result = graph.count('cat')"),  # returns 1
    _pair("Is there a dog?", "no", "import os\nresult = False"),  # refused
    _pair("What is under the cat?", "chair", "result = graph.relations_of('cat')[5]"),  # IndexError
    _pair("Where is the cat sitting?", "The cat is sitting on the chair.",
          "def verify(graph):\n    rel = graph.relations_between('cat', 'chair')[0]\n    return 'The cat is ' + rel + ' the chair.'"),
]  # fmt: skip


def test_same_answer_and_strict_parse() -> None:
    assert same_answer(True, "Yes") and same_answer(2.0, "2") and same_answer(["red", "blue"], "blue, red")
    assert same_answer("The sofa is red", "the sofa is red.") and not same_answer(1, "2")
    with pytest.raises(ValueError, match="not one JSON array"):
        parse_qa_output("Sure: []")
    with pytest.raises(ValueError, match="element 0 is not"):
        parse_qa_output('[{"question": "q", "answer": "a"}]')


def test_build_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for name in ("cat.png", "bird.png"):
        Image.new("RGB", (16, 16), "white").save(images / name)
    captions = tmp_path / "captions.jsonl"
    captions.write_text(
        json.dumps({"image": "cat.png", "caption": "A black cat sits on a wooden chair.", "tuples": CAT}) + "\n"
        + json.dumps({"image": "bird.png", "caption": "A white bird on a branch.", "tuples": [["bird"], ["bird", "white"]]}) + "\n"
    )  # fmt: skip
    script = tmp_path / "script.json"
    rules = [{"match": "Caption: A black cat", "text": json.dumps(PAIRS)}, {"match": "Caption: A white bird", "text": "Here are the pairs: none"}]
    script.write_text(json.dumps({"generate": rules}))
    out = tmp_path / "built"
    args = ["prove", "build", "--captions", str(captions), "--model", str(script), "--backend", "scripted", "--images", str(images), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    build = json.loads((out / "build.json").read_text())
    assert build["counts"] == {
        "kept": 2, "near_duplicate": 1, "answer_mismatch": 1, "program_refused": 1, "program_failed": 1, "invalid_output": 1,
    }  # fmt: skip
    dropped = {d["reason"]: d for d in map(json.loads, (out / "dropped.jsonl").read_text().splitlines())}
    assert dropped["answer_mismatch"]["detail"] == "program returned 1, not the stated answer '2'"
    assert dropped["program_refused"]["detail"] == "line 1: Import is not allowed"
    assert dropped["program_failed"]["detail"].startswith("error: IndexError")
    assert dropped["near_duplicate"]["detail"].startswith("near-duplicate of cat.png#0 (cos ")
    assert dropped["invalid_output"]["raw"] == "Here are the pairs: none" and dropped["invalid_output"]["image"] == "bird.png"
    # every persisted file carries schema_version (read_prove checks it and does not keep it)
    assert build["schema_version"] == 1 and build["model"] == str(script)
    assert all(d["schema_version"] == 1 for d in map(json.loads, (out / "dropped.jsonl").read_text().splitlines()))
    assert all(json.loads(line)["schema_version"] == 1 for line in (out / "prove.jsonl").read_text().splitlines())
    items = read_prove(out / "prove.jsonl")  # the built file is a PROVE file
    assert all("schema_version" not in i.metadata for i in items)
    assert [i.question for i in items] == ["What is the chair made of?", "Where is the cat sitting?"]
    assert [tuple_key(t) for t in items[0].qa_diff_tuples] == [("attribute", "chair", "wooden")]  # "chair" was in the question
    assert items[0].metadata["program"].startswith("def verify(graph):")
    assert CliRunner().invoke(app, args).exit_code == 2  # no silent overwrite
    # every model answer was kept as it arrived: a build started again asks only what is missing
    kept = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert sorted(a["image"] for a in kept) == ["bird.png", "cat.png"]


class _Orthogonal:
    """Embedder whose questions are never near-duplicates (one unit axis each)."""

    name = "orthogonal"

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        return np.eye(len(sentences), max(len(sentences), 1))


class _Extractor:
    """Tuples per text from a table: a failed extraction, an answer with nothing beyond its question."""

    identity = "table"

    def __init__(self, table: dict[str, Extraction]) -> None:
        self.table = table

    def extract(self, texts: Sequence[str]) -> list[Extraction]:
        return [self.table.get(t, Extraction()) for t in texts]


def test_failed_or_empty_extraction_drops_the_pair(tmp_path: Path) -> None:
    from halluprobe.backends.scripted import ScriptedBackend

    Image.new("RGB", (8, 8), "white").save(tmp_path / "cat.png")
    pairs = [
        _pair("Is the chair wooden?", "yes", "result = True"),  # answer extraction fails
        _pair("What is the cat on?", "A chair.", "result = 'a chair'"),  # answer's tuples all in the question
        _pair("What colour is the cat?", "Black.", "result = 'black'"),  # kept
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"generate": [{"match": "Caption:", "text": json.dumps(pairs)}]}))
    cat, chair = ["cat"], ["chair"]
    table = {
        "yes": Extraction(error="invalid LM output: not one JSON array"),
        "A chair.": Extraction(tuples=[parse_tuple(chair)]),
        "What is the cat on?": Extraction(tuples=[parse_tuple(cat), parse_tuple(chair)]),
        "Black.": Extraction(tuples=[parse_tuple(["cat", "black"])]),
    }
    result = build_prove(
        [CaptionRecord(image="cat.png", caption="A black cat on a chair.", tuples=CAT)],
        ScriptedBackend(str(script)),
        images_root=tmp_path,
        embedder=_Orthogonal(),
        extractor=_Extractor(table),
    )
    assert [i.question for i in result.items] == ["What colour is the cat?"]
    assert all(i.qa_diff_tuples for i in result.items)
    failed = [d for d in result.dropped if d.reason == "extraction_failed"]
    assert [d.question for d in failed] == ["Is the chair wooden?", "What is the cat on?"]
    assert failed[0].detail == "answer: invalid LM output: not one JSON array"
    assert failed[1].detail.startswith("the answer has no tuples beyond the question's")
    assert result.counts() == {"kept": 1, "extraction_failed": 2}


def test_build_files_are_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails leaves no half-written file under the final name, and is one line."""
    import os

    from halluprobe.benchmarks.prove.build import BuildResult, Dropped, write_build
    from halluprobe.errors import InputError

    result = BuildResult(dropped=[Dropped(image="a.png", reason="invalid_output", detail="x")])
    real_replace = os.replace

    def fail_on_dropped(src: str, dst: str) -> None:
        if str(dst).endswith("dropped.jsonl"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", fail_on_dropped)
    with pytest.raises(InputError, match=r"dropped.jsonl: cannot write: No space left on device$"):
        write_build(tmp_path / "out", result, {"model": "m"})
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["prove.jsonl"]  # no dropped.jsonl, no temp file
    monkeypatch.setattr(os, "replace", real_replace)
    with pytest.raises(InputError, match="prove.jsonl: exists; pass --overwrite"):
        write_build(tmp_path / "out", result, {"model": "m"})
    write_build(tmp_path / "out", result, {"model": "m"}, overwrite=True)
    assert json.loads((tmp_path / "out" / "build.json").read_text())["counts"] == {"kept": 0, "invalid_output": 1}


def test_programs_the_parser_cannot_take_lose_nothing(tmp_path: Path) -> None:
    """A lone surrogate (an escaped half emoji), 100,000 nested minus signs, a 200,000-term sum:
    each pair is dropped as refused, the others are kept, and every file is written and reads back."""
    from halluprobe.backends.scripted import ScriptedBackend
    from halluprobe.benchmarks.prove.build import write_build

    Image.new("RGB", (8, 8), "white").save(tmp_path / "cat.png")
    pairs = [
        _pair("What colour is the cat \ud83d?", "Black.", 'result = "\ud83d"'),
        _pair("How deep?", "1", "result = " + "-" * 100_000 + "1"),
        _pair("How long?", "200000", "result = " + "+".join(["1"] * 200_000)),
        _pair("What colour is the cat?", "Black.", "result = 'black'"),
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"generate": [{"match": "Caption:", "text": json.dumps(pairs)}]}))
    table = {"Black.": Extraction(tuples=[parse_tuple(["cat", "black"])])}
    result = build_prove(
        [CaptionRecord(image="cat.png", caption="A black cat on a chair.", tuples=CAT)],
        ScriptedBackend(str(script)),
        images_root=tmp_path,
        embedder=_Orthogonal(),
        extractor=_Extractor(table),
    )
    assert result.counts() == {"kept": 1, "answer_mismatch": 1, "program_refused": 2}
    refused = [d for d in result.dropped if d.reason == "program_refused"]
    assert [d.detail for d in refused] == ["nested too deeply for the parser"] * 2
    mismatch = next(d for d in result.dropped if d.reason == "answer_mismatch")
    assert mismatch.question == "What colour is the cat \ufffd?" and mismatch.program == 'result = "\ufffd"'
    write_build(tmp_path / "out", result, {"model": "m"})
    dropped = [json.loads(line) for line in (tmp_path / "out" / "dropped.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(dropped) == 3 and [i.question for i in read_prove(tmp_path / "out" / "prove.jsonl")] == ["What colour is the cat?"]


def test_answers_collected_before_a_failure_are_kept_and_not_asked_again(tmp_path: Path) -> None:
    """The embedder fails after every answer came in: a second build asks the model for nothing."""
    from halluprobe.backends.scripted import ScriptedBackend
    from halluprobe.benchmarks.prove.build import read_answers

    for name in ("cat.png", "bird.png"):
        Image.new("RGB", (8, 8), "white").save(tmp_path / name)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"generate": [{"match": "Caption:", "text": json.dumps([_pair("What colour is the cat?", "Black.", "result = 'black'")])}]}))
    records = [CaptionRecord(image="cat.png", caption="A black cat on a chair.", tuples=CAT), CaptionRecord(image="bird.png", caption="A bird.", tuples=[["bird"]])]
    answers = tmp_path / "out" / "answers.jsonl"

    class Counting(ScriptedBackend):
        asked = 0

        def answer(self, requests, config):  # type: ignore[no-untyped-def]
            Counting.asked += len(requests)
            yield from super().answer(requests, config)

    class Failing:
        name = "failing"

        def encode(self, sentences: Sequence[str]) -> np.ndarray:
            raise RuntimeError("embedder crashed")

    table = {"Black.": Extraction(tuples=[parse_tuple(["cat", "black"])])}
    common = {"images_root": tmp_path, "extractor": _Extractor(table), "answers_path": answers}
    with pytest.raises(RuntimeError, match="embedder crashed"):
        build_prove(records, Counting(str(script)), embedder=Failing(), **common)
    assert Counting.asked == 2 and [a.image for a in read_answers(answers)] == ["cat.png", "bird.png"]
    with open(answers, "ab") as fh:  # a kill during the next append leaves half a line
        fh.write(b'{"schema_version": 1, "model": "x", "max_new')
    result = build_prove(records, Counting(str(script)), embedder=_Orthogonal(), **common)
    assert Counting.asked == 2  # nothing asked again
    assert result.counts() == {"kept": 2}
    # another answer length is another answer: asked again
    build_prove(records, Counting(str(script)), embedder=_Orthogonal(), max_new_tokens=64, **common)
    assert Counting.asked == 4
    assert [a.max_new_tokens for a in read_answers(answers)] == [1024, 1024, 64, 64]  # the cut line was dropped, not run into
