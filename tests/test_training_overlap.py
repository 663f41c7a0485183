"""The training-image overlap of COCO benchmarks: the shipped val2017 id list, COCO names, and a
small fake COCO POPE run (some val2017 images, some val2014 images that went to train2017)
counted and scored on its held-out part by ``audit``, ``score --images``, ``report``.

The held-out figures are recomputed here from ``samples.jsonl`` with plain Python; the CI is
compared with the project's one metric kernel over the rows chosen by hand."""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.audit import audit_run, summarise_audit
from halluprobe.audit.overlap import NOT_COCO
from halluprobe.backends.scripted import ScriptedBackend
from halluprobe.benchmarks.coco_split import (
    TRAIN2017_TRAINED,
    VAL2017_COUNT,
    VAL2017_SHA256,
    CocoImage,
    coco_image,
    image_overlap,
    val2017_ids,
)
from halluprobe.benchmarks.question_file import read_questions
from halluprobe.cli import app
from halluprobe.metrics.score import ScoreRow, score_rows
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.runner import run_questions

RESAMPLES = 200
runner = CliRunner()
VAL2017 = (139, 285, 632, 724, 776)  # in COCO val2017
TRAIN2017 = (9, 25, 30, 34, 36, 42, 49)  # val2014-named here, outside val2017: train2017 since 2017
OBJECTS = ["cat", "dog", "umbrella", "cup", "car", "person", "bus", "apple", "chair", "kite", "oven", "bird"]


def test_shipped_val2017_ids_are_pinned() -> None:
    data = resources.files("halluprobe.benchmarks").joinpath("data", "coco_val2017_ids.txt").read_bytes()
    assert hashlib.sha256(data).hexdigest() == VAL2017_SHA256
    ids = [int(x) for x in data.decode("ascii").splitlines()]
    assert len(ids) == len(set(ids)) == VAL2017_COUNT == 5000 and ids == sorted(ids)
    assert ids[:3] == [139, 285, 632] and ids[-1] == 581781
    assert val2017_ids() == frozenset(ids)
    assert not set(TRAIN2017) & set(ids) and set(VAL2017) <= set(ids)


def test_a_changed_id_file_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from halluprobe.benchmarks import coco_split
    from halluprobe.errors import RuntimeFailure

    monkeypatch.setattr(coco_split, "VAL2017_SHA256", "0" * 64)
    val2017_ids.cache_clear()
    try:
        with pytest.raises(RuntimeFailure, match="sha256"):
            val2017_ids()
    finally:
        monkeypatch.undo()
        val2017_ids.cache_clear()
    assert len(val2017_ids()) == 5000


def test_coco_names() -> None:
    assert coco_image("COCO_val2014_000000310196.jpg") == CocoImage(310196, "val2014")
    assert coco_image("some/folder/COCO_train2014_000000000009.jpg") == CocoImage(9, "train2014")
    assert coco_image("val2017/000000000139.jpg") == CocoImage(139, None)
    for other in ("scene_00000.png", "AMBER_1.jpg", "img001.png", "COCO_val2014_123.jpg", ""):
        assert coco_image(other) is None
    counts = image_overlap(["COCO_val2014_000000000139.jpg", "COCO_val2014_000000000009.jpg", "000000000025.jpg",
                            "COCO_test2015_000000000001.jpg", "kitchen.png", "kitchen.png"])  # fmt: skip
    assert (counts.images, counts.coco_images, counts.val2017, counts.train2017, counts.unplaced) == (5, 4, 1, 1, 2)
    assert not image_overlap(["scene_00000.png"]).is_coco
    # a bare id (an imported caption run's image): train2017 only where COCO annotations hold it
    assert coco_image("3501") == CocoImage(3501, None)
    assert image_overlap(["139", "9"]).unplaced == 1 and image_overlap(["139", "9"], annotated=True).train2017 == 1
    assert TRAIN2017_TRAINED[0].model == "LLaVA-1.5" and "haotian-liu/LLaVA" in TRAIN2017_TRAINED[0].source


def _world(root: Path, names: list[str]) -> tuple[Path, dict[str, Path], Path]:
    """Images, POPE-format random/popular files (3 positives and 3 negatives per image), a script."""
    images = root / "images"
    images.mkdir(parents=True)
    present: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        Image.new("RGB", (4, 4), (i * 20 % 255, 0, 0)).save(images / name, format="PNG")
        present[name] = [OBJECTS[(i + j * 4) % 12] for j in range(3)]
    files = {}
    for split, shift in (("random", 1), ("popular", 2)):
        lines, qid = [], 1
        for name, objs in present.items():
            absent = [o for o in OBJECTS if o not in objs]
            for pos, neg in zip(objs, absent[shift:]):
                for obj, label in ((pos, "yes"), (neg, "no")):
                    lines.append(json.dumps({"question_id": qid, "image": name, "text": f"Is there a {obj} in the image?", "label": label}))
                    qid += 1
        files[split] = root / f"coco_pope_{split}.json"
        files[split].write_text("\n".join(lines) + "\n")
    script = root / "script.json"
    script.write_text(json.dumps({"present": present, "hallucinate": {"dog": 0.6, "car": 0.5, "kite": 0.4, "oven": 0.5}, "seed": 3}))
    return images, files, script


def _run(root: Path, names: list[str]) -> Path:
    images, files, script = _world(root, names)
    backend = ScriptedBackend(str(script), batch_size=8)
    questions = [q for split, f in files.items() for q in read_questions(f, split=split)]
    config = RunConfig(model=str(script), backend="scripted", overwrite=True)
    header = make_header(config, backend, {s: (f, sha256_file(f)) for s, f in files.items()}, images)
    run_questions(backend, questions, images, RunDir(root / "run"), config, header)
    return root / "run"


@pytest.fixture(scope="module")
def coco_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    names = [f"COCO_val2014_{i:012d}.jpg" for i in (*VAL2017, *TRAIN2017)]
    return _run(tmp_path_factory.mktemp("coco_pope"), names)


@pytest.fixture(scope="module")
def other_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("other_pope"), [f"scene_{i:05d}.png" for i in range(6)])


def _held_out_by_hand(run: Path) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    """The samples about val2017 images and their per-split F1 under the ``wrong`` policy, from
    samples.jsonl and the scored decisions."""
    from _scored import scored_samples

    decided = {s.key: s.readouts["dynamic"].decision for s in scored_samples(run)}
    lines = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    held = [x for x in lines if int(x["image"][-16:-4]) in VAL2017]
    f1: dict[str, float | None] = {}
    for split in ("random", "popular"):
        rows = [x for x in held if x["split"] == split]
        tp = sum(x["label"] == "yes" and decided[(split, x["question_id"])] == "yes" for x in rows)
        fp = sum(x["label"] == "no" and decided[(split, x["question_id"])] == "yes" for x in rows)
        yes = sum(x["label"] == "yes" for x in rows)
        f1[split] = 2 * tp / (2 * tp + fp + yes - tp) if (2 * tp + fp + yes - tp) else None
    for x in held:
        x["decision"] = decided[(x["split"], x["question_id"])]
    return held, f1


def test_audit_counts_train2017_images_and_scores_the_held_out_part(coco_run: Path) -> None:
    audit = audit_run(coco_run, n_resamples=RESAMPLES, seed=0)
    o = audit.training_overlap
    assert o is not None
    assert (o.images, o.coco_images, o.val2017, o.train2017, o.unplaced) == (12, 12, 5, 7, 0)
    assert o.val2017_ids_sha256 == VAL2017_SHA256 and o.readout == "dynamic"
    held, f1 = _held_out_by_hand(coco_run)
    assert o.held_out is not None and o.in_train2017 is not None
    assert o.held_out.macro.n == len(held) == 5 * 3 * 2 * 2
    assert o.in_train2017.macro.n == 7 * 3 * 2 * 2
    for split, value in f1.items():
        assert o.held_out.splits[split].f1 == pytest.approx(value)
    # the CI: the image-clustered bootstrap of the one metric kernel over the held-out rows alone
    rows = [ScoreRow(split=x["split"], question_id=x["question_id"], image=x["image"], label=x["label"], decision=x["decision"],
                     p_yes=None, error=x["error"] is not None) for x in held]  # fmt: skip
    expected = score_rows(rows, readout="dynamic", policy="wrong", n_resamples=RESAMPLES, seed=0)
    assert o.held_out.macro.ci["f1"] == pytest.approx(expected.macro.ci["f1"])
    lo, hi = o.held_out.macro.ci["f1"]
    assert lo <= o.held_out.macro.f1 <= hi and lo < hi
    lines = summarise_audit(audit)
    assert any(line.startswith("COCO train2017 images: 7 of 12 images (58.3%") for line in lines)
    assert any(line.startswith(f"held out, val2017 images ({len(held)} questions): dynamic macro F1") for line in lines)
    assert any(line.startswith(f"train2017 images ({7 * 12} questions): dynamic macro F1") for line in lines)
    assert any("LLaVA-1.5" in line and "train2017" in line for line in lines)
    # audit.json round-trips with the record
    RunDir(coco_run).write_audit(audit)
    assert RunDir(coco_run).read_audit() == audit


def test_score_images_held_out_on_the_cli(coco_run: Path) -> None:
    metrics = coco_run / "metrics.json"
    before = metrics.read_bytes() if metrics.exists() else None
    done = runner.invoke(app, ["score", str(coco_run), "--images", "held-out", "--resamples", str(RESAMPLES), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    audit = audit_run(coco_run, n_resamples=RESAMPLES, seed=0)
    assert audit.training_overlap is not None and audit.training_overlap.held_out is not None
    assert report["macro"]["f1"] == pytest.approx(audit.training_overlap.held_out.macro.f1)
    assert report["macro"]["ci"]["f1"] == pytest.approx(list(audit.training_overlap.held_out.macro.ci["f1"]))
    assert (metrics.read_bytes() if metrics.exists() else None) == before  # a part's score never replaces the run's
    plain = runner.invoke(app, ["score", str(coco_run), "--images", "train2017", "--resamples", "50"])
    assert plain.exit_code == 0 and "COCO train2017 images: 7 of 12 images" in plain.stdout
    for bad in (["--images", "val"], ["--images", "held-out", "--markdown"], ["--images", "held-out", "--per-question", "x.jsonl"]):
        refused = runner.invoke(app, ["score", str(coco_run), *bad])
        assert refused.exit_code == 2 and "--images" in refused.output


def test_a_run_of_other_images_is_said_not_coco(other_run: Path, tmp_path: Path) -> None:
    audit = audit_run(other_run, n_resamples=20, seed=0)
    assert audit.training_overlap is None and "training_overlap" not in audit.to_json_dict()
    assert not any("train2017" in line for line in summarise_audit(audit))
    done = runner.invoke(app, ["audit", str(other_run), "--resamples", "20"])
    assert done.exit_code == 0 and NOT_COCO in done.stderr and "train2017" not in done.stdout
    refused = runner.invoke(app, ["score", str(other_run), "--images", "held-out"])
    assert refused.exit_code == 2 and "run.json" in refused.output and "no image of this run has a COCO file name" in refused.output
    report = runner.invoke(app, ["report", str(other_run), "--resamples", "20", "--out", str(tmp_path / "r.html")])
    assert report.exit_code == 0 and NOT_COCO in report.stderr
    assert "Training images" not in (tmp_path / "r.md").read_text()


def test_report_has_the_training_images_section(coco_run: Path, tmp_path: Path) -> None:
    done = runner.invoke(app, ["report", str(coco_run), "--resamples", "50", "--out", str(tmp_path / "r.html")])
    assert done.exit_code == 0, done.output
    md = (tmp_path / "r.md").read_text()
    html = (tmp_path / "r.html").read_text()
    assert "## Training images" in md and "- COCO train2017 images: 7 of 12 images (58.3%" in md
    assert 'id="training-images"' in html and 'href="#training-images"' in html and "LLaVA-1.5" in html
    check = runner.invoke(app, ["check", str(tmp_path / "r.md")])
    assert check.exit_code == 0, check.output
