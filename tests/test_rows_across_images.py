"""Rows of several images in one batch (issue 33), on tiny real LLaVA and Qwen2-VL builds.

The prefix-cache engine's batches take the next ``batch_size`` rows whichever images they
belong to: each image's prefix once, the rows stacked over their own image's cache (Qwen2-VL's
photos give prefixes of different lengths, so the stacked caches are padded). The plain engine is
the reference: first-token log-probabilities within 1e-4 (fp32), the same top tokens and the
same greedy texts, at batch sizes that split an image's rows, one-image batches and batches
larger than all the work. Also: a prefix computed once per image even when its rows span two
batches, prefix caches held only for images in flight, a failed prefix costing only its own
image's samples, and out of memory halving the batch with nothing lost.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
from _engines import OBJECTS, PHOTOS, PrefixSpy, assert_same_responses, decisions, tiny_pair, yes_no_requests

torch = pytest.importorskip("torch")

from halluprobe.backends.hf import engines
from halluprobe.backends.hf.backend import HFBackend
from halluprobe.backends.hf.prefix import rows_inputs
from halluprobe.records import GenerateConfig, Request, Response
from halluprobe.tiny import demo_photos

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images_dir, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    return images_dir


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path, qwen2_tokenizer_dir: Path) -> dict[str, dict[bool, HFBackend]]:
    out = {}
    for name, path in tiny_pair(tmp_path_factory, llama_tokenizer_dir, qwen2_tokenizer_dir).items():
        fast = HFBackend(str(path), batch_size=4, dtype="float32", device="cpu", prefix_cache=True)
        fast.core.packs_rows = False  # the stacked rows (a row per question); tests/test_packed_rows.py: packed ones
        out[name] = {True: fast, False: HFBackend.on_core(fast.core, batch_size=4, prefix_cache=False)}
    return out


def _answer(backend: HFBackend, requests: list[Request], new_tokens: int) -> dict[tuple[str, int], Response]:
    out = {r.key: r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=new_tokens, top_k=5)) for r in batch}
    assert len(out) == len(requests)
    return out



class _RowsSpy:
    """Records each batch's images (distinct prefix objects) and how many prefixes were alive."""

    def __init__(self, backend: HFBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.batches: list[tuple[int, int]] = []  # (images in the batch, prefixes alive)
        self.made: list[weakref.ref[Any]] = []
        real_prefixes, real_rows = backend.core.run_prefixes, engines.rows_inputs

        def run_prefixes(*args: Any, **kwargs: Any) -> Any:
            prefixes = real_prefixes(*args, **kwargs)
            self.made.extend(weakref.ref(prefix) for prefix in prefixes)
            return prefixes

        def spied_rows(model: Any, prefixes: Any, *args: Any, **kwargs: Any) -> Any:
            gc.collect()
            alive = sum(ref() is not None for ref in self.made)
            self.batches.append((len({id(p) for p in prefixes}), alive))
            return real_rows(model, prefixes, *args, **kwargs)

        monkeypatch.setattr(backend.core, "run_prefixes", run_prefixes)
        monkeypatch.setattr(engines, "rows_inputs", spied_rows)


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
@pytest.mark.parametrize("new_tokens", [0, 5])
def test_batches_across_images_equal_the_plain_engine(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, model: str, new_tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, plain = backends[model][True], backends[model][False]
    requests = yes_no_requests(fast, photos, PHOTOS, OBJECTS)
    images = len({r.image_path for r in requests})
    want = _answer(plain, requests, new_tokens)
    for size in (1, 2, 4, 7, 64):  # one row; rows of an image split; several images; all the work
        monkeypatch.setattr(fast.batching, "size", size)
        spy = _RowsSpy(fast, monkeypatch)
        prefixes = PrefixSpy(fast, monkeypatch)
        got = _answer(fast, requests, new_tokens)
        assert_same_responses(want, got, texts=new_tokens > 0)
        assert decisions(fast, requests, got) == decisions(plain, requests, want)
        assert prefixes.prefixes == images  # once per image, even when its rows span batches
        if model == "llava" and size >= 7:  # one image shape: images new to a batch share one prefix pass
            assert prefixes.batched >= 2
        rows = len({(r.image_path, r.prompt) for r in requests})
        assert len(spy.batches) == -(-rows // size)  # full batches across images: no short batch per image
        if size >= 7:
            assert max(n for n, _ in spy.batches) > 1
        # caches held only for the images whose rows are in flight
        assert all(alive <= n for n, alive in spy.batches), spy.batches
        monkeypatch.undo()


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
def test_every_generated_step_of_a_stacked_batch_matches_full_prompts(backends: dict[str, dict[bool, HFBackend]], photos: Path, model: str) -> None:
    """The raw logits of every greedy step for rows of three images, of different prefix
    lengths on Qwen2-VL, stacked in one batch: positions (3-D for Qwen2-VL), padded caches and masks."""
    from PIL import Image

    core = backends[model][True].core
    steps = 4
    prompts = [backends[model][True].render_prompt(f"Is there a {o} in the image?", None) for o in OBJECTS[:3]]
    images, prefixes, suffixes, full_images, full_prompts = [], [], [], [], []
    for name in PHOTOS[:3]:
        with Image.open(photos / name) as im:
            image = im.convert("RGB")
        shared = core.inputs.encode_shared(prompts, image)
        assert shared is not None
        prefix = core.run_prefix(shared.prefix)
        images.append(shared.prefix_len)
        for prompt, suffix in zip(prompts, shared.suffixes):
            prefixes.append(prefix)
            suffixes.append(suffix)
            full_images.append(image)
            full_prompts.append(prompt)
    if model == "qwen2vl":
        assert len(set(images)) >= 2  # prefixes of different lengths: the stacked cache is padded

    def generate(inputs: dict[str, Any]) -> Any:
        with torch.inference_mode():
            return core.model.generate(
                **inputs, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                output_logits=True, return_dict_in_generate=True, pad_token_id=core.tokenizer.pad_token_id,
            )  # fmt: skip

    full = generate(core.to_device(core.inputs.encode(full_prompts, full_images)))
    stacked = generate(rows_inputs(core.model, prefixes, suffixes, steps, core.pad_id))
    for a, b in zip(full.logits, stacked.logits):
        assert torch.allclose(torch.log_softmax(a, -1), torch.log_softmax(b, -1), atol=1e-4)
    assert torch.equal(full.sequences[:, -steps:], stacked.sequences[:, -steps:])


def test_a_failed_prefix_costs_only_its_images_samples(backends: dict[str, dict[bool, HFBackend]], photos: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, plain = backends["llava"][True], backends["llava"][False]
    requests = yes_no_requests(fast, photos, PHOTOS, OBJECTS)
    bad = str(photos / "chelsea.jpg")  # the second image in path order
    want = _answer(plain, requests, 0)
    real = fast.core.run_prefixes

    def failing(prefixes: list[dict[str, Any]]) -> Any:
        # the image whose pixels are the chelsea photo's: any pass holding it fails
        if any(torch.equal(p["pixel_values"], bad_pixels) for p in prefixes):
            raise RuntimeError("a broken image tower")
        return real(prefixes)

    from PIL import Image

    with Image.open(bad) as im:
        bad_pixels = fast.core.inputs.encode([requests[0].prompt], [im.convert("RGB")])["pixel_values"]
    monkeypatch.setattr(fast.core, "run_prefixes", failing)
    monkeypatch.setattr(fast.batching, "size", 4)
    got = _answer(fast, requests, 0)
    broken = {key for key, r in got.items() if r.error}
    assert broken == {r.key for r in requests if r.image_path == bad}
    assert all("a broken image tower" in (got[k].error or "") for k in broken)
    assert_same_responses({k: v for k, v in want.items() if k not in broken}, {k: v for k, v in got.items() if k not in broken}, texts=False)


def test_out_of_memory_halves_a_batch_across_images_and_loses_nothing(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = backends["llava"][True]
    requests = yes_no_requests(fast, photos, PHOTOS, OBJECTS)
    monkeypatch.setattr(fast.batching, "size", 1)
    want = _answer(fast, requests, 0)
    monkeypatch.setattr(fast.batching, "size", 8)
    real = fast.core.first_step
    sizes: list[int] = []

    def tight(inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        sizes.append(inputs["input_ids"].shape[0])
        if inputs["input_ids"].shape[0] > 3:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(inputs, *args, **kwargs)

    monkeypatch.setattr(fast.core, "first_step", tight)
    got = _answer(fast, requests, 0)
    assert sizes[:2] == [8, 4] and fast.batching.size == 2
    assert_same_responses(want, got, texts=False)


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
def test_a_batchs_cache_takes_generates_steps_in_place(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine asks rows_inputs for room: every cache layer (one image's broadcast rows, and
    several images' stacked rows) is then written in place by each of generate's steps, into the
    buffer it started with, never copied (issue 33: a 7B batch's copy is ~45 GB per step)."""
    from halluprobe.backends.hf.prefix import _appending_layer

    fast = backends[model][True]
    requests = yes_no_requests(fast, photos, PHOTOS, OBJECTS)
    caches: list[tuple[Any, list[Any]]] = []
    real_rows = engines.rows_inputs

    def spied(*args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("room") is True
        inputs = real_rows(*args, **kwargs)
        cache = inputs["past_key_values"]
        caches.append((cache, [layer.key_room for layer in cache.layers]))
        return inputs

    monkeypatch.setattr(engines, "rows_inputs", spied)
    for size in (2, 64):  # one image's rows; several images' rows
        monkeypatch.setattr(fast.batching, "size", size)
        _answer(fast, requests, 5)
    assert caches
    for cache, buffers in caches:
        for layer, buffer in zip(cache.layers, buffers, strict=True):
            assert type(layer) is _appending_layer()
            assert layer.key_room is buffer  # never re-allocated: generate's steps fit the room
            assert layer.keys.data_ptr() == buffer.data_ptr() and layer.keys.shape[-2] > 0
