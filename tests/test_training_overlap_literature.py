"""``literature audit`` states how many of an audited entry's images are COCO train2017 images
(the toy entry's images are val2014-named ids 0-3, none in val2017), with the source of which
models trained on train2017, in literature.json's notes and literature.md."""

from __future__ import annotations

# ruff: noqa: F811  (toy_coco is a fixture imported from _literature, then requested by name)
import json
from pathlib import Path

import pytest
from _literature import (
    literature_cache,  # noqa: F401 - fixture
    llava_entry,
    toy_coco,  # noqa: F401 - fixture
    write_registry,
)
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("literature_cache")


def test_literature_audit_counts_train2017_images(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    reg = write_registry(tmp_path, [entry])
    out = tmp_path / "audit"
    result = runner.invoke(app, ["literature", "audit", "--all", "--out", str(out), "--registry", str(reg), "--resamples", "50"])
    assert result.exit_code == 0, result.output
    notes = json.loads((out / "literature.json").read_text())["entries"][0]["notes"]
    counts = [n for n in notes if n.startswith("COCO train2017 images:")]
    expected = ("COCO train2017 images: 4 of 4 images (100.0%; a val2014 image outside val2017 went to train2017 "
                "in COCO's 2017 re-split); held out (val2017): 0")  # fmt: skip
    assert counts == [expected]
    assert any(n.startswith("train2017 is in the published training data of: LLaVA-1.5") for n in notes)
    md = (out / "literature.md").read_text()
    assert "COCO train2017 images: 4 of 4 images" in md
    check = runner.invoke(app, ["check", str(out / "literature.md")])
    assert check.exit_code == 0, check.output
