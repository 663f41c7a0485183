"""Verbs that move answers across tools: import (other tools' answers -> a run dir) and export."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from halluprobe.cli._app import app, errors

__all__ = ["import_cmd", "export_cmd"]


@app.command("import")
def import_cmd(
    args: Annotated[list[str], typer.Argument(help="[FORMAT] FILE...: llava, lmms-eval, vlmevalkit, pope, answers, marine, dashb, mme (the MME eval tool's results files), lmms-eval-mme, hallusionbench (its result JSON: records with model_prediction) (or the caption formats opera, llava-captions, lmms-eval-chair, lmms-eval-amber), then the files.")],
    out: Annotated[Path, typer.Option(help="Run directory to write.")],
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the format (else the first word, or detected).")] = None,
    labels: Annotated[
        Optional[list[Path]], typer.Option(help="POPE labels file, one per split (coco_pope_<split>.json), or MARINE's labels keyed id; repeatable.")
    ] = None,
    questions: Annotated[Optional[Path], typer.Option(help="llava: LLaVA's question file (its category names the split).")] = None,
    split: Annotated[Optional[str], typer.Option(help="lmms-eval: the split of a file that holds one split; marine, dashb: the split to record.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Model name to record (else what the file says).")] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Write into a folder that is not empty: an earlier run's files there are replaced, nothing else is touched.")
    ] = False,
) -> None:
    """Turn third-party answers into a run dir: score, audit and report then work on it, any text
    rule applies, and the tool's own stored decision is the readout <tool>:<rule>.

    Every answer is imported or listed with its reason in RUNDIR/manifest.json."""
    from halluprobe.errors import InputError
    from halluprobe.imports.captions import CAPTION_FORMATS, detect_caption_format, import_captions
    from halluprobe.imports.formats import FORMATS, import_answers

    with errors():
        files = list(args)
        if files and files[0] in (*FORMATS, *CAPTION_FORMATS) and not Path(files[0]).exists():
            if fmt is not None and fmt != files[0]:
                raise InputError(f"two formats given: {files[0]} and --format {fmt}")
            fmt = files.pop(0)
        if not files:
            raise InputError("give the answers file(s) to import")
        if fmt is None:  # OPERA's caption lines and lmms-eval coco_cap_chair logs are told from their first line
            fmt = detect_caption_format(Path(files[0]))
        if fmt in CAPTION_FORMATS:  # captions: a run dir of open answers, scored by `halluprobe chair`
            if labels or split is not None:  # said, not ignored: the user expected them to count
                raise InputError(f"the caption format {fmt} takes no --labels or --split: `halluprobe chair` scores captions against object ground truth")
            captions_run, n = import_captions(fmt, [Path(f) for f in files], out, questions=questions, model=model, overwrite=overwrite)
            typer.echo(f"{captions_run.path}: {n} captions imported ({fmt}); score them with `halluprobe chair {captions_run.path}`")
            return
        rundir, result = import_answers(
            fmt, [Path(f) for f in files], out, labels=labels or (), questions=questions, split=split, model=model,
            overwrite=overwrite,
        )  # fmt: skip
    splits: dict[str, int] = {}
    for a in result.answers:
        splits[a.split] = splits.get(a.split, 0) + 1
    typer.echo(f"{rundir.path}: {len(result.answers)} answers imported ({result.format}); "
               + ", ".join(f"{s} {n}" for s, n in splits.items()))  # fmt: skip
    if result.skipped:
        typer.echo(f"  {len(result.skipped)} not imported (reasons in {rundir.path / 'manifest.json'}): {result.skipped[0]['reason']}")
    fits = result.versions.get("questions", {})
    for split, names in result.versions.get("labels", {}).items():
        line = f"  {split} labels: POPE version {', '.join(names) or 'unpublished'}"
        if split in fits:
            line += f"; the answered questions: {', '.join(fits[split]) or 'no published version in full'}"
        if result.unanswered.get(split):
            line += f"; {result.unanswered[split]} labelled questions have no answer"
        typer.echo(line)
    from halluprobe.readouts.text import TEXT_RULES

    typer.echo("  readouts: " + ", ".join([*(f"text:{rule}" for rule in TEXT_RULES), *result.tool_rules]))


@app.command("export")
def export_cmd(
    rundir: Annotated[Path, typer.Argument(help="Run directory.")],
    fmt: Annotated[str, typer.Option("--format", help="llava, pope or lmms-eval.")],
    out: Annotated[Path, typer.Option(help="Folder to write the files into: new or empty.")],
    overwrite: Annotated[
        bool, typer.Option(help="Write into a folder that is not empty: the files this export writes are replaced, nothing else.")
    ] = False,
) -> None:
    """Write a run's answers in another tool's format, so that tool can rescore the run. Only a
    whole run is exported (those formats pair answers with labels by position)."""
    from halluprobe.imports.export import export_run

    with errors():
        result = export_run(rundir, fmt, out, overwrite=overwrite)
    for path in result.files:
        typer.echo(str(path))
    for split, source in result.texts_from.items():
        typer.echo(f"  {split} question texts: {source}")
