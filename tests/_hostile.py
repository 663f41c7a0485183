"""What the hostile-input tests share (issue 25): the one-line refusal check, folder snapshots,
and the inputs the tests start from (a VLMEvalKit sheet, its import, a scripted run), also as
the fixtures ``imported`` and ``scripted`` that test_hostile.py and test_hostile_inputs.py import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app
from test_imports import make_labels
from test_imports_tools import vlmeval_rows
from test_pipeline import _make_world, _run_args

__all__ = [
    "DEEP", "LONG_INT", "copy_run", "imported", "make_imported", "make_scripted", "make_sheet", "ok", "refused", "runner", "scripted",
    "snapshot",
]  # fmt: skip

runner = CliRunner()

DEEP = "[" * 200_000

LONG_INT = "9" * 5000  # beyond Python's 4,300-digit conversion limit


def refused(args: list[str], *fragments: str, code: int = 2) -> str:
    """The command exits ``code`` with one line that holds every fragment."""
    result = runner.invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("error: "), (result.exit_code, result.output)
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def make_sheet(folder: Path) -> Path:
    """A VLMEvalKit sheet (JSON): an import needs no labels file."""
    rows = vlmeval_rows(make_labels(folder / "labels"), extracted=False)
    path = folder / "m_POPE.json"
    path.write_text(json.dumps(rows))
    return path


def make_imported(folder: Path) -> Path:
    """The sheet of :func:`make_sheet` imported as ``folder/run``."""
    ok(["import", str(make_sheet(folder)), "--out", str(folder / "run")])
    return folder / "run"


def make_scripted(root: Path) -> tuple[Path, dict[str, Path]]:
    """A complete scripted run (72 samples over two splits) and its world; tests copy the run."""
    world = _make_world(root)
    ok(_run_args(world, root / "run"))
    return root / "run", world


@pytest.fixture()
def imported(tmp_path: Path) -> Path:
    return make_imported(tmp_path)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    return make_scripted(tmp_path_factory.mktemp("scripted"))


def copy_run(run: Path, to: Path) -> Path:
    to.mkdir(parents=True)
    for f in run.iterdir():
        (to / f.name).write_bytes(f.read_bytes())
    return to

