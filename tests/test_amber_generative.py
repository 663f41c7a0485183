"""AMBER's generative CHAIR / Cover / Hal / Cog on a hand-computed example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.captions.amber import generative
from halluprobe.captions.amber.data import AmberAnnotation
from halluprobe.captions.amber.generative import amber_generative
from halluprobe.captions.chair import families as chair_families
from halluprobe.cli import app

from _chair import wordnet_or_skip, FixtureTools


@pytest.fixture(autouse=True, scope="module")
def _wordnet() -> None:
    wordnet_or_skip()

ASSOCIATION = {"dog": ["puppy"], "cat": [], "grass": ["lawn"], "car": ["vehicle"], "frisbee": [], "sign": []}
ANNOTATIONS = [
    {"id": 1, "type": "generative", "truth": ["dog", "grass"], "hallu": ["cat", "car"]},
    {"id": 2, "type": "generative", "truth": ["cat"], "hallu": []},
]
TAGS = {"a": "DT", "on": "IN", "the": "DT", "near": "IN", "and": "CC"}


class FixtureSimilarity:
    """spaCy's verdicts, written down: a word is similar to itself, and frisbee to cat."""

    identity = "fixture"

    def similar(self, a: str, b: str) -> bool:
        return a == b or (a, b) == ("frisbee", "cat")


def test_by_hand() -> None:
    captions = [(1, "a puppy on the lawn near a car and a sign and a frisbee"), (2, "a cat")]
    annotations = [AmberAnnotation.model_validate(a) for a in ANNOTATIONS]
    numbers, per = amber_generative(captions, annotations, ASSOCIATION, ["sign"], FixtureTools(TAGS), FixtureSimilarity())
    assert per[0].nouns == ("puppy", "lawn", "car", "sign", "frisbee") and per[0].hallucinated == ("car", "frisbee")
    assert per[0].truth_covered == (1, 1) and per[0].hallu_covered == (1, 1)
    assert per[1].hallucinated == () and per[1].truth_covered == (1,)
    # CHAIR 2/(6+0.001); Cover 3/(3+0.001); Hal 100 - 1/(2+0.001); Cog 2/(2+0.001)
    assert numbers.model_dump() == {"CHAIR": 33.3, "Cover": 100.0, "Hal": 50.0, "Cog": 100.0, "n": 2}


def test_cli_records_the_similarity_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools(TAGS))
    monkeypatch.setattr(generative, "SpacySimilarity", lambda model, threshold: FixtureSimilarity())
    data = tmp_path / "amber"
    (data / "query").mkdir(parents=True)
    (data / "annotations.json").write_text(json.dumps(ANNOTATIONS))
    (data / "relation.json").write_text(json.dumps(ASSOCIATION))
    (data / "safe_words.txt").write_text("sign\n")
    (data / "query" / "query_discriminative.json").write_text("[]")
    (data / "query" / "query_generative.json").write_text(json.dumps([{"id": 1, "image": "AMBER_1.jpg", "query": "Describe this image."},
                                                                      {"id": 2, "image": "AMBER_2.jpg", "query": "Describe this image."}]))  # fmt: skip
    runner = CliRunner()
    built = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(tmp_path / "q"), "--no-check-sha256"])
    assert built.exit_code == 0, built.output
    images = tmp_path / "imgs"
    images.mkdir()
    for k in (1, 2):
        (images / f"AMBER_{k}.jpg").write_bytes(b"x")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}, "generate": [
        {"match": "Describe", "image": "AMBER_1.jpg", "text": "a puppy on the lawn near a car and a sign and a frisbee"},
        {"match": "Describe", "image": "AMBER_2.jpg", "text": "a cat"}]}))  # fmt: skip
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(tmp_path / "q" / "amber_generative.jsonl"),
                              "--images", str(images), "--open-ended", "--max-new-tokens", "64", "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    result = runner.invoke(app, ["amber", "generative", str(tmp_path / "run"), "--data", str(data), "--no-check-sha256", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["numbers"]["CHAIR"] == 33.3 and out["settings"]["similarity"] == "fixture" and out["settings"]["max_new_tokens"] == 64
    # the same captions from an lmms-eval amber_g log: the same numbers
    logs = tmp_path / "samples_amber_g.jsonl"
    logs.write_text("".join(json.dumps({"doc_id": k, "doc": {"question_id": k + 1, "task_type": "generative"}, "filtered_resps": [text]}) + "\n"
                            for k, text in enumerate(["a puppy on the lawn near a car and a sign and a frisbee", "a cat"])))  # fmt: skip
    imported = runner.invoke(app, ["import", "lmms-eval-amber", str(logs), "--out", str(tmp_path / "lmms")])
    assert imported.exit_code == 0, imported.output
    again = runner.invoke(app, ["amber", "generative", str(tmp_path / "lmms"), "--data", str(data), "--no-check-sha256", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["numbers"] == out["numbers"]
