"""AMBER: discriminative queries as POPE-format questions, and AMBER's own numbers (compat mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.captions.amber.discriminative import amber_discriminative_numbers
from halluprobe.cli import app

runner = CliRunner()

EXISTENCE = "discriminative-hallucination"
STATE = "discriminative-attribute-state"


def _amber(folder: Path) -> Path:
    """AMBER-shaped files: 1 generative record, 4 existence (2 yes), 2 state (1 yes), 2 relation."""
    (folder / "query").mkdir(parents=True)
    records = [("generative", None), (EXISTENCE, "yes"), (EXISTENCE, "yes"), (EXISTENCE, "no"), (EXISTENCE, "no"),
               (STATE, "yes"), (STATE, "no"), ("relation", "no"), ("discriminative-relation", "yes")]  # fmt: skip
    annotations = [{"id": k + 1, "type": t, "truth": truth if truth else ["dog"], **({"hallu": ["cat"]} if not truth else {})}
                   for k, (t, truth) in enumerate(records)]  # fmt: skip
    (folder / "annotations.json").write_text(json.dumps(annotations))
    queries = [{"id": k + 1, "image": f"AMBER_{k % 3 + 1}.jpg", "query": f"Is there a thing number {k + 1} in this image?"} for k in range(1, len(records))]
    (folder / "query" / "query_discriminative.json").write_text(json.dumps(queries))
    return folder


def test_all_no_by_hand() -> None:
    rows = [(EXISTENCE, "yes", "No"), (EXISTENCE, "yes", "No"), (EXISTENCE, "no", "No"), (EXISTENCE, "no", "No")]
    n = amber_discriminative_numbers(rows).existence
    # accuracy 2/4.001; precision 2/4.001; recall 2/2.001 -> 100.0; F1 from the rounded 50.0 and 100.0
    assert n.model_dump() == {"Accuracy": 50.0, "Precision": 50.0, "Recall": 100.0, "F1": round(2 * 0.5 * 1.0 / (1.5 + 0.001) * 100, 1), "n": 4}
    assert n.f1 == 66.6


def test_exact_strings_and_pooled_attribute() -> None:
    rows = [(STATE, "no", "no"), (STATE, "no", "No."), (STATE, "yes", "Yes"), ("discriminative-attribute-number", "no", "No")]
    numbers = amber_discriminative_numbers(rows)
    # "no" and "No." are neither Yes nor No: wrong, and not answered "No"
    assert numbers.state.accuracy == round(1 / 3.001 * 100, 1) and numbers.state.recall == 0.0
    # the pooled attribute counters start at 3 x 0.001
    assert numbers.attribute.accuracy == round(2 / 4.003 * 100, 1) == 50.0
    assert numbers.attribute.recall == round(1 / 3.003 * 100, 1)
    assert numbers.existence.n == 0 and numbers.existence.accuracy == 0.0


def test_questions_run_and_both_numbers(tmp_path: Path) -> None:
    data = _amber(tmp_path / "amber")
    out = tmp_path / "questions"
    refused = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(out)])
    assert refused.exit_code == 2 and "annotations.json: sha256" in refused.output and "differs from AMBER commit" in refused.output
    built = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(out), "--no-check-sha256"])
    assert built.exit_code == 0, built.output
    existence = [json.loads(x) for x in (out / "amber_existence.jsonl").read_text().splitlines()]
    assert [q["question_id"] for q in existence] == [2, 3, 4, 5] and [q["label"] for q in existence] == ["yes", "yes", "no", "no"]
    assert existence[0]["amber_type"] == EXISTENCE and sorted(p.name for p in out.iterdir()) == [
        "amber_attribute-state.jsonl", "amber_existence.jsonl", "amber_relation.jsonl"]  # fmt: skip
    images = tmp_path / "imgs"
    images.mkdir()
    missing = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(tmp_path / "q2"), "--no-check-sha256", "--images", str(images)])
    assert missing.exit_code == 2 and "3 AMBER images are not in the folder, e.g. AMBER_1.jpg" in missing.output
    for k in (1, 2, 3):
        (images / f"AMBER_{k}.jpg").write_bytes(b"x")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}}))  # every object absent: the scripted model says no
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(out / "amber_existence.jsonl"),
                              "--images", str(images), "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    score = runner.invoke(app, ["score", str(tmp_path / "run"), "--json"])
    assert score.exit_code == 0, score.output
    compat = runner.invoke(app, ["amber", "score", str(tmp_path / "run"), "--data", str(data), "--no-check-sha256", "--json"])
    assert compat.exit_code == 0, compat.output
    numbers = json.loads(compat.stdout)["numbers"]
    texts = [json.loads(x)["text"] for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    expected = amber_discriminative_numbers([(EXISTENCE, label, t) for label, t in zip(["yes", "yes", "no", "no"], texts)])
    assert numbers["existence"] == expected.existence.model_dump()
    # the scripted model says "No." -- not AMBER's exact "No": every answer counts wrong there
    assert texts == ["No."] * 4 and numbers["existence"]["Accuracy"] == 0.0 and numbers["existence"]["Recall"] == 0.0
    assert json.loads(score.stdout)["splits"]["amber_existence"]["n"] == 4  # the split is the file stem
    open_run = runner.invoke(app, ["amber", "score", str(tmp_path / "nothing"), "--data", str(data), "--no-check-sha256"])
    assert open_run.exit_code == 2


@pytest.mark.parametrize("bad", ["[1, 2]", '[{"id": 2, "type": "x", "truth": "yes"}]'])
def test_bad_annotations(tmp_path: Path, bad: str) -> None:
    data = _amber(tmp_path / "amber")
    (data / "annotations.json").write_text(bad)
    result = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(tmp_path / "q"), "--no-check-sha256"])
    assert result.exit_code == 2 and "annotations.json" in result.output and len(result.output.strip().splitlines()) == 1
