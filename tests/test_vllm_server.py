"""The openai backend against a REAL vLLM server (the CPU build, in its own environment: see
tests/_vllm_server.py; ``bash scripts/setup.sh --server-tests`` builds it, and these tests skip
saying so when it is missing). A random-weight text-only LLaMA with the Mistral v1 tokenizer is
served (no VLM family loads on vLLM's CPU build without torchvision; the image path is tested
against llama.cpp's server in test_openai_llamacpp.py): the request path, the ids and the
readouts are what is checked here.

- exact mode is detected, and every stored candidate log-probability, every logit readout's
  scores and decision, the first token and the greedy text equal the hf backend's computation on
  the same weights (log-softmax over the whole vocabulary, read at the same candidate ids) within
  1e-3 in log-probability;
- ``--exact-logprobs off`` on the same server is recorded as "top-20 pieces";
- ``diagnose --prefix-cache-check`` passes on it.

About 3-4 minutes on 2 shared cores (engine start, the first request's compilation, the reference).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

import _vllm_server
from halluprobe.cli import app
from halluprobe.readouts.logits import LOGIT_READOUTS, candidate_ids
from halluprobe.readouts.tokensets import derive_token_sets, load_tokenizer
from halluprobe.rundir import RunDir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

_REASON = _vllm_server.skip_reason(import_check=False)  # collection stays fast; the import is checked below
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

runner = CliRunner()
OBJECTS = ("cat", "dog", "cup", "car", "person", "umbrella")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, _vllm_server.VllmServer]]:
    reason = _vllm_server.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("vllm")
    model = _vllm_server.build_tiny_llama(root / "tiny-llama")
    with _vllm_server.VllmServer(model, root / "server.log") as server:
        yield model, server


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("world")
    images = root / "images"
    images.mkdir()
    lines = []
    for i in range(3):
        Image.new("RGB", (8, 8), (60 * i, 90, 200)).save(images / f"img{i}.png")
        for j, obj in enumerate(OBJECTS[i : i + 4]):
            lines.append(json.dumps({"question_id": 4 * i + j + 1, "image": f"img{i}.png", "text": f"Is there a {obj} in the image?", "label": "yes" if j % 2 else "no"}))
    (root / "toy_pope_random.json").write_text("\n".join(lines) + "\n")
    return {"images": images, "bench": root / "toy_pope_random.json"}


def _common(served: tuple[Path, Any], world: dict[str, Path]) -> list[str]:
    _, server = served
    # the served model is text-only: the question goes without its image
    return ["--backend", "openai", "--model", server.name, "--endpoint", server.url, "--benchmark", str(world["bench"]),
            "--images", str(world["images"]), "--backend-option", "send_images=false", "--concurrency", "4"]  # fmt: skip


def test_exact_mode_equals_the_hf_computation_on_the_same_weights(tmp_path: Path, served: tuple[Path, Any], world: dict[str, Path]) -> None:
    model, server = served
    out = tmp_path / "exact"
    result = runner.invoke(app, ["run", *_common(served, world), "--tokenizer", str(model), "--exact-logprobs", "require", "--out", str(out)])
    assert result.exit_code == 0, result.output + server.log_tail()
    header = RunDir(out).read_header()
    assert header.logprob_mode == "exact" and header.logprob_label == "exact" and header.token_sets is not None
    sets = derive_token_sets(load_tokenizer(str(model)))
    ids = candidate_ids(sets)
    assert header.token_sets.yes_ids == sets.yes_ids and header.token_sets.no_ids == sets.no_ids
    samples = sorted(RunDir(out).read_samples(), key=lambda s: s.question_id)
    assert len(samples) == 12 and all(s.error is None for s in samples)
    reference = _vllm_server.reference_first_token(model, [s.prompt for s in samples], ids, header.max_new_tokens)
    worst = 0.0
    for sample, (logprobs, argmax, text) in zip(samples, reference):
        assert list(sample.candidates) == list(logprobs)
        worst = max(worst, max(abs(sample.candidates[k] - logprobs[k]) for k in logprobs))
        assert sample.first_token[0].id == argmax and sample.text == text
        for name, read in LOGIT_READOUTS.items():
            ours, theirs = read(sample.candidates, header.token_sets), read(logprobs, sets)
            assert ours.decision == theirs.decision, name
            for a, b in ((ours.yes_score, theirs.yes_score), (ours.no_score, theirs.no_score)):
                assert (a is None) == (b is None) and (a is None or abs(a - b) <= 1e-3), name  # type: ignore[operator]
    print(f"exact mode vs the hf computation: {len(samples)} questions, {len(ids)} candidate ids, largest |log-prob difference| {worst:.2e}")
    assert worst <= 1e-3, worst
    score = runner.invoke(app, ["score", str(out), "--resamples", "10"])
    assert score.exit_code == 0 and "log-probabilities: exact" in score.output


def test_off_reads_the_top_20_pieces_and_says_so(tmp_path: Path, served: tuple[Path, Any], world: dict[str, Path]) -> None:
    out = tmp_path / "pieces"
    result = runner.invoke(app, ["run", *_common(served, world), "--exact-logprobs", "off", "--out", str(out)])
    assert result.exit_code == 0, result.output
    header = RunDir(out).read_header()
    assert header.logprob_mode == "pieces" and header.logprob_label == "top-20 pieces"
    assert all(s.error is None and len(s.candidates) <= 20 for s in RunDir(out).read_samples())


def test_the_prefix_cache_check_passes_on_the_real_server(served: tuple[Path, Any], world: dict[str, Path]) -> None:
    model, _ = served
    result = runner.invoke(app, ["diagnose", *_common(served, world), "--tokenizer", str(model), "--sample", "4",
                                 "--max-offset", "1", "--prefix-cache-check", "--cache-images", "3", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    check = json.loads(result.stdout)["prefix_cache"]
    print(f"prefix-cache check on vLLM: {check['compared']} questions, largest difference {check['max_diff']:.2e}")
    assert check["ok"] and check["compared"] == 12 and check["max_diff"] <= 1e-3
