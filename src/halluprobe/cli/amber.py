"""AMBER verbs: its discriminative queries as yes/no question files (run and scored like POPE,
every readout applies), and AMBER's own numbers from a run (compatibility mode ``amber``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from halluprobe.cli._app import app, errors
from halluprobe.errors import InputError
from halluprobe.jsonl import loads

__all__ = ["amber_app"]

amber_app = typer.Typer(help="AMBER: discriminative questions through the POPE machinery, and AMBER's own numbers.", no_args_is_help=True)
app.add_typer(amber_app, name="amber")

DataOption = Annotated[Path, typer.Option(help="AMBER's data folder (annotations.json, query/...), commit 5e1fd52f8ea6.")]
GENERATIVE_FILE = "amber_generative.json"  # what `amber generative --out` writes
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
    from halluprobe.benchmarks.question_file import write_questions
    from halluprobe.captions.amber.data import (
        amber_generative_questions,
        amber_questions,
        read_amber_annotations,
        read_amber_queries,
    )
    from halluprobe.files import refuse_existing, refuse_non_folder

    with errors():
        annotations = read_amber_annotations(data / "annotations.json", check_sha256=check_sha256)
        query_path = data / "query" / "query_discriminative.json"
        by_split = amber_questions(annotations, read_amber_queries(query_path, check_sha256=check_sha256), query_path)
        generative_path = data / "query" / "query_generative.json"
        if generative_path.is_file():  # open questions: run with --open-ended, score with `amber generative`
            by_split["generative"] = amber_generative_questions(annotations, read_amber_queries(generative_path, check_sha256=check_sha256), generative_path)
        if images is not None:
            refuse_non_folder(images, "--images")  # a file there: "3 AMBER images are not in the folder" named file/AMBER_1.jpg
            missing = sorted({q.image for qs in by_split.values() for q in qs if not (images / q.image).is_file()})
            if missing:
                raise InputError(f"{len(missing)} AMBER images are not in the folder, e.g. {missing[0]}", images / missing[0])
        paths = {split: out / f"amber_{split}.jsonl" for split in by_split}
        refuse_non_folder(out)
        for path in paths.values():  # every file this writes, checked before any is written
            refuse_existing(path, overwrite=overwrite)
        for split, questions in by_split.items():
            write_questions(paths[split], questions)
    for split, questions in by_split.items():
        kind = "open questions (run --open-ended)" if split == "generative" else f"questions ({sum(q.label == 'no' for q in questions)} no)"
        typer.echo(f"{paths[split]}: {len(questions)} {kind}")


@amber_app.command("score")
def amber_score_cmd(
    rundir: Annotated[Path, typer.Argument(help="A run of the AMBER question files.")],
    data: DataOption,
    check_sha256: CheckOption = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """AMBER's own discriminative numbers (exact 'Yes'/'No', 'No' positive, F1 of rounded P and R).

    halluprobe's numbers for the same run, with every readout and CIs: `halluprobe score RUNDIR`."""
    from halluprobe.captions.amber.data import read_amber_annotations, read_amber_queries
    from halluprobe.captions.amber.discriminative import AmberDiscriminativeResult, amber_discriminative_numbers
    from halluprobe.captions.amber.runs import refuse_other_questions
    from halluprobe.rundir import RunDir

    with errors():
        annotations = read_amber_annotations(data / "annotations.json", check_sha256=check_sha256)
        queries = read_amber_queries(data / "query" / "query_discriminative.json", check_sha256=check_sha256)
        run = RunDir(rundir)
        header = run.read_header()
        if header.open_ended:
            raise InputError("a run of open answers: AMBER's discriminative numbers read yes/no answers", run.header_path)
        samples = list(run.read_samples())
        if not samples:  # AMBER's numbers of nothing are all 0.0: not a score
            raise InputError("the run has no samples yet", run.samples_path)
        refuse_other_questions(samples, queries, run.samples_path)
        rows = []
        for sample in samples:
            if not 1 <= sample.question_id <= len(annotations):
                raise InputError(f"sample question_id {sample.question_id} is not an AMBER id", run.samples_path)
            ann = annotations[sample.question_id - 1]
            rows.append((ann.type, str(ann.truth), "" if sample.error else (sample.text or "")))
        numbers = amber_discriminative_numbers(rows)
    if as_json:
        typer.echo(json.dumps(AmberDiscriminativeResult(numbers=numbers).model_dump(mode="json"), indent=2))
        return
    typer.echo("AMBER's own numbers (compat amber: exact 'Yes'/'No', 'No' the positive class)")
    for dimension, v in numbers.dimensions().items():
        typer.echo(f"  {dimension:<10} n={v.n:<6} Accuracy {v.accuracy:5.1f}  Precision {v.precision:5.1f}  Recall {v.recall:5.1f}  F1 {v.f1:5.1f}")


@amber_app.command("generative")
def amber_generative_cmd(
    rundir: Annotated[Path, typer.Argument(help="A run --open-ended of amber_generative.jsonl.")],
    data: DataOption,
    spacy_model: Annotated[str, typer.Option(help="spaCy model of the similarity step (AMBER: en_core_web_lg; another changes the numbers).")] = "en_core_web_lg",
    similarity: Annotated[float, typer.Option(help="spaCy similarity above which two words are one (AMBER: 0.8).")] = 0.8,
    check_sha256: CheckOption = True,
    out: Annotated[Optional[Path], typer.Option(help="Folder for amber_generative.json (numbers, settings, per caption).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing amber_generative.json in --out.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """AMBER's generative CHAIR, Cover, Hal and Cog of a run's captions (the spaCy model is recorded)."""
    from halluprobe.captions.amber.data import AMBER_PINS, read_amber_annotations
    from halluprobe.captions.amber.generative import AmberGenerative, AmberGenerativeSettings, SpacySimilarity, amber_generative
    from halluprobe.captions.chair.families import NltkTools
    from halluprobe.captions.chair.scoring import MAX_CAPTION_CHARS
    from halluprobe.files import refuse_existing, refuse_non_folder, write_atomic
    from halluprobe.rundir import RunDir, sha256_file

    with errors():
        if not -1 <= similarity < 1:  # a cosine: nan, >= 1 or < -1 makes no (or every) two words one, silently
            raise InputError(f"--similarity must be a number from -1 up to (not including) 1 (AMBER: 0.8), not {similarity:g}")
        if out is not None:  # checked before any input is read
            refuse_existing(refuse_non_folder(out) / GENERATIVE_FILE, overwrite=overwrite)
        annotations = read_amber_annotations(data / "annotations.json", check_sha256=check_sha256)
        files = {"relation.json": data / "relation.json", "safe_words.txt": data / "safe_words.txt"}
        for name, path in files.items():
            if not path.is_file():
                raise InputError("AMBER file not found", path)
            if check_sha256 and sha256_file(path) != AMBER_PINS[f"data/{name}"]:
                raise InputError("sha256 differs from AMBER commit 5e1fd52f8ea6's (pass --no-check-sha256 to use it anyway)", path)
        try:
            association = loads(files["relation.json"].read_text(encoding="utf-8"))
        except ValueError as err:
            raise InputError(f"not a JSON file: {err}", files["relation.json"]) from None
        safe_words = [line.split("\n")[0] for line in files["safe_words.txt"].read_text(encoding="utf-8").splitlines()]
        run = RunDir(rundir)
        header = run.read_header()
        if not header.open_ended:
            raise InputError("a run of yes/no answers: AMBER's generative metrics read captions (run amber_generative.jsonl --open-ended)", run.header_path)
        captions = []
        for line, sample in enumerate(run.read_samples(), start=1):
            if not 1 <= sample.question_id <= len(annotations) or annotations[sample.question_id - 1].type != "generative":
                raise InputError(f"sample question_id {sample.question_id} is not a generative AMBER id", run.samples_path)
            text = "" if sample.error else (sample.text or "")
            if len(text) > MAX_CAPTION_CHARS:
                raise InputError(f"a caption of {len(text):,} characters is over the limit of {MAX_CAPTION_CHARS:,}", run.samples_path, line)
            captions.append((sample.question_id, text))
        tools = NltkTools()
        sim = SpacySimilarity(spacy_model, similarity)
        try:
            numbers, per_caption = amber_generative(captions, annotations, association, safe_words, tools, sim)
        except TimeoutError:
            raise InputError("a caption could not be split into words in time (NLTK's regex time guard)", run.samples_path) from None
        settings = AmberGenerativeSettings(commit="5e1fd52f8ea6", similarity=sim.identity, tools=tools.identity, run=str(rundir),
                                           max_new_tokens=header.max_new_tokens)  # fmt: skip
        result = AmberGenerative(numbers=numbers, settings=settings, captions=tuple(per_caption))
        if out is not None:
            write_atomic(out / GENERATIVE_FILE, json.dumps(result.model_dump(mode="json"), indent=1) + "\n")
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json", exclude={"captions"}), indent=2))
        return
    shown = {"CHAIR": numbers.chair, "Cover": numbers.cover, "Hal": numbers.hal, "Cog": numbers.cog}
    typer.echo("AMBER generative: " + "  ".join(f"{k} {v:.1f}" for k, v in shown.items()) + f"  (n={numbers.n})")
    typer.echo(f"similarity: {sim.identity}" + ("" if spacy_model == "en_core_web_lg" else " -- AMBER used en_core_web_lg: not comparable"))
