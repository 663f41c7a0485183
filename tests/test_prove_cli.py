"""`halluprobe prove score` and `prove questions` end to end (real MiniLM and spaCy, offline)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.cli import app

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

pytest.importorskip("sentence_transformers")
pytest.importorskip("spacy")

runner = CliRunner()

GRAPH = [["dog"], ["sofa"], ["dog", "brown"], ["sofa", "red"], ["dog", "lying on", "sofa"], ["lamp"], ["lamp", "tall"]]


def _data(tmp_path: Path) -> Path:
    records = [
        {"question_id": "a", "image": "one.png", "question": "What is the dog lying on?", "answer": "A red sofa.",
         "image_tuples": GRAPH, "qa_diff_tuples": [["sofa", "red"], ["dog", "lying on", "sofa"]]},
        {"question_id": "b", "image": "one.png", "question": "What colour is the dog?", "answer": "Brown.",
         "image_tuples": GRAPH, "qa_diff_tuples": [["dog", "brown"]]},
        {"question_id": "c", "image": "two.png", "question": "What stands by the sofa?", "answer": "A tall lamp.",
         "image_tuples": GRAPH, "qa_diff_tuples": [["lamp", "tall"]]},
    ]  # fmt: skip
    path = tmp_path / "prove.json"
    path.write_text(json.dumps(records))
    return path


def test_prove_score_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    data = _data(tmp_path)
    responses = tmp_path / "responses.jsonl"
    responses.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question_id": "a", "response": "The brown dog is lying on a red sofa."},
                {"question_id": "b", "response": "The dog is black.", "response_tuples": [["dog", "black"]]},
            ]
        )
    )
    images = tmp_path / "images"
    images.mkdir()
    for name in ("one.png", "two.png"):
        Image.new("RGB", (32, 32), "white").save(images / name)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}}))
    out = tmp_path / "scored"
    args = ["prove", "score", "--data", str(data), "--responses", str(responses), "--out", str(out), "--bootstrap", "50"]
    result = runner.invoke(app, [*args, "--entail-backend", "scripted", "--entail-model", str(script), "--images", str(images)])
    assert result.exit_code == 0, result.output
    assert "hscore" in result.output and "errors 1 of 3" in result.output
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [r["question_id"] for r in rows] == ["a", "b", "c"]
    a, b, c = rows
    # a: spaCy found "sofa red" and "dog lying on sofa" in the response: both recalled at high similarity
    assert a["hscore"] > 0.9 and {m["match_sentence"] for m in a["answer_matches"]} >= {"The sofa is red."}
    assert all(m["p_yes"] is None for m in a["response_matches"] if m["similarity"] >= 0.7)
    # b: the given tuple "dog black" is not in the graph: asked of the scripted model, which says no
    [black] = b["response_matches"]
    assert black["sentence"] == "The dog is black." and black["p_yes"] is not None and black["p_yes"] < 0.5
    assert black["entailed"] is False and b["tscore"] == pytest.approx(black["similarity"])
    assert c["error"] == "no response" and c["hscore"] is None
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 3 and summary["errors"] == 1 and summary["n_hscore"] == 2
    assert summary["hscore"] == pytest.approx((a["hscore"] + b["hscore"]) / 2)
    assert summary["settings"]["entailment"]["backend"] == "scripted"
    assert (tmp_path / "cache" / "prove_tuples.sqlite").is_file()
    # existing results are kept
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "pass --overwrite" in again.output


def test_prove_score_bad_input_is_one_line(tmp_path: Path) -> None:
    data = _data(tmp_path)
    responses = tmp_path / "r.jsonl"
    responses.write_text(json.dumps({"question_id": "zzz", "response": "x"}) + "\n")
    result = runner.invoke(app, ["prove", "score", "--data", str(data), "--responses", str(responses), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert f"{responses}:1: question id 'zzz' is not in the PROVE file" in result.output


def test_prove_questions_cli(tmp_path: Path) -> None:
    data = _data(tmp_path)
    out = tmp_path / "prove_open.jsonl"
    result = runner.invoke(app, ["prove", "questions", "--data", str(data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(x["question_id"], x["prove_id"], x["kind"]) for x in lines] == [(0, "a", "open"), (1, "b", "open"), (2, "c", "open")]
    # written by pope.write_questions: the POPE line keys (object included), then the metadata keys
    assert list(lines[0]) == ["question_id", "image", "text", "label", "object", "kind", "prove_id"] and lines[0]["object"] is None
    # the placeholder label is never scored as yes/no, not even as a third-party labels file
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"question_id": i, "answer": "yes"}) + "\n" for i in range(3)))
    scored = runner.invoke(app, ["score", "--answers", str(answers), "--labels", str(out)])
    assert scored.exit_code == 2 and scored.output.count("\n") == 1
    assert f"{out}: question 0 is an open question (kind 'open'; its label is a placeholder)" in scored.output
    assert runner.invoke(app, ["prove", "questions", "--data", str(data), "--out", str(out)]).exit_code == 2


def test_questions_run_score_through_a_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prove questions -> run --open-ended (scripted free text) -> prove score --responses RUNDIR."""
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    data = _data(tmp_path)
    images = tmp_path / "images"
    images.mkdir()
    for name in ("one.png", "two.png"):
        Image.new("RGB", (16, 16), "white").save(images / name)
    questions = tmp_path / "prove_open.jsonl"
    assert runner.invoke(app, ["prove", "questions", "--data", str(data), "--out", str(questions)]).exit_code == 0
    script = tmp_path / "script.json"
    texts = {"lying on": "The dog is lying on a red sofa.", "colour": "The dog is brown.", "stands": "A tall lamp."}
    rules = [{"match": re.escape(key), "text": text} for key, text in texts.items()]
    script.write_text(json.dumps({"generate": rules, "errors": ["two.png"]}))
    run = tmp_path / "run"
    result = runner.invoke(
        app,
        ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(questions), "--images", str(images), "--out", str(run), "--open-ended", "--max-new-tokens", "64"],
    )
    assert result.exit_code == 0, result.output
    # no yes/no metric from the placeholder labels: score and audit refuse the open-ended run ...
    for verb in (["score", str(run)], ["audit", str(run)]):
        refused = runner.invoke(app, verb)
        assert refused.exit_code == 2 and refused.output.count("\n") == 1, (verb, refused.output)
        assert f"{run / 'run.json'}: an open-ended run (free-form answers; its labels are placeholders) has no yes/no metrics" in refused.output
    # ... and a yes/no run over open questions is refused before it starts
    yes_no = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(questions), "--images", str(images), "--out", str(tmp_path / "yn")])
    assert yes_no.exit_code == 2 and "question 0 (split 'prove_open') is an open question (kind 'open')" in yes_no.output
    assert not (tmp_path / "yn").exists()
    out = tmp_path / "scored"
    result = runner.invoke(app, ["prove", "score", "--data", str(data), "--responses", str(run), "--out", str(out), "--json", "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [r["response"] for r in rows[:2]] == ["The dog is lying on a red sofa.", "The dog is brown."]
    assert rows[0]["hscore"] > 0.9 and rows[1]["hscore"] == pytest.approx(1.0) and rows[1]["tscore"] == pytest.approx(1.0)
    assert rows[2]["error"] is not None and "cannot read image" in rows[2]["error"]  # a failed sample stays an error
    summary = json.loads(result.output[result.output.index("{"):])
    assert summary["errors"] == 1 and summary["n_hscore"] == 2
    # a responses run whose images do not match the PROVE records is refused
    (tmp_path / "x").mkdir()
    other = _data(tmp_path / "x")
    records = json.loads(other.read_text())
    records[0]["image"] = "elsewhere.png"
    other.write_text(json.dumps(records))
    bad = runner.invoke(app, ["prove", "score", "--data", str(other), "--responses", str(run), "--out", str(tmp_path / "o2")])
    assert bad.exit_code == 2 and "PROVE record 0 is about 'elsewhere.png'" in bad.output
    # PROVE asks several questions per image: the same images with the questions reordered are
    # refused too (records a and b are both about one.png)
    (tmp_path / "y").mkdir()
    swapped = _data(tmp_path / "y")
    records = json.loads(swapped.read_text())
    records[0], records[1] = records[1], records[0]
    swapped.write_text(json.dumps(records))
    bad = runner.invoke(app, ["prove", "score", "--data", str(swapped), "--responses", str(run), "--out", str(tmp_path / "o3")])
    assert bad.exit_code == 2, bad.output
    assert bad.output.count("\n") == 1 and "sample 0 did not ask PROVE record 0's question 'What colour is the dog?'" in bad.output


def test_prove_score_with_the_lm_extractor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--extractor lm: a (scripted) model writes the tuples; invalid output is a recorded error."""
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    data = _data(tmp_path)
    responses = tmp_path / "responses.json"
    responses.write_text(json.dumps([{"question_id": "a", "response": "A red sofa."}, {"question_id": "b", "response": "It is brown."}]))
    blank = tmp_path / "blank.png"
    Image.new("RGB", (8, 8), "white").save(blank)
    script = tmp_path / "extractor.json"
    texts = {"Text: A red sofa.": '[["sofa"], ["sofa", "red"]]', "Text: It is brown.": "brown dog"}
    script.write_text(json.dumps({"generate": [{"match": re.escape(key), "text": text} for key, text in texts.items()]}))
    out = tmp_path / "scored"
    lm = ["--extractor", "lm", "--extractor-backend", "scripted", "--extractor-model", str(script), "--extractor-image", str(blank)]
    result = runner.invoke(app, ["prove", "score", "--data", str(data), "--responses", str(responses), "--out", str(out), *lm, "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    a, b, _ = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [m["sentence"] for m in a["response_matches"]] == ["There is a sofa.", "The sofa is red."]
    assert a["answer_matches"][0]["similarity"] == pytest.approx(1.0)  # "sofa red" recalled exactly
    assert b["error"].startswith("tuple extraction failed: invalid LM output: not one JSON array")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["extractor"].startswith("lm:scripted:")
    missing = runner.invoke(app, ["prove", "score", "--data", str(data), "--responses", str(responses), "--out", str(tmp_path / "o"), "--extractor", "lm"])
    assert missing.exit_code == 2 and "--extractor lm needs --extractor-model and --extractor-image" in missing.output


def test_prove_score_refuses_a_folder_that_is_no_run(tmp_path: Path) -> None:
    data = _data(tmp_path)
    folder = tmp_path / "not-a-run"
    folder.mkdir()
    (folder / "samples.jsonl").write_text("")
    result = runner.invoke(app, ["prove", "score", "--data", str(data), "--responses", str(folder), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "not a run directory (no run.json)" in result.output, result.output
    assert not (tmp_path / "o").exists()
