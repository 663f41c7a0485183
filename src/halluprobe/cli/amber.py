"""AMBER verbs: its discriminative queries as yes/no question files (run and scored like POPE,
every readout applies), and AMBER's own numbers from a run (compatibility mode ``amber``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from halluprobe.cli._app import app, errors
from halluprobe.errors import InputError

__all__ = ["amber_app"]

amber_app = typer.Typer(help="AMBER: discriminative questions through the POPE machinery, and AMBER's own numbers.", no_args_is_help=True)
app.add_typer(amber_app, name="amber")

DataOption = Annotated[Path, typer.Option(help="AMBER's data folder (annotations.json, query/...), commit 5e1fd52f8ea6.")]
CheckOption = Annotated[bool, typer.Option("--check-sha256/--no-check-sha256", help="Refuse files whose sha256 differs from the pinned commit's.")]


@amber_app.command("questions")
def amber_questions_cmd(
    data: DataOption,
    out: Annotated[Path, typer.Option(help="Folder for amber_<split>.jsonl (existence, attribute-state/number/action, relation).")],
    images: Annotated[Optional[Path], typer.Option(help="AMBER's images folder: every queried image must be in it (checked now).")] = None,
    check_sha256: CheckOption = True,
    overwrite: Annotated[bool, typer.Option(help="Replace existing files.")] = False,
) -> None:
    """Write AMBER's discriminative queries as yes/no question files for `halluprobe run`."""
    from halluprobe.benchmarks.amber.data import amber_questions, read_amber_annotations, read_amber_queries
    from halluprobe.benchmarks.pope import write_questions

    with errors():
        annotations = read_amber_annotations(data / "annotations.json", check_sha256=check_sha256)
        query_path = data / "query" / "query_discriminative.json"
        by_split = amber_questions(annotations, read_amber_queries(query_path, check_sha256=check_sha256), query_path)
        if images is not None:
            missing = sorted({q.image for qs in by_split.values() for q in qs if not (images / q.image).is_file()})
            if missing:
                raise InputError(f"{len(missing)} AMBER images are not in the folder, e.g. {missing[0]}", images / missing[0])
        paths = {split: out / f"amber_{split}.jsonl" for split in by_split}
        existing = [p for p in paths.values() if p.exists()]
        if existing and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", existing[0])
        for split, questions in by_split.items():
            write_questions(paths[split], questions)
    for split, questions in by_split.items():
        typer.echo(f"{paths[split]}: {len(questions)} questions ({sum(q.label == 'no' for q in questions)} no)")


@amber_app.command("score")
def amber_score_cmd(
    rundir: Annotated[Path, typer.Argument(help="A run of the AMBER question files.")],
    data: DataOption,
    check_sha256: CheckOption = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """AMBER's own discriminative numbers (exact 'Yes'/'No', 'No' positive, F1 of rounded P and R).

    halluprobe's numbers for the same run, with every readout and CIs: `halluprobe score RUNDIR`."""
    from halluprobe.benchmarks.amber.data import read_amber_annotations
    from halluprobe.benchmarks.amber.discriminative import amber_discriminative_numbers
    from halluprobe.rundir import RunDir

    with errors():
        annotations = read_amber_annotations(data / "annotations.json", check_sha256=check_sha256)
        run = RunDir(rundir)
        header = run.read_header()
        if header.open_ended:
            raise InputError("a run of open answers: AMBER's discriminative numbers read yes/no answers", run.header_path)
        rows = []
        for sample in run.read_samples():
            if not 1 <= sample.question_id <= len(annotations):
                raise InputError(f"sample question_id {sample.question_id} is not an AMBER id", run.samples_path)
            ann = annotations[sample.question_id - 1]
            rows.append((ann["type"], ann["truth"], "" if sample.error else (sample.text or "")))
        numbers = amber_discriminative_numbers(rows)
    if as_json:
        typer.echo(json.dumps({"compat": "amber", "commit": "5e1fd52f8ea6", "numbers": numbers}, indent=2))
        return
    typer.echo("AMBER's own numbers (compat amber: exact 'Yes'/'No', 'No' the positive class)")
    for dimension, v in numbers.items():
        typer.echo(f"  {dimension:<10} n={v['n']:<6} Accuracy {v['Accuracy']:5.1f}  Precision {v['Precision']:5.1f}  Recall {v['Recall']:5.1f}  F1 {v['F1']:5.1f}")
