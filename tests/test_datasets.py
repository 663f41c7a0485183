"""The pinned POPE datasets: content fingerprints, fetching through file:// mirrors, DASH-B and
POPEv2 conversion and their own metrics, and the fingerprint in run.json and in imports."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.benchmarks.dataset_files import DASHB_QUERY, dashb_questions, fetch_dataset, popev2_questions
from halluprobe.benchmarks.datasets import DATASETS, DatasetVersion, SourceFile, dataset_version, identify_fingerprint
from halluprobe.benchmarks.fingerprint import content_fingerprint
from halluprobe.benchmarks.question_file import read_questions
from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.metrics.datasets import dashb_scores, popev2_paired_drop
from halluprobe.metrics.score import ScoreRow

runner = CliRunner()
HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HALLUPROBE_GITHUB_URL", raising=False)


def _records(n_images: int = 3) -> list[dict[str, object]]:
    rows = []
    for i in range(n_images):
        for obj, label in (("dog", "yes"), ("building", "no")):
            rows.append({"question_id": len(rows) + 1, "image": f"{2405722 + i}.jpg", "text": f"Is there a {obj} in the image?", "label": label})
    return rows


def _write_array(path: Path, records: list[dict[str, object]]) -> bytes:
    data = json.dumps(records, indent=4).encode()  # pretty-printed, as POPE's SEEM files
    path.write_bytes(data)
    return data


# -- fingerprints ------------------------------------------------------------------------------


def test_a_json_array_and_its_json_lines_copy_have_one_fingerprint(tmp_path: Path) -> None:
    records = _records()
    _write_array(tmp_path / "gqa_pope_random.json", records)
    lines = "\r\n".join(json.dumps(r) for r in records) + "\r\n"  # JSON lines, CRLF, as VCD's copies are not
    (tmp_path / "copy_pope_random.json").write_bytes(lines.encode())
    a = read_questions(tmp_path / "gqa_pope_random.json")
    b = read_questions(tmp_path / "copy_pope_random.json")
    assert [q.model_dump() for q in a] == [q.model_dump() for q in b]
    assert (tmp_path / "gqa_pope_random.json").read_bytes() != (tmp_path / "copy_pope_random.json").read_bytes()
    expected = hashlib.sha256(
        json.dumps([{k: r[k] for k in sorted(r)} for r in records], separators=(",", ":"), sort_keys=True).encode()
    ).hexdigest()  # the documented definition, computed here without the module
    assert content_fingerprint(a) == content_fingerprint(b) == expected
    # a changed label, or another order, is another fingerprint
    flipped = [dict(r, label="yes") if r["question_id"] == 2 else r for r in records]
    _write_array(tmp_path / "f_pope_random.json", flipped)
    _write_array(tmp_path / "r_pope_random.json", list(reversed(records)))
    assert content_fingerprint(read_questions(tmp_path / "f_pope_random.json")) != expected
    assert content_fingerprint(read_questions(tmp_path / "r_pope_random.json")) != expected


def test_a_bad_record_in_an_array_names_its_line(tmp_path: Path) -> None:
    records = _records(1)
    records[1] = {**records[1], "label": "maybe"}
    _write_array(tmp_path / "x_pope_random.json", records)
    with pytest.raises(InputError) as ei:
        read_questions(tmp_path / "x_pope_random.json")
    # record 2 opens on line 8 of the pretty-printed array (7 lines per record, "[" first)
    assert ei.value.line == 8 and "unknown label 'maybe'" in str(ei.value)


def test_the_registry_is_pinned_and_detects_published_files() -> None:
    for versions in DATASETS.values():
        for v in versions.values():
            for name, sources in v.sources.items():
                assert HEX64.match(v.fingerprints[name])
                assert all(HEX64.match(s.sha256) and re.match(r"^[0-9a-f]{40}$", s.commit) for s in sources)
    # LLaVA-1.5's random split: 2,910 questions, its own fingerprint, one version only
    assert dataset_version("coco", "2023-08").counts["random"] == 2910
    llava = dataset_version("coco", "2023-08-10").fingerprints["coco_pope_random.json"]
    assert identify_fingerprint(llava) == ["coco@2023-08-10:coco_pope_random.json"]
    # the random split did not change from 2023-10-09 to 2023-11-16: both are named
    current = dataset_version("coco").fingerprints["coco_pope_random.json"]
    assert identify_fingerprint(current) == ["coco@2023-10-09:coco_pope_random.json", "coco@2023-11-16:coco_pope_random.json"]
    assert identify_fingerprint("0" * 64) == []
    assert dataset_version("gqa").copies  # VCD's JSON-lines copies are known by sha256
    for bad in (("nope", None), ("gqa", "2019"), ("coco", "1999")):
        with pytest.raises(InputError):
            dataset_version(*bad)


# -- fetching -----------------------------------------------------------------------------------


def _mirror_file(root: Path, repo: str, commit: str, path: str, data: bytes) -> SourceFile:
    dest = root / repo / commit / path
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return SourceFile(repo, commit, path, hashlib.sha256(data).hexdigest())


def _toy_gqa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[DatasetVersion, list[dict[str, object]]]:
    root = tmp_path / "mirror"
    records = _records()
    data = json.dumps(records, indent=4).encode()
    src = _mirror_file(root, "RUCAIBox/POPE", "9" * 40, "output/seem/gqa/gqa_pope_seem_random.json", data)
    fp = hashlib.sha256(json.dumps(records, separators=(",", ":"), sort_keys=True).encode()).hexdigest()
    version = DatasetVersion("gqa", "toy", "2023-10-26", "pope", {"gqa_pope_random.json": (src,)}, {"gqa_pope_random.json": fp}, "user", {"random": 6})
    monkeypatch.setitem(DATASETS, "gqa", {"toy": version})
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", (root.as_uri()))
    return version, records


def test_data_pope_dataset_fetches_at_the_commit_and_names_missing_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, records = _toy_gqa(tmp_path, monkeypatch)
    images = tmp_path / "vg"
    images.mkdir()
    Image.new("RGB", (4, 4)).save(images / "2405722.jpg")
    result = runner.invoke(app, ["data", "pope", "--dataset", "gqa", "--out", str(tmp_path / "out"), "--images", str(images)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "out" / "gqa_pope_random.json"
    assert json.loads(out.read_text()) == records  # the array, byte for byte
    assert "1 of 3 images present" in result.output
    assert "2 images missing: 2405723.jpg, 2405724.jpg" in result.output
    assert (tmp_path / "out" / "missing-images.txt").read_text() == "2405723.jpg\n2405724.jpg\n"
    # a second fetch is served by the cache, even with the mirror gone
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", (tmp_path / "nowhere").as_uri())
    again = runner.invoke(app, ["data", "pope", "--dataset", "gqa", "--out", str(tmp_path / "out2")])
    assert again.exit_code == 0, again.output


def test_a_download_that_differs_from_its_pin_is_exit_2_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version, _ = _toy_gqa(tmp_path, monkeypatch)
    src = version.sources["gqa_pope_random.json"][0]
    (tmp_path / "mirror" / src.repository / src.commit / src.path).write_text("[]\n")
    result = runner.invoke(app, ["data", "pope", "--dataset", "gqa", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "sha256 mismatch" in line and src.sha256 in line and "gqa_pope_seem_random.json" in line
    assert not (tmp_path / "out").exists()  # nothing fetched, nothing to write: no empty --out left behind
    bad = runner.invoke(app, ["data", "pope", "--dataset", "pope2", "--out", str(tmp_path / "out")])
    assert bad.exit_code == 2 and "unknown POPE dataset 'pope2'" in bad.output


# -- DASH-B and POPEv2 --------------------------------------------------------------------------

NEG = {"coco": {"backpack": ["11.png", "12.png"]}, "objects_365_100": {"tie": ["13.png"]}}
POS = {"coco": {"backpack": ["0.jpg"]}, "objects_365_100": {"tie": ["0.jpg", "1.jpg"]}}  # "0.jpg" twice: two images


def test_dashb_questions_follow_the_authors_loader(tmp_path: Path) -> None:
    (tmp_path / "neg.json").write_text(json.dumps(NEG))
    (tmp_path / "pos.json").write_text(json.dumps(POS))
    questions = dashb_questions(tmp_path / "neg.json", tmp_path / "pos.json")
    # src/data/dash_b.py: negatives then positives, dataset -> object -> file, one query per object
    expected = [("neg/coco/backpack/11.png", "backpack", "no"), ("neg/coco/backpack/12.png", "backpack", "no"),
                ("neg/objects_365_100/tie/13.png", "tie", "no"), ("pos/coco/backpack/0.jpg", "backpack", "yes"),
                ("pos/objects_365_100/tie/0.jpg", "tie", "yes"), ("pos/objects_365_100/tie/1.jpg", "tie", "yes")]  # fmt: skip
    assert [(q.image, q.object, q.label) for q in questions] == expected
    assert [q.question_id for q in questions] == [1, 2, 3, 4, 5, 6]
    assert questions[0].text == "Can you see a backpack in this image? Please answer only with yes or no." == DASHB_QUERY.format("backpack")
    assert len({q.image for q in questions}) == 6  # (object, file name) keeps the two "0.jpg" apart


def test_popev2_pairs_and_the_converted_fetch_checks_its_fingerprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    annotations = []
    for image_id, obj in ((46207, "remote"), (489255, "pizza")):
        for folder, label in (("/images", "No"), ("/coco/train2017", "Yes")):
            name = f"{folder}/{image_id:012d}.jpg"
            annotations.append({"image_id": image_id, "image_name": name, "target_object": obj, "query": f"Is there a {obj} in the image?", "label": label})
    root = tmp_path / "mirror"
    src = _mirror_file(root, "RUCAIBox/POPE", "8" * 40, "POPEv2/dataset/annotations.json", json.dumps(annotations, indent=4).encode())
    questions = popev2_questions(root / src.repository / src.commit / src.path)
    assert [(q.image, q.label, q.metadata["variant"]) for q in questions] == [
        ("edited/000000046207.jpg", "no", "edited"), ("train2017/000000046207.jpg", "yes", "original"),
        ("edited/000000489255.jpg", "no", "edited"), ("train2017/000000489255.jpg", "yes", "original"),
    ]  # fmt: skip
    version = DatasetVersion("popev2", "toy", "2025-08-21", "popev2", {"popev2.jsonl": (src,)}, {"popev2.jsonl": "0" * 64}, "popev2", {"popev2": 4})
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", root.as_uri())
    with pytest.raises(InputError, match="fingerprint"):
        fetch_dataset(version, tmp_path / "out")
    right = DatasetVersion("popev2", "toy", "2025-08-21", "popev2", {"popev2.jsonl": (src,)}, {"popev2.jsonl": content_fingerprint(questions)}, "popev2", {"popev2": 4})
    (path,) = fetch_dataset(right, tmp_path / "out")
    assert [q.image for q in read_questions(path)] == [q.image for q in questions]


def _row(image: str, label: str, decision: str, p_yes: float | None = None, split: str = "s") -> ScoreRow:
    return ScoreRow(split=split, question_id=hash(image) % 10_000, image=image, label=label, decision=decision, p_yes=p_yes)  # type: ignore[arg-type]


def test_dashb_scores_are_the_mean_of_tpr_and_tnr() -> None:
    rows = [_row("pos/a", "yes", "yes"), _row("pos/b", "yes", "yes"), _row("pos/c", "yes", "unknown"), _row("pos/d", "yes", "no"),
            _row("neg/a", "no", "yes"), _row("neg/b", "no", "no")]  # fmt: skip
    d = dashb_scores(rows, n_resamples=200)
    assert (d.n_pos, d.n_neg) == (4, 2)
    assert d.tpr == pytest.approx(2 / 4) and d.tnr == pytest.approx(1 / 2)  # unknown counts as wrong
    assert d.mean_tpr_tnr == pytest.approx(0.5) and d.accuracy == pytest.approx(3 / 6)
    assert d.harmonic_mean == pytest.approx(2 * 0.5 * 0.5 / 1.0)
    assert d.mean_ci is not None and d.mean_ci[0] <= 0.5 <= d.mean_ci[1]


def test_popev2_paired_drop_per_pair_with_a_ci_over_pairs() -> None:
    rows = [
        _row("train2017/1.jpg", "yes", "yes", 0.9), _row("edited/1.jpg", "no", "no", 0.2),  # drop 0.7
        _row("train2017/2.jpg", "yes", "yes", 0.8), _row("edited/2.jpg", "no", "yes", 0.7),  # 0.1, yes to both
        _row("train2017/3.jpg", "yes", "yes"), _row("edited/3.jpg", "no", "no"),  # decisions only: 1.0
        _row("train2017/4.jpg", "yes", "no", 0.4),  # its edit is absent: unpaired
    ]  # fmt: skip
    p = popev2_paired_drop(rows, n_resamples=500, seed=3)
    drops = np.array([0.7, 0.1, 1.0])
    assert (p.pairs, p.unpaired, p.both_correct, p.yes_to_both) == (3, 1, 2, 1)
    assert p.mean_drop == pytest.approx(drops.mean())
    rng = np.random.default_rng(3)  # the same bootstrap over pairs, written out
    reps = drops[rng.integers(0, 3, size=(500, 3))].mean(axis=1)
    assert p.ci == pytest.approx((float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))))


# -- the fingerprint in run.json and in imports ------------------------------------------------


def test_run_json_records_the_question_fingerprint(tmp_path: Path) -> None:
    from halluprobe.rundir import RunDir

    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(images / f"{2405722 + i}.jpg")
    bench = tmp_path / "gqa_pope_random.json"
    _write_array(bench, _records())
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {f"{2405722 + i}.jpg": ["dog"] for i in range(3)}, "seed": 1}))
    args = ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(bench), "--images", str(images), "--out", str(tmp_path / "run")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    header = RunDir(tmp_path / "run").read_header()
    assert header.question_fingerprints == {"random": content_fingerprint(read_questions(bench))}
    # an older run.json without the field still reads, and resumes under the same fingerprint
    raw = json.loads((tmp_path / "run" / "run.json").read_text())
    del raw["question_fingerprints"]
    (tmp_path / "run" / "run.json").write_text(json.dumps(raw, indent=2) + "\n")
    assert RunDir(tmp_path / "run").read_header().question_fingerprints is None
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output


def test_an_import_records_the_fingerprint_and_the_pinned_file_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from halluprobe.rundir import RunDir

    version, records = _toy_gqa(tmp_path, monkeypatch)
    labels = tmp_path / "gqa_pope_random.json"
    _write_array(labels, records)
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"question": r["text"], "image": r["image"], "answer": "No"}) + "\n" for r in records))
    result = runner.invoke(app, ["import", "answers", str(answers), "--labels", str(labels), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    info = RunDir(tmp_path / "run").read_header().backend_info
    assert info["question_fingerprints"] == {"random": version.fingerprints["gqa_pope_random.json"]}
    assert info["question_datasets"] == {"random": ["gqa@toy:gqa_pope_random.json"]}


def test_fingerprint_info_skips_a_labels_file_that_is_not_pope(tmp_path: Path) -> None:
    from halluprobe.benchmarks.fingerprint import fingerprint_info

    pope = tmp_path / "gqa_pope_random.json"
    _write_array(pope, _records())
    keyed_by_id = tmp_path / "marine_label.json"  # MARINE's labels: {"id", "image", "label"}
    keyed_by_id.write_text(json.dumps([{"id": 1, "image": "a.jpg", "label": "yes"}], indent=4))
    info = fingerprint_info({"random": pope, "adversarial": keyed_by_id})
    assert info["question_fingerprints"] == {"random": content_fingerprint(read_questions(pope))}
    assert info["question_datasets"] == {"random": []}


def test_counts_tell_a_version_where_the_fingerprint_does_not() -> None:
    from halluprobe.benchmarks.datasets import counts_hint

    # LLaVA-1.5's random split re-saved or reordered: its counts still name 2023-08-10
    assert counts_hint("random", 2910, 144) == "2910 random questions, 144 reading 'imange': the counts of coco@2023-08-10 (other questions, labels or order)"
    assert "coco@2023-10-09" in counts_hint("adversarial", 3000, 57) and "coco@2023-11-16" not in counts_hint("adversarial", 3000, 57)
    assert "repope@2025-04-10" in counts_hint("random", 2774, 0)
    assert counts_hint("adversarial", 3000, 66).endswith("no pinned version has these counts")  # MARINE's own draw


def test_dashb_fetched_imported_and_scored_with_its_own_metric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "mirror"
    neg = _mirror_file(root, "YanNeu/DASH-B", "1" * 40, "images/dash_benchmark_neg.json", json.dumps(NEG, indent=4).encode())
    pos = _mirror_file(root, "YanNeu/DASH-B", "1" * 40, "images/dash_benchmark_pos.json", json.dumps(POS, indent=4).encode())
    expected = [{"question_id": i + 1, "image": image, "text": DASHB_QUERY.format(obj), "label": label}
                for i, (image, obj, label) in enumerate([
                    ("neg/coco/backpack/11.png", "backpack", "no"), ("neg/coco/backpack/12.png", "backpack", "no"),
                    ("neg/objects_365_100/tie/13.png", "tie", "no"), ("pos/coco/backpack/0.jpg", "backpack", "yes"),
                    ("pos/objects_365_100/tie/0.jpg", "tie", "yes"), ("pos/objects_365_100/tie/1.jpg", "tie", "yes")])]  # fmt: skip
    fp = hashlib.sha256(json.dumps(expected, separators=(",", ":"), sort_keys=True).encode()).hexdigest()
    version = DatasetVersion("dashb", "toy", "2025-03-31", "dashb", {"dashb.jsonl": (neg, pos)}, {"dashb.jsonl": fp}, "user", {"dashb": 6})
    monkeypatch.setitem(DATASETS, "dashb", {"toy": version})
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", root.as_uri())
    fetched = runner.invoke(app, ["data", "pope", "--dataset", "dashb", "--out", str(tmp_path / "dashb"), "--images", str(tmp_path / "imgs")])
    assert fetched.exit_code == 0, fetched.output
    assert "0 of 6 images present" in fetched.output and "6 images missing: neg/coco/backpack/11.png" in fetched.output
    # answers: neg "No", "I don't know" (unknown: wrong), "Yes"; pos "Yes", "yes", "No"
    said = ["No", "I don't know", "Yes", "Yes", "yes", "No"]
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"question": q["text"], "image": q["image"], "answer": a}) + "\n" for q, a in zip(expected, said)))
    imported = runner.invoke(app, ["import", "answers", str(answers), "--labels", str(tmp_path / "dashb" / "dashb.jsonl"), "--out", str(tmp_path / "run")])
    assert imported.exit_code == 0, imported.output
    scored = runner.invoke(app, ["score", str(tmp_path / "run"), "--readout", "text:strict", "--resamples", "50"])
    assert scored.exit_code == 0, scored.output
    # TPR 2/3, TNR 1/3 (the unknown counts wrong), mean 1/2, harmonic 2*(2/3)(1/3)/1 = 4/9
    assert "DASH-B: mean of TPR and TNR 50.0 [" in scored.output
    assert "(TPR 66.7 of 3, TNR 33.3 of 3; accuracy 50.0, harmonic mean 44.4)" in scored.output
    as_json = runner.invoke(app, ["score", str(tmp_path / "run"), "--readout", "text:strict", "--json", "--resamples", "50"])
    assert "DASH-B" not in as_json.output  # the JSON score object is unchanged


def test_popev2_images_originals_fetched_edits_named(tmp_path: Path) -> None:
    from halluprobe.benchmarks.dataset_files import fetch_dataset_images
    from halluprobe.benchmarks.question_file import write_questions

    coco = tmp_path / "coco"  # a local stand-in for images.cocodataset.org, served as file://
    (coco / "train2017").mkdir(parents=True)
    Image.new("RGB", (6, 6), (200, 10, 10)).save(coco / "train2017" / "000000046207.jpg")
    annotations = [{"image_id": 46207, "image_name": n, "target_object": "remote", "query": "Is there a remote in the image?", "label": lab}
                   for n, lab in (("/images/000000046207.jpg", "No"), ("/coco/train2017/000000046207.jpg", "Yes"))]  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps(annotations))
    questions = write_questions(tmp_path / "popev2.jsonl", popev2_questions(tmp_path / "a.json"))
    version = dataset_version("popev2")
    line, missing = fetch_dataset_images(version, [questions], tmp_path / "images", base_url=coco.as_uri())
    assert (tmp_path / "images" / "train2017" / "000000046207.jpg").is_file()
    assert "1 downloaded" in line and missing == ["edited/000000046207.jpg"]


def test_score_prints_popev2s_paired_drop(tmp_path: Path) -> None:
    from halluprobe.benchmarks.question_file import write_questions

    annotations = [{"image_id": i, "image_name": f"{folder}/{i:012d}.jpg", "target_object": "cup", "query": "Is there a cup in the image?", "label": lab}
                   for i in (1, 2) for folder, lab in (("/images", "No"), ("/coco/train2017", "Yes"))]  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps(annotations))
    questions = popev2_questions(tmp_path / "a.json")
    labels = write_questions(tmp_path / "popev2.jsonl", questions)
    said = {"edited/000000000001.jpg": "No", "train2017/000000000001.jpg": "Yes", "edited/000000000002.jpg": "Yes", "train2017/000000000002.jpg": "Yes"}
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"question": q.text, "image": q.image, "answer": said[q.image]}) + "\n" for q in questions))
    imported = runner.invoke(app, ["import", "answers", str(answers), "--labels", str(labels), "--out", str(tmp_path / "run")])
    assert imported.exit_code == 0, imported.output
    scored = runner.invoke(app, ["score", str(tmp_path / "run"), "--readout", "text:pope", "--resamples", "50"])
    assert scored.exit_code == 0, scored.output
    # pair 1: yes then no (drop 1); pair 2: yes to both (drop 0)
    assert "POPEv2: paired drop in p(yes), original to edited, 0.500 [" in scored.output
    assert "over 2 pairs (1 yes then no, 1 yes to both; 0 unpaired)" in scored.output
