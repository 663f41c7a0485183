"""The CHAIR page of a caption run on COCO images counts its COCO train2017 images (the shipped
CHAIR ground truth is keyed by COCO val2014 ids); counts only, no held-out CHAIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _chair import FixtureTools, wordnet_or_skip
from typer.testing import CliRunner

from halluprobe.benchmarks.coco_split import val2017_ids
from halluprobe.captions.chair import families as chair_families
from halluprobe.captions.chair.groundtruth import shipped_ground_truth
from halluprobe.cli import app

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")
runner = CliRunner()


@pytest.fixture(autouse=True)
def fixture_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    wordnet_or_skip()
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())


def test_chair_page_counts_train2017_images(tmp_path: Path) -> None:
    ids = sorted(shipped_ground_truth("chair@lemmatizer").objects)
    held = [i for i in ids if i in val2017_ids()][:3]
    trained = [i for i in ids if i not in val2017_ids()][:9]
    assert len(held) == 3 and len(trained) == 9
    source = tmp_path / "captions.jsonl"
    source.write_text("".join(json.dumps({"image_id": i, "caption": "a dog and a person sitting on a bench"}) + "\n" for i in held + trained))
    assert runner.invoke(app, ["import", "opera", str(source), "--out", str(tmp_path / "run")]).exit_code == 0
    done = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html"), "--resamples", "0"])
    assert done.exit_code == 0, done.output
    md = (tmp_path / "r.md").read_text()
    assert "## Training images" in md and "- COCO train2017 images: 9 of 12 images (75.0%" in md and "held out (val2017): 3" in md
    assert 'id="training-images"' in (tmp_path / "r.html").read_text()
