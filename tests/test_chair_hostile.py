"""CHAIR and AMBER under hostile input (issue 32): images that share a number stay apart, no
user file is replaced, work is bounded, and every bad input is one line naming where it is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _chair import FixtureTools, write_coco
from typer.testing import CliRunner

from halluprobe.captions.chair import families as chair_families
from halluprobe.captions.chair.evaluate import ChairResults
from halluprobe.cli import app

runner = CliRunner()
SINGULARIZE = ["--family", "singularize", "--bootstrap", "0"]  # no tagger, no WordNet needed


@pytest.fixture(autouse=True)
def fixture_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real tokenizer needs NLTK data no test can download: the fixture's stands in."""
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _one_line(output: str) -> bool:
    return len(output.strip().splitlines()) == 1


def test_images_that_end_in_the_same_number_are_two_images(tmp_path: Path) -> None:
    # finding 2: kitchen_1.png and street_1.png were both image 1, their ground truths unioned
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": "kitchen_1.png", "caption": "a cup and a car"},
                                                {"image_id": "street_1.png", "caption": "a car"}])  # fmt: skip
    truth = _lines(tmp_path / "gt.jsonl", [{"image": "kitchen_1.png", "objects": ["cup"]}, {"image": "street_1.png", "objects": ["car"]}])
    result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), *SINGULARIZE, "--json", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["chair@singularize"]["summary"]
    assert summary["chair_s"] == 0.5 and summary["settings"]["ground_truth"]["images"] == 2  # the car in the kitchen is invented
    shown = [json.loads(x)["image_id"] for x in (tmp_path / "o" / "chair_singularize.jsonl").read_text().splitlines()]
    assert shown == ["kitchen_1.png", "street_1.png"]  # a number two images share names neither
    # chair_summary.json reads back as the record it was written from, and writes the same bytes
    written = (tmp_path / "o" / "chair_summary.json").read_text()
    again = ChairResults.model_validate(json.loads(written))
    assert json.dumps(again.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n" == written
    assert again.families["chair@singularize"].summary.settings.captions == str(captions)


def test_coco_names_and_ids_are_one_image_and_numbered_names_keep_their_number(tmp_path: Path) -> None:
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": "val2014/COCO_val2014_000000000007.jpg", "caption": "a dog"},
                                                {"image_id": "scene_00003.png", "caption": "a cat"}])  # fmt: skip
    truth = _lines(tmp_path / "gt.jsonl", [{"image_id": 7, "objects": ["dog"]}, {"image": "scene_00003.png", "objects": ["cat"]}])
    result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), *SINGULARIZE, "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    shown = [json.loads(x)["image_id"] for x in (tmp_path / "o" / "chair_singularize.jsonl").read_text().splitlines()]
    assert shown == [7, 3]  # as earlier versions wrote them (the demo's scene_NNNNN.png among them)
    # a ground truth that names a numbered scene by its number only is not that scene's
    by_number = _lines(tmp_path / "gt2.jsonl", [{"image_id": 7, "objects": ["dog"]}, {"image_id": 3, "objects": ["cat"]}])
    refused = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(by_number), *SINGULARIZE])
    assert refused.exit_code == 2 and f"{captions}:2: image scene_00003.png is not in the ground truth" in refused.output


def test_two_ground_truth_lines_for_one_image(tmp_path: Path) -> None:
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": "a_1.png", "caption": "a car"}])
    twice = _lines(tmp_path / "gt.jsonl", [{"image": "a_1.png", "objects": ["cup"]}, {"image": "a_1.png", "objects": ["car"]}])
    refused = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(twice), *SINGULARIZE])
    assert refused.exit_code == 2 and _one_line(refused.output), refused.output
    assert f"{twice}:2: image a_1.png has a line already (line 1)" in refused.output
    same = _lines(tmp_path / "gt2.jsonl", [{"image": "a_1.png", "objects": ["car"]}, {"image": "a_1.png", "objects": ["Car"]}])
    assert runner.invoke(app, ["chair", str(captions), "--ground-truth", str(same), *SINGULARIZE]).exit_code == 0


@pytest.mark.parametrize("name", ["chair_summary.json", "chair_report.md", "chair_table.tex", "chair_singularize.jsonl",
                                  "ground_truth_singularize.json"])  # fmt: skip
def test_chair_out_replaces_no_file_without_overwrite(tmp_path: Path, name: str) -> None:
    # finding 4: only chair_summary.json was checked; every file the verb writes is now
    coco = write_coco(tmp_path / "ann", "2014", {1: ["dog"]}, {1: ["a dog"]})
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": 1, "caption": "a dog"}])
    out = tmp_path / "paper"
    out.mkdir()
    (out / name).write_text("the user's own\n")
    (out / "notes.txt").write_text("kept\n")
    argv = ["chair", str(captions), "--coco", str(coco), *SINGULARIZE, "--out", str(out)]
    refused = runner.invoke(app, argv)
    assert refused.exit_code == 2 and _one_line(refused.output) and "--overwrite" in refused.output, refused.output
    assert sorted(p.name for p in out.iterdir()) == sorted({name, "notes.txt"})  # nothing written
    assert (out / name).read_text() == "the user's own\n"
    replaced = runner.invoke(app, [*argv, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert (out / name).read_text() != "the user's own\n" and (out / "notes.txt").read_text() == "kept\n"


def test_chair_out_naming_a_file_or_a_dangling_link(tmp_path: Path) -> None:
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": 1, "caption": "a dog"}])
    truth = _lines(tmp_path / "gt.jsonl", [{"image_id": 1, "objects": ["dog"]}])
    file = tmp_path / "a-file"
    file.write_text("mine\n")
    link = tmp_path / "link"
    os.symlink(tmp_path / "nowhere", link)
    for out in (file, link):
        result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), *SINGULARIZE, "--out", str(out)])
        assert result.exit_code == 2 and _one_line(result.output) and str(out) in result.output, result.output
    assert file.read_text() == "mine\n" and not (tmp_path / "nowhere").exists()


def test_chair_resamples_are_capped_as_scores(tmp_path: Path) -> None:
    # finding 9: 10^9 resamples exhausted memory; score's cap (100,000) holds here too
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": 1, "caption": "a dog"}])
    truth = _lines(tmp_path / "gt.jsonl", [{"image_id": 1, "objects": ["dog"]}])
    result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), "--family", "singularize", "--bootstrap", "100001"])
    assert result.exit_code == 2 and "--bootstrap 100001 is over the limit of 100,000" in result.output and _one_line(result.output)


def test_an_overlong_caption_is_one_line_naming_it(tmp_path: Path) -> None:
    # finding 10: a 50 MB caption ran into NLTK's regex time guard (a traceback); long ones are refused first
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": 1, "caption": "a dog"}, {"image_id": 1, "caption": "dog " * 50_000}])
    truth = _lines(tmp_path / "gt.jsonl", [{"image_id": 1, "objects": ["dog"]}])
    result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), *SINGULARIZE])
    assert result.exit_code == 2 and _one_line(result.output), result.output
    assert f"{captions}:2: a caption of 200,000 characters is over the limit" in result.output


def test_nltks_time_guard_is_one_line_naming_the_caption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def too_slow(self: FixtureTools, text: str) -> list[str]:
        raise TimeoutError("regex timed out")

    monkeypatch.setattr(FixtureTools, "tokenize", too_slow)
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": 1, "caption": "a dog"}])
    truth = _lines(tmp_path / "gt.jsonl", [{"image_id": 1, "objects": ["dog"]}])
    result = runner.invoke(app, ["chair", str(captions), "--ground-truth", str(truth), *SINGULARIZE])
    assert result.exit_code == 2 and _one_line(result.output), result.output
    assert f"{captions}:1: a caption of 5 characters could not be split into words in time" in result.output


@pytest.mark.parametrize("bad", ["abc", 1.5, None])
def test_coco_instances_with_a_non_integer_image_id(tmp_path: Path, bad: object) -> None:
    coco = write_coco(tmp_path / "ann", "2014", {1: ["dog"]}, {1: ["a dog"]})
    instances = json.loads((coco / "instances_val2014.json").read_text())
    instances["annotations"][0]["image_id"] = bad
    (coco / "instances_val2014.json").write_text(json.dumps(instances))
    captions = _lines(tmp_path / "caps.jsonl", [{"image_id": 1, "caption": "a dog"}])
    result = runner.invoke(app, ["chair", str(captions), "--coco", str(coco), *SINGULARIZE])
    assert result.exit_code == 2 and _one_line(result.output), result.output
    assert "instances_val2014.json" in result.output and "is not an integer" in result.output
