"""`amber score` scores only runs that asked AMBER's queries (issue 32, finding 6): a yes/no run
whose ids fall in AMBER's range is not AMBER."""

from __future__ import annotations

import json
from pathlib import Path

from test_amber import _amber
from typer.testing import CliRunner

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
