"""Verbs for MME and HallusionBench: build their question files, fetch HallusionBench's pinned
file, and print their own scores for a run (every readout side by side)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from halluprobe.cli._app import MAX_RESAMPLES, ResamplesOption, SeedOption, app, build_app, data_app, errors, refuse_over_limit
from halluprobe.errors import InputError

if TYPE_CHECKING:  # the verbs import the library inside themselves (a fast --help)
    from halluprobe.benchmarks.mme import MmeLine
    from halluprobe.records import Question

__all__ = ["build_hallusionbench_cmd", "build_mme_cmd", "data_hallusionbench_cmd", "hallusionbench_cmd", "mme_cmd"]

_MME_READOUTS = ("dynamic", "text:mme", "text:mme@lmms-eval", "text:strict")
_HB_READOUTS = ("dynamic", "text:strict", "text:hallusionbench@vlmevalkit", "text:hallusionbench@evalscope")


def _write_question_files(by_split: dict[str, list[Question]], out: Path, overwrite: bool) -> list[Path]:
    from halluprobe.benchmarks.question_file import write_questions
    from halluprobe.files import plain_component, refuse_outputs

    paths = {split: out / f"{plain_component(split, 'split')}.jsonl" for split in by_split}
    refuse_outputs(paths.values(), overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    return [write_questions(paths[split], questions) for split, questions in by_split.items()]


@build_app.command("mme")
def build_mme_cmd(
    out: Annotated[Path, typer.Option(help="Directory for one question file per subtask (<subtask>.jsonl).")],
    release: Annotated[
        Optional[Path], typer.Option(help="MME's release folder (subtask folders of images and question .txt files); also the --images root of `run`.")
    ] = None,
    eval_tool: Annotated[
        Optional[Path], typer.Option(help="A folder of the eval tool's <subtask>.txt files (image, question, answer[, response]), in their line order.")
    ] = None,
    parquet: Annotated[
        Optional[list[Path]],
        typer.Option(help="lmms-lab/MME's parquet files, or a folder of them (repeatable): the images are written to OUT/images, the --images root of `run`."),
    ] = None,
    subtask: Annotated[Optional[list[str]], typer.Option(help="Only these subtasks (repeatable; default: every one present).")] = None,
    hallucination: Annotated[bool, typer.Option("--hallucination", help="Only the hallucination subsets: existence, count, position, color.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace existing question files (and, with --parquet, images).")] = False,
) -> None:
    """Write MME's questions as question files `run` executes like POPE's (two per image, in the eval tool's order)."""
    from halluprobe.benchmarks.mme import COGNITION, HALLUCINATION, PERCEPTION, mme_questions, read_eval_tool_file, read_parquet, read_release_folder

    with errors():
        if release is None and eval_tool is None and not parquet:
            raise InputError("give --release DIR (the release folder), --eval-tool DIR (with --release to find the images), or --parquet FILE_OR_DIR")
        if parquet and (release is not None or eval_tool is not None):
            raise InputError("--parquet holds the questions and the images: drop --release and --eval-tool")
        if hallucination and subtask:
            raise InputError("--hallucination names the subtasks itself: drop --subtask (or --hallucination)")
        chosen = HALLUCINATION if hallucination else (tuple(subtask) if subtask else None)
        if parquet:
            paths = _parquet_build(read_parquet(parquet, chosen), out, overwrite)
            for path in paths:
                typer.echo(str(path))
            return
        if eval_tool is not None:
            if not eval_tool.is_dir():
                raise InputError("the eval tool's folder is not a directory", eval_tool)
            names = chosen or tuple(s for s in (*PERCEPTION, *COGNITION) if (eval_tool / f"{s}.txt").is_file())
            if not names:
                raise InputError("no <subtask>.txt of MME's subtasks in it", eval_tool)
            lines = {s: read_eval_tool_file(eval_tool / f"{s}.txt", images_root=release, results=None) for s in names}
        else:
            lines = read_release_folder(release, chosen)  # type: ignore[arg-type]
        by_split = {s: mme_questions(found) for s, found in lines.items()}
        paths = _write_question_files(by_split, out, overwrite)
    for path in paths:
        typer.echo(str(path))


def _parquet_build(lines: dict[str, list[MmeLine]], out: Path, overwrite: bool) -> list[Path]:
    """Question files and OUT/images from lmms-lab's parquet: every output refused before any write."""
    from halluprobe.benchmarks.mme import mme_questions, write_parquet_images
    from halluprobe.files import plain_component, refuse_outputs

    by_split = {s: mme_questions(found) for s, found in lines.items()}
    images = out / "images"
    every = [line for found in lines.values() for line in found]
    targets = dict.fromkeys(images / line.image for line in every)  # an image's two questions: one file
    refuse_outputs([*(out / f"{plain_component(s, 'split')}.jsonl" for s in by_split), *targets], overwrite=overwrite)
    written = write_parquet_images(every, images)
    typer.echo(f"{len(written)} image(s) in {images} (the --images folder of `run`)", err=True)
    return _write_question_files(by_split, out, overwrite=True)  # refused above, with the images


def _hallusion_files(questions_file: Path, out: Path, images: Optional[Path], overwrite: bool) -> list[Path]:
    from halluprobe.benchmarks.hallusionbench import hallusion_questions, missing_figures

    found = hallusion_questions(questions_file)
    if images is not None:
        missing = missing_figures(found, images)
        if missing:
            raise InputError(f"{len(missing)} figure(s) missing from the images folder, e.g. {', '.join(missing[:3])}", images)
    paths = _write_question_files(found.by_split, out, overwrite)
    typer.echo(f"{found.without_figure} question(s) without a figure left out (a backend answers about an image)", err=True)
    return paths


@build_app.command("hallusionbench")
def build_hallusionbench_cmd(
    questions: Annotated[Path, typer.Option(help="HallusionBench.json (tianyi-lab/HallusionBench).")],
    out: Annotated[Path, typer.Option(help="Directory for one question file per category and subcategory.")],
    images: Annotated[Optional[Path], typer.Option(help="Folder of the figures (<category>/<subcategory>/<set>_<figure>.png): every one is checked.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace existing question files.")] = False,
) -> None:
    """Write HallusionBench's questions (those with a figure) as question files, split per category and subcategory."""
    with errors():
        paths = _hallusion_files(questions, out, images, overwrite)
    for path in paths:
        typer.echo(str(path))


@data_app.command("hallusionbench")
def data_hallusionbench_cmd(
    out: Annotated[Path, typer.Option(help="Directory for the question files.")],
    images: Annotated[Optional[Path], typer.Option(help="Folder of the figures (the authors' archive, unpacked): checked, not fetched.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace existing question files.")] = False,
    judge_script: Annotated[bool, typer.Option("--judge-script", help="Also fetch the official utils.py (pinned; `hallusion judge` reads its prompt).")] = False,
) -> None:
    """Fetch HallusionBench.json at the authors' commit (pinned sha256, cached) and write its question files."""
    from halluprobe.benchmarks.dataset_files import fetch_source
    from halluprobe.benchmarks.hallusionbench import HALLUSIONBENCH_JUDGE_SCRIPT, HALLUSIONBENCH_SOURCE

    with errors():
        cached = fetch_source(HALLUSIONBENCH_SOURCE)
        script = fetch_source(HALLUSIONBENCH_JUDGE_SCRIPT) if judge_script else None
        paths = _hallusion_files(cached, out, images, overwrite)
    if script is not None:
        typer.echo(f"{script}: the judge prompt's script (pinned)", err=True)
    for path in paths:
        typer.echo(str(path))


@app.command("mme")
def mme_cmd(
    rundir: Annotated[Path, typer.Argument(help="Run directory of MME questions (`build mme`).")],
    readout: Annotated[Optional[list[str]], typer.Option(help=f"Readout (repeatable; default: {', '.join(_MME_READOUTS)} where the run has them).")] = None,
    compat: Annotated[str, typer.Option(help="How questions group into images: official (calculation.py's line pairs), lmms-eval, vlmevalkit.")] = "official",
    results_out: Annotated[Optional[Path], typer.Option(help="Also write the eval tool's <subtask>.txt results files (the stored text) here.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace existing --results-out files.")] = False,
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """MME's accuracy, accuracy+ and score per subtask, and the hallucination subtotal, for each readout."""
    from halluprobe.benchmark_scores import mme_run_scores, render_mme, scores_json, write_mme_results
    from halluprobe.metrics.mme import MME_GROUPINGS

    with errors():
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)
        if compat not in MME_GROUPINGS:
            raise InputError(f"unknown --compat {compat!r}; known: {', '.join(MME_GROUPINGS)}")
        names = readout or _available(rundir, _MME_READOUTS)
        results = mme_run_scores(rundir, names, grouping=compat, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
        written = write_mme_results(rundir, results_out, overwrite=overwrite) if results_out is not None else []
    typer.echo(json.dumps(scores_json(results), indent=2) if as_json else render_mme(results))
    for path in written:
        typer.echo(str(path), err=True)


@app.command("hallusionbench")
def hallusionbench_cmd(
    rundir: Annotated[Path, typer.Argument(help="Run directory of HallusionBench questions (`build hallusionbench`).")],
    readout: Annotated[Optional[list[str]], typer.Option(help=f"Readout (repeatable; default: {', '.join(_HB_READOUTS)} where the run has them).")] = None,
    compat: Annotated[str, typer.Option(help="How questions group into figures and question variants: official (utils.py), vlmevalkit, evalscope.")] = "official",
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """HallusionBench's aAcc, fAcc and qAcc per category and overall, for each rule-based readout."""
    from halluprobe.benchmark_scores import hallusion_run_scores, render_hallusion, scores_json
    from halluprobe.metrics.hallusionbench import HALLUSION_GROUPINGS

    with errors():
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)
        if compat not in HALLUSION_GROUPINGS:
            raise InputError(f"unknown --compat {compat!r}; known: {', '.join(HALLUSION_GROUPINGS)}")
        names = readout or _available(rundir, _HB_READOUTS)
        results = hallusion_run_scores(rundir, names, grouping=compat, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
    typer.echo(json.dumps(scores_json(results), indent=2) if as_json else render_hallusion(results))


def _available(rundir: Path, wanted: tuple[str, ...]) -> list[str]:
    """The default readouts this run can give (a logits-only run has no text rules)."""
    from halluprobe.readouts.apply import available_readouts
    from halluprobe.scoring import read_run_samples

    _, header, samples = read_run_samples(rundir)
    have = set(available_readouts(header, samples))
    text = any(name.startswith("text:") for name in have)
    return [w for w in wanted if w in have or (text and w.startswith("text:"))]
