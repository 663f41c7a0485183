"""Exact mode's fall back on a REAL llama.cpp server (no ``logprob_token_ids``): asked with the
served model's tokenizer, ``auto`` reads the top-20 pieces and records why, the run scores as a
run that never asked, and ``require`` refuses. Reuses tests/test_openai_llamacpp.py's server
(skipped with it unless ``bash scripts/setup.sh --server-tests`` installed llama-cpp-python).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("uvicorn")

import _assets  # noqa: E402
from test_openai_llamacpp import _toy_benchmark, llama_server  # noqa: E402, F401 - the module's server fixture
from typer.testing import CliRunner  # noqa: E402

from halluprobe.cli import app  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402

pytestmark = pytest.mark.slow

runner = CliRunner()


def test_llamacpp_falls_back_to_the_top_20_pieces_and_says_so(llama_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    bench, images = _toy_benchmark(tmp_path, "random", 2, ["cat", "dog", "umbrella"])
    common = ["run", "--backend", "openai", "--model", "tiny", "--endpoint", llama_server, "--benchmark", str(bench),
              "--images", str(images), "--max-new-tokens", "3", "--concurrency", "2"]  # fmt: skip
    tokenizer = str(_assets.llama_tokenizer_dir())  # the GGUF's vocabulary: LLaMA-2's
    auto = runner.invoke(app, [*common, "--tokenizer", tokenizer, "--out", str(tmp_path / "auto")])
    plain = runner.invoke(app, [*common, "--out", str(tmp_path / "plain")])
    refused = runner.invoke(app, [*common, "--tokenizer", tokenizer, "--exact-logprobs", "require", "--out", str(tmp_path / "req")])
    assert auto.exit_code == 0 and plain.exit_code == 0, auto.output + plain.output
    header = RunDir(tmp_path / "auto").read_header()
    assert header.logprob_mode == "pieces" and header.logprob_label == "top-20 pieces"
    assert header.backend_info["logprob_mode_reason"] and header.token_sets is not None and header.token_sets.keyed_by == "piece"
    assert header.fingerprint == RunDir(tmp_path / "plain").read_header().fingerprint
    scores = [runner.invoke(app, ["score", str(tmp_path / name), "--json", "--resamples", "20"]) for name in ("auto", "plain")]
    assert all(s.exit_code == 0 for s in scores)
    assert "top-20 pieces" in scores[0].stderr
    first, second = (json.loads(s.stdout) for s in scores)
    assert first["pooled"] == second["pooled"]
    assert refused.exit_code == 2 and "--exact-logprobs require" in refused.output
