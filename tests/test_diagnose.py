"""`halluprobe diagnose`: token sets and the off-set argmax rate on a sample, exit 1 above the limit."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from halluprobe.cli import app
from test_pipeline import _make_world

runner = CliRunner()


def _args(world: dict[str, Path], *extra: str) -> list[str]:
    return ["diagnose", "--backend", "scripted", "--model", str(world["script"]), "--benchmark", str(world["random"]),
            "--images", str(world["images"]), *extra]  # fmt: skip


def test_clean_model_passes_and_prints_token_sets(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    result = runner.invoke(app, _args(world, "--sample", "20"))
    assert result.exit_code == 0, result.output
    assert "'▁Yes'=1" in result.output and "off-set argmax: 0 of 20" in result.output


def test_offset_pieces_over_the_limit_exit_1_naming_the_piece(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    script = json.loads(world["script"].read_text())
    script["offset"] = {"img1.png": "▁Maybe", "img2.png": "."}
    world["script"].write_text(json.dumps(script))
    result = runner.invoke(app, _args(world, "--sample", "36", "--json"))
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    # 6 questions per image in this split, two images answer off-set
    assert payload["offset_rate"] == 12 / 36 and dict(payload["offset_pieces"]) == {"▁Maybe": 6, ".": 6}
    assert "33.3%" in result.stderr and "'▁Maybe' (6)" in result.stderr
    # a looser limit accepts the same model
    assert runner.invoke(app, _args(world, "--sample", "36", "--max-offset", "0.5")).exit_code == 0


def test_sample_is_seeded_and_bounded(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    a = json.loads(runner.invoke(app, _args(world, "--sample", "7", "--seed", "3", "--json")).stdout)
    b = json.loads(runner.invoke(app, _args(world, "--sample", "7", "--seed", "3", "--json")).stdout)
    assert a == b and a["n"] == 7
    bad = runner.invoke(app, _args(world, "--sample", "0"))
    assert bad.exit_code == 2
