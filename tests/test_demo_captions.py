"""The demo's caption part without a model: the punkt-free CHAIR tokenizer it counts with, the
ground truth it builds from the scenes' annotations, and the decoding verb's --tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.captions.chair.families import NltkLineTools, family_named
from halluprobe.benchmarks.synthetic import CLASSES, write_synthetic
from halluprobe.cli import app
from halluprobe.demo_captions import caption_ground_truth_lines

nltk = pytest.importorskip("nltk")


def test_line_tokenizer_needs_no_nltk_data_and_counts_the_demo_captions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])  # no punkt, no tagger anywhere
    family = family_named("singularize", tokenizer="line")
    assert isinstance(family.tools, NltkLineTools)
    assert "preserve_line=True" in family.identity["tools"] and "no punkt" in family.identity["tools"]
    read = family.caption_objects("A street with a car, a bus, a traffic light and a person.")
    # pattern's singularize reads "bus" as "bu" (the original CHAIR's quirk, kept): not counted
    assert read.objects == ("car", "traffic light", "person")
    assert read.tokens[:4] == ("a", "street", "with", "a") and read.tokens[-1] == "."
    # the Treebank words of the whole caption: what word_tokenize gives a one-sentence caption
    caption = "An office with a laptop, a book, a clock and a keyboard."
    assert family.tools.tokenize(caption.lower()) == nltk.tokenize.NLTKWordTokenizer().tokenize(caption.lower())
    assert family_named("singularize", tokenizer="line").caption_objects("Two dogs and three cups.").objects == ("dog", "cup")


def test_unknown_tokenizer_is_refused() -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        family_named("singularize", tokenizer="spaces")


def test_decoding_verb_refuses_an_unknown_tokenizer_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["decoding", str(tmp_path / "a"), str(tmp_path / "b"), "--tokenizer", "spaces"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [result.output.strip()] and "--tokenizer must be punkt or line" in result.output


def test_ground_truth_lines_keep_the_coco_objects_of_every_scene(tmp_path: Path) -> None:
    scenes = write_synthetic(tmp_path / "scenes", n_images=30, seed=7)
    lines = caption_ground_truth_lines(scenes.annotations)
    data = json.loads(scenes.annotations.read_text())
    assert [line["image"] for line in lines] == [img["file_name"] for img in data["images"]]
    names = {c["id"]: c["name"] for c in data["categories"]}
    not_coco = {"tree", "shell", "bag"}
    assert not_coco <= {c.name for c in CLASSES}
    for img, line in zip(data["images"], lines):
        annotated = {names[a["category_id"]] for a in data["annotations"] if a["image_id"] == img["id"]}
        assert set(line["objects"]) == annotated - not_coco and len(line["objects"]) == len(set(line["objects"]))
    assert not_coco & {names[a["category_id"]] for a in data["annotations"]}  # the set has some to leave out
