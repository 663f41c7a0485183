"""The hf backend's correction signals: both engines give the same numbers (fp32, 1e-4), on the
tiny LLaVA (LLaMA-2 vocabulary) and the tiny Qwen2-VL (Qwen2 vocabulary, 3-D rotary positions);
the noise is VCD's schedule, seeded per image; PAI at alpha 0 is the plain pass; DoLa's layers
go through the final norm and the LM head."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from halluprobe.backends.hf import HFBackend  # noqa: E402
from halluprobe.backends.hf_signals import add_diffusion_noise  # noqa: E402
from halluprobe.errors import InputError  # noqa: E402
from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request, Response  # noqa: E402
from halluprobe.tiny import build_tiny_llava, build_tiny_qwen2vl, demo_photos  # noqa: E402

PHOTOS = ["astronaut.jpg", "coffee.jpg", "chelsea.jpg"]
QUESTIONS = ["Is there a cup in the image?", "Is there a dining table in this picture?", "Is there a dog?", "Is there a cat?"]
SIGNALS = ("noised", "layers", "attention:0.5,0,2", "instruction", "no-image")


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


def _ask(backend: HFBackend, photos: Path, signals: tuple[str, ...], max_new_tokens: int = 0) -> dict[tuple[str, int], Response]:
    requests = [
        Request(split="s", question_id=i, image_path=str(photos / image), prompt=backend.render_prompt(text, None),
                variants={"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {text}", None),
                          "no-image": backend.render_prompt(text, None, image=False)})  # fmt: skip
        for i, (image, text) in enumerate((image, text) for image in PHOTOS for text in QUESTIONS)
    ]
    config = GenerateConfig(max_new_tokens=max_new_tokens, top_k=5, signals=signals)
    out = {r.key: r for batch in backend.answer(requests, config) for r in batch}
    assert len(out) == len(requests) and not any(r.error for r in out.values())
    return out


def test_both_engines_record_the_same_signals(engines: dict[bool, HFBackend], photos: Path) -> None:
    fast, plain = _ask(engines[True], photos, SIGNALS, max_new_tokens=3), _ask(engines[False], photos, SIGNALS, max_new_tokens=3)
    for key, response in fast.items():
        other = plain[key]
        assert set(response.signals) == set(other.signals) == {"noised", "layer:0", "attention", "instruction", "no-image"}
        for name, signal in response.signals.items():
            theirs = other.signals[name]
            assert signal.candidates.keys() == theirs.candidates.keys()
            assert max(abs(v - theirs.candidates[k]) for k, v in signal.candidates.items()) < 1e-4
            assert abs(signal.max_logit - theirs.max_logit) < 1e-4 and abs(signal.log_normaliser - theirs.log_normaliser) < 1e-4
        # the signals are other passes: the noised image moves the first token's numbers
        assert response.signals["noised"].candidates != response.candidates


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
    token = backend._inputs.image_token
    assert token in with_image and token not in without and "Is there a cat?" in without
    assert backend.render_prompt("Is there a cat?", "llava", image=False) == "USER: Is there a cat?\nASSISTANT:"
