"""`import llava-captions` keeps the prompt each line records: one prompt per run, the header's
template and every sample's prompt; a line asking another prompt is refused at its file:line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.imports.captions import UNKNOWN_PROMPT
from halluprobe.rundir import RunDir

runner = CliRunner()
PROMPT = "Please describe this image in detail."


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_prompt_is_the_runs_template_and_each_samples_prompt(tmp_path: Path) -> None:
    caps = _lines(tmp_path / "caps.jsonl", [
        {"question_id": 1, "image": "COCO_val2014_000000000042.jpg", "text": "a dog", "prompt": PROMPT},
        {"image_id": 7, "caption": "two cats", "prompt": PROMPT},  # MARINE's captions: "caption"
    ])  # fmt: skip
    result = runner.invoke(app, ["import", "llava-captions", str(caps), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    run = RunDir(tmp_path / "run")
    assert run.read_header().template == PROMPT
    assert [(s.prompt, s.text) for s in run.read_samples()] == [(PROMPT, "a dog"), (PROMPT, "two cats")]


def test_lines_without_a_prompt_record_that_it_is_unknown(tmp_path: Path) -> None:
    caps = _lines(tmp_path / "caps.jsonl", [{"question_id": 1, "image_id": 3, "text": "a dog"}])
    assert runner.invoke(app, ["import", "llava-captions", str(caps), "--out", str(tmp_path / "run")]).exit_code == 0
    assert RunDir(tmp_path / "run").read_header().template == UNKNOWN_PROMPT


def test_a_second_prompt_is_refused_at_its_line_across_files(tmp_path: Path) -> None:
    first = _lines(tmp_path / "a.jsonl", [{"image_id": 1, "text": "a dog", "prompt": PROMPT}])
    second = _lines(tmp_path / "b.jsonl", [{"image_id": 2, "text": "a cat", "prompt": PROMPT},
                                           {"image_id": 3, "text": "a bus"}])  # fmt: skip
    result = runner.invoke(app, ["import", "llava-captions", str(first), str(second), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert f"{second}:2: prompt (none) differs" in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_a_prompt_that_is_not_text_is_refused(tmp_path: Path) -> None:
    caps = _lines(tmp_path / "caps.jsonl", [{"image_id": 1, "text": "a dog", "prompt": ["x"]}])
    result = runner.invoke(app, ["import", "llava-captions", str(caps), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and f"{caps}:1: " in result.output and "Traceback" not in result.output, result.output
