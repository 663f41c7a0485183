"""What a verb that writes a table (``--markdown`` / ``--latex``) does with the paths it is
given: a folder there is one line, a file there (a paper's own .tex) stays as it was unless
``--overwrite``. Shared by the judged-table verbs' tests."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()


def assert_table_outputs_kept(args: list[str], tmp_path: Path) -> None:
    """``args``: the verb's whole command line but its table output."""
    result = runner.invoke(app, [*args, "--markdown", str(tmp_path)])
    assert result.exit_code == 2 and str(tmp_path) in result.output and "a folder stands where this command writes a file" in result.output
    paper = tmp_path / "main.tex"
    paper.write_text("my paper\n", encoding="utf-8")
    result = runner.invoke(app, [*args, "--latex", str(paper)])
    assert result.exit_code == 2 and "pass --overwrite" in result.output and str(paper) in result.output
    assert paper.read_text(encoding="utf-8") == "my paper\n"
    result = runner.invoke(app, [*args, "--latex", str(paper), "--overwrite"])
    assert result.exit_code == 0, result.output
    assert "provenance" in paper.read_text(encoding="utf-8")
