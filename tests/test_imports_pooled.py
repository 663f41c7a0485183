"""lmms-eval 0.7's pooled ``pope`` task imported with the three label files (issue 27).

The log is written in lmms-eval 0.7's layout for the pooled task: one line per sample with
``doc_id`` (its row in the pooled dataset, the splits in blocks), ``target``, ``filtered_resps``
(a bare string after 0.7's flattening), ``input`` (question + the short-answer suffix),
``input_media``, ``doc_hash`` and the five metric entries holding ``question_id`` (repeated in
every split) — and no ``doc``. Every count and lmms-eval's five printed numbers are recomputed
here from the log's own entries, as lmms-eval's aggregation functions do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app
from test_imports import ANSWERS, make_labels, score_json, write_lines
from test_imports_tools import lmms_printed

SUFFIX = "\nAnswer the question using a single word or phrase."
BLOCKS = ("adversarial", "popular", "random")  # the pooled dataset's order of splits
METRICS = ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio")


def pooled_log(splits: dict[str, list[dict]], *, media: bool = True, order: list[tuple[str, int]] | None = None,
               answer_of=lambda n, split, row: ANSWERS[n % len(ANSWERS)]) -> list[dict]:  # fmt: skip
    """Logs in the pooled dataset's order (``order``: (split, row index) pairs; default the blocks)."""
    order = order or [(s, i) for s in BLOCKS for i in range(len(splits[s]))]
    logs = []
    for doc_id, (split, i) in enumerate(order):
        row = splits[split][i]
        answer = answer_of(doc_id, split, row)
        pred = answer.lower().strip()
        entry = {"question_id": str(row["question_id"]), "score": float(pred == row["label"]), "prediction": pred,
                 "ground_truth": row["label"]}  # fmt: skip
        log: dict = {"doc_id": doc_id, "target": row["label"], "filtered_resps": answer, "token_counts": [None],
                     "doc_hash": f"{doc_id:064d}", "input": row["text"] + SUFFIX}  # fmt: skip
        if media:
            log["input_media"] = [f"/data/coco/val2014/{row['image']}"]
        log.update({metric: dict(entry) for metric in METRICS})
        logs.append(log)
    return logs


def labels_args(folder: Path) -> list[str]:
    return [a for s in ("random", "popular", "adversarial") for a in ("--labels", str(folder / f"coco_pope_{s}.json"))]


def split_counts(logs: list[dict], doc_split: dict[int, str]) -> dict[str, tuple[int, int, int, int]]:
    """(TP, FP, TN, FN) per split of the exact rule, from the log and where each doc_id was built."""
    out: dict[str, list[int]] = {s: [0, 0, 0, 0] for s in BLOCKS}
    for log in logs:
        pred, gold = log["pope_accuracy"]["prediction"], log["target"]
        cell = {("yes", "yes"): 0, ("yes", "no"): 1, ("no", "no"): 2, ("no", "yes"): 3}.get((pred, gold))
        if cell is not None:
            out[doc_split[log["doc_id"]]][cell] += 1
    return {s: tuple(c) for s, c in out.items()}  # type: ignore[misc]


def counts(report: dict, split: str) -> tuple[int, int, int, int]:
    m = report["splits"][split]
    return (m["tp"], m["fp"], m["tn"], m["fn"])


@pytest.mark.parametrize("media", [True, False])
def test_pooled_log_with_three_label_files(tmp_path: Path, media: bool) -> None:
    splits = make_labels(tmp_path / "labels")
    # identical questions (same image, text and id) recur across splits, as in COCO POPE
    keys = [(r["image"], r["text"], r["question_id"]) for s in BLOCKS for r in splits[s]]
    assert len(set(keys)) < len(keys)
    # a shared question gets another answer in each split: only the right split gives the counts
    logs = pooled_log(splits, media=media, answer_of=lambda n, split, row: ANSWERS[(n + BLOCKS.index(split)) % len(ANSWERS)])
    log_file = write_lines(tmp_path / "20260101_samples_pope.jsonl", logs)
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["import", str(log_file), *labels_args(tmp_path / "labels"), "--out", str(run)])
    assert done.exit_code == 0, done.output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["skipped"] == []
    assert any("doc_id block" in note for note in manifest["notes"])
    assert manifest["imported"]["splits"] == {s: len(splits[s]) for s in BLOCKS}
    doc_split = {}
    n = 0
    for s in BLOCKS:
        for _ in splits[s]:
            doc_split[n] = s
            n += 1
    expected = split_counts(logs, doc_split)
    for readout in ("lmms-eval:exact", "text:exact"):
        report = score_json(run, readout)
        assert {s: counts(report, s) for s in BLOCKS} == expected
    # every sample is under its own split's image and question
    samples = [json.loads(l) for l in (run / "samples.jsonl").read_text().splitlines()]
    for sample, log in zip(samples, logs):
        row = next(r for r in splits[doc_split[log["doc_id"]]] if r["question_id"] == int(log["pope_accuracy"]["question_id"]))
        assert (sample["split"], sample["image"], sample["text"]) == (doc_split[log["doc_id"]], row["image"], log["filtered_resps"])
    # lmms-eval's five printed numbers for the pooled task
    compat = CliRunner().invoke(app, ["score", str(run), "--readout", "lmms-eval:exact", "--compat", "lmms-eval"])
    assert compat.exit_code == 0, compat.output
    pooled = json.loads(compat.stdout)["pooled"]
    for key, value in lmms_printed(logs).items():
        assert pooled[key] == pytest.approx(value, abs=1e-12), key
    assert pooled["n"] == len(logs)


def test_unmatched_and_ambiguous_samples_are_listed_with_their_reason(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    # interleaved rows: no split occupies a block of doc_ids, so a question asked identically in
    # several splits cannot be placed when its answers differ
    order = [(s, i) for i in range(8) for s in BLOCKS]
    logs = pooled_log(splits, order=order)
    logs[0]["input_media"] = ["/data/coco/val2014/COCO_val2014_999999999999.jpg"]  # an image no label has
    for metric in METRICS:
        logs[1][metric]["question_id"] = "7"  # the (image, text) of question 1, under another id
    log_file = write_lines(tmp_path / "20260101_samples_pope.jsonl", logs)
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["import", "lmms-eval", str(log_file), *labels_args(tmp_path / "labels"), "--out", str(run)])
    assert done.exit_code == 0, done.output
    manifest = json.loads((run / "manifest.json").read_text())
    reasons = {s["source"].rsplit(":", 1)[1]: s["reason"] for s in manifest["skipped"]}
    assert "no labelled question has image COCO_val2014_999999999999" in reasons["1"]
    assert "the log's question_id is 7" in reasons["2"]
    imported = sum(manifest["imported"]["splits"].values())
    assert imported + len(manifest["skipped"]) == len(logs)  # every sample imported or listed
    # which ones are ambiguous, recomputed: same (image, text, id) in several splits, not all the same answer
    asked: dict[tuple, list[int]] = {}
    for n, (s, i) in enumerate(order):
        r = splits[s][i]
        asked.setdefault((r["image"], r["text"], r["question_id"]), []).append(n)
    ambiguous = set()
    for ns in asked.values():
        left = [k for k in ns if k > 1]  # samples 0 and 1 were listed above
        placeable = len(left) == len(ns) and len({logs[k]["filtered_resps"] for k in left}) == 1
        if len(ns) > 1 and not placeable:
            ambiguous.update(left)
    listed = {int(src) - 1 for src, reason in reasons.items() if reason.startswith("ambiguous")}
    assert listed == ambiguous and ambiguous
    assert any("--compat lmms-eval then covers the imported ones only" in note for note in manifest["notes"])


def test_identical_answers_to_a_shared_question_are_assigned(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    order = [(s, i) for i in range(8) for s in BLOCKS]  # no blocks
    logs = pooled_log(splits, order=order, answer_of=lambda n, split, row: "Yes" if "cat" in row["text"] else "No")
    log_file = write_lines(tmp_path / "20260101_samples_pope.jsonl", logs)
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["import", "lmms-eval", str(log_file), *labels_args(tmp_path / "labels"), "--out", str(run)])
    assert done.exit_code == 0, done.output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["skipped"] == []
    assert any("no number depends on the assignment" in note for note in manifest["notes"])
    report = score_json(run, "text:exact")
    for s in BLOCKS:
        rows = splits[s]
        expect_tp = sum(r["label"] == "yes" and "cat" in r["text"] for r in rows)
        expect_fn = sum(r["label"] == "yes" and "cat" not in r["text"] for r in rows)
        expect_tn = sum(r["label"] == "no" and "cat" not in r["text"] for r in rows)
        expect_fp = sum(r["label"] == "no" and "cat" in r["text"] for r in rows)
        assert counts(report, s) == (expect_tp, expect_fp, expect_tn, expect_fn)


def test_pooled_log_without_labels_says_what_makes_it_importable(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    log_file = write_lines(tmp_path / "20260101_samples_pope.jsonl", pooled_log(splits))
    done = CliRunner().invoke(app, ["import", "lmms-eval", str(log_file), "--out", str(tmp_path / "run")])
    assert done.exit_code == 2
    assert len(done.output.strip().splitlines()) == 1
    assert "samples_pope.jsonl:1: cannot tell the split" in done.output and "pass --labels, one per split" in done.output
    assert not (tmp_path / "run").exists()


def test_a_split_file_whose_documents_say_another_split_is_refused(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    row = splits["popular"][0]
    log = {"doc_id": 0, "target": row["label"], "filtered_resps": ["Yes"],
           "doc": {"question_id": str(row["question_id"]), "question": row["text"], "answer": row["label"], "category": "popular"},
           "pope_accuracy": {"question_id": str(row["question_id"]), "score": 1.0, "prediction": "yes", "ground_truth": row["label"]}}  # fmt: skip
    log_file = write_lines(tmp_path / "20260101_samples_pope_random.jsonl", [log])
    done = CliRunner().invoke(app, ["import", "lmms-eval", str(log_file), "--out", str(tmp_path / "run")])
    assert done.exit_code == 2
    assert len(done.output.strip().splitlines()) == 1
    assert "samples_pope_random.jsonl:1: document of category 'popular' in a file of the pope_random task (random)" in done.output


def test_a_missing_label_file_does_not_pull_its_split_into_another(tmp_path: Path) -> None:
    """The adversarial labels are not given and its block sits between the other two: its
    shared questions match popular and random questions, but none is imported under them."""
    splits = make_labels(tmp_path / "labels")
    order = [(s, i) for s in ("popular", "adversarial", "random") for i in range(8)]
    logs = pooled_log(splits, order=order, answer_of=lambda n, split, row: "Yes")  # identical answers everywhere
    log_file = write_lines(tmp_path / "20260101_samples_pope.jsonl", logs)
    labels = [a for s in ("random", "popular") for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["import", "lmms-eval", str(log_file), *labels, "--out", str(run)])
    assert done.exit_code == 0, done.output
    manifest = json.loads((run / "manifest.json").read_text())
    listed = {int(s["source"].rsplit(":", 1)[1]) - 1 for s in manifest["skipped"]}
    adversarial = {n for n, (s, _) in enumerate(order) if s == "adversarial"}
    assert adversarial <= listed  # every adversarial sample listed, none imported
    samples = [json.loads(l) for l in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) + len(listed) == len(logs)
    # what was imported is each sample's own split
    sources = {n for n in range(len(logs))} - listed
    assert sorted(s["split"] for s in samples) == sorted(order[n][0] for n in sources)


def test_two_samples_claiming_one_question_are_both_listed(tmp_path: Path) -> None:
    """Adversarial and popular share a question random does not ask; without the adversarial
    labels, the adversarial sample of it pairs with the popular question only, as does the
    popular sample: a conflict, both listed."""
    splits = make_labels(tmp_path / "labels")
    splits["adversarial"][1] = dict(splits["popular"][1])
    write_lines(tmp_path / "labels" / "coco_pope_adversarial.json", splits["adversarial"])
    logs = pooled_log(splits)  # blocks: adversarial, popular, random
    log_file = write_lines(tmp_path / "20260101_samples_pope.jsonl", logs)
    labels = [a for s in ("random", "popular") for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["import", "lmms-eval", str(log_file), *labels, "--out", str(run)])
    assert done.exit_code == 0, done.output
    reasons = {int(s["source"].rsplit(":", 1)[1]): s["reason"] for s in json.loads((run / "manifest.json").read_text())["skipped"]}
    assert reasons[2].startswith("conflict: popular question 2 is also the only match of line 10")
    assert reasons[10].startswith("conflict: popular question 2 is also the only match of line 2")
    assert set(range(1, 9)) <= set(reasons)  # no adversarial sample imported
