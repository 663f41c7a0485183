"""The check verb: every reported number (tables with a provenance comment, claims in prose)
recomputed from the run dirs it names. Exit 0 all match, 1 a number differs, 2 bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from halluprobe.cli._app import app, errors

__all__ = ["check_cmd"]


@app.command("check")
def check_cmd(
    files: Annotated[list[Path], typer.Argument(help=".tex / .md files with tables written by `score`, `audit`, `corrections`, `chair`, `decoding` or `mmhal score` --latex/--markdown, or report.md.")],
    runs: Annotated[
        Optional[list[Path]],
        typer.Option(help="Run dir (or answers / labels file) to recompute from, serving the tables and claims whose path it ends with; repeatable."),
    ] = None,
    claims: Annotated[
        Optional[Path], typer.Option(help="TOML file of numbers in prose (run, readout, split, metric, value as written).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON (for CI).")] = False,
) -> None:
    """Check every table with a provenance comment, and every claim, against the run dirs:
    reports each cell that differs (file:line, expected, found) and each run that is missing,
    incomplete or changed since. Tables of score, audit, corrections, report.md, chair,
    decoding, mmhal score (against its judgment dir: no model or judge runs) and literature audit
    (literature.md, against its literature.json) are read."""
    from halluprobe.check import check_files

    with errors():
        result = check_files(files, runs=runs or (), claims=claims)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        for finding in result.findings:
            typer.echo(finding.describe())
        failing = sum(f.fails for f in result.findings)
        verdict = "everything matches" if failing == 0 else f"{failing} problem{'s' if failing != 1 else ''}"
        tables = f"{result.tables} table{'s' if result.tables != 1 else ''} ({result.cells} cells)"
        typer.echo(f"checked {tables} and {result.claims} claims: {verdict}")
    raise typer.Exit(result.exit_code)
