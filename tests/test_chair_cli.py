"""`halluprobe build chair`, `run --open-ended` on it, caption imports and `halluprobe chair`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _chair import FixtureTools, wordnet_or_skip
from typer.testing import CliRunner

from halluprobe.captions.chair import families as chair_families
from halluprobe.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _wordnet() -> None:
    wordnet_or_skip()


@pytest.fixture(autouse=True)
def fixture_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real tokenizer and tagger need NLTK data no test can download: the fixture's stand in."""
    monkeypatch.setattr(
        chair_families, "NltkTools", lambda need_tagger=True: FixtureTools()
    )


def _objects(tmp_path: Path) -> Path:
    path = tmp_path / "objects.jsonl"
    rows = [
        {"image_id": 1, "objects": ["dog", "person"]},
        {"image_id": 2, "objects": ["cat"]},
        {"image_id": 3, "objects": ["bus"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_build_chair_on_the_standard_lists(tmp_path: Path) -> None:
    out = tmp_path / "q.jsonl"
    result = runner.invoke(
        app, ["build", "chair", "--list", "chair500-opera", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert (
        len(lines) == 500
        and lines[0]["kind"] == "open"
        and lines[0]["image"] == "COCO_val2014_000000226988.jpg"
    )
    assert lines[0]["image_id"] == 226988 and lines[0]["chair_list"] == "chair500-opera"
    assert lines[0]["text"] == "Please describe this image in detail."
    bad = runner.invoke(
        app,
        ["build", "chair", "--list", "chair400", "--out", str(tmp_path / "x.jsonl")],
    )
    assert (
        bad.exit_code == 2
        and "unknown image list 'chair400'" in bad.output
        and not (tmp_path / "x.jsonl").exists()
    )
    (tmp_path / "imgs").mkdir()
    missing = runner.invoke(
        app,
        [
            "build",
            "chair",
            "--list",
            "chair500-lim",
            "--images",
            str(tmp_path / "imgs"),
            "--out",
            str(tmp_path / "y.jsonl"),
        ],
    )
    assert (
        missing.exit_code == 2
        and "500 images of chair500-lim are not in the folder" in missing.output
    )
    assert "000000002239.jpg" in missing.output


def test_build_run_and_score(tmp_path: Path) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    listing = tmp_path / "list.jsonl"
    names = [f"COCO_val2014_{i:012d}.jpg" for i in (1, 2, 3)]
    for name in names:
        (images / name).write_bytes(b"not read by the scripted backend")
    listing.write_text("".join(json.dumps({"image": n}) + "\n" for n in names))
    bench = tmp_path / "chair.jsonl"
    assert runner.invoke(app, ["build", "chair", "--list", str(listing), "--images", str(images), "--out", str(bench),
                               "--prompt", "Describe this image."]).exit_code == 0  # fmt: skip
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}, "generate": [
        {"match": "Describe", "image": names[0], "text": "a man with a dog and a cat"},
        {"match": "Describe", "image": names[1], "text": "a cat"},
        {"match": "Describe", "image": names[2], "text": "a red bus and two buses"}]}))  # fmt: skip
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(bench), "--images", str(images),
                              "--open-ended", "--max-new-tokens", "64", "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    result = runner.invoke(app, ["chair", str(tmp_path / "run"), "--ground-truth", str(_objects(tmp_path)), "--json", "--bootstrap", "50",
                                 "--out", str(tmp_path / "scores")])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    lem, sing = (
        data["chair@lemmatizer"]["summary"],
        data["chair@singularize"]["summary"],
    )
    # lemmatizer: cat hallucinated on image 1; bus read twice on image 3. singularize: "bus" -> "bu"
    assert lem["chair_s"] == pytest.approx(1 / 3) and lem["chair_i"] == pytest.approx(
        1 / 6
    )
    assert sing["chair_i"] == pytest.approx(1 / 5) and sing["recall"] == pytest.approx(
        4 / 4
    )
    settings = lem["settings"]
    assert (
        settings["prompt"] == "Describe this image."
        and settings["max_new_tokens"] == 64
    )
    assert (
        settings["truncate_incomplete"] is False
        and settings["ground_truth"]["source"] == "objects"
    )
    assert (
        settings["image_list"] == {"chair": "list.jsonl"}
        and settings["family"] == "chair@lemmatizer"
    )
    report = (tmp_path / "scores" / "chair_report.md").read_text()
    assert report.startswith("## CHAIR\n\n<!-- halluprobe-chair-provenance {") and "| chair@lemmatizer | 3 | 33.3 [" in report
    assert "### Objects most often hallucinated" in report and "| 1 | cat (1 captions) | cat (1 captions) |" in report
    provenance = json.loads(report.splitlines()[2].removeprefix("<!-- halluprobe-chair-provenance ").removesuffix(" -->"))
    assert provenance["source"]["run"] == str(tmp_path / "run") and len(provenance["source"]["samples_sha256"]) == 64
    assert (tmp_path / "scores" / "chair_table.tex").read_text().startswith("% halluprobe-chair-provenance {")
    per_caption = [
        json.loads(x)
        for x in (tmp_path / "scores" / "chair_singularize.jsonl")
        .read_text()
        .splitlines()
    ]
    assert per_caption[0]["hallucinated"] == ["cat"] and per_caption[0][
        "positions"
    ] == [1, 4, 7]


def test_import_caption_files_and_score_both_families(tmp_path: Path) -> None:
    opera = tmp_path / "opera.jsonl"
    opera.write_text(
        '{"image_id": 1, "caption": "a dog . a truck"}\n{"image_id": 2, "caption": "two ties"}\n{"image_id": 3, "caption": "a bus"}\n'
    )
    imported = runner.invoke(
        app, ["import", "opera", str(opera), "--out", str(tmp_path / "a")]
    )
    assert imported.exit_code == 0, imported.output
    for extra in (["--labels", str(opera)], ["--split", "random"]):  # no meaning for captions: refused, not ignored
        refused = runner.invoke(app, ["import", "opera", str(opera), *extra, "--out", str(tmp_path / "refused")])
        assert refused.exit_code == 2 and "takes no --labels or --split" in refused.output, refused.output
        assert not (tmp_path / "refused").exists()
    llava = tmp_path / "answers.jsonl"
    llava.write_text("".join(json.dumps({"question_id": i, "image_id": f"{i:012d}.jpg", "text": t}) + "\n"
                             for i, t in ((1, "a dog"), (2, "a cat"), (3, "a bus"))))  # fmt: skip
    assert (
        runner.invoke(
            app, ["import", "llava-captions", str(llava), "--out", str(tmp_path / "b")]
        ).exit_code
        == 0
    )
    objects = str(_objects(tmp_path))
    result = runner.invoke(app, ["chair", str(tmp_path / "a"), "--ground-truth", objects, "--against", str(tmp_path / "b"),
                                 "--json", "--bootstrap", "50"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["chair@singularize"]["summary"]["chair_s"] == pytest.approx(
        1 / 3
    )  # truck; "ties" -> "ty", "bus" -> "bu"
    assert data["chair@lemmatizer"]["summary"]["chair_s"] == pytest.approx(
        2 / 3
    )  # truck; ties
    assert data["chair@lemmatizer"]["paired"]["chair_s"]["diff"] == pytest.approx(
        2 / 3 - 0
    )
    truncated = runner.invoke(app, ["chair", str(tmp_path / "a"), "--ground-truth", objects, "--truncate-incomplete", "--json",
                                    "--bootstrap", "0", "--family", "singularize"])  # fmt: skip
    summary = json.loads(truncated.stdout)["chair@singularize"]["summary"]
    assert (
        summary["chair_s"] == 0
        and summary["settings"]["max_new_tokens"] == "unknown (imported)"
    )
    assert summary["settings"]["prompt"] == "unknown"
    text = runner.invoke(
        app,
        ["chair", str(tmp_path / "a"), "--ground-truth", objects, "--bootstrap", "20"],
    )
    assert (
        text.exit_code == 0
        and "chair@lemmatizer: n=3" in text.output
        and "chair@singularize: n=3" in text.output
    )


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    opera = tmp_path / "opera.jsonl"
    opera.write_text(
        '{"image_id": 1, "caption": "a dog"}\n{"image_id": 99, "caption": "a cat"}\n'
    )
    result = runner.invoke(
        app,
        [
            "chair",
            str(opera),
            "--ground-truth",
            str(_objects(tmp_path)),
            "--bootstrap",
            "0",
        ],
    )
    assert (
        result.exit_code == 2
        and f"{opera}:2: image 99 is not in the ground truth" in result.output
    )
    assert len(result.output.strip().splitlines()) == 1
    opera.write_text('{"image": 1, "caption": "a dog"}\n')
    result = runner.invoke(app, ["chair", str(opera), "--bootstrap", "0"])
    assert (
        result.exit_code == 2
        and f"{opera}:1: an OPERA caption line is" in result.output
    )
    unknown = runner.invoke(app, ["chair", str(opera), "--family", "stemmer"])
    assert unknown.exit_code == 2 and "--family must be" in unknown.output


def test_a_yes_no_run_is_refused(tmp_path: Path) -> None:
    bench = tmp_path / "pope.jsonl"
    bench.write_text(
        json.dumps(
            {
                "question_id": 1,
                "image": "a.jpg",
                "text": "Is there a dog in the image?",
                "label": "yes",
                "object": "dog",
            }
        )
        + "\n"
    )
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(b"x")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {"a.jpg": ["dog"]}}))
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(bench),
                              "--images", str(tmp_path / "imgs"), "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    result = runner.invoke(app, ["chair", str(tmp_path / "run")])
    assert (
        result.exit_code == 2
        and "run.json: a run of yes/no answers: CHAIR scores captions" in result.output
    )


def test_import_lmms_eval_chair_logs(tmp_path: Path) -> None:
    logs = tmp_path / "samples_coco_cap_chair.jsonl"
    rows = [
        {"doc_id": 0, "doc": {"question_id": 1, "gt_object": ["dog"]}, "filtered_resps": [["a dog"]], "resps": [["a dog"]]},
        {"doc_id": 1, "filtered_resps": ["a cat"], "coco_cap_chair_s": {"image_id": 2, "pred": ["cat"], "answer": ["cat"]}},
    ]
    logs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["import", "lmms-eval-chair", str(logs), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [(s["image"], s["text"]) for s in samples] == [("1", "a dog"), ("2", "a cat")]
    scored = runner.invoke(app, ["chair", str(tmp_path / "run"), "--ground-truth", str(_objects(tmp_path)), "--json", "--bootstrap", "0"])
    assert json.loads(scored.stdout)["chair@lemmatizer"]["summary"]["chair_s"] == 0


def test_ground_truth_from_coco_files_is_cached_per_family(tmp_path: Path) -> None:
    from _chair import write_coco

    coco = write_coco(tmp_path / "ann", "2017", {1: ["dog"], 2: ["cat"], 3: []}, {1: ["a man"], 2: ["a cat"], 3: ["a red bus"]})
    opera = tmp_path / "opera.jsonl"
    opera.write_text('{"image_id": 1, "caption": "a man and a dog"}\n{"image_id": 2, "caption": "a cat"}\n{"image_id": 3, "caption": "a bus"}\n')
    first = runner.invoke(app, ["chair", str(opera), "--coco", str(coco), "--year", "2017", "--out", str(tmp_path / "s"), "--json", "--bootstrap", "0"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    # the ground-truth captions are read by each family: "a red bus" gives bus to the lemmatizer only
    assert data["chair@lemmatizer"]["summary"]["chair_s"] == 0 and data["chair@singularize"]["summary"]["chair_s"] == 0
    assert data["chair@lemmatizer"]["summary"]["recall"] == pytest.approx(4 / 4)
    assert data["chair@singularize"]["summary"]["recall"] == pytest.approx(3 / 3)  # "a bus" is "a bu": nothing mentioned
    gt = data["chair@lemmatizer"]["summary"]["settings"]["ground_truth"]
    assert gt["source"] == "coco" and gt["year"] == "2017" and len(gt["files"]) == 4
    for family in ("lemmatizer", "singularize"):
        again = runner.invoke(app, ["chair", str(opera), "--family", family, "--ground-truth", str(tmp_path / "s" / f"ground_truth_{family}.json"),
                                    "--json", "--bootstrap", "0"])  # fmt: skip
        assert again.exit_code == 0, again.output
        summary = json.loads(again.stdout)[f"chair@{family}"]["summary"]
        assert summary["recall"] == data[f"chair@{family}"]["summary"]["recall"] and summary["settings"]["ground_truth"]["source"] == "coco"


def test_coco_zip_read_as_it_is_and_pinned(tmp_path: Path) -> None:
    import hashlib
    import zipfile

    from _chair import write_coco

    folder = write_coco(tmp_path / "ann", "2014", {1: ["dog"], 2: ["cat"], 3: ["bus"]}, {1: ["a dog"], 2: ["a cat"], 3: ["a bus"]})
    archive = tmp_path / "annotations_trainval2014.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(folder.iterdir()):
            z.write(f, f"annotations/{f.name}")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    opera = tmp_path / "opera.jsonl"
    opera.write_text('{"image_id": 1, "caption": "a dog and a cat"}\n')
    ok = runner.invoke(app, ["chair", str(opera), "--coco", str(archive), "--coco-sha256", digest, "--json", "--bootstrap", "0"])
    assert ok.exit_code == 0, ok.output
    summary = json.loads(ok.stdout)["chair@singularize"]["summary"]
    assert summary["chair_s"] == 1 and f"{archive}!annotations/captions_train2014.json" in summary["settings"]["ground_truth"]["files"]
    bad = runner.invoke(app, ["chair", str(opera), "--coco", str(archive), "--coco-sha256", "0" * 64, "--bootstrap", "0"])
    assert bad.exit_code == 2 and f"{archive}: sha256 {digest} differs from the pinned" in bad.output
    wrong_year = runner.invoke(app, ["chair", str(opera), "--coco", str(archive), "--year", "2017", "--bootstrap", "0"])
    assert wrong_year.exit_code == 2 and "the zip holds no annotations/instances_val2017.json" in wrong_year.output


def test_tokenizer_line_is_recorded_and_check_recomputes_with_it(tmp_path: Path) -> None:
    """`chair --tokenizer line`: nltk's Treebank words of the whole caption (no punkt data), so a full
    stop that ends a non-final sentence stays on its word; the tables name the tokenizer and `check`
    recomputes them with it (the same comment read as punkt's gives other numbers)."""
    opera = tmp_path / "opera.jsonl"
    # image 1: "truck." is no word CHAIR knows under line; image 2: the final full stop is split off, truck is hallucinated
    opera.write_text('{"image_id": 1, "caption": "a truck. a dog"}\n{"image_id": 2, "caption": "a cat and a truck."}\n')
    objects = str(_objects(tmp_path))
    out = tmp_path / "scores"
    args = ["chair", str(opera), "--ground-truth", objects, "--family", "singularize", "--bootstrap", "20"]
    made = runner.invoke(app, [*args, "--tokenizer", "line", "--out", str(out), "--json"])
    assert made.exit_code == 0, made.output
    summary = json.loads(made.stdout)["chair@singularize"]["summary"]
    assert summary["chair_s"] == pytest.approx(1 / 2) and summary["chair_i"] == pytest.approx(1 / 3)  # dog; cat, truck
    assert summary["settings"]["tokenizer"] == "line" and "preserve_line=True" in summary["settings"]["tools"]
    punkt = runner.invoke(app, [*args, "--json"])  # the fixture's words (split on spaces): "truck." is no object either time
    punkt_summary = json.loads(punkt.stdout)["chair@singularize"]["summary"]
    assert punkt_summary["chair_i"] == 0 and "tokenizer" not in punkt_summary["settings"]
    for name in ("chair_report.md", "chair_table.tex"):
        text = (out / name).read_text()
        assert '"tokenizer": "line"' in text
        checked = runner.invoke(app, ["check", str(out / name), "--json"])
        assert checked.exit_code == 0, checked.output
        assert json.loads(checked.stdout)["findings"] == []
        other = out / f"punkt_{name}"
        other.write_text(text.replace('"tokenizer": "line"', '"tokenizer": "punkt"'))
        differs = runner.invoke(app, ["check", str(other), "--json"])
        assert differs.exit_code == 1 and {f["kind"] for f in json.loads(differs.stdout)["findings"]} == {"differs"}
        bad = out / f"bad_{name}"
        bad.write_text(text.replace('"tokenizer": "line"', '"tokenizer": "spaces"'))
        refused = runner.invoke(app, ["check", str(bad)])
        assert refused.exit_code == 2 and "'tokenizer' must be one of punkt, line" in refused.output
    unknown = runner.invoke(app, [*args, "--tokenizer", "spaces"])
    assert unknown.exit_code == 2 and "--tokenizer must be punkt or line, not 'spaces'" in unknown.output
    assert len(unknown.output.strip().splitlines()) == 1


def test_ground_truth_from_coco_is_read_with_the_runs_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--coco` with `--tokenizer line`: COCO's captions are split as the run's captions are, so
    no punkt data is needed anywhere (NLTK's data path points at an empty folder here)."""
    import nltk

    from _chair import write_coco

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "no_nltk_data")])
    real = chair_families.NltkLineTools.__mro__[1]  # the real NltkTools, under this module's fixture
    monkeypatch.setattr(chair_families, "NltkTools", real)
    coco = write_coco(tmp_path / "ann", "2017", {1: ["dog"], 2: ["cat"], 3: []}, {1: ["a man"], 2: ["a cat"], 3: ["a red dog"]})
    opera = tmp_path / "opera.jsonl"
    opera.write_text('{"image_id": 1, "caption": "a man and a dog"}\n{"image_id": 2, "caption": "a cat"}\n{"image_id": 3, "caption": "a cat"}\n')
    args = ["chair", str(opera), "--coco", str(coco), "--year", "2017", "--family", "singularize", "--tokenizer", "line", "--json", "--bootstrap", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["chair@singularize"]["summary"]
    # image 3's COCO caption gives it a dog (the caption's words, as the family reads them): its "cat" is hallucinated
    assert summary["chair_s"] == pytest.approx(1 / 3) and summary["recall"] == pytest.approx(3 / 4)


def test_the_three_verbs_read_family_and_tokenizer_alike() -> None:
    """chair, decoding and report take the same --family / --tokenizer values, with one message each."""
    from halluprobe.captions.chair.families import FAMILIES
    from halluprobe.errors import InputError

    options = chair_families.counting_options
    assert options("singularize", "line", allow_both=False) == options("chair@singularize", "line", allow_both=False) == (("chair@singularize",), "line")
    assert options("both", "punkt", allow_both=True) == (FAMILIES, "punkt")
    for family, tokenizer, both, message in (("both", "punkt", False, "lemmatizer or singularize, not 'both'"),
                                             ("opera", "punkt", True, "lemmatizer, singularize or both, not 'opera'"),
                                             ("lemmatizer", "spaces", True, "--tokenizer must be punkt or line, not 'spaces'")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            options(family, tokenizer, allow_both=both)
    for verb in (["decoding", "a", "b"], ["chair", "a"]):  # chair@ names are accepted by every verb
        result = runner.invoke(app, [*verb, "--family", "chair@singularize", "--tokenizer", "spaces"])
        assert result.exit_code == 2 and "--tokenizer must be punkt or line, not 'spaces'" in result.output, result.output
