"""`data objhal` (pinned files from a local mirror) and `objhal` (scores equal the transcription)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from _chair import wordnet_or_skip, write_coco
from _objhal import SYNONYMS_TEXT, transcribe_script, write_answers
from typer.testing import CliRunner

import halluprobe.captions.objhal.sources as sources
from halluprobe.benchmarks.question_file import read_questions
from halluprobe.captions.chair.families import wordnet_lemmatize
from halluprobe.cli import app

runner = CliRunner()


def _blob(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def _question_bytes(ids: list[int]) -> bytes:
    lines = [json.dumps({"image_id": i, "question": "Provide a thorough description of the given image.",
                         "image": base64.b64encode(b"jpeg-bytes-%d" % i).decode()}) for i in ids]  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


def _mirror(tmp: Path, monkeypatch: pytest.MonkeyPatch, questions: bytes, synonyms: bytes = SYNONYMS_TEXT.encode()) -> Path:
    """A mirror folder laid out <repo>/<commit>/<path>, and pins that name the good fixture files."""
    root = tmp / "mirror"
    base = root / sources.RLAIFV_REPOSITORY / sources.RLAIFV_COMMIT
    for pin, data in ((sources.SYNONYMS, synonyms), (sources.QUESTIONS, questions)):
        (base / pin.path).parent.mkdir(parents=True, exist_ok=True)
        (base / pin.path).write_bytes(data)
    good = SYNONYMS_TEXT.encode()
    monkeypatch.setattr(sources, "SYNONYMS", sources.PinnedFile(sources.SYNONYMS.path, _blob(good), hashlib.sha256(good).hexdigest(), len(good)))
    monkeypatch.setattr(sources, "QUESTIONS", sources.PinnedFile(sources.QUESTIONS.path, _blob(_question_bytes(list(range(1, 301))))))
    return root


def test_data_objhal_fetches_and_writes_questions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = _mirror(tmp_path, monkeypatch, _question_bytes(list(range(1, 301))))
    result = runner.invoke(app, ["data", "objhal", "--out", str(tmp_path / "out"), "--mirror", str(mirror)])
    assert result.exit_code == 0, result.output
    questions = read_questions(tmp_path / "out" / "objhal.jsonl")
    assert len(questions) == 300 and {q.kind for q in questions} == {"open"}
    assert questions[0].image == "COCO_val2014_000000000001.jpg"
    assert (tmp_path / "out" / "images" / questions[0].image).read_bytes() == b"jpeg-bytes-1"
    note = json.loads((tmp_path / "out" / "objhal_sources.json").read_text())
    assert note["synonyms_refine.txt"]["commit"] == sources.RLAIFV_COMMIT


@pytest.mark.parametrize(
    "case,where",
    [
        ("sha256", "synonyms_refine.txt"),
        ("blob", "obj_halbench_300_with_image.jsonl"),
        ("truncated", "obj_halbench_300_with_image.jsonl:300"),
        ("duplicate", "obj_halbench_300_with_image.jsonl:300"),
    ],
)
def test_data_objhal_bad_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, where: str) -> None:
    good = _question_bytes(list(range(1, 301)))
    questions, synonyms = good, SYNONYMS_TEXT.encode()
    if case == "sha256":
        synonyms = synonyms.replace(b"puppy", b"puppi")
    elif case == "blob":
        questions = good.replace(b"thorough", b"detailed")
    elif case == "truncated":
        questions = good[: good.rindex(b'"image"') + 20]
    else:
        questions = _question_bytes(list(range(1, 300)) + [7])
    mirror = _mirror(tmp_path, monkeypatch, questions, synonyms)
    if case in ("truncated", "duplicate"):  # a pin that names these bytes: the reader's checks refuse them
        monkeypatch.setattr(sources, "QUESTIONS", sources.PinnedFile(sources.QUESTIONS.path, _blob(questions)))
    result = runner.invoke(app, ["data", "objhal", "--out", str(tmp_path / "out"), "--mirror", str(mirror)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and where in result.output
    assert not (tmp_path / "out").exists()  # nothing half-written stays


def test_objhal_scores_equal_the_transcription(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wordnet_or_skip()
    from test_objhal_rules import ANSWERS, COCO_CAPTIONS, INSTANCES

    _mirror(tmp_path, monkeypatch, b"")  # the pins only
    syn = tmp_path / "synonyms_refine.txt"
    syn.write_text(SYNONYMS_TEXT)
    coco = write_coco(tmp_path / "coco", "2014", INSTANCES, COCO_CAPTIONS)
    answers = write_answers(tmp_path / "obj_halbench_answer.jsonl", ANSWERS)
    args = ["objhal", str(answers), "--coco", str(coco), "--synonyms", str(syn), "--tokenizer", "line", "--families", "singularize", "--bootstrap", "50"]
    result = runner.invoke(app, [*args, "--json", "--out", str(tmp_path / "scores")])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    want = transcribe_script(SYNONYMS_TEXT, str.split, lambda w: wordnet_lemmatize(w, "n"), ANSWERS, INSTANCES, COCO_CAPTIONS)
    assert got["summary"]["response_hallucination"] == pytest.approx(want["CHAIRs_refine"])
    assert got["summary"]["mention_hallucination"] == pytest.approx(want["CHAIRi"])
    assert got["summary"]["chair_s"] == pytest.approx(want["CHAIRs"])
    assert set(got["chair"]) == {"chair@singularize"} and len(got["length_groups"]) == 4
    assert got["n_images"] == 4 and "4 images answered (Object HalBench has 300)" in result.stderr
    chair = got["chair"]["chair@singularize"]["summary"]
    assert chair["n"] == len(ANSWERS) and set(chair["settings"]["ground_truth"]["files"]) >= {str(coco / "instances_val2014.json")}
    human = runner.invoke(app, args)
    assert human.exit_code == 0 and "response hallucination (CHAIRs_refine): 85.71" in human.output
    assert (tmp_path / "scores" / "objhal_summary.json").is_file()
    again = runner.invoke(app, args + ["--out", str(tmp_path / "scores")])
    assert again.exit_code == 2  # outputs there: --overwrite replaces them
    syn.write_text(SYNONYMS_TEXT + "lamp, light\n")
    bad = runner.invoke(app, args)
    assert bad.exit_code == 2 and "not the pinned synonyms_refine.txt" in bad.output


def test_fetched_questions_run_and_score(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """data objhal -> run --open-ended (scripted backend) -> objhal on the run dir."""
    wordnet_or_skip()
    from test_objhal_rules import COCO_CAPTIONS, INSTANCES

    mirror = _mirror(tmp_path, monkeypatch, _question_bytes(list(range(1, 301))))
    out = tmp_path / "objhal"
    assert runner.invoke(app, ["data", "objhal", "--out", str(out), "--mirror", str(mirror)]).exit_code == 0
    texts = {1: "a man and two dogs near a toilet seat", 2: "two buses and a motor bike", 3: "wine glasses , a mug , a mug", 4: "people in a taxi"}
    rules = [{"match": "thorough", "image": f"COCO_val2014_{i:012d}.jpg", "text": t} for i, t in texts.items()]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}, "generate": [*rules, {"match": "thorough", "text": "a dog on a bench"}]}))
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(out / "objhal.jsonl"),
                              "--images", str(out / "images"), "--open-ended", "--max-new-tokens", "64", "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    coco = write_coco(tmp_path / "coco", "2014", INSTANCES, COCO_CAPTIONS)
    (out / "synonyms_refine.txt").write_text(SYNONYMS_TEXT)
    result = runner.invoke(app, ["objhal", str(tmp_path / "run"), "--coco", str(coco), "--synonyms", str(out / "synonyms_refine.txt"),
                                 "--tokenizer", "line", "--families", "none", "--bootstrap", "20", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["summary"]
    answers = [(i, texts.get(i, "a dog on a bench")) for i in range(1, 301)]
    want = transcribe_script(SYNONYMS_TEXT, str.split, lambda w: wordnet_lemmatize(w, "n"), answers, INSTANCES, COCO_CAPTIONS)
    assert got["n_responses"] == 300 and json.loads(result.stdout)["errors"] == 0 and not result.stderr
    assert got["response_hallucination"] == pytest.approx(want["CHAIRs_refine"])
    assert got["mention_hallucination"] == pytest.approx(want["CHAIRi"])
    assert got["object_recall"] == pytest.approx(want["obj_rec"])


def test_data_objhal_rerun_keeps_and_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = _mirror(tmp_path, monkeypatch, _question_bytes(list(range(1, 301))))
    args = ["data", "objhal", "--out", str(tmp_path / "out"), "--mirror", str(mirror)]
    assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, args).exit_code == 0  # the same bytes: kept
    (tmp_path / "out" / "objhal.jsonl").write_text("mine\n")
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "objhal.jsonl" in refused.output
    assert (tmp_path / "out" / "objhal.jsonl").read_text() == "mine\n"
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0
    assert (tmp_path / "out" / "objhal.jsonl").read_text() != "mine\n"
