"""Imports of lmms-eval sample logs (v0.2, v0.3, v0.4+) and VLMEvalKit sheets, and export round trips.

Files are built from the fields each tool's logger writes (documented in the import modules);
every confusion count is recomputed here from the built rows.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app
from test_imports import ANSWERS, counts, make_labels, make_llava, score_json, write_lines

TASKS = {"random": "pope_random", "popular": "pope_pop", "adversarial": "pope_adv"}


def lmms_log(doc_id: int, row: dict, split: str, answer: str, layout: str) -> dict:
    pred = answer.lower().strip()
    entry = {"question_id": str(row["question_id"]), "score": float(pred == row["label"]), "prediction": pred,
             "ground_truth": row["label"]}  # fmt: skip
    log: dict = {"doc_id": doc_id, "target": row["label"], "filtered_resps": [answer]}
    if layout in ("v0.2", "v0.3"):
        log["doc"] = {"question_id": str(row["question_id"]), "question": row["text"], "answer": row["label"], "category": split}
        log["arguments"] = [row["text"] + "\nAnswer the question using a single word or phrase."]
        log["resps"] = [[answer]]
    else:
        log["input"] = row["text"] + "\nAnswer the question using a single word or phrase."
        log["doc_hash"] = "0" * 64
    for metric in ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio"):
        log[metric] = dict(entry)
    return log


def write_lmms(folder: Path, splits: dict[str, list[dict]], layout: str, *, pooled: bool = False) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    groups = {"pope": list(splits)} if pooled else {TASKS[s]: [s] for s in splits}
    files = []
    for task, members in groups.items():
        logs = [lmms_log(n, r, s, ANSWERS[n % len(ANSWERS)], layout) for s in members for n, r in enumerate(splits[s])]
        if layout == "v0.2":
            path = folder / f"{task}.json"
            path.write_text(json.dumps({"args": {}, "model_configs": {"task": task}, "logs": logs, "time": "x"}, indent=4))
        else:
            path = write_lines(folder / f"20240601_samples_{task}.jsonl", logs)
        files.append(path)
    return files


def exact_counts(rows: list[dict]) -> tuple[int, int, int, int]:
    tp = fp = tn = fn = 0
    for n, r in enumerate(rows):
        pred = ANSWERS[n % len(ANSWERS)].lower().strip()
        tp += (pred, r["label"]) == ("yes", "yes")
        fp += (pred, r["label"]) == ("yes", "no")
        tn += (pred, r["label"]) == ("no", "no")
        fn += (pred, r["label"]) == ("no", "yes")
    return tp, fp, tn, fn


@pytest.mark.parametrize("layout", ["v0.2", "v0.3", "v0.4+"])
def test_lmms_eval_layouts(tmp_path: Path, layout: str) -> None:
    splits = make_labels(tmp_path / "labels")
    files = write_lmms(tmp_path / "logs", splits, layout)
    result = CliRunner().invoke(app, ["import", *map(str, files), "--out", str(tmp_path / "run")])  # format detected
    assert result.exit_code == 0, result.output
    for readout in ("lmms-eval:exact", "text:exact"):
        report = score_json(tmp_path / "run", readout)
        for split, rows in splits.items():
            assert counts(report, split) == exact_counts(rows)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert f"lmms-eval log layout: {layout}" in manifest["notes"]


@pytest.mark.parametrize("layout", ["v0.2", "v0.3"])
def test_lmms_eval_pooled_task_takes_split_from_doc(tmp_path: Path, layout: str) -> None:
    splits = make_labels(tmp_path / "labels")
    files = write_lmms(tmp_path / "logs", splits, layout, pooled=True)
    result = CliRunner().invoke(app, ["import", "lmms-eval", *map(str, files), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    report = score_json(tmp_path / "run", "lmms-eval:exact")
    assert {s: counts(report, s) for s in splits} == {s: exact_counts(r) for s, r in splits.items()}


def test_lmms_eval_pooled_v04_cannot_tell_the_split(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    files = write_lmms(tmp_path / "logs", splits, "v0.4+", pooled=True)
    result = CliRunner().invoke(app, ["import", "lmms-eval", *map(str, files), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "samples_pope.jsonl:1: cannot tell the split" in result.output


def test_lmms_eval_with_labels_gets_images_and_checks_text(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    files = write_lmms(tmp_path / "logs", splits, "v0.4+")
    labels = [a for s in splits for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    ok = CliRunner().invoke(app, ["import", "lmms-eval", *map(str, files), *labels, "--out", str(tmp_path / "run")])
    assert ok.exit_code == 0, ok.output
    sample = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert sample["image"].startswith("COCO_val2014_")
    # the same logs against labels whose questions differ are refused
    other = make_labels(tmp_path / "other", misspell=False)
    other["random"][0]["text"] = "Is there a zebra in the image?"
    write_lines(tmp_path / "other" / "coco_pope_random.json", other["random"])
    bad = CliRunner().invoke(
        app, ["import", "lmms-eval", str(files[0]), "--labels", str(tmp_path / "other" / "coco_pope_random.json"), "--out", str(tmp_path / "r2")]
    )
    assert bad.exit_code == 2 and "random question 1 has another question text" in bad.output


# -- VLMEvalKit -----------------------------------------------------------------------------------


def vlmeval_rows(splits: dict[str, list[dict]], extracted: bool) -> list[dict]:
    """One row per distinct question; a question that several splits ask is one row whose
    category lists them (as VLMEvalKit's POPE file)."""
    merged: dict[tuple[str, str], dict] = {}
    for split, rows in splits.items():
        for r in rows:
            key = (r["image"], r["text"])
            if key in merged:
                merged[key]["category"] += f",{split}"
                continue
            n = len(merged)
            answer = ANSWERS[n % len(ANSWERS)]
            row = {"index": n, "question": r["text"], "answer": r["label"].capitalize(), "category": split, "prediction": answer}
            if extracted:
                from halluprobe.readouts.text import yorn

                row["extracted"] = {"yes": "Yes", "no": "No"}.get(yorn(answer), "Unknown")
            merged[key] = row
    return list(merged.values())


def vlmeval_counts(rows: list[dict], split: str, key: str) -> tuple[int, int, int, int]:
    tp = fp = tn = fn = 0
    for r in rows:
        if split not in r["category"].split(","):
            continue
        pred = r[key]
        tp += (pred, r["answer"]) == ("Yes", "Yes")
        fp += (pred, r["answer"]) == ("Yes", "No")
        tn += (pred, r["answer"]) == ("No", "No")
        fn += (pred, r["answer"]) == ("No", "Yes")
    return tp, fp, tn, fn


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".json"])
def test_vlmevalkit_sheet_and_auxmatch(tmp_path: Path, suffix: str) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = vlmeval_rows(splits, extracted=True)
    assert any("," in r["category"] for r in rows)  # some rows belong to several splits
    path = tmp_path / f"model_POPE_auxmatch{suffix}"
    if suffix in (".tsv", ".csv"):  # detected by the suffix: the first line is no JSON
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter="\t" if suffix == ".tsv" else ",", quoting=csv.QUOTE_ALL)
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text(json.dumps(rows, indent=4))
    result = CliRunner().invoke(app, ["import", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    report = score_json(tmp_path / "run", "vlmevalkit:auxmatch")
    for split in splits:
        assert counts(report, split) == vlmeval_counts(rows, split, "extracted")
        assert report["splits"][split]["n"] == len(splits[split])
    assert counts(score_json(tmp_path / "run", "text:yorn"), "random") == vlmeval_counts(rows, "random", "extracted")


def test_vlmevalkit_missing_column(tmp_path: Path) -> None:
    rows = [{"index": 0, "question": "Is there a cat in the image?", "answer": "Yes", "prediction": "Yes"}]
    path = tmp_path / "model_POPE.json"
    path.write_text(json.dumps(rows))
    result = CliRunner().invoke(app, ["import", "vlmevalkit", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "lacks column(s) category" in result.output


# -- export round trips -----------------------------------------------------------------------------


def samples_of(run: Path) -> list[tuple]:
    lines = [json.loads(l) for l in (run / "samples.jsonl").read_text().splitlines()]
    return sorted((s["split"], s["question_id"], s["image"], s["label"], s["text"]) for s in lines)


@pytest.mark.parametrize("fmt", ["llava", "pope", "lmms-eval"])
def test_export_round_trip(tmp_path: Path, fmt: str) -> None:
    splits = make_labels(tmp_path / "labels", misspell=True)
    answers, questions = make_llava(tmp_path, splits)
    labels = [a for s in ("random", "popular", "adversarial") for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    first = CliRunner().invoke(app, ["import", "llava", str(answers), "--questions", str(questions), *labels, "--out", str(tmp_path / "run")])
    assert first.exit_code == 0, first.output
    exported = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", fmt, "--out", str(tmp_path / "exp")])
    assert exported.exit_code == 0, exported.output
    files = sorted((tmp_path / "exp").iterdir())
    if fmt == "llava":
        args = ["import", "llava", str(tmp_path / "exp" / "answers.jsonl"), "--questions", str(tmp_path / "exp" / "llava_pope_test.jsonl"), *labels]
    elif fmt == "pope":
        # POPE's evaluate.py takes one answers file and one labels file: import split by split
        args = ["import", "pope", str(tmp_path / "exp" / "random_answers.json"), "--labels", str(tmp_path / "labels" / "coco_pope_random.json")]
    else:
        args = ["import", "lmms-eval", *map(str, files), *labels]
    again = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "run2")])
    assert again.exit_code == 0, again.output
    before = samples_of(tmp_path / "run")
    if fmt == "pope":
        before = [s for s in before if s[0] == "random"]
    assert samples_of(tmp_path / "run2") == before
    assert score_json(tmp_path / "run2", "text:pope")["pooled"]["tp"] == sum(
        score_json(tmp_path / "run", "text:pope")["splits"][s]["tp"] for s in {b[0] for b in before}
    )


# -- compatibility: the numbers lmms-eval and VLMEvalKit print ---------------------------------------


def lmms_printed(logs: list[dict]) -> dict[str, float]:
    """lmms-eval's pope_aggregate_* over a task's logged metric entries, as its utils.py does them."""
    entries = [log["pope_accuracy"] for log in logs]
    tp = sum(e["ground_truth"] == "yes" and e["prediction"] == "yes" for e in entries)
    fp = sum(e["ground_truth"] == "no" and e["prediction"] == "yes" for e in entries)
    fn = sum(e["ground_truth"] == "yes" and e["prediction"] == "no" for e in entries)
    precision = tp / (tp + fp) if tp + fp else 0
    recall = tp / (tp + fn) if tp + fn else 0
    return {
        "pope_accuracy": sum(e["score"] for e in entries) / len(entries),
        "pope_precision": precision,
        "pope_recall": recall,
        "pope_f1_score": 2 * precision * recall / (precision + recall) if precision + recall else 0,
        "pope_yes_ratio": sum(e["ground_truth"] == "yes" for e in entries) / len(entries),
    }


def test_compat_lmms_eval_reproduces_its_printed_numbers(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    files = write_lmms(tmp_path / "logs", splits, "v0.4+")
    assert CliRunner().invoke(app, ["import", *map(str, files), "--out", str(tmp_path / "run")]).exit_code == 0
    result = CliRunner().invoke(app, ["score", str(tmp_path / "run"), "--readout", "lmms-eval:exact", "--compat", "lmms-eval"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    for path in files:
        logs = [json.loads(l) for l in path.read_text().splitlines()]
        split = {v: k for k, v in TASKS.items()}[path.stem.split("_samples_")[1]]
        for key, value in lmms_printed(logs).items():
            assert printed[split][key] == pytest.approx(value, abs=1e-12), (split, key)
    # no --unknown policy gives these: accuracy is `wrong`'s, recall `drop`'s
    wrong = score_json(tmp_path / "run", "lmms-eval:exact")
    assert wrong["splits"]["random"]["recall"] != pytest.approx(printed["random"]["pope_recall"])


def test_compat_vlmevalkit_counts_unknown_as_no_in_f1(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = vlmeval_rows(splits, extracted=True)
    path = tmp_path / "m_POPE_auxmatch.json"
    path.write_text(json.dumps(rows))
    assert CliRunner().invoke(app, ["import", str(path), "--out", str(tmp_path / "run")]).exit_code == 0
    result = CliRunner().invoke(app, ["score", str(tmp_path / "run"), "--readout", "vlmevalkit:auxmatch", "--compat", "vlmevalkit"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    for split in splits:
        sub = [r for r in rows if split in r["category"].split(",")]
        tp = sum(r["answer"] == "Yes" and r["extracted"] == "Yes" for r in sub)
        fp = sum(r["answer"] == "No" and r["extracted"] == "Yes" for r in sub)
        fn = sum(r["answer"] == "Yes" and r["extracted"] != "Yes" for r in sub)
        p, rc = (tp / (tp + fp) if tp + fp else 0), (tp / (tp + fn) if tp + fn else 0)
        assert printed[split]["acc"] == pytest.approx(100 * sum(r["answer"] == r["extracted"] for r in sub) / len(sub))
        assert printed[split]["Overall"] == pytest.approx(100 * (2 * p * rc / (p + rc) if p + rc else 0))


def test_export_refuses_a_run_with_errored_samples(tmp_path: Path) -> None:
    """The formats pair answers by position: one gap would move every later answer onto another label."""
    from test_pipeline import _make_world, _run_args

    world = _make_world(tmp_path)
    (world["images"] / "img1.png").unlink()
    assert CliRunner().invoke(app, _run_args(world, tmp_path / "run")).exit_code == 0
    result = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", "pope", "--out", str(tmp_path / "exp")])
    assert result.exit_code == 2 and "12 sample(s) have no answer text" in result.output, result.output
    assert not (tmp_path / "exp").exists()
