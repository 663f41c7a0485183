"""The hf backend's correction signals: both engines give the same numbers (fp32, 1e-4), on the
tiny LLaVA (LLaMA-2 vocabulary) and the tiny Qwen2-VL (Qwen2 vocabulary, 3-D rotary positions);
the prefix-cache engine reads them from cached prefixes (no full prompt with the image runs);
a failing signal pass makes its batch's samples errors; out of memory halves the batch; the
noise is VCD's schedule, seeded per image; PAI at alpha 0 is the plain pass; DoLa's layers go
through the final norm and the LM head."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.backends.hf.signal_passes import SignalPasses  # noqa: E402
from halluprobe.backends.hf.signals import add_diffusion_noise  # noqa: E402
from halluprobe.errors import InputError  # noqa: E402
from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request, Response  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402
from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

PHOTOS = ["astronaut.jpg", "coffee.jpg", "chelsea.jpg"]
QUESTIONS = ["Is there a cup in the image?", "Is there a dining table in this picture?", "Is there a dog?", "Is there a cat?"]
# layer 1 reads the context (layer 0, the embeddings, only the last token). PAI at alpha 10: the
# tiny random models move little at 0.5 (5e-4), and above 1 the amplification once overflowed
# on masked (padding) columns into NaN
SIGNALS = ("noised", "layers:0,1", "attention:10,0,2", "instruction", "no-image")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images_dir, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    return images_dir


@pytest.fixture(scope="module", params=["llava", "qwen2vl"])
def engines(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path,
            qwen2_tokenizer_dir: Path) -> dict[bool, HFBackend]:  # fmt: skip
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "llava":
        path = build_tiny_llava(root, llama_tokenizer_dir, seed=0, image_size=112)
    else:
        path = build_tiny_qwen2vl(root, qwen2_tokenizer_dir, seed=0)
    return {pc: HFBackend(str(path), batch_size=3, dtype="float32", device="cpu", prefix_cache=pc) for pc in (True, False)}


def _requests(backend: HFBackend, photos: Path, instruction_template: str | None = None) -> list[Request]:
    """Four questions per photo, the first two asked again in a second split (identical prompts
    about one image: computed once)."""
    asked = [(split, image, text) for image in PHOTOS for split, texts in (("s", QUESTIONS), ("t", QUESTIONS[:2])) for text in texts]
    return [
        Request(split=split, question_id=i, image_path=str(photos / image), prompt=backend.render_prompt(text, None),
                variants={"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {text}", instruction_template),
                          "no-image": backend.render_prompt(text, None, image=False)})  # fmt: skip
        for i, (split, image, text) in enumerate(asked)
    ]


def _answer(backend: HFBackend, requests: list[Request], signals: tuple[str, ...], max_new_tokens: int = 0) -> dict[tuple[str, int], Response]:
    config = GenerateConfig(max_new_tokens=max_new_tokens, top_k=5, signals=signals)
    return {r.key: r for batch in backend.answer(requests, config) for r in batch}


def _ask(backend: HFBackend, photos: Path, signals: tuple[str, ...], max_new_tokens: int = 0) -> dict[tuple[str, int], Response]:
    requests = _requests(backend, photos)
    out = _answer(backend, requests, signals, max_new_tokens)
    assert len(out) == len(requests) and not any(r.error for r in out.values())
    return out


MOVED = ("noised", "attention", "instruction", "no-image", "layer:1")


def _assert_same_signals(
    fast: dict[tuple[str, int], Response], plain: dict[tuple[str, int], Response], moved: tuple[str, ...] = MOVED
) -> None:
    assert fast.keys() == plain.keys()
    for key, response in fast.items():
        other = plain[key]
        assert set(response.signals) == set(other.signals) == {"noised", "layer:0", "layer:1", "attention", "instruction", "no-image"}
        for name, signal in response.signals.items():
            theirs = other.signals[name]
            assert signal.candidates.keys() == theirs.candidates.keys()
            assert max(abs(v - theirs.candidates[k]) for k, v in signal.candidates.items()) < 1e-4, (key, name)
            assert abs(signal.max_logit - theirs.max_logit) < 1e-4 and abs(signal.log_normaliser - theirs.log_normaliser) < 1e-4
            assert (signal.jsd is None) == (theirs.jsd is None)
            if signal.jsd is not None:
                assert abs(signal.jsd - theirs.jsd) < 1e-4
    # the signals are other passes: they move the first token's numbers (so equal engines
    # cannot come from a pass that changed nothing, such as PAI's image columns all False)
    for name in moved:
        assert max(abs(r.signals[name].candidates[k] - v) for r in fast.values() for k, v in r.candidates.items()) > 1e-3, name


# (new tokens, the fast engine's batch size): each image's 4 distinct prompts split 3 + 1 or 2 + 2
@pytest.mark.parametrize(("max_new_tokens", "batch_size"), [(3, 3), (0, 2), (0, 3)])
def test_both_engines_record_the_same_signals(
    engines: dict[bool, HFBackend], photos: Path, max_new_tokens: int, batch_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines[True].batching, "size", batch_size)
    fast = _ask(engines[True], photos, SIGNALS, max_new_tokens=max_new_tokens)
    plain = _ask(engines[False], photos, SIGNALS, max_new_tokens=max_new_tokens)
    _assert_same_signals(fast, plain)
    # identical prompts about one image give one computation, so one set of numbers
    assert fast[("t", 4)] == fast[("s", 0)].model_copy(update={"split": "t", "question_id": 4, "latency_s": fast[("t", 4)].latency_s})


class _ForwardSpy:
    """Records every forward pass of a backend's model: its batch, and whether it carries
    pixels or image tokens (generate's passes included)."""

    def __init__(self, backend: HFBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, bool, bool]] = []  # (rows, pixels, image tokens)
        model, image_id = backend.core.model, backend.core.inputs.image_token_id
        real = model.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            ids = kwargs.get("input_ids")
            image_tokens = ids is not None and bool((ids == image_id).any())
            self.calls.append((0 if ids is None else ids.shape[0], kwargs.get("pixel_values") is not None, image_tokens))
            return real(*args, **kwargs)

        monkeypatch.setattr(model, "forward", functools.wraps(real)(forward))


@pytest.mark.parametrize("max_new_tokens", [0, 3])
def test_the_prefix_engine_runs_no_full_prompt_with_the_image(
    engines: dict[bool, HFBackend], photos: Path, max_new_tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No full prompt with the image runs for any signal: per image the base prefix and the
    noised prefix carry the pixels (at batch 1); the instruction variants' prefix continues the
    base one's cache after the image; every other pass is a suffix batch over a cached prefix,
    or the no-image prompt."""
    spy = _ForwardSpy(engines[True], monkeypatch)
    _ask(engines[True], photos, SIGNALS, max_new_tokens=max_new_tokens)
    with_image = [call for call in spy.calls if call[1] or call[2]]
    assert with_image == [(1, True, True)] * (2 * len(PHOTOS))
    # and the passes without the image did run: base, noised, attention and instruction per batch
    # (the no-image prompts run once per backend, maybe in an earlier test)
    batches = len(PHOTOS) * 2  # 4 distinct prompts per image at batch 3
    assert len(spy.calls) - len(with_image) >= 4 * batches


def test_an_instruction_variant_equal_to_the_prompt_reuses_the_prefix_as_it_is(
    engines: dict[bool, HFBackend], photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variants' prefix is the image's prefix itself (nothing to continue): no pass of its
    own, and the signal is the base pass's numbers."""
    fast = engines[True]
    requests = [r.model_copy(update={"variants": {"instruction": r.prompt}}) for r in _requests(fast, photos)]
    spy = _ForwardSpy(fast, monkeypatch)
    out = _answer(fast, requests, ("instruction",))
    assert [call for call in spy.calls if call[1] or call[2]] == [(1, True, True)] * len(PHOTOS)
    assert len(spy.calls) == len(PHOTOS) * (1 + 2 * 2)  # per image: its prefix, then base + signal per batch
    for response in out.values():
        same = response.signals["instruction"].candidates
        assert not response.error and max(abs(v - response.candidates[k]) for k, v in same.items()) < 1e-5


def test_a_cache_that_cannot_be_cropped_gives_the_instruction_its_own_prefix(
    engines: dict[bool, HFBackend], photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemma 3's sliding-window layers keep only their cache's tail, so the variants' prefix
    cannot continue the image's: it runs a prefix pass of its own (pixels included), still no
    full prompt, and still the plain engine's numbers."""
    import _families

    if engines[True].core.inputs.model_type != "llava":
        pytest.skip("one build is enough")
    folder = _families.build_family("gemma3", tmp_path / "gemma3")
    fast, plain = (HFBackend(str(folder), batch_size=3, dtype="float32", device="cpu", prefix_cache=pc) for pc in (True, False))
    assert fast.core.sliding_window is not None and fast.prefix_cache
    spy = _ForwardSpy(fast, monkeypatch)
    signals = ("noised", "layers:0,1", "attention:10,0,2", "instruction", "no-image")
    got = _ask(fast, photos, signals, max_new_tokens=2)
    assert [call for call in spy.calls if call[1] or call[2]] == [(1, True, True)] * (3 * len(PHOTOS))
    _assert_same_signals(got, _ask(plain, photos, signals, max_new_tokens=2))


def test_instruction_variants_without_a_shared_prefix_run_in_full(
    engines: dict[bool, HFBackend], photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image after the instruction and question: the variants share no image prefix, so
    their pass is a full prompt per batch; the numbers still equal the plain engine's."""
    fast, plain = engines[True], engines[False]
    if fast.core.inputs.model_type != "llava":
        pytest.skip("one model is enough for the fallback")
    template = "Question: {question}\n<image>\nAnswer:"
    spy = _ForwardSpy(fast, monkeypatch)
    got = _answer(fast, _requests(fast, photos, template), ("instruction",))
    want = _answer(plain, _requests(plain, photos, template), ("instruction",))
    assert not any(r.error for r in got.values())
    for key, response in got.items():
        theirs = want[key].signals["instruction"].candidates
        assert max(abs(v - theirs[k]) for k, v in response.signals["instruction"].candidates.items()) < 1e-4
    # per image: its prefix, then the full variants of its two batches (4 distinct prompts at batch 3)
    assert [call for call in spy.calls if call[1]] == [(1, True, True), (3, True, True), (1, True, True)] * len(PHOTOS)


def test_a_failing_signal_pass_makes_its_batch_errors(engines: dict[bool, HFBackend], photos: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a silent baseline value: the samples of the batch whose attention pass failed are
    errors, every other sample has all its signals."""
    fast = engines[True]
    real = SignalPasses.amplified_logits  # the engines build their signal passes per call
    calls: list[int] = []

    def second_fails(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("attention pass broke")
        return real(*args, **kwargs)

    monkeypatch.setattr(SignalPasses, "amplified_logits", second_fails)
    requests = _requests(fast, photos)
    out = _answer(fast, requests, SIGNALS)
    errors = {key for key, r in out.items() if r.error}
    # the first image's second batch holds its 4th distinct prompt (split s, question 3)
    assert errors == {("s", 3)}
    assert "attention pass broke" in (out[("s", 3)].error or "") and not out[("s", 3)].signals
    assert all(len(r.signals) == 6 for key, r in out.items() if key not in errors)


def test_a_missing_variant_makes_its_images_samples_errors(engines: dict[bool, HFBackend], photos: Path) -> None:
    fast = engines[True]
    requests = _requests(fast, photos)
    requests[0] = requests[0].model_copy(update={"variants": {"no-image": requests[0].variants["no-image"]}})
    out = _answer(fast, requests, ("instruction",))
    first_image = {r.key for r in requests if r.image_path == requests[0].image_path}
    assert {key for key, r in out.items() if r.error} == first_image
    assert all("instruction" in r.signals for key, r in out.items() if key not in first_image)


def test_out_of_memory_in_a_signal_pass_halves_the_batch(
    engines: dict[bool, HFBackend], photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suffix pass of a signal runs out of memory above 2 rows: the batch halves and is
    retried, every sample is answered with the plain engine's numbers."""
    fast, plain = engines[True], engines[False]
    monkeypatch.setattr(fast.batching, "size", 4)
    real = fast.core.logits

    def small_memory(inputs: dict[str, Any]) -> Any:
        if "past_key_values" in inputs and inputs["input_ids"].shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(inputs)

    monkeypatch.setattr(fast.core, "logits", small_memory)
    got = _ask(fast, photos, SIGNALS, max_new_tokens=0)
    assert fast.batching.size == 2
    _assert_same_signals(got, _ask(plain, photos, SIGNALS, max_new_tokens=0))


def test_dola_layers_are_a_full_prompts_hidden_states(engines: dict[bool, HFBackend], photos: Path) -> None:
    """The layers signal against the model's own full-prompt pass: the last position's hidden
    state of layer N through the final norm and the LM head."""
    from PIL import Image

    fast = engines[True]
    requests = _requests(fast, photos)[:: len(QUESTIONS) + 2]  # one question per photo
    out = _answer(fast, requests, ("layers:0,1",), max_new_tokens=3)
    model = fast.core.model
    for request in requests:
        with Image.open(request.image_path) as im:
            inputs = fast.core.inputs.encode([request.prompt], [im.convert("RGB")])
        with torch.inference_mode():
            hidden = model(**inputs, output_hidden_states=True).hidden_states
            for n in (0, 1):
                want = torch.log_softmax(model.get_output_embeddings()(model.get_decoder().norm(hidden[n][0, -1])).float(), -1)
                got = out[request.key].signals[f"layer:{n}"].candidates
                assert max(abs(v - float(want[int(k)])) for k, v in got.items()) < 1e-4


def test_pai_at_alpha_zero_is_the_plain_pass(engines: dict[bool, HFBackend], photos: Path) -> None:
    for backend in engines.values():
        out = _ask(backend, photos, ("attention:0,0,2",))
        for response in out.values():
            amplified = response.signals["attention"].candidates
            assert max(abs(v - response.candidates[k]) for k, v in amplified.items()) < 1e-4


def test_the_noise_follows_vcds_schedule_and_is_seeded_per_image() -> None:
    pixels = torch.zeros(2, 3, 4, 4)
    noised = add_diffusion_noise(pixels, 500, seed=7)
    betas = torch.sigmoid(torch.linspace(-6, 6, 1000, dtype=torch.float64)) * (0.5e-2 - 1e-5) + 1e-5
    abar = float(torch.cumprod(1 - betas, 0)[500])
    eps = torch.randn(pixels.shape, generator=torch.Generator().manual_seed(7))
    assert torch.allclose(noised, math.sqrt(1 - abar) * eps, atol=1e-6)
    assert torch.equal(add_diffusion_noise(pixels, 500, seed=7), noised)  # same image, same noise
    ones = add_diffusion_noise(torch.ones(2, 3, 4, 4), 0, seed=7)
    assert torch.allclose(ones, math.sqrt(1 - float(betas[0])) + math.sqrt(float(betas[0])) * eps, atol=1e-6)


def test_a_signal_the_backend_cannot_record_is_refused_before_any_request(engines: dict[bool, HFBackend], photos: Path) -> None:
    with pytest.raises(InputError, match="not 'clip'"):
        _ask(engines[True], photos, ("clip",))
    with pytest.raises(InputError, match=r"layers \[START, END\)"):
        _ask(engines[True], photos, ("attention:0.5,0,99",))


def test_a_prompt_without_the_image_has_no_image_token(engines: dict[bool, HFBackend]) -> None:
    backend = engines[False]
    with_image = backend.render_prompt("Is there a cat?", None)
    without = backend.render_prompt("Is there a cat?", None, image=False)
    token = backend.core.inputs.image_token
    assert token in with_image and token not in without and "Is there a cat?" in without
    assert backend.render_prompt("Is there a cat?", "llava", image=False) == "USER: Is there a cat?\nASSISTANT:"


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_each_prompt_without_the_image_runs_once(engines: dict[bool, HFBackend], photos: Path, monkeypatch: pytest.MonkeyPatch,
                                                 prefix_cache: bool) -> None:  # fmt: skip
    """A prompt without the image does not depend on the image: asked about 3 images, each of
    the distinct question texts runs once, and a later call reuses it."""
    backend = engines[prefix_cache]
    monkeypatch.setattr(backend.core, "no_image_cache", {})
    seen: list[str] = []
    real = backend.core.prompt_logits

    def spy(prompts: list[str], images: list[Any]) -> Any:
        if not images:
            seen.extend(prompts)
        return real(prompts, images)

    monkeypatch.setattr(backend.core, "prompt_logits", spy)
    requests = _requests(backend, photos)
    first = _answer(backend, requests, ("no-image",))
    distinct = {r.variants["no-image"] for r in requests}
    assert sorted(seen) == sorted(distinct) and len(requests) > len(distinct)
    again = _answer(backend, requests, ("no-image",))
    assert len(seen) == len(distinct)  # nothing ran again
    assert all(first[k].signals["no-image"] == again[k].signals["no-image"] and not first[k].error for k in first)
