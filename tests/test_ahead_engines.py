"""The engines with the next images' CPU side on a worker thread (hf/ahead.py, issue 33).

On tiny real LLaVA and Qwen2-VL builds, the engines with the worker thread on (``core.prefetch``,
the default on a GPU) give exactly the responses they give with it off: POPE-shaped rows across
images, the decoding loop's queued rows (VCD, ICD) and its batches of full prompts (captions,
one prompt per image), with the encoding done on the worker's own copy of the processor.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


from halluprobe.backends.hf.backend import HFBackend
from halluprobe.backends.hf.decode_prefix import PrefixDecodeEngine
from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request, Response
from halluprobe.tiny import build_tiny_llava, demo_photos
from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl

pytestmark = pytest.mark.slow

OBJECTS = ["cup", "dining table", "dog", "person"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    folder = folder / "images" if (folder / "images").is_dir() else folder
    return sorted(folder.iterdir())[:5]


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path, qwen2_tokenizer_dir: Path) -> dict[str, HFBackend]:
    llava = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    qwen = build_tiny_qwen2vl(tmp_path_factory.mktemp("qwen2vl"), qwen2_tokenizer_dir, seed=0)
    return {name: HFBackend(str(path), batch_size=4, dtype="float32", device="cpu") for name, path in (("llava", llava), ("qwen2vl", qwen))}


def _requests(backend: HFBackend, photos: list[Path], objects: list[str]) -> list[Request]:
    out = []
    for photo in photos:
        for name in objects:
            question = f"Is there a {name} in the image?" if len(objects) > 1 else "Describe the image."
            variants = {"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {question}", None)}
            prompt = backend.render_prompt(question, None)
            out.append(Request(split="s", question_id=len(out), image_path=str(photo), prompt=prompt, variants=variants))
    out.append(Request(split="s", question_id=len(out), image_path=str(photos[0].parent / "missing.jpg"), prompt=out[0].prompt))
    return out


def _answers(backend: HFBackend, requests: list[Request], config: GenerateConfig, *, prefetch: bool, monkeypatch: pytest.MonkeyPatch, loop: bool = False) -> tuple[dict[Any, Response], set[str]]:
    """Every response, and the threads the image encodings ran on."""
    monkeypatch.setattr(backend.core, "prefetch", prefetch)
    threads: set[str] = set()
    worker = backend.core.worker_inputs()
    for inputs in (backend.core.inputs, worker):
        for name in ("encode", "encode_shared"):
            real = getattr(inputs, name)

            def spied(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
                threads.add(threading.current_thread().name)
                return _real(*args, **kwargs)

            monkeypatch.setattr(inputs, name, spied)
    engine = PrefixDecodeEngine(backend.core, backend.batching, config) if loop else backend.engine(config)
    out = {r.key: r for batch in engine.answer(requests) for r in batch}
    monkeypatch.undo()
    assert len(out) == len(requests)
    return out, threads


def _same(want: dict[Any, Response], got: dict[Any, Response]) -> None:
    for key, a in want.items():
        b = got[key]
        assert (a.error is None) == (b.error is None), key
        assert a.text == b.text and a.candidates == b.candidates, key
        assert [t.id for t in a.first_token] == [t.id for t in b.first_token], key


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
@pytest.mark.parametrize("size", [3, 64])
def test_rows_across_images_are_the_same_with_the_worker_thread(backends: dict[str, HFBackend], photos: list[Path], model: str, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = backends[model]
    backend.batching.size = size
    requests = _requests(backend, photos, OBJECTS)
    config = GenerateConfig(max_new_tokens=4, top_k=5)
    want, main = _answers(backend, requests, config, prefetch=False, monkeypatch=monkeypatch)
    got, worker = _answers(backend, requests, config, prefetch=True, monkeypatch=monkeypatch)
    assert main == {threading.current_thread().name}
    assert worker and all(name.startswith("halluprobe-ahead") for name in worker)
    assert sum(r.error is not None for r in got.values()) == 1  # the missing image, and only it
    _same(want, got)


@pytest.mark.parametrize("spec", [None, "vcd:alpha=1,beta=0.1", "icd:alpha=1,beta=0.1"], ids=lambda s: (s or "greedy").split(":")[0])
@pytest.mark.parametrize("objects", [OBJECTS[:2], ["-"]], ids=["queued rows", "captions"])
def test_the_decoding_loop_is_the_same_with_the_worker_thread(
    backends: dict[str, HFBackend], photos: list[Path], spec: str | None, objects: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two questions per image go through the queue (hf/image_rows.py); one per image through
    batches of full prompts, whose next batch the worker encodes (base and contrast inputs)."""
    backend = backends["llava"]
    backend.batching.size = 3
    requests = _requests(backend, photos, objects)
    config = GenerateConfig(max_new_tokens=4, stop_strings=(), decode=spec)
    want, _ = _answers(backend, requests, config, prefetch=False, monkeypatch=monkeypatch, loop=True)
    got, worker = _answers(backend, requests, config, prefetch=True, monkeypatch=monkeypatch, loop=True)
    assert any(name.startswith("halluprobe-ahead") for name in worker)
    _same(want, got)
