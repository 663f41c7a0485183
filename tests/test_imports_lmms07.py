"""lmms-eval 0.7's POPE sample logs, written as its log writer writes them (tests/_lmms_eval_log.py,
which cites the source files and commits), imported and scored.

The pooled ``pope`` task (one ``test`` split, ids 1..N repeated in every block, no ``doc`` in
the log, no ``input_media`` for POPE rows) is paired with the three label files by question
text and id; the ``pope_full`` group writes one file per split task. Every count and the five
numbers lmms-eval prints are recomputed here from the log lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _lmms_eval_log import FULL_TASKS, METRICS, POOLED_BLOCKS, POST_PROMPT, lmms_row, logged_sample, saved_line, write_samples
from halluprobe.cli import app
from test_imports import ANSWERS, counts, make_labels, score_json
from test_imports_pooled import labels_args, split_counts
from test_imports_tools import lmms_printed

runner = CliRunner()


def _answer(doc_id: int, split: str) -> str:
    # a question shared by several splits gets another answer in each: only the right split gives the counts
    return ANSWERS[(doc_id + POOLED_BLOCKS.index(split)) % len(ANSWERS)]


def _pooled(splits: dict[str, list[dict]]) -> tuple[list[dict], dict[int, str]]:
    samples, where = [], {}
    for split in POOLED_BLOCKS:
        for row in splits[split]:
            doc_id = len(samples)
            doc = lmms_row(row, split, doc_id)
            samples.append(logged_sample(doc_id, doc, "pope", "test", _answer(doc_id, split)))
            where[doc_id] = split
    return samples, where


def test_a_line_is_what_lmms_eval_07_writes(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    samples, _ = _pooled(splits)
    line = saved_line(samples[0])
    assert list(line) == ["doc_id", "target", "filtered_resps", "token_counts", "doc_hash", *METRICS, "input"]
    assert line["filtered_resps"] == ANSWERS[0] and line["target"] == "yes" and line["token_counts"] == [None]
    assert line["input"] == splits["adversarial"][0]["text"] + POST_PROMPT
    assert line["pope_accuracy"] == {"question_id": "1", "score": 1.0, "prediction": "yes", "ground_truth": "yes"}
    assert len(line["doc_hash"]) == 64 and "doc" not in line and "input_media" not in line and "resps" not in line


def test_pooled_pope_task_of_lmms_eval_07(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    samples, where = _pooled(splits)
    log = write_samples(tmp_path / "logs" / "llava", "pope", samples)
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    run = tmp_path / "run"
    done = runner.invoke(app, ["import", str(log), *labels_args(tmp_path / "labels"), "--out", str(run)])
    assert done.exit_code == 0, done.output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["skipped"] == [] and manifest["unanswered"] == {"adversarial": 0, "popular": 0, "random": 0}
    assert manifest["imported"]["splits"] == {"adversarial": 8, "popular": 8, "random": 8}
    report = score_json(run, "lmms-eval:exact")
    expected = split_counts(lines, where)
    for split in POOLED_BLOCKS:
        assert counts(report, split) == expected[split], split
    compat = runner.invoke(app, ["score", str(run), "--readout", "lmms-eval:exact", "--compat", "lmms-eval"])
    assert compat.exit_code == 0, compat.output
    pooled = json.loads(compat.stdout)["pooled"]
    for key, value in lmms_printed(lines).items():  # the five numbers lmms-eval prints for the task
        assert pooled[key] == pytest.approx(value, abs=1e-12), key
    assert pooled["n"] == len(lines)


def test_pope_full_group_writes_one_file_per_split_task(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    files, per_split = [], {}
    for split, task in FULL_TASKS.items():
        samples = [logged_sample(i, lmms_row(row, split, i), task, split, _answer(i, split)) for i, row in enumerate(splits[split])]
        files.append(write_samples(tmp_path / "logs", task, samples))
        per_split[split] = [saved_line(s) for s in samples]
    for extra in ([], labels_args(tmp_path / "labels")):  # the log's own targets, then the label files
        run = tmp_path / f"run{len(extra)}"
        done = runner.invoke(app, ["import", *map(str, files), *extra, "--out", str(run)])
        assert done.exit_code == 0, done.output
        report = score_json(run, "lmms-eval:exact")
        for split, lines in per_split.items():
            where = {line["doc_id"]: "random" for line in lines}  # one split per file: count it as one block
            assert counts(report, split) == split_counts(lines, where)["random"], split


def test_reasoning_tags_stripped_by_lmms_eval_keep_resps_and_the_answer_is_filtered_resps(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = splits["random"]
    samples = [
        logged_sample(i, lmms_row(row, "random", i), "pope_random", "random", "Yes" if i % 2 == 0 else "No", raw=f"<think>step {i}</think>{'Yes' if i % 2 == 0 else 'No'}")
        for i, row in enumerate(rows)
    ]
    log = write_samples(tmp_path / "logs", "pope_random", samples)
    first = json.loads(log.read_text().splitlines()[0])
    assert first["resps"] == "<think>step 0</think>Yes" and first["filtered_resps"] == "Yes"
    done = runner.invoke(app, ["import", str(log), "--out", str(tmp_path / "run")])
    assert done.exit_code == 0, done.output
    report = score_json(tmp_path / "run", "text:exact")
    m = report["splits"]["random"]
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (len(rows) // 2, 0, len(rows) // 2, 0)  # make_labels: yes, no, yes, ...


def test_the_note_names_the_key_a_pooled_log_was_paired_by(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    samples, _ = _pooled(splits)
    log = write_samples(tmp_path / "logs", "pope", samples)
    done = runner.invoke(app, ["import", str(log), *labels_args(tmp_path / "labels"), "--out", str(tmp_path / "run")])
    assert done.exit_code == 0, done.output
    notes = json.loads((tmp_path / "run" / "manifest.json").read_text())["notes"]
    # lmms-eval 0.7 names no image for a POPE row: the pairing was by text and id, and says so
    assert "pooled 'pope' task: 24 of 24 samples paired with their split by question text and id (the log names no image)" in notes
