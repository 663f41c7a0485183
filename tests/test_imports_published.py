"""Answers files as the literature publishes them (issue 22, item 3): VCD-style LLaVA answer lines
one split per file with --labels alone, MARINE's answers with its id-keyed labels array, and
DASH-B's answers array. Files are built from the fields each repository writes (named in the
import modules); every count is recomputed here from the built rows, with the authors' rules
as their scripts count (transcriptions in test_literature_rules).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app
from test_imports import ANSWERS, make_labels, write_lines
from test_literature_rules import script_dashb, script_marine, script_vcd

SPLITS = ("random", "popular", "adversarial")


def score_json(run: Path, readout: str) -> dict:
    result = CliRunner().invoke(app, ["score", str(run), "--readout", readout, "--json", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # text:vcd's label-dependence note goes to stderr


def counts(report: dict, split: str) -> tuple[int, int, int, int]:
    m = report["splits"][split]
    return (m["tp"], m["fp"], m["tn"], m["fn"])


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args))


def one_line_exit_2(result: object, *fragments: str) -> None:
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    out = result.output.strip()  # type: ignore[attr-defined]
    assert len(out.splitlines()) == 1, out
    for fragment in fragments:
        assert fragment in out, out


# -- VCD-style LLaVA answer lines, one split per file, --labels alone ------------------------------


def vcd_lines(rows: list[dict], split: str) -> list[dict]:
    """VCD's object_hallucination_vqa_llava.py lines: the prompt is the labels' text (some with
    LLaVA's <image> line and the short-answer suffix, some respelled "imange")."""
    out = []
    for n, r in enumerate(rows):
        prompt = r["text"]
        if n % 3 == 1:
            prompt = "<image>\n" + prompt + "\nAnswer the question using a single word or phrase."
        if n % 3 == 2:
            prompt = prompt.replace("image", "imange")
        out.append({"question_id": r["question_id"], "prompt": prompt, "text": ANSWERS[(n + SPLITS.index(split)) % len(ANSWERS)],
                    "model_id": "llava-v1.5-7b", "image": r["image"], "metadata": {}})  # fmt: skip
    return out


def test_llava_lines_one_split_per_file_with_labels_alone(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    files = [write_lines(tmp_path / f"llava15_coco_pope_{s}_answers_no_cd.jsonl", vcd_lines(splits[s], s)) for s in SPLITS]
    extra = json.loads(files[0].read_text().splitlines()[0]) | {"question_id": 99}
    files[0].write_text(files[0].read_text() + json.dumps(extra) + "\n")  # an answer to no labelled question
    labels = [a for s in SPLITS for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    run = tmp_path / "run"
    done = invoke("import", "llava", *map(str, files), *labels, "--out", str(run))
    assert done.exit_code == 0, done.output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["imported"]["splits"] == {s: len(splits[s]) for s in SPLITS}
    assert [s["reason"] for s in manifest["skipped"]] == ["pairs with no labels file: random question_id 99 has no question"]
    report = score_json(run, "text:vcd")
    for split in SPLITS:
        answers = [line["text"] for line in vcd_lines(splits[split], split)]
        assert counts(report, split) == script_vcd(answers, [r["label"] for r in splits[split]]), split


def test_llava_labels_alone_refusals(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    random_file = write_lines(tmp_path / "answers_random.jsonl", vcd_lines(splits["random"], "random"))
    # named for random, given the popular labels only: its shared questions pair, the rest do not
    wrong = invoke("import", "llava", str(random_file), "--labels", str(tmp_path / "labels" / "coco_pope_popular.json"), "--out", str(tmp_path / "r1"))
    one_line_exit_2(wrong, "named for the random split but its answers pair with the popular labels")
    # a file mixing splits
    mixed = write_lines(tmp_path / "mixed.jsonl", vcd_lines(splits["random"][:4], "random") + vcd_lines(splits["popular"][1:2], "popular"))
    labels = [a for s in ("random", "popular") for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    one_line_exit_2(invoke("import", "llava", str(mixed), *labels, "--out", str(tmp_path / "r2")), "answers of several splits in one file")
    # only shared questions: every split pairs alike
    shared = write_lines(tmp_path / "shared.jsonl", [vcd_lines(splits["random"], "random")[0]])
    one_line_exit_2(invoke("import", "llava", str(shared), *labels, "--out", str(tmp_path / "r3")), "pairs with the random and popular labels alike")
    nothing = write_lines(tmp_path / "other.jsonl", [{"question_id": 1, "prompt": "Is there a zebra in the image?", "text": "No"}])
    one_line_exit_2(invoke("import", "llava", str(nothing), *labels, "--out", str(tmp_path / "r4")), "other.jsonl:1: no answer pairs with the labels")
    one_line_exit_2(invoke("import", "llava", str(random_file), "--out", str(tmp_path / "r5")), "the llava format needs --labels")


# -- MARINE ----------------------------------------------------------------------------------------


def marine_files(folder: Path, rows: list[dict], answers: list[str]) -> tuple[Path, Path]:
    """MARINE's answers (question_id, image_id, prompt "<image>\\n...", text, answer_id, model_id,
    metadata) and its labels array (id, image, label), pretty-printed as the repository has it."""
    lines = [{"question_id": r["question_id"], "image_id": r["image"], "prompt": "<image>\n" + r["text"], "text": a,
              "answer_id": f"id{n}", "model_id": "llava-1.5-7b-hf", "metadata": {}} for n, (r, a) in enumerate(zip(rows, answers))]  # fmt: skip
    labels = [{"id": r["question_id"], "image": r["image"], "label": r["label"]} for r in rows]
    answers_file = write_lines(folder / "pope_coco_detr_th0.95_ram_th0.68-7b-bs4-s242-guidance_strength0.7.jsonl", lines)
    labels_file = folder / "pope_coco_detr_th0.95_ram_th0.68_label.json"
    labels_file.write_text(json.dumps(labels, indent=4))
    return answers_file, labels_file


def marine_metrics(answers: list[str], labels: list[str]) -> tuple[int, int, int, int]:
    """MARINE's compute_metrics: blank predictions (-1) filtered out, then the confusion counts."""
    kept = [(gold, script_marine(a)) for a, gold in zip(answers, labels) if script_marine(a) != -1]
    tp = sum(g == "yes" and p == 1 for g, p in kept)
    fp = sum(g == "no" and p == 1 for g, p in kept)
    tn = sum(g == "no" and p == 0 for g, p in kept)
    fn = sum(g == "yes" and p == 0 for g, p in kept)
    return tp, fp, tn, fn


def test_marine_answers_with_its_id_keyed_labels(tmp_path: Path) -> None:
    rows = make_labels(tmp_path / "labels")["adversarial"]
    answers = ["Yes, there is a cat.", "No, there is no bowl.", "", "Not sure.", "I don't know", "NO", "There isn't any fork", "Yes"]
    answers_file, labels_file = marine_files(tmp_path, rows, answers)
    run = tmp_path / "run"
    done = invoke("import", "marine", str(answers_file), "--labels", str(labels_file), "--split", "adversarial", "--out", str(run))
    assert done.exit_code == 0, done.output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["imported"]["splits"] == {"adversarial": len(rows)} and manifest["skipped"] == []
    result = invoke("score", str(run), "--readout", "text:marine", "--unknown", "drop", "--json", "--resamples", "0")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert counts(report, "adversarial") == marine_metrics(answers, [r["label"] for r in rows])
    assert report["splits"]["adversarial"]["unknown"] == sum(not a.strip() for a in answers)
    # a POPE labels file (keyed question_id, with the text) pairs the same answers alike
    again = invoke("import", "marine", str(answers_file), "--labels", str(tmp_path / "labels" / "coco_pope_adversarial.json"),
                   "--out", str(tmp_path / "run2"))  # fmt: skip
    assert again.exit_code == 0, again.output
    assert counts(score_json(tmp_path / "run2", "text:marine"), "adversarial") == counts(score_json(run, "text:marine"), "adversarial")


def test_marine_refusals(tmp_path: Path) -> None:
    rows = make_labels(tmp_path / "labels")["adversarial"]
    answers_file, labels_file = marine_files(tmp_path, rows, ["Yes"] * len(rows))
    neither = tmp_path / "labels_by_name.json"
    neither.write_text(json.dumps([{"name": r["image"], "label": r["label"]} for r in rows], indent=2))
    one_line_exit_2(
        invoke("import", "marine", str(answers_file), "--labels", str(neither), "--out", str(tmp_path / "r1")),
        "labels_by_name.json: record 0: labels must be keyed by 'question_id' (POPE) or 'id' (MARINE)",
    )
    swapped = json.loads(labels_file.read_text())
    swapped[0]["image"] = "COCO_val2014_000000999999.jpg"
    labels_file.write_text(json.dumps(swapped))
    one_line_exit_2(
        invoke("import", "marine", str(answers_file), "--labels", str(labels_file), "--out", str(tmp_path / "r2")),
        "guidance_strength0.7.jsonl:1: question_id 1 is about COCO_val2014_000000000000.jpg",
    )
    one_line_exit_2(invoke("import", "marine", str(answers_file), "--out", str(tmp_path / "r3")), "the marine format needs --labels")


# -- DASH-B ----------------------------------------------------------------------------------------


def dashb_entries() -> list[dict]:
    """DASH-B's answers array: {img_id, object_name, gt, response, answer}, answer compute_answer's."""
    responses = ["no", "yes", "Yes.", "I don't know", "There isn't any", "No, but a dog", "nothing", "yes, there is no cat"]
    entries = []
    for n in range(16):
        obj = ("backpack", "zebra")[n // 8]
        response = responses[n % len(responses)]
        entries.append({"img_id": f"{1000 + n % 5}.png", "object_name": obj, "gt": "yes" if n % 2 else "no",
                        "response": response, "answer": script_dashb(response)})  # fmt: skip
    return entries


def test_dashb_answers_array(tmp_path: Path) -> None:
    entries = dashb_entries()
    answers_file = tmp_path / "Paligemma-3b_answers.json"
    answers_file.write_text(json.dumps(entries, indent=4))
    run = tmp_path / "run"
    done = invoke("import", "dashb", str(answers_file), "--out", str(run))
    assert done.exit_code == 0, done.output
    samples = [json.loads(l) for l in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == len(entries)
    assert samples[8]["image"] == "zebra/1003.png" and samples[8]["prompt"].startswith("Can you see a zebra in this image?")
    # DASH-B's compute_results over its stored answers
    n_pos = sum(e["gt"] == "yes" for e in entries)
    n_neg = len(entries) - n_pos
    correct_pos = sum(e["answer"] == e["gt"] == "yes" for e in entries)
    correct_neg = sum(e["answer"] == e["gt"] == "no" for e in entries)
    for readout in ("dashb:compute_answer", "text:dashb"):
        m = score_json(run, readout)["splits"]["dashb"]
        assert m["tp"] == correct_pos and m["tn"] == correct_neg, readout
        assert m["accuracy"] == pytest.approx((correct_pos + correct_neg) / len(entries))  # unknown counts wrong, as DASH-B
        assert m["recall"] == pytest.approx(correct_pos / n_pos)  # DASH-B's TPR
        assert m["unknown"] == sum(e["answer"] is None for e in entries)
        assert m["tn"] / n_neg == pytest.approx(correct_neg / n_neg)  # DASH-B's TNR
    manifest = json.loads((run / "manifest.json").read_text())
    assert not any("differ from text:dashb" in note for note in manifest["notes"])


def test_dashb_refusals(tmp_path: Path) -> None:
    entries = dashb_entries()
    entries[3]["gt"] = "maybe"
    bad = tmp_path / "bad_answers.json"
    bad.write_text(json.dumps(entries, indent=4))
    one_line_exit_2(invoke("import", "dashb", str(bad), "--out", str(tmp_path / "r1")), "record 3: 'gt' must be yes or no")
    labels = make_labels(tmp_path / "labels")
    del labels
    one_line_exit_2(
        invoke("import", "dashb", str(bad), "--labels", str(tmp_path / "labels" / "coco_pope_random.json"), "--out", str(tmp_path / "r2")),
        "drop --labels",
    )


def test_published_formats_are_detected(tmp_path: Path) -> None:
    from halluprobe.imports.formats import detect_format

    splits = make_labels(tmp_path / "labels")
    vcd = write_lines(tmp_path / "vcd.jsonl", vcd_lines(splits["random"], "random"))
    marine, _ = marine_files(tmp_path, splits["adversarial"], ["Yes"] * 8)
    dash = tmp_path / "Model_answers.json"
    dash.write_text(json.dumps(dashb_entries(), indent=4))
    assert (detect_format(vcd), detect_format(marine), detect_format(dash)) == ("llava", "marine", "dashb")
    # with the format detected, each imports as with its word
    done = invoke("import", str(dash), "--out", str(tmp_path / "run"))
    assert done.exit_code == 0, done.output
    assert "answers imported (dashb)" in done.output
