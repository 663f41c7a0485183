"""The README's main command: `halluprobe demo`, offline, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app


@pytest.mark.slow
def test_demo_runs_offline_end_to_end(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    out = tmp_path / "demo"
    samples = [json.loads(line) for line in (out / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 30 and not any(s["error"] for s in samples)
    header = json.loads((out / "run" / "run.json").read_text())
    # the Mistral v1 vocabulary: the legacy LLaMA ids are other words, and the demo says so
    assert header["token_sets"]["legacy_valid"] is False
    assert "legacy LLaMA-2 ids on this vocabulary: INVALID" in result.output
    assert json.loads((out / "run" / "metrics.json").read_text())["readout"] == "dynamic"
    assert (out / "run" / "audit.json").exists() and (out / "report.html").stat().st_size > 10_000
    assert "halluprobe-demo" not in result.output  # every path printed is the one asked for
