"""The training-image overlap of caption benchmarks: `objhal` and `chair` count the COCO images
by 2017 split and score the held-out (val2017) images alone; the held-out numbers are the
numbers the same scorer gives on those images' answers alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _chair import FixtureTools, wordnet_or_skip, write_coco
from _objhal import SYNONYMS_TEXT, write_answers
from test_objhal_cli import _mirror
from typer.testing import CliRunner

from halluprobe.benchmarks.coco_split import val2017_ids
from halluprobe.captions.chair import families as chair_families
from halluprobe.captions.chair.evaluate import chair_results
from halluprobe.captions.chair.groundtruth import shipped_ground_truth
from halluprobe.captions.chair.held_out import chair_held_out, in_val2017, key_overlap
from halluprobe.captions.chair.scoring import Caption, ChairSettings
from halluprobe.cli import app

runner = CliRunner()

# Object HalBench fixture (test_objhal_rules' answers), images 1 and 2 moved to val2017 ids
HELD, TRAINED = (139, 285), (3, 4)
_ANSWERS = [
    (139, "Assistant: a man and two dogs near a toilet seat ."),
    (139, "the seat of the toilet and a chair"),
    (285, "two buses and a motor bike on the road , a passenger jet above"),
    (285, "a baby bear and a teddy bear with a bow tie"),
    (3, "nothing to see here  at all"),
    (3, "wine glasses , a mug , a mug and skis"),
    (4, "people in a taxi next to a train track and a locomotive"),
    (4, "a dog a dog a dog"),
]
_INSTANCES = {139: ["person", "toilet"], 285: ["bus"], 3: ["cup"], 4: ["person", "car"]}
_CAPTIONS = {139: ["a man sits"], 285: ["a baby bear"], 3: ["glasses of wine"], 4: ["a dog in a taxi"]}


def test_fixture_ids_and_key_overlap() -> None:
    assert all(i in val2017_ids() for i in HELD) and not any(i in val2017_ids() for i in TRAINED)
    assert in_val2017(139) and in_val2017("COCO_val2014_000000000139.jpg") and not in_val2017(3) and not in_val2017("scene_00000.png")
    # a bare id states no 2014 split: train2017 only against COCO's annotations; a val2014 name states it
    bare = key_overlap([139, 3, 4], annotated=False)
    assert (bare.val2017, bare.train2017, bare.unplaced) == (1, 0, 2)
    assert (key_overlap([139, 3, 4], annotated=True).train2017) == 2
    named = key_overlap([], names=["COCO_val2014_000000000139.jpg", "COCO_val2014_000000000003.jpg", "x.png"], annotated=False)
    assert (named.images, named.coco_images, named.val2017, named.train2017) == (3, 2, 1, 1)
    assert not key_overlap(["scene_00000.png", "AMBER_1.jpg"], annotated=True).is_coco


def _objhal(tmp_path: Path, answers: Path, *extra: str) -> list[str]:
    syn = tmp_path / "synonyms_refine.txt"
    syn.write_text(SYNONYMS_TEXT)
    coco = write_coco(tmp_path / "coco", "2014", _INSTANCES, _CAPTIONS)
    return ["objhal", str(answers), "--coco", str(coco), "--synonyms", str(syn), "--tokenizer", "line", "--families", "none",
            "--bootstrap", "50", *extra]  # fmt: skip


def test_objhal_held_out_equals_the_subset_scored_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wordnet_or_skip()
    _mirror(tmp_path, monkeypatch, b"")  # the pins only
    full = write_answers(tmp_path / "all.jsonl", _ANSWERS)
    held = write_answers(tmp_path / "held.jsonl", [a for a in _ANSWERS if a[0] in HELD])
    got = runner.invoke(app, _objhal(tmp_path, full, "--json"))
    alone = runner.invoke(app, _objhal(tmp_path, held, "--json"))
    assert got.exit_code == 0 and alone.exit_code == 0, got.output + alone.output
    overlap = json.loads(got.stdout)["training_overlap"]
    assert {k: overlap[k] for k in ("images", "coco_images", "val2017", "train2017", "unplaced")} == \
        {"images": 4, "coco_images": 4, "val2017": 2, "train2017": 2, "unplaced": 0}  # fmt: skip
    summary = json.loads(alone.stdout)["summary"]
    assert overlap["held_out"] == summary and summary["n_responses"] == 4
    assert overlap["held_out"] != json.loads(got.stdout)["summary"]  # not the full score by another name
    text = runner.invoke(app, _objhal(tmp_path, full))
    assert text.exit_code == 0, text.output
    rh, mh = (f"{100 * summary[k]:.2f} [{100 * summary['ci'][k][0]:.2f}, {100 * summary['ci'][k][1]:.2f}]"
              for k in ("response_hallucination", "mention_hallucination"))  # fmt: skip
    assert f"  held out, val2017 images (4 answers): response hallucination {rh}, mention hallucination {mh}\n" in text.output
    assert "  COCO train2017 images: 2 of 4 images (50.0%" in text.output and "held out (val2017): 2" in text.output


def test_objhal_no_val2017_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wordnet_or_skip()
    _mirror(tmp_path, monkeypatch, b"")
    only = write_answers(tmp_path / "trained.jsonl", [a for a in _ANSWERS if a[0] in TRAINED])
    got = runner.invoke(app, _objhal(tmp_path, only, "--json"))
    assert got.exit_code == 0, got.output
    overlap = json.loads(got.stdout)["training_overlap"]
    assert overlap["held_out"] is None and (overlap["val2017"], overlap["train2017"]) == (0, 2)
    assert "held out, val2017 images: no answers" in runner.invoke(app, _objhal(tmp_path, only)).output


@pytest.fixture
def fixture_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    wordnet_or_skip()
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())


def _chair_ids() -> tuple[list[int], list[int]]:
    ids = sorted(shipped_ground_truth("chair@lemmatizer").objects)
    return [i for i in ids if i in val2017_ids()][:3], [i for i in ids if i not in val2017_ids()][:5]


_TEXTS = ["a dog and a person sitting on a bench", "a cat on a couch", "a person riding a horse next to a car"]


def _caption_file(path: Path, ids: list[int]) -> Path:
    path.write_text("".join(json.dumps({"image_id": i, "caption": _TEXTS[i % 3]}) + "\n" for i in ids))
    return path


def test_chair_held_out_equals_the_subset_scored_alone(fixture_nltk: None) -> None:
    held, trained = _chair_ids()
    caps = [Caption(image_id=i, text=_TEXTS[i % 3]) for i in trained + held]
    names = ["chair@lemmatizer", "chair@singularize"]
    truth = shipped_ground_truth
    results, per_caption = chair_results(caps, ChairSettings(captions="x"), names, truth, n_resamples=40, seed=3)
    got = chair_held_out(results, per_caption, n_resamples=40, seed=3)
    assert got is not None and (got.images, got.val2017, got.train2017, got.unplaced) == (8, 3, 5, 0)
    alone, _ = chair_results([c for c in caps if c.image_id in held], ChairSettings(captions="x"), names, truth, n_resamples=40, seed=3)
    assert got.held_out == {n: alone.families[n].summary for n in names} and got.held_out["chair@lemmatizer"].n == 3
    none, per = chair_results([c for c in caps if c.image_id in trained], ChairSettings(captions="x"), names, truth, n_resamples=0)
    empty = chair_held_out(none, per, n_resamples=0)
    assert empty is not None and empty.held_out == {} and empty.train2017 == 5


def _family_cells(output: str, family: str) -> str:
    found = re.search(rf"^{family}: n=\d+ (chair_s \S+ \[[^]]+\])  (chair_i \S+ \[[^]]+\])", output, re.MULTILINE)
    assert found, output
    return f"{family} CHAIR_s {found.group(1).removeprefix('chair_s ')}, CHAIR_i {found.group(2).removeprefix('chair_i ')}"


def test_chair_verb_and_page_show_the_held_out_chair(tmp_path: Path, fixture_nltk: None) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    held, trained = _chair_ids()
    full = _caption_file(tmp_path / "all.jsonl", trained + held)
    args = ["--format", "opera", "--family", "lemmatizer", "--bootstrap", "30"]
    got = runner.invoke(app, ["chair", str(full), *args])
    alone = runner.invoke(app, ["chair", str(_caption_file(tmp_path / "held.jsonl", held)), *args])
    assert got.exit_code == 0 and alone.exit_code == 0, got.output + alone.output
    assert "COCO train2017 images: 5 of 8 images (62.5%" in got.output and "held out (val2017): 3" in got.output
    line = f"held out, val2017 images (3 captions): {_family_cells(alone.output, 'chair@lemmatizer')}\n"
    assert line in got.output and "train2017 is in the published training data of: LLaVA-1.5" in got.output
    as_json = runner.invoke(app, ["chair", str(full), *args, "--json"])  # the families' mapping, as before
    assert as_json.exit_code == 0 and set(json.loads(as_json.stdout)) == {"chair@lemmatizer"}
    # the report's CHAIR page: the same lines (its bootstrap: --resamples, seed 0)
    assert runner.invoke(app, ["import", "opera", str(full), "--out", str(tmp_path / "run")]).exit_code == 0
    done = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html"), "--resamples", "30"])
    assert done.exit_code == 0, done.output
    page_alone = runner.invoke(app, ["chair", str(tmp_path / "held.jsonl"), "--format", "opera", "--family", "lemmatizer", "--bootstrap", "30", "--seed", "0"])
    md = (tmp_path / "r.md").read_text()
    assert "## Training images" in md and "- COCO train2017 images: 5 of 8 images" in md
    assert f"- held out, val2017 images (3 captions): {_family_cells(page_alone.output, 'chair@lemmatizer')}\n" in md
    assert "held out, val2017 images (3 captions): chair@singularize CHAIR_s" in md  # the page scores both families
