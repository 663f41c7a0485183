"""Issue 32 on the decoding comparison: a table `check` cannot recompute never passes (finding 1),
and the runs a comparison combines belong together: one model unless asked (finding 7)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _decoding_runs import (  # noqa: F401 (autouse fixtures)
    GREEDY,
    METHOD,
    SAMPLED,
    chair_wordnet,
    decoding_run,
    fixture_nltk,
    write_truth,
)
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()


def _decoding(tmp_path: Path, *args: str) -> Any:
    return runner.invoke(app, ["decoding", *args, "--ground-truth", str(write_truth(tmp_path))])


def _paper(tmp_path: Path, fmt: str) -> tuple[Path, int]:
    """A decoding table under its comment in a paper; the comment's line."""
    greedy, vcd = decoding_run(tmp_path / "greedy", GREEDY), decoding_run(tmp_path / "vcd", METHOD, decode="vcd:alpha=1")
    written = _decoding(tmp_path, str(greedy), str(vcd), "--bootstrap", "20", f"--{fmt}")
    assert written.exit_code == 0, written.output
    paper = tmp_path / ("paper.tex" if fmt == "latex" else "paper.md")
    paper.write_text("Some prose.\n\n" + written.stdout)
    lines = paper.read_text().split("\n")
    return paper, next(i for i, line in enumerate(lines) if "halluprobe-decoding-provenance" in line) + 1


def _edit_chair_s(paper: Path, fmt: str) -> None:
    """The greedy run's CHAIR_s cell (50.0) written as 12.3."""
    row = "| greedy | greedy baseline | 4 | " if fmt == "markdown" else "greedy & greedy baseline & 4 & "
    text = paper.read_text()
    assert row + "50.0" in text
    paper.write_text(text.replace(row + "50.0", row + "12.3"))


@pytest.mark.parametrize("fmt", ["markdown", "latex"])
@pytest.mark.parametrize("family", ["null", "missing"])
def test_a_comment_naming_no_chair_family_is_bad_input_not_a_pass(tmp_path: Path, fmt: str, family: str) -> None:
    """Finding 1: the comment's family null (or the key left out) and a CHAIR_s cell edited: before,
    0 cells were compared and everything "matched" (exit 0); now one line at the comment, exit 2."""
    paper, line = _paper(tmp_path, fmt)
    _edit_chair_s(paper, fmt)
    text = paper.read_text()
    replacement = '"family": null, ' if family == "null" else ""
    paper.write_text(re.sub(r'"family": "chair@lemmatizer", ', replacement, text, count=1))
    assert paper.read_text() != text
    result = runner.invoke(app, ["check", str(paper)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [result.output.strip()]  # one line
    assert f"{paper}:{line}: " in result.output and "no CHAIR family and no PROVE scores" in result.output


def test_an_unedited_table_still_checks_and_an_edit_is_still_caught(tmp_path: Path) -> None:
    paper, _ = _paper(tmp_path, "markdown")
    clean = runner.invoke(app, ["check", str(paper), "--json"])
    assert clean.exit_code == 0 and json.loads(clean.stdout)["cells"] > 0, clean.output
    _edit_chair_s(paper, "markdown")
    assert runner.invoke(app, ["check", str(paper)]).exit_code == 1


def test_no_compared_cell_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever leaves nothing to compare (here: a recomputation with no table) fails, never passes."""
    from halluprobe.check import decoding as check_decoding

    paper, line = _paper(tmp_path, "markdown")
    monkeypatch.setattr(check_decoding, "decoding_grids", lambda result, style: [])
    result = runner.invoke(app, ["check", str(paper)])
    assert result.exit_code == 2 and f"{paper}:{line}: " in result.output and "cannot be checked" in result.output, result.output


def _other_model(run: Path, model: str = "other-model") -> Path:
    header = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**header, "model": model}))
    return run


@pytest.mark.parametrize("role", ["method", "sampled baseline"])
def test_a_run_of_another_model_is_refused_unless_asked(tmp_path: Path, role: str) -> None:
    """Finding 7: a method run (or the sampled baseline) of another model than the greedy baseline's
    was paired with it silently; now refused in one line naming its run.json, unless --allow-other-models."""
    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    vcd = decoding_run(tmp_path / "vcd", METHOD, decode="vcd:alpha=1")
    sampled = decoding_run(tmp_path / "sampled", SAMPLED, sample=True, seed=0)
    other = _other_model(vcd if role == "method" else sampled)
    args = [str(greedy), str(vcd), "--sampled-baseline", str(sampled), "--bootstrap", "0"]
    refused = _decoding(tmp_path, *args)
    assert refused.exit_code == 2, refused.output
    assert len(refused.output.strip().splitlines()) == 1 and f"{other / 'run.json'}: " in refused.output
    assert "the model 'other-model' is not the greedy baseline's 'tiny'" in refused.output and "--allow-other-models" in refused.output
    asked = _decoding(tmp_path, *args, "--allow-other-models", "--json")
    assert asked.exit_code == 0, asked.output
    assert len(json.loads(asked.stdout)["runs"]) == 3


def test_allow_other_models_is_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # rich wraps the help to the terminal's width
    shown = runner.invoke(app, ["decoding", "--help"])
    text = " ".join(shown.output.replace("│", " ").split())
    assert shown.exit_code == 0 and "--allow-other-models" in text and "compares methods on one model" in text, shown.output


def test_a_report_of_runs_of_other_models_shows_no_comparison(tmp_path: Path) -> None:
    """The report pairs caption runs only when they are a comparison: runs of other models are not one."""
    from halluprobe.report.decoding_section import decoding_comparison

    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    vcd = decoding_run(tmp_path / "vcd", METHOD, decode="vcd:alpha=1")
    assert decoding_comparison([greedy, vcd]) is not None
    _other_model(vcd)
    assert decoding_comparison([greedy, vcd]) is None


def test_check_recomputes_a_table_written_with_other_models(tmp_path: Path) -> None:
    """A table its writer made with --allow-other-models (which its comment does not record) still checks."""
    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    vcd = _other_model(decoding_run(tmp_path / "vcd", METHOD, decode="vcd:alpha=1"))
    written = _decoding(tmp_path, str(greedy), str(vcd), "--bootstrap", "10", "--markdown", "--allow-other-models")
    assert written.exit_code == 0, written.output
    paper = tmp_path / "paper.md"
    paper.write_text(written.stdout)
    checked = runner.invoke(app, ["check", str(paper)])
    assert checked.exit_code == 0, checked.output
