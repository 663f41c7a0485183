"""What the decoding-table tests share (test_freeform_decoding.py, test_check_decoding.py): free-form
run dirs of captions with known hallucinations, their ground truth, and the CHAIR fixtures (the
fixture's NLTK stand-in, WordNet from Debian's files or a skip).

The fixtures below are autouse: a module that imports them runs every test with them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _chair import FixtureTools, wordnet_or_skip

from halluprobe.captions.chair import families as chair_families
from halluprobe.records import GenerateConfig, RunHeader, Sample

__all__ = ["GREEDY", "METHOD", "OBJECTS", "PROMPT", "SAMPLED", "TRUTH", "chair_wordnet", "decoding_run", "fixture_nltk", "write_truth"]

PROMPT = "USER: <image>\nPlease describe this image in detail. ASSISTANT:"
TRUTH = {1: ["dog"], 2: ["cat"], 3: ["cat", "dog"], 4: ["bus"]}
OBJECTS = {"dog", "cat", "bus", "car", "person"}  # every object word the captions use
# greedy: image 1 hallucinates a cat, image 2 a dog and a car
GREEDY = {1: "a dog and a cat", 2: "a cat with a dog and a car", 3: "a dog and a cat", 4: "a bus"}
# the method: image 1 shortened (its hallucination gone), image 3 unchanged, image 2 the same
METHOD = {1: "a dog", 2: "a cat with a dog and a car", 3: "a dog and a cat", 4: "a bus"}
SAMPLED = {1: "a dog", 2: "a cat and a bus", 3: "a cat", 4: "a bus and a dog"}


@pytest.fixture(autouse=True, scope="module")
def chair_wordnet() -> None:
    wordnet_or_skip()


@pytest.fixture(autouse=True)
def fixture_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())


def decoding_run(
    folder: Path,
    captions: dict[int, str | None],
    *,
    prompt: str = PROMPT,
    image_of: Callable[[int], str] | None = None,
    **generate: Any,
) -> Path:
    """A free-form run dir (run.json + samples.jsonl) of one caption per image id; a None caption
    is a sample that failed; ``generate``: the run's GenerateConfig (decode, sample, ...)."""
    folder.mkdir(parents=True)
    header = RunHeader(
        halluprobe_version="test", created_at="2026-01-01T00:00:00Z", fingerprint=f"fp-{folder.name}", backend="hf", backend_info={},
        model="tiny", template="llava", readouts=[], text_rules=[], max_new_tokens=64, token_sets=None, benchmarks={"chair": "0" * 64},
        benchmark_paths={"chair": str(folder.parent / "q.jsonl")}, images_root=str(folder.parent), open_ended=True,
        generate=GenerateConfig(max_new_tokens=64, stop_strings=(), **generate),
    )  # fmt: skip
    (folder / "run.json").write_text(header.model_dump_json(indent=2) + "\n")
    name_of = image_of or (lambda i: f"COCO_val2014_{i:012d}.jpg")
    samples = [
        Sample(split="chair", question_id=image, image=name_of(image), object=None, label="yes", prompt=prompt, text=text,
               error=None if text is not None else "boom")
        for image, text in captions.items()
    ]  # fmt: skip
    (folder / "samples.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in samples))
    return folder


def write_truth(folder: Path) -> Path:
    """TRUTH as a ground-truth file (``{"image_id", "objects"}`` lines) in ``folder``."""
    path = folder / "objects.jsonl"
    path.write_text("".join(json.dumps({"image_id": i, "objects": o}) + "\n" for i, o in TRUTH.items()))
    return path
