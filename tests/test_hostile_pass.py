"""A fresh adversarial pass over the issue-32 verbs: each test reproduces a defect still open
(xfail strict: it flips when fixed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _chair import FixtureTools
from typer.testing import CliRunner

from halluprobe.captions.chair import families as chair_families
from halluprobe.cli import app

runner = CliRunner()
SINGULARIZE = ["--family", "singularize", "--bootstrap", "0", "--tokenizer", "line"]


@pytest.fixture(autouse=True)
def fixture_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())


def test_llava_captions_import_keeps_the_prompt_the_file_records(tmp_path: Path) -> None:
    answers = tmp_path / "caps.jsonl"
    answers.write_text(json.dumps({"question_id": 1, "image": "a.png", "text": "a car", "prompt": "Describe this image."}) + "\n")
    result = runner.invoke(app, ["import", "llava-captions", str(answers), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    sample = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prompt"] == "Describe this image."


def test_llava_captions_import_refuses_two_prompts(tmp_path: Path) -> None:
    answers = tmp_path / "caps.jsonl"
    rows = [{"question_id": 1, "image": "a.png", "text": "a car", "prompt": "Describe this image."},
            {"question_id": 2, "image": "b.png", "text": "a cup", "prompt": "List every object."}]  # fmt: skip
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["import", "llava-captions", str(answers), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "prompt" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and f"{answers}:2: " in result.output, result.output
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_chair_refuses_a_caption_line_with_a_duplicated_key(tmp_path: Path) -> None:
    captions = tmp_path / "caps.jsonl"
    captions.write_text('{"image_id": "a.png", "caption": "a car", "caption": "a cup"}\n')
    truth = tmp_path / "gt.jsonl"
    truth.write_text(json.dumps({"image": "a.png", "objects": ["cup"]}) + "\n")
    result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), *SINGULARIZE])
    assert result.exit_code == 2 and f"{captions}:1" in result.output, result.output


def test_chair_refuses_a_ground_truth_line_with_a_duplicated_key(tmp_path: Path) -> None:
    captions = tmp_path / "caps.jsonl"
    captions.write_text(json.dumps({"image_id": "a.png", "caption": "a car"}) + "\n")
    truth = tmp_path / "gt.jsonl"
    truth.write_text('{"image": "a.png", "objects": ["cup"], "objects": ["car"]}\n')
    result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), *SINGULARIZE])
    assert result.exit_code == 2 and f"{truth}:1" in result.output, result.output


def test_chair_on_a_llava_caption_file_records_its_prompt_and_refuses_two(tmp_path: Path) -> None:
    """`chair FILE --format llava-captions` records the prompt the lines carry, as the import
    does, and refuses a file of two prompts at the line that differs."""
    truth = tmp_path / "gt.jsonl"
    truth.write_text(json.dumps({"image": "a.png", "objects": ["cup"]}) + "\n" + json.dumps({"image": "b.png", "objects": ["car"]}) + "\n")
    rows = [{"question_id": 1, "image": "a.png", "text": "a cup", "prompt": "Describe this image."},
            {"question_id": 2, "image": "b.png", "text": "a car", "prompt": "Describe this image."}]  # fmt: skip
    captions = tmp_path / "caps.jsonl"
    captions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["chair", str(captions), "--format", "llava-captions", "--ground-truth", str(truth), *SINGULARIZE, "--json"])
    assert result.exit_code == 0, result.output
    assert '"prompt": "Describe this image."' in result.output
    rows[1]["prompt"] = "List every object."
    captions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["chair", str(captions), "--format", "llava-captions", "--ground-truth", str(truth), *SINGULARIZE])
    assert result.exit_code == 2 and f"{captions}:2:" in result.output and "one prompt per run" in result.output, result.output
