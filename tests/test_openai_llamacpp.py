"""The openai backend against a REAL llama.cpp server (llama-cpp-python[server]==0.3.36).

Skipped unless ``llama_cpp`` is importable: ``bash scripts/setup.sh --server-tests`` compiles it
(10-15 minutes on 2 cores), the default set-up does not.

The model is a tiny llama-architecture GGUF written here with the ``gguf`` package from the
REAL LLaMA-2 vocabulary (``ggml-vocab-llama-spm.gguf`` from the llama-cpp-python sdist, see
tests/_assets.py), random weights, and a Jinja chat template that accepts list-form content
(the built-in llama-2 / chatml formats silently drop it; ASSETS.md). Its output is steered:
hidden dimension 0 carries a large constant through the residual stream, the final norm keeps
only that dimension, and only the rows of ``▁Yes`` / ``▁No`` / ``▁yes`` read it, so every
first token is ``" Yes"`` (p about 0.98) with ``" No"`` and ``" yes"`` behind it. The server
reports those as strings (leading space kept, no ids): this is what the piece-keyed readouts
must handle.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _scored import scored_samples  # noqa: E402

pytest.importorskip("llama_cpp")
pytest.importorskip("uvicorn")

import _assets  # noqa: E402
from PIL import Image  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from halluprobe.cli import app  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402

pytestmark = pytest.mark.slow

YES, NO, YES_LOWER = 3869, 1939, 4874  # ▁Yes, ▁No, ▁yes in the LLaMA-2 vocabulary
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}USER: "
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% else %}<image>\n{% endif %}{% endfor %}{% endif %}\n{% endif %}{% endfor %}ASSISTANT:"
)


def _write_tiny_gguf(path: Path) -> None:
    import gguf
    import numpy as np

    vocab = gguf.GGUFReader(str(_assets.gguf_vocab_dir() / "ggml-vocab-llama-spm.gguf"))

    def field(name: str) -> Any:
        f = vocab.fields[name]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in field("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in field("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in field("tokenizer.ggml.token_type")]
    n_vocab, n_embd, n_ff, n_layers, n_head = len(tokens), 64, 128, 2, 4
    assert tokens[YES] == "▁Yes" and tokens[NO] == "▁No" and tokens[YES_LOWER] == "▁yes"

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("halluprobe-tiny-llama")
    w.add_context_length(512)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(0)

    def small(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    embd = small(n_vocab, n_embd)
    embd[:, 0] = 10.0  # the steering dimension: large and positive for every token
    w.add_tensor("token_embd.weight", embd)
    for i in range(n_layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", small(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", small(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", small(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", small(n_embd, n_ff))
    norm = np.zeros(n_embd, dtype=np.float32)
    norm[0] = 1.0  # the final hidden state keeps only the steering dimension
    w.add_tensor("output_norm.weight", norm)
    out = np.zeros((n_vocab, n_embd), dtype=np.float32)
    out[YES, 0], out[NO, 0], out[YES_LOWER, 0] = 2.0, 1.5, 1.0
    w.add_tensor("output.weight", out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("llamacpp")
    model = folder / "tiny.gguf"
    _write_tiny_gguf(model)
    port = _free_port()
    log = open(folder / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "512", "--n_threads", "1"],  # fmt: skip
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    watchdog = threading.Timer(300, proc.kill)  # the server stops by itself whatever happens
    watchdog.daemon = True
    watchdog.start()
    url = f"http://127.0.0.1:{port}/v1"
    try:
        import httpx

        for _ in range(120):  # bounded: about 60 s at most
            if proc.poll() is not None:
                break
            try:
                if httpx.get(f"{url}/models", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("llama.cpp server did not come up")
        if proc.poll() is not None:
            pytest.fail("llama.cpp server exited: " + (folder / "server.log").read_text(errors="replace")[-2000:])
        yield url
    finally:
        watchdog.cancel()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _toy_benchmark(root: Path, split: str, n_images: int, objects: list[str]) -> tuple[Path, Path]:
    """Plain images and one POPE-format split: every object asked of every image, labels alternating."""
    images = root / "images"
    images.mkdir()
    lines = []
    for i in range(n_images):
        Image.new("RGB", (16, 16), (50 * i, 80, 120)).save(images / f"img{i}.png")
        for j, obj in enumerate(objects):
            article = "an" if obj[0] in "aeiou" else "a"
            label = "yes" if (i + j) % 2 else "no"
            text = f"Is there {article} {obj} in the image?"
            lines.append(json.dumps({"question_id": i * len(objects) + j + 1, "image": f"img{i}.png", "text": text, "label": label}))
    bench = root / f"toy_pope_{split}.json"
    bench.write_text("\n".join(lines) + "\n")
    return bench, images


def _run(server: str, bench: Path, images: Path, out: Path, *extra: str) -> None:
    result = CliRunner().invoke(app, [
        "run", "--backend", "openai", "--model", "tiny", "--endpoint", server, "--benchmark", str(bench),
        "--images", str(images), "--out", str(out), "--max-new-tokens", "3", *extra,
    ])  # fmt: skip
    assert result.exit_code == 0, result.output


def test_real_llamacpp_server_gives_piece_keyed_readouts(
    llama_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    bench, images = _toy_benchmark(tmp_path, "random", 2, ["cat", "dog", "umbrella"])
    out = tmp_path / "run"
    _run(llama_server, bench, images, out, "--concurrency", "2")
    samples = scored_samples(out)
    assert len(samples) == 6 and not any(s.error for s in samples)
    for s in samples:
        pieces = [t.piece for t in s.first_token]
        assert pieces[:3] == [" Yes", " No", " yes"], pieces  # strings, leading space kept, no ids
        assert all(t.id is None for t in s.first_token)
        dyn = s.readouts["dynamic"]
        assert dyn.decision == "yes" and dyn.p_yes is not None and 0.9 < dyn.p_yes < 1.0
        assert s.offset_argmax is None
        assert (s.text or "").startswith("Yes") or (s.text or "").startswith(" Yes")
        assert s.readouts["text:pope"].decision == "yes"
    stats = RunDir(out).read_request_stats()["total"]
    assert stats["attempts"]["ok"] == 6 and stats["errors"] == 0
    # a second run is served from the cache: the server is not asked again
    _run(llama_server, bench, images, tmp_path / "again", "--concurrency", "2")
    assert RunDir(tmp_path / "again").read_request_stats()["total"]["cache_hits"] == 6


def test_real_server_logprobs_are_stored_as_reported_and_shards_merge_to_the_same_scores(
    llama_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    import httpx

    from halluprobe.scoring import score_rundir

    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    bench, images = _toy_benchmark(tmp_path, "adversarial", 4, ["cat", "dog", "umbrella", "traffic light"])

    def run(target: Path, *extra: str) -> None:
        _run(llama_server, bench, images, target, "--concurrency", "3", *extra)

    run(tmp_path / "whole")
    # what the server itself reports for one question, asked directly with the same message
    data = base64.b64encode((images / "img2.png").read_bytes()).decode("ascii")
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
            {"type": "text", "text": "Is there a traffic light in the image?"},
        ]}],
        "temperature": 0, "max_tokens": 1, "logprobs": True, "top_logprobs": 20,
    }  # fmt: skip
    reported = httpx.post(f"{llama_server}/chat/completions", json=body, timeout=60).json()
    tops = reported["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    sample = next(s for s in RunDir(tmp_path / "whole").read_samples() if s.question_id == 12)
    stored = {t.piece: t.logprob for t in sample.first_token}
    assert len(tops) >= 3
    for top in tops[: len(stored)]:
        assert stored[top["token"]] == pytest.approx(top["logprob"], abs=1e-5), top

    # two shards on the same server (no cache: they really ask), merged: the same scores
    for k in range(2):
        run(tmp_path / f"part{k}", "--shard", f"{k}/2", "--no-cache")
    merged = CliRunner().invoke(app, ["merge", str(tmp_path / "part0"), str(tmp_path / "part1"), "--out", str(tmp_path / "merged")])
    assert merged.exit_code == 0, merged.output
    parts = [len(RunDir(tmp_path / f"part{k}").read_samples()) for k in range(2)]
    assert sum(parts) == 16 and min(parts) > 0
    for readout in ("dynamic", "text:strict"):
        whole = score_rundir(tmp_path / "whole", readout=readout, n_resamples=50, write=False)
        joined = score_rundir(tmp_path / "merged", readout=readout, n_resamples=50, write=False)
        a, b = joined.model_dump(), whole.model_dump()
        for split in ("adversarial",):
            for key in ("tp", "fp", "tn", "fn", "unknown", "n"):
                assert a["splits"][split][key] == b["splits"][split][key], (readout, key)
        # the sample order differs, so sums may differ in the last bits
        assert _flatten(a) == pytest.approx(_flatten(b), rel=1e-9, abs=1e-12), readout


def _flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """Every number in a nested dict/list, keyed by its path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flatten(item, f"{prefix}/{key}").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in _flatten(item, f"{prefix}/{i}").items()}
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return {}
    return {prefix: float(value)}
