"""LLaVA-style caption lines (less-is-more, MARINE's captions) share LLaVA's / MARINE's POPE
answers' fields: `halluprobe import FILE` tells them apart by the prompt (a description asked for,
not a question), and where it cannot, the message names `import llava-captions`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.imports.captions import asks_for_a_caption, detect_caption_format
from halluprobe.rundir import RunDir

runner = CliRunner()
DESCRIBE = "Please describe this image in detail."


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_less_is_more_and_marine_captions_are_detected_and_keep_their_prompt(tmp_path: Path) -> None:
    shapes = {
        "less_is_more.jsonl": [{"question_id": 0, "image": "COCO_val2014_000000000042.jpg", "prompt": DESCRIBE, "text": "A dog."},
                               {"question_id": 1, "image": "COCO_val2014_000000000007.jpg", "prompt": DESCRIBE, "text": "Two cats."}],
        "marine_captions.jsonl": [{"question_id": n, "image_id": f"COCO_val2014_{n:012d}.jpg", "prompt": "<image>\n" + DESCRIBE,
                                   "text": t, "answer_id": f"a{n}", "model_id": "llava-1.5-7b-hf", "metadata": {}}
                                  for n, t in ((42, "A dog."), (7, "Two cats."))],
        "caption_key.jsonl": [{"image_id": 42, "caption": "A dog.", "prompt": DESCRIBE}, {"image_id": 7, "caption": "Two cats.", "prompt": DESCRIBE}],
    }  # fmt: skip
    for name, rows in shapes.items():
        path = _lines(tmp_path / name, rows)
        assert detect_caption_format(path) == "llava-captions", name
        out = tmp_path / f"run_{name}"
        result = runner.invoke(app, ["import", str(path), "--out", str(out)])
        assert result.exit_code == 0 and "2 captions imported (llava-captions)" in result.output, (name, result.output)
        run = RunDir(out)
        assert run.read_header().open_ended and run.read_header().template == rows[0]["prompt"]
        assert [s.text for s in run.read_samples()] == ["A dog.", "Two cats."]


def test_pope_answers_are_not_taken_for_captions() -> None:
    for prompt in ("Is there a dog in the image?", "<image>\nIs there a dog in the image?",
                   "Is there a dog in the imange?\nAnswer the question using a single word or phrase.", "<image>\n", None):  # fmt: skip
        assert not asks_for_a_caption(prompt), prompt
    assert asks_for_a_caption("<image>\nDescribe this image.")


def test_a_caption_prompt_that_asks_a_question_names_import_llava_captions(tmp_path: Path) -> None:
    question = "<image>\nWhat is in this image? Describe it in detail."
    for name, row in {
        "marine_shape.jsonl": {"question_id": 1, "image_id": "COCO_val2014_000000000042.jpg", "prompt": question, "text": "A dog."},
        "llava_shape.jsonl": {"question_id": 1, "prompt": question, "text": "A dog."},
    }.items():  # fmt: skip
        path = _lines(tmp_path / name, [row])
        assert detect_caption_format(path) is None
        result = runner.invoke(app, ["import", str(path), "--out", str(tmp_path / "r")])
        assert result.exit_code == 2 and "import llava-captions" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
        assert not (tmp_path / "r").exists()
    bare = _lines(tmp_path / "bare.jsonl", [{"question_id": 1, "image_id": 3, "text": "a dog"}])  # no prompt: the word is needed
    result = runner.invoke(app, ["import", str(bare), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "llava-captions" in result.output, result.output
