"""The hf backend on tiny real architectures with real vocabularies and real photos.

The stored readouts are checked against log-probabilities this test computes itself from the
model's logits (one question at a time, no batching), and against greedy decoding on a
"steered" tiny LLaVA whose answer head puts the argmax on ``▁Yes`` or ``▁No``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _scored import scored_samples  # noqa: E402

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.benchmarks.question_file import read_questions  # noqa: E402
from halluprobe.readouts.tokensets import LEGACY_8TOK_NO, LEGACY_8TOK_YES  # noqa: E402
from halluprobe.rundir import RunDir, sha256_file  # noqa: E402
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.runner import run_questions  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402
from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

LLAMA_YES = [3582, 3869, 4874, 8241, 21143, 22483]  # yes ▁Yes ▁yes Yes YES ▁YES (published LLaMA-2 ids)
LLAMA_NO = [694, 1217, 1939, 3782, 6632, 11698]  # ▁no no ▁No No NO ▁NO

OBJECTS = ["person", "cat", "cup", "umbrella", "motorcycle", "dog"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images_dir, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    return images_dir


def _questions_file(path: Path, images: list[str], split: str = "random") -> Path:
    lines, qid = [], 1
    for image in images:
        for i, obj in enumerate(OBJECTS):
            article = "an" if obj[0] in "aeiou" else "a"
            text = f"Is there {article} {obj} in the image?"
            lines.append(json.dumps({"question_id": qid, "image": image, "text": text, "label": "yes" if i % 2 == 0 else "no"}))
            qid += 1
    file = path / f"tiny_pope_{split}.json"
    file.write_text("\n".join(lines) + "\n")
    return file


def _run(model_dir: Path, photos: Path, bench: Path, out: Path, *, batch_size: int, template: str | None, max_new_tokens: int = 6) -> tuple[HFBackend, list[Any]]:
    backend = HFBackend(str(model_dir), batch_size=batch_size, dtype="float32", device="cpu")
    questions = read_questions(bench, split="random")
    config = RunConfig(model=str(model_dir), template=template, max_new_tokens=max_new_tokens, overwrite=True)
    header = make_header(config, backend, {"random": (bench, sha256_file(bench))}, photos)
    run_questions(backend, questions, photos, RunDir(out), config, header)
    return backend, scored_samples(out)


def _steer(model: Any, inputs_list: list[dict[str, Any]], yes_id: int, no_id: int) -> None:
    """Rewrite the answer head so the argmax is ``yes_id`` or ``no_id`` depending on the input.

    Captures the head's input (the final hidden state) for each prompt, takes the direction that
    best separates them, and makes ``yes_id``/``no_id`` its +/- readers, dwarfing every other row.
    """
    head = model.get_output_embeddings()
    captured: list[Any] = []
    hook = head.register_forward_hook(lambda mod, args, out: captured.append(args[0][:, -1, :].detach().clone()))
    with torch.no_grad():
        for inputs in inputs_list:
            model(**inputs)
    hook.remove()
    hidden = torch.cat(captured)
    centred = hidden - hidden.mean(0)
    direction = torch.linalg.svd(centred, full_matrices=False).Vh[0]
    offset = -(hidden.mean(0) @ direction)  # put the decision boundary through the middle
    with torch.no_grad():
        head.weight.mul_(0.01)
        head.weight[yes_id] = direction * 40
        head.weight[no_id] = -direction * 40
        bias_dir = hidden.mean(0) / hidden.mean(0).norm() ** 2
        head.weight[yes_id] += bias_dir * offset * 40
        head.weight[no_id] -= bias_dir * offset * 40


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> Path:
    return build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0)


@pytest.fixture(scope="module")
def steered_llava(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path, photos: Path) -> Path:
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model_dir = build_tiny_llava(tmp_path_factory.mktemp("steered"), llama_tokenizer_dir, seed=1)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    inputs_list = []
    for image in sorted(p.name for p in photos.iterdir()):
        with Image.open(photos / image) as img:
            rgb = img.convert("RGB")
        for obj in OBJECTS:
            prompt = f"USER: <image>\nIs there a {obj} in the image?\nASSISTANT:"
            inputs_list.append(processor(images=rgb, text=prompt, return_tensors="pt"))
    _steer(model, inputs_list, yes_id=3869, no_id=1939)
    model.save_pretrained(model_dir)
    return model_dir


def _reference_logprobs(model_dir: Path, photos: Path, sample: Any) -> Any:
    """This test's own computation: the sample's prompt and image alone through the processor and model."""
    from PIL import Image

    from halluprobe.backends.hf.load import load_model, load_processor

    inputs_adapter = load_processor(str(model_dir))
    model = load_model(str(model_dir), dtype="float32", device="cpu")
    with Image.open(photos / sample.image) as img:
        rgb = img.convert("RGB")
    inputs = inputs_adapter.encode([sample.prompt], [rgb])
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1]
    return torch.log_softmax(logits.float(), dim=-1)


def _lse(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


@pytest.mark.slow
def test_llava_stored_readouts_equal_own_computation(tiny_llava: Path, photos: Path, tmp_path: Path) -> None:
    images = sorted(p.name for p in photos.iterdir())[:3]
    bench = _questions_file(tmp_path, images)
    backend, samples = _run(tiny_llava, photos, bench, tmp_path / "run", batch_size=4, template="llava")
    sets = backend.token_sets()
    assert sets.legacy_valid and sets.yes_ids == LLAMA_YES and sets.no_ids == LLAMA_NO
    assert len(samples) == 18 and not any(s.error for s in samples)
    for sample in samples[::4]:
        ref = _reference_logprobs(tiny_llava, photos, sample)
        for token_id in LLAMA_YES + LLAMA_NO:
            assert sample.candidates[str(token_id)] == pytest.approx(float(ref[token_id]), abs=1e-4)
        yes2, no2 = float(ref[3582]), float(ref[1217])
        assert sample.readouts["legacy_2tok"].decision == ("yes" if yes2 > no2 else "no")
        yes8, no8 = max(float(ref[i]) for i in LEGACY_8TOK_YES), max(float(ref[i]) for i in LEGACY_8TOK_NO)
        assert sample.readouts["legacy_8tok"].decision == ("yes" if yes8 > no8 else "no")
        dyn_yes, dyn_no = _lse([float(ref[i]) for i in LLAMA_YES]), _lse([float(ref[i]) for i in LLAMA_NO])
        assert sample.readouts["dynamic"].decision == ("yes" if dyn_yes > dyn_no else "no")
        assert sample.readouts["dynamic"].p_yes == pytest.approx(1 / (1 + math.exp(dyn_no - dyn_yes)), abs=1e-5)
        top_id = int(torch.argmax(ref))
        assert sample.first_token[0].id == top_id
        # random weights: the argmax is (almost surely) some other word, reported as off-set
        if top_id not in LLAMA_YES + LLAMA_NO:
            assert sample.offset_argmax == sample.first_token[0].piece
    assert all(s.prompt.startswith("USER: <image>\nIs there") and s.prompt.endswith("ASSISTANT:") for s in samples)


@pytest.mark.slow
def test_readouts_agree_with_greedy_decoding_when_argmax_is_in_the_sets(steered_llava: Path, photos: Path, tmp_path: Path) -> None:
    """Exercises the in-set case: the steered head's argmax is always ▁Yes or ▁No, and the other
    set's variants are dwarfed, so there is no near tie: dynamic and legacy_8tok must match greedy."""
    images = sorted(p.name for p in photos.iterdir())
    bench = _questions_file(tmp_path, images)
    _, samples = _run(steered_llava, photos, bench, tmp_path / "run", batch_size=5, template="llava")
    decisions = []
    for s in samples:
        top = s.first_token[0]
        assert top.id in (3869, 1939), top
        greedy = "yes" if top.id == 3869 else "no"
        decisions.append(greedy)
        assert s.offset_argmax is None
        assert s.readouts["dynamic"].decision == greedy
        assert s.readouts["legacy_8tok"].decision == greedy
        # the stored text is the continuation that greedy decoding produced from the same pass
        assert s.text is not None and s.text.strip().lower().startswith(greedy)
        assert s.readouts["text:strict"].decision == greedy
    assert {"yes", "no"} <= set(decisions), "steering should give both answers"


@pytest.mark.slow
def test_batch_size_does_not_change_decisions(tiny_llava: Path, photos: Path, tmp_path: Path) -> None:
    images = sorted(p.name for p in photos.iterdir())[:2]
    bench = _questions_file(tmp_path, images)
    runs = {}
    for batch_size in (1, 3, 8):
        _, samples = _run(tiny_llava, photos, bench, tmp_path / f"run{batch_size}", batch_size=batch_size, template="llava", max_new_tokens=0)
        runs[batch_size] = {s.key: s for s in samples}
    for key, sample in runs[1].items():
        for other in (3, 8):
            assert runs[other][key].readouts == sample.readouts or all(
                runs[other][key].readouts[n].decision == r.decision for n, r in sample.readouts.items()
            )
            for token_id, value in sample.candidates.items():
                assert runs[other][key].candidates[token_id] == pytest.approx(value, abs=1e-4)


@pytest.fixture(scope="module")
def tiny_qwen2vl(tmp_path_factory: pytest.TempPathFactory, qwen2_tokenizer_dir: Path) -> Path:
    return build_tiny_qwen2vl(tmp_path_factory.mktemp("qwen2vl"), qwen2_tokenizer_dir, seed=0)


@pytest.mark.slow
def test_qwen2vl_readouts_and_invalid_legacy_ids(tiny_qwen2vl: Path, photos: Path, tmp_path: Path) -> None:
    images = sorted(p.name for p in photos.iterdir())[:2]
    bench = _questions_file(tmp_path, images)
    backend, samples = _run(tiny_qwen2vl, photos, bench, tmp_path / "run", batch_size=4, template=None)
    sets = backend.token_sets()
    assert not sets.legacy_valid
    assert {9454, 7414} <= set(sets.yes_ids) and {2753, 2308} <= set(sets.no_ids)
    header = RunDir(tmp_path / "run").read_header()
    assert header.token_sets is not None and not header.token_sets.legacy_valid
    assert not any(s.error for s in samples)
    for sample in samples[::3]:
        ref = _reference_logprobs(tiny_qwen2vl, photos, sample)
        for token_id in sets.yes_ids + sets.no_ids:
            assert sample.candidates[str(token_id)] == pytest.approx(float(ref[token_id]), abs=1e-4)
        dyn_yes = _lse([float(ref[i]) for i in sets.yes_ids])
        dyn_no = _lse([float(ref[i]) for i in sets.no_ids])
        assert sample.readouts["dynamic"].decision == ("yes" if dyn_yes > dyn_no else "no")
        assert "<|vision_start|>" in sample.prompt


def test_out_of_memory_halves_the_batch_and_loses_nothing(tiny_llava: Path, photos: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from halluprobe.records import GenerateConfig, Request

    backend = HFBackend(str(tiny_llava), batch_size=8, dtype="float32", device="cpu")
    real_step = backend.core.first_step
    sizes: list[int] = []

    def step_with_small_memory(inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        rows = inputs["input_ids"].shape[0]
        sizes.append(rows)
        if rows > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_step(inputs, *args, **kwargs)

    real_packed = backend.core.packed_step

    def packed_with_small_memory(packed: Any, *args: Any, **kwargs: Any) -> Any:  # a row per image, its questions in slots
        sizes.append(packed.rows)
        if packed.rows > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_packed(packed, *args, **kwargs)

    monkeypatch.setattr(backend.core, "first_step", step_with_small_memory)
    monkeypatch.setattr(backend.core, "packed_step", packed_with_small_memory)
    image = str(sorted(photos.iterdir())[0])
    requests = [
        Request(split="random", question_id=i, image_path=image, prompt=f"USER: <image>\nIs there a {obj} in the image?\nASSISTANT:")
        for i, obj in enumerate(OBJECTS)
    ]
    responses = [r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=0, top_k=3)) for r in batch]
    assert sorted(r.question_id for r in responses) == list(range(len(OBJECTS)))
    assert not any(r.error for r in responses)
    assert sizes[:3] == [6, 4, 2] and backend.info()["batch_size"] == 2


@pytest.mark.slow
def test_diagnose_fails_random_weights_and_passes_the_steered_head(tiny_llava: Path, steered_llava: Path, photos: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from halluprobe.cli import app

    bench = _questions_file(tmp_path, sorted(p.name for p in photos.iterdir()))
    args = ["diagnose", "--benchmark", str(bench), "--images", str(photos), "--sample", "12", "--template", "llava",
            "--device", "cpu", "--dtype", "float32", "--json"]  # fmt: skip
    random_weights = CliRunner().invoke(app, [*args, "--model", str(tiny_llava)])
    assert random_weights.exit_code == 1
    assert json.loads(random_weights.stdout)["offset_rate"] > 0.9
    assert "outside the yes/no sets" in random_weights.stderr
    steered = CliRunner().invoke(app, [*args, "--model", str(steered_llava)])
    assert steered.exit_code == 0, steered.output
    report = json.loads(steered.stdout)
    assert report["offset_rate"] == 0.0 and set(dict(report["first_pieces"])) <= {"▁Yes", "▁No"}


def test_non_finite_first_token_logits_are_that_rows_error(tiny_llava: Path, photos: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A float16 overflow (logits past 65504 become inf; log_softmax then gives NaN) in one row of
    a batch: that row's samples are errors, the other rows are answered, nothing holds a NaN."""
    from halluprobe.records import GenerateConfig, Request

    backend = HFBackend(str(tiny_llava), batch_size=8, dtype="float32", device="cpu")

    def overflowing(real_step: Any) -> Any:
        def step_with_overflow(*args: Any, **kwargs: Any) -> Any:
            step = real_step(*args, **kwargs)
            scaled = step.logits.clone()
            scaled[0] = scaled[0] * 1e6  # the first row only
            step.logits = scaled.half()  # what a float16 head holds: +-inf past its range
            return step

        return step_with_overflow

    # stacked rows pass through first_step, an image's questions in slots through packed_step
    monkeypatch.setattr(backend.core, "first_step", overflowing(backend.core.first_step))
    monkeypatch.setattr(backend.core, "packed_step", overflowing(backend.core.packed_step))
    image = str(sorted(photos.iterdir())[0])
    requests = [
        Request(split="random", question_id=i, image_path=image, prompt=f"USER: <image>\nIs there a {obj} in the image?\nASSISTANT:")
        for i, obj in enumerate(OBJECTS)
    ]
    responses = [r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=0, top_k=3)) for r in batch]
    assert len(responses) == len(OBJECTS)
    errors = [r for r in responses if r.error]
    assert len(errors) == 1 and "not finite" in (errors[0].error or "") and not errors[0].candidates
    for r in responses:
        assert all(math.isfinite(v) for v in r.candidates.values()) and all(math.isfinite(t.logprob) for t in r.first_token)


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_a_calls_settings_stay_with_its_engine_when_calls_interleave(tiny_llava: Path, photos: Path, prefix_cache: bool) -> None:
    """Each answer() call builds its own engine: a second call with other settings, run to the
    end while the first is paused between batches, changes nothing of the first (its signals
    and its token cap), and the backend keeps no call's settings."""
    from halluprobe.records import GenerateConfig, Request

    backend = HFBackend(str(tiny_llava), batch_size=2, dtype="float32", device="cpu", prefix_cache=prefix_cache)
    image = str(sorted(photos.iterdir())[0])
    requests = [
        Request(split="random", question_id=i, image_path=image, prompt=f"USER: <image>\nIs there a {obj} in the image?\nASSISTANT:")
        for i, obj in enumerate(OBJECTS)
    ]
    first = backend.answer(requests, GenerateConfig(max_new_tokens=0, top_k=3, signals=("noised",)))
    got = list(next(first))
    other = [r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=3, top_k=3)) for r in batch]
    got += [r for batch in first for r in batch]
    assert len(got) == len(OBJECTS) and not any(r.error for r in got)
    assert all("noised" in r.signals and r.text is None for r in got)  # the first call's settings throughout
    assert all(not r.signals and r.text is not None for r in other)
    assert not any(isinstance(v, (tuple, GenerateConfig)) for v in vars(backend).values())
