"""Imports under hostile use (issue 32): a caption import holds --out to absent-or-empty as the
answers imports do, and --overwrite replaces only an import's own files."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()


def test_a_caption_import_never_replaces_a_folders_manifest(tmp_path: Path) -> None:
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(json.dumps({"image_id": i, "caption": f"A cat on a mat {i}."}) + "\n" for i in (1, 2)))
    out = tmp_path / "paper"
    out.mkdir()
    (out / "manifest.json").write_text('{"mine": true}\n')
    (out / "notes.txt").write_text("keep me\n")
    result = runner.invoke(app, ["import", "opera", str(captions), "--out", str(out)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "--out is not empty" in result.output
    assert (out / "manifest.json").read_text() == '{"mine": true}\n' and sorted(p.name for p in out.iterdir()) == ["manifest.json", "notes.txt"]
    result = runner.invoke(app, ["import", "opera", str(captions), "--out", str(out), "--overwrite"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text())["format"] == "opera" and (out / "notes.txt").read_text() == "keep me\n"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    result = runner.invoke(app, ["import", "opera", str(captions), "--out", str(a_file)])
    assert result.exit_code == 2 and "must be a folder, not a file" in result.output and a_file.read_text() == "x"
