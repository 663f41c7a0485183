"""The committed demo model: loads like a hub model, really answers, and hallucinates like one.

One run of halluprobe's own pipeline (hf backend, every readout) over POPE built from scenes
the model never saw (training used seeds 1 and 2, the demo uses 7) feeds the checks below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _scored import scored_samples  # noqa: E402

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.benchmarks.objects import read_objects  # noqa: E402
from halluprobe.benchmarks.pope import build_pope, write_pope
from halluprobe.benchmarks.question_file import read_questions, split_name  # noqa: E402
from halluprobe.benchmarks.synthetic import write_synthetic  # noqa: E402
from halluprobe.demo import DEMO_MODEL_DIR  # noqa: E402
from halluprobe.rundir import RunDir, sha256_file  # noqa: E402
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.runner import run_questions  # noqa: E402
from halluprobe.scoring import score_rundir  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

HELD_OUT_SEED = 11  # not a training seed (1, 2) nor the demo's (7)
N_IMAGES = 80
# Measured with the shipped weights on held-out seeds 11..20, 80 images each (first token
# ▁Yes vs ▁No): random-split accuracy 0.887 to 0.935, random-minus-adversarial F1 gap 0.104 to
# 0.140, 'yes' to absent objects 92 to 109 adversarial vs 19 to 31 random. The bounds below sit
# well inside these ranges, for any of those seeds.
MIN_RANDOM_ACCURACY = 0.8
MIN_F1_GAP = 0.08
# Greedy captions of the same seeds' scenes (`run --open-ended`, the demo's prompt), read against
# all 29 synthetic classes (every caption of the trained form): recall of present classes 0.758 to 0.832, captions naming an absent
# class 0.463 to 0.650, absent classes named that belong to the scene's theme 55% to 78%.
MIN_CAPTION_RECALL = 0.65
MIN_RIGHT_THEME = 0.85  # measured 0.925 to 0.988 (the scene's theme named)
MIN_CAPTIONS_WITH_ABSENT = 0.3
MAX_CAPTIONS_WITH_ABSENT = 0.8


@pytest.fixture(scope="module")
def held_out_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("demo-model")
    scenes = write_synthetic(root / "scenes", n_images=N_IMAGES, seed=HELD_OUT_SEED)
    build = build_pope(read_objects(scenes.annotations), name="heldout", n_images=N_IMAGES, per_image=3, seed=0)
    files = [p for p in write_pope(build, root / "bench") if "_pope_" in p.name]
    questions, fingerprints = [], {}
    for path in files:
        questions.extend(read_questions(path))
        fingerprints[split_name(path)] = (path, sha256_file(path))
    backend = HFBackend(str(DEMO_MODEL_DIR), batch_size=16, dtype="float32", device="cpu")
    config = RunConfig(model=str(DEMO_MODEL_DIR), template="llava")
    header = make_header(config, backend, fingerprints, scenes.images_dir)
    run_questions(backend, questions, scenes.images_dir, RunDir(root / "run"), config, header)
    return {"run": root / "run", "samples": scored_samples(root / "run"), "header": header}


def _metrics(run: Path, split: str, readout: str) -> Any:
    return score_rundir(run, readout=readout, n_resamples=0, write=False, force_invalid=True).splits[split]


def test_loads_like_a_hub_model_and_is_small() -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor, LlavaForConditionalGeneration

    files = {p.name: p.stat().st_size for p in DEMO_MODEL_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json", "training.json"} <= set(files)
    assert sum(files.values()) < 12_000_000, files
    processor = AutoProcessor.from_pretrained(DEMO_MODEL_DIR, local_files_only=True)
    model, info = AutoModelForImageTextToText.from_pretrained(
        DEMO_MODEL_DIR, local_files_only=True, dtype=torch.float32, output_loading_info=True
    )
    assert isinstance(model, LlavaForConditionalGeneration) and model.dtype == torch.float32
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")), info
    # tied input/output embeddings: the 32064-row matrix is stored once
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model.get_input_embeddings().weight.shape[0] == 32064
    assert processor.tokenizer.convert_ids_to_tokens([5592, 1770]) == ["▁Yes", "▁No"]  # Mistral v1
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is there a cup in the image?"}]}]
    # the chat template renders exactly halluprobe's "llava" prompt format
    assert processor.apply_chat_template(messages, add_generation_prompt=True) == (
        "USER: <image>\nIs there a cup in the image?\nASSISTANT:"
    )
    record = json.loads((DEMO_MODEL_DIR / "training.json").read_text())
    assert {"config", "data_recipe", "training_seconds", "held_out"} <= set(record)
    assert record["config"]["data_seed"] != HELD_OUT_SEED and record["config"]["eval_seed"] != HELD_OUT_SEED


@pytest.mark.slow
def test_answers_far_above_chance_and_adversarial_negatives_fool_it_more(held_out_run: dict[str, Any]) -> None:
    samples, run = held_out_run["samples"], held_out_run["run"]
    assert len(samples) == N_IMAGES * 18 and not any(s.error for s in samples)
    random = _metrics(run, "random", "dynamic")
    adversarial = _metrics(run, "adversarial", "dynamic")
    assert random.accuracy > MIN_RANDOM_ACCURACY, random
    assert adversarial.f1 < random.f1 - MIN_F1_GAP, (random.f1, adversarial.f1)
    # the mechanism: more "yes" to absent objects that go with the scene (popular negatives are
    # not reliably harder here: on seed 11 the model says yes to fewer of them than to random ones)
    assert adversarial.fp > 2 * random.fp, (random.fp, adversarial.fp)


@pytest.mark.slow
def test_legacy_ids_invalid_while_dynamic_reads_the_answer(held_out_run: dict[str, Any]) -> None:
    """The in-set case: the greedy first token is always ``▁Yes`` or ``▁No`` here, so ``dynamic``
    must agree with greedy decoding; the legacy LLaMA-2 ids are other Mistral words."""
    sets = held_out_run["header"].token_sets
    assert sets.legacy_valid is False
    assert sets.legacy_pieces["3582"] != "yes" and sets.legacy_pieces["1217"] != "no"
    assert 5592 in sets.yes_ids and 1770 in sets.no_ids
    samples = held_out_run["samples"]
    for s in samples:
        top = s.first_token[0]
        assert top.id in (5592, 1770) and s.offset_argmax is None, top
        greedy = "yes" if top.id == 5592 else "no"
        assert s.readouts["dynamic"].decision == greedy
        assert s.text == ("Yes." if greedy == "yes" else "No.")  # ▁Yes/▁No, '.', then it stops
        assert s.readouts["text:strict"].decision == greedy
    # forced anyway, the legacy readouts read noise: near chance on the random split
    run = held_out_run["run"]
    forced = _metrics(run, "random", "legacy_2tok")
    assert abs(forced.accuracy - 0.5) < 0.2 and forced.accuracy < _metrics(run, "random", "dynamic").accuracy - 0.2


@pytest.fixture(scope="module")
def held_out_captions(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, str]]:
    """(scene, greedy caption) of the held-out scenes, through `run --open-ended`'s path."""
    from halluprobe.benchmarks.synthetic import generate_scene
    from halluprobe.demo_captions import caption_config, write_caption_inputs

    root = tmp_path_factory.mktemp("demo-captions")
    scenes = write_synthetic(root / "scenes", n_images=N_IMAGES, seed=HELD_OUT_SEED)
    questions, fingerprints, _ = write_caption_inputs(root / "captions", scenes.annotations)
    backend = HFBackend(str(DEMO_MODEL_DIR), batch_size=16, dtype="float32", device="cpu")
    config = caption_config(str(DEMO_MODEL_DIR), "greedy")
    header = make_header(config, backend, fingerprints, scenes.images_dir)
    run_questions(backend, questions, scenes.images_dir, RunDir(root / "run"), config, header)
    samples = list(RunDir(root / "run").read_samples())
    assert len(samples) == N_IMAGES and not any(s.error for s in samples)
    return [(generate_scene(HELD_OUT_SEED, int(s.image[6:11]), size=96), s.text or "") for s in samples]


@pytest.mark.slow
def test_captions_name_most_objects_and_some_that_go_with_the_scene_but_are_absent(held_out_captions: list[tuple[Any, str]]) -> None:
    import re

    from halluprobe.benchmarks.synthetic_classes import CLASSES, THEMES

    names = [c.name for c in CLASSES]
    with_absent = present = recalled = absent = absent_in_theme = right_theme = 0
    for scene, caption in held_out_captions:
        assert re.fullmatch(r"An? (kitchen|street|park|office|beach) with .+\.", caption.strip()), caption  # the trained form
        right_theme += f" {scene.theme} with " in caption
        said = {n for n in names if re.search(rf"\b{re.escape(n)}\b", caption.lower())}
        wrong = said - set(scene.names)
        with_absent += bool(wrong)
        present, recalled = present + len(set(scene.names)), recalled + len(said & set(scene.names))
        absent, absent_in_theme = absent + len(wrong), absent_in_theme + len(wrong & set(THEMES[scene.theme]))
    share = with_absent / len(held_out_captions)
    assert right_theme / len(held_out_captions) > MIN_RIGHT_THEME, right_theme  # the theme is easy: a tint
    assert recalled / present > MIN_CAPTION_RECALL, (recalled, present)
    assert MIN_CAPTIONS_WITH_ABSENT < share < MAX_CAPTIONS_WITH_ABSENT, share
    # the theme prior: most absent objects named belong to the scene's theme
    assert absent_in_theme > absent / 2, (absent_in_theme, absent)
