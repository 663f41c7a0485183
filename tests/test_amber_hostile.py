"""AMBER under hostile input (issue 32): `amber score` scores only runs that asked AMBER's
queries (finding 6: a yes/no run whose ids fall in AMBER's range is not AMBER); `amber
generative` replaces no file without --overwrite and refuses an overlong caption in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_amber_generative as generative_case
from _chair import FixtureTools
from test_amber import _amber
from typer.testing import CliRunner

from halluprobe.captions.amber import generative
from halluprobe.captions.chair import families as chair_families
from halluprobe.cli import app

runner = CliRunner()


def _run(tmp_path: Path, name: str, questions: list[dict[str, object]]) -> Path:
    bench = tmp_path / f"{name}.jsonl"
    bench.write_text("".join(json.dumps(q) + "\n" for q in questions))
    images = tmp_path / "imgs"
    images.mkdir(exist_ok=True)
    for q in questions:
        (images / str(q["image"])).write_bytes(b"x")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}}))
    out = tmp_path / f"run-{name}"
    done = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(bench), "--images", str(images),
                               "--out", str(out)])  # fmt: skip
    assert done.exit_code == 0, done.output
    return out


def test_a_pope_run_with_ids_in_ambers_range_is_refused(tmp_path: Path) -> None:
    data = _amber(tmp_path / "amber")
    pope = [{"question_id": k, "image": f"COCO_val2014_{k:012d}.jpg", "text": f"Is there a dog in the image? ({k})", "label": "no"}
            for k in (2, 3)]  # fmt: skip
    run = _run(tmp_path, "pope", pope)
    result = runner.invoke(app, ["amber", "score", str(run), "--data", str(data), "--no-check-sha256"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"{run / 'samples.jsonl'}:1: question_id 2 asked about 'COCO_val2014_000000000002.jpg', not AMBER's query 2" in result.output


def test_other_questions_on_ambers_images_are_refused(tmp_path: Path) -> None:
    data = _amber(tmp_path / "amber")
    queries = json.loads((data / "query" / "query_discriminative.json").read_text())
    other = [{"question_id": q["id"], "image": q["image"], "text": "Is it sunny?", "label": "no"} for q in queries[:2]]
    run = _run(tmp_path, "other", other)
    result = runner.invoke(app, ["amber", "score", str(run), "--data", str(data), "--no-check-sha256"])
    assert result.exit_code == 2 and "not AMBER's query 2" in result.output and "samples.jsonl:1" in result.output, result.output


def _generative_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, texts: list[str]) -> tuple[Path, Path]:
    """AMBER-shaped data and an --open-ended run of its two generative queries answering ``texts``."""
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools(generative_case.TAGS))
    monkeypatch.setattr(generative, "SpacySimilarity", lambda model, threshold: generative_case.FixtureSimilarity())
    data = tmp_path / "amber"
    (data / "query").mkdir(parents=True)
    (data / "annotations.json").write_text(json.dumps(generative_case.ANNOTATIONS))
    (data / "relation.json").write_text(json.dumps(generative_case.ASSOCIATION))
    (data / "safe_words.txt").write_text("sign\n")
    (data / "query" / "query_generative.json").write_text(json.dumps([{"id": k, "image": f"AMBER_{k}.jpg", "query": "Describe this image."}
                                                                      for k in (1, 2)]))  # fmt: skip
    questions = [{"question_id": k, "image": f"AMBER_{k}.jpg", "text": "Describe this image.", "label": "yes", "kind": "open"} for k in (1, 2)]
    bench = tmp_path / "amber_generative.jsonl"
    bench.write_text("".join(json.dumps(q) + "\n" for q in questions))
    images = tmp_path / "imgs"
    images.mkdir()
    for k in (1, 2):
        (images / f"AMBER_{k}.jpg").write_bytes(b"x")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}, "generate": [{"match": "Describe", "image": f"AMBER_{k}.jpg", "text": t}
                                                              for k, t in zip((1, 2), texts)]}))  # fmt: skip
    done = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(bench), "--images", str(images),
                               "--open-ended", "--max-new-tokens", "64", "--out", str(tmp_path / "run")])  # fmt: skip
    assert done.exit_code == 0, done.output
    return data, tmp_path / "run"


def test_amber_generative_out_replaces_no_file_without_overwrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, run = _generative_run(tmp_path, monkeypatch, ["a cat", "a dog"])
    out = tmp_path / "paper"
    out.mkdir()
    (out / "amber_generative.json").write_text("the user's own\n")
    argv = ["amber", "generative", str(run), "--data", str(data), "--no-check-sha256", "--out", str(out)]
    refused = runner.invoke(app, argv)
    assert refused.exit_code == 2 and "--overwrite" in refused.output and len(refused.output.strip().splitlines()) == 1, refused.output
    assert (out / "amber_generative.json").read_text() == "the user's own\n"
    replaced = runner.invoke(app, [*argv, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((out / "amber_generative.json").read_text())["numbers"]["n"] == 2


def test_amber_generative_overlong_caption_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, run = _generative_run(tmp_path, monkeypatch, ["a cat", "a dog"])
    samples = run / "samples.jsonl"
    lines = [json.loads(x) for x in samples.read_text().splitlines()]
    lines[1]["text"] = "dog " * 50_000  # a 200,000-character caption (the scripted model stops at max_new_tokens)
    samples.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = runner.invoke(app, ["amber", "generative", str(run), "--data", str(data), "--no-check-sha256"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"{run / 'samples.jsonl'}:2: a caption of 200,000 characters is over the limit" in result.output
