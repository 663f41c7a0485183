"""The CLI verbs end to end: build, data (offline), tokens; exit codes and one-line errors."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()


def _coco(path: Path) -> Path:
    names = ["person", "umbrella", "car", "dog", "cup", "orange", "bench"]
    categories = [{"id": i + 1, "name": n} for i, n in enumerate(names)]
    images, annotations = [], []
    for i in range(12):
        images.append({"id": i, "file_name": f"im{i:03d}.jpg"})
        for j in range(4):
            annotations.append({"id": len(annotations), "image_id": i, "category_id": (i + j * (1 + i % 2)) % len(names) + 1})
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def test_build_pope_cli_is_deterministic_and_refuses_to_overwrite(tmp_path: Path) -> None:
    objects = _coco(tmp_path / "instances.json")
    args = ["build", "pope", "--objects", str(objects), "--images", "8", "--per-image", "2", "--seed", "3"]
    first = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert second.exit_code == 0
    for split in ("random", "popular", "adversarial"):
        a = (tmp_path / "a" / f"coco_pope_{split}.json").read_bytes()
        assert a == (tmp_path / "b" / f"coco_pope_{split}.json").read_bytes()
        lines = [json.loads(x) for x in a.decode().splitlines()]
        assert len(lines) == 32 and {x["label"] for x in lines} == {"yes", "no"}
        assert all(set(x) == {"question_id", "image", "text", "label", "object"} for x in lines)
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["seed"] == 3
    again = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert again.exit_code == 2 and "overwrite" in again.output.lower()


def test_build_pope_cli_bad_input_names_file_and_line(tmp_path: Path) -> None:
    objects = tmp_path / "objects.jsonl"
    objects.write_text('{"image": "a.jpg", "objects": ["cat", "dog", "cup"]}\n{"image": "b.jpg"}\n')
    result = runner.invoke(app, ["build", "pope", "--objects", str(objects), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert f"{objects}:2:" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_build_pope_cli_rejects_bad_options(tmp_path: Path) -> None:
    objects = _coco(tmp_path / "instances.json")
    bad = runner.invoke(app, ["build", "pope", "--objects", str(objects), "--out", str(tmp_path / "o"), "--positives", "last"])
    assert bad.exit_code == 2 and "--positives" in bad.output


def test_data_pope_offline_is_one_clear_line_and_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HALLUPROBE_POPE_URL", f"http://127.0.0.1:{port}/")
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["data", "pope", "--out", str(tmp_path / "pope")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1" in lines[0]


def test_tokens_json_on_real_vocabularies(llama_tokenizer_dir: Path, mistral_tokenizer_dir: Path) -> None:
    llama = json.loads(runner.invoke(app, ["tokens", str(llama_tokenizer_dir), "--json"]).output)
    assert {3582, 8241, 4874, 3869} <= set(llama["yes_ids"]) and {1217, 3782, 694, 1939} <= set(llama["no_ids"])
    assert llama["yes_ids"] == sorted(llama["yes_ids"]) and llama["legacy_valid"] is True
    mistral = json.loads(runner.invoke(app, ["tokens", str(mistral_tokenizer_dir), "--json"]).output)
    assert {5592, 5613} <= set(mistral["yes_ids"]) and {1770, 2501} <= set(mistral["no_ids"])
    assert mistral["legacy_valid"] is False
    text = runner.invoke(app, ["tokens", str(mistral_tokenizer_dir)])
    assert text.exit_code == 0 and "INVALID" in text.output


def test_tokens_on_a_missing_path_is_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tokens", str(tmp_path / "nothing-here")])
    assert result.exit_code == 2 and "nothing-here" in result.output
