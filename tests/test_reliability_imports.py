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


def _labels(path: Path, split: str) -> Path:
    recs = [{"question_id": i, "image": f"COCO_val2014_{i:012d}.jpg", "text": f"Is there a cat in the image {i}?", "label": "yes" if i % 2 else "no"} for i in (1, 2)]
    path.mkdir(parents=True, exist_ok=True)
    target = path / f"coco_pope_{split}.json"
    target.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return target


def test_llava_pooled_answers_without_questions_name_the_missing_option(tmp_path: Path) -> None:
    labels = [_labels(tmp_path / "labels", s) for s in ("adversarial", "random")]
    pooled = tmp_path / "llava-v1.5-13b.jsonl"
    lines = [{"question_id": off + i, "prompt": f"Is there a cat in the image {i}?\nAnswer the question using a single word or phrase.", "text": "Yes"}
             for off in (0, 10_000_000) for i in (1, 2)]
    pooled.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["import", "llava", str(pooled), "--out", str(tmp_path / "run")]
    for lab in labels:
        args += ["--labels", str(lab)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "llava-v1.5-13b.jsonl:3: question_id 10000001 is LLaVA's pooled numbering" in result.output and "--questions is missing" in result.output
    assert not (tmp_path / "run").exists()


def test_llava_given_marines_labels_names_import_marine(tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"question_id": 1, "prompt": "Is there a cat in the image?", "text": "Yes"}) + "\n")
    marine = tmp_path / "labels.json"
    marine.write_text(json.dumps([{"id": 1, "image": "COCO_val2014_000000000001.jpg", "label": "yes"}]))
    result = runner.invoke(app, ["import", "llava", str(answers), "--labels", str(marine), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "use `halluprobe import marine`" in result.output, result.output


def test_imange_questions_keep_their_object() -> None:
    from halluprobe.benchmarks.question_file import object_from_text

    assert object_from_text("Is there a dining table in the imange?") == "dining table"
    assert object_from_text("Is there an apple in the image?") == "apple"
    assert object_from_text("Is there a cat in the imagery?") is None
