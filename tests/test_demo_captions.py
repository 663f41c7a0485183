"""The demo's caption part without a model: the punkt-free CHAIR tokenizer it counts with, the
ground truth it builds from the scenes' annotations, and the decoding verb's --tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.benchmarks.synthetic_classes import CLASSES
from halluprobe.benchmarks.synthetic import write_synthetic
from halluprobe.captions.chair.families import NltkLineTools, family_named
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


# caption_lines of the demo's stored caption runs (tests/golden/frozen/runs), 50 resamples, as
# the dict-based table printed them before issue 31 (the records must print the same)
STORED_CAPTION_LINES = (
    'captions of the same 120 scenes, CHAIR (chair@singularize, words split without punkt; sampling temperature 1.0, seed 0): greedy CHAIR_s 55.8% CHAIR_i 23.7% recall 73.9% length 14.3; vcd:alpha=1,beta=0.1 sampled CHAIR_s 51.7% CHAIR_i 25.1% recall 64.9% length 12.8; sampled CHAIR_s 65.0% CHAIR_i 29.2% recall 67.9% length 14.3',
    'vcd:alpha=1,beta=0.1 minus greedy: CHAIR_s -4.2 [-13.0, +5.6] (at its length -0.5 [-13.0, +13.6]), CHAIR_i +1.4 [-2.0, +6.4], length -1.6 [-1.9, -1.3]; minus sampled: CHAIR_s -13.3 [-22.5, -3.6] (at its length -10.1 [-19.8, +5.6]), CHAIR_i -4.2 [-8.0, +1.4], length -1.5 [-2.1, -1.2] (CHAIR in points, length in words; paired 95% CIs)',
)


def test_caption_lines_of_the_stored_demo_runs_are_unchanged(tmp_path: Path) -> None:
    import _frozen_outputs

    from halluprobe.captions.chair.families import family_named
    from halluprobe.captions.chair.groundtruth import load_ground_truth
    from halluprobe.captions.comparison.runs import load_comparison
    from halluprobe.captions.comparison.table import decoding_table
    from halluprobe.demo_captions import (
        CAPTION_FAMILY,
        CAPTION_TOKENIZER,
        CaptionDemo,
        caption_lines,
    )

    _frozen_outputs.lay_out(tmp_path)
    d = tmp_path / "halluprobe-demo"
    demo = CaptionDemo(greedy=d / "captions-greedy", method=d / "captions-vcd", sampled=d / "captions-sampled",
                       ground_truth=d / "captions" / "ground_truth.jsonl", n_resamples=50)  # fmt: skip
    demo.table = decoding_table(load_comparison(demo.greedy, [demo.method], demo.sampled), family=family_named(CAPTION_FAMILY, tokenizer=CAPTION_TOKENIZER),
                                ground_truth=load_ground_truth(demo.ground_truth), n_resamples=50, seed=0)  # fmt: skip
    lines = caption_lines(demo)
    assert tuple(lines[:2]) == STORED_CAPTION_LINES and lines[2] == f"compare: {demo.command}"
