"""The README's main command: `halluprobe demo`, offline, end to end, deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

pytest.importorskip("torch")


@pytest.mark.slow
def test_demo_runs_offline_end_to_end(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    out = tmp_path / "demo"
    # the scenes and the POPE files built from their COCO annotations
    assert (out / "scenes" / "instances.json").exists() and (out / "benchmark" / "manifest.json").exists()
    samples = [json.loads(line) for line in (out / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 120 * 18 and not any(s["error"] for s in samples)
    header = json.loads((out / "run" / "run.json").read_text())
    # the Mistral v1 vocabulary: the legacy LLaMA ids are other words, and the demo says so
    assert header["token_sets"]["legacy_valid"] is False
    assert "legacy LLaMA-2 ids on this vocabulary: INVALID" in result.output
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    assert metrics["readout"] == "dynamic"
    f1 = {split: m["f1"] for split, m in metrics["splits"].items()}
    # the point of the demo: negatives that go with the scene fool the model more
    assert f1["adversarial"] < f1["random"] - 0.05, f1
    assert f"F1 by split (dynamic readout): random {f1['random']:.3f}" in result.output
    assert (out / "run" / "audit.json").exists() and (out / "report.html").stat().st_size > 10_000
    assert f"report: {out / 'report.html'}" in result.output
    assert "halluprobe-demo" not in result.output  # every path printed is the one asked for


@pytest.mark.slow
def test_demo_is_deterministic(tmp_path: Path) -> None:
    from halluprobe.demo import run_demo

    runs = [run_demo(tmp_path / name, n_images=6, n_resamples=20) for name in ("a", "b")]
    a, b = (
        [{k: v for k, v in json.loads(line).items() if k != "latency_s"} for line in (r.out / "run" / "samples.jsonl").read_text().splitlines()]
        for r in runs
    )
    assert len(a) == 6 * 18 and a == b
    for name in ("synthetic_pope_random.json", "synthetic_pope_adversarial.json"):
        assert (runs[0].out / "benchmark" / name).read_bytes() == (runs[1].out / "benchmark" / name).read_bytes()
    assert runs[0].f1 == runs[1].f1
