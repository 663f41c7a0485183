"""`halluprobe import FILE` without the format word: OPERA's caption lines and lmms-eval
coco_cap_chair logs are told from their first line; what is ambiguous still needs the word."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.imports.captions import detect_caption_format
from halluprobe.rundir import RunDir

runner = CliRunner()


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_opera_lines_are_imported_without_the_format_word(tmp_path: Path) -> None:
    opera = _lines(tmp_path / "captions.jsonl", [{"image_id": 42, "caption": "a dog"}, {"image_id": 7, "caption": "two cats"}])
    result = runner.invoke(app, ["import", str(opera), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "2 captions imported (opera)" in result.output
    run = RunDir(tmp_path / "run")
    assert run.read_header().open_ended
    assert [s.text for s in run.read_samples()] == ["a dog", "two cats"]
    # the same as naming the format
    named = runner.invoke(app, ["import", "opera", str(opera), "--out", str(tmp_path / "named")])
    assert named.exit_code == 0
    assert [s.text for s in RunDir(tmp_path / "named").read_samples()] == ["a dog", "two cats"]


def test_lmms_eval_chair_logs_are_detected(tmp_path: Path) -> None:
    logs = _lines(tmp_path / "samples.jsonl", [
        {"doc_id": 0, "filtered_resps": ["a cat on a couch"], "coco_cap_chair_s": {"image_id": 2, "pred": ["cat"]}},
    ])  # fmt: skip
    assert detect_caption_format(logs) == "lmms-eval-chair"
    result = runner.invoke(app, ["import", str(logs), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "1 captions imported (lmms-eval-chair)" in result.output


def test_answers_lines_are_not_taken_for_captions(tmp_path: Path) -> None:
    cases = {
        "answers.jsonl": {"question": "Is there a dog?", "answer": "yes", "image_id": 1, "caption": "x"},
        "llava.jsonl": {"question_id": 1, "prompt": "Is there a dog?", "text": "Yes"},
        "llava_caption.jsonl": {"question_id": 1, "image_id": 3, "text": "a dog"},  # LLaVA-style captions: the word is needed
        "lmms.jsonl": {"doc_id": 0, "filtered_resps": ["yes"], "pope_accuracy": {"score": 1}},
        "array.json": None,
    }
    for name, row in cases.items():
        path = tmp_path / name
        path.write_text("[1, 2]\n" if row is None else json.dumps(row) + "\n")
        assert detect_caption_format(path) is None, name
    (tmp_path / "broken.jsonl").write_bytes(b"\xff\xfe not text")
    assert detect_caption_format(tmp_path / "broken.jsonl") is None
    refused = runner.invoke(app, ["import", str(tmp_path / "llava_caption.jsonl"), "--out", str(tmp_path / "r")])
    assert refused.exit_code == 2  # the answers formats' detection names what it needs, in one line
    assert len(refused.output.strip().splitlines()) == 1
