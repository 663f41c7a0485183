"""CHAIR verbs: ``build chair`` (open questions on a 500-image list) and ``chair`` (score
captions in one or both normaliser families, with CIs and paired differences)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from halluprobe.cli._app import MAX_RESAMPLES, ResamplesOption, SeedOption, app, build_app, errors, refuse_over_limit
from halluprobe.errors import InputError
from halluprobe.files import refuse_existing, refuse_non_folder
from halluprobe.rundir import refuse_run_file

__all__ = ["build_chair_cmd", "chair_cmd", "chair_outputs"]

DEFAULT_PROMPT = "Please describe this image in detail."


@build_app.command("chair")
def build_chair_cmd(
    image_list: Annotated[
        str,
        typer.Option(
            "--list",
            help="chair500-lim, chair500-opera, or a file of {image_id} / {image} lines.",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Question file (JSON Lines) for `halluprobe run --open-ended`."
        ),
    ],
    prompt: Annotated[
        str,
        typer.Option(help="The captioning prompt (it moves CHAIR: it is recorded)."),
    ] = DEFAULT_PROMPT,
    images: Annotated[
        Path | None,
        typer.Option(
            help="Images folder: every image of the list must be in it (checked now)."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing output file.")
    ] = False,
) -> None:
    """Write one open question per image of a CHAIR list; run it with `halluprobe run --open-ended`."""
    from halluprobe.benchmarks.question_file import write_questions
    from halluprobe.captions.chair.lists import (
        chair_questions,
        missing_images,
        read_image_list,
    )

    with errors():
        chosen = read_image_list(image_list)
        if images is not None:
            missing = missing_images(chosen, images)
            if missing:
                raise InputError(
                    f"{len(missing)} images of {chosen.name} are not in the folder, e.g. {missing[0]}",
                    images / missing[0],
                )
        refuse_run_file(out, "--out")  # not even with --overwrite: a run's header or samples
        refuse_existing(out, overwrite=overwrite)
        write_questions(out, chair_questions(chosen, prompt))
    typer.echo(
        f"{out}: {len(chosen.ids)} open questions on {chosen.name} ({chosen.source})"
    )


@app.command("chair")
def chair_cmd(
    captions: Annotated[
        Path,
        typer.Argument(
            help="Run dir of open answers (or a caption file: see --format)."
        ),
    ],
    family: Annotated[
        str,
        typer.Option(
            help="lemmatizer (OPERA's chair.py), singularize (the original), or both."
        ),
    ] = "both",
    tokenizer: Annotated[
        str,
        typer.Option(
            help="How captions are split into words: punkt (nltk word_tokenize, as the evaluators) or line "
            "(the Treebank tokenizer on the whole caption: no punkt data; a non-final full stop stays on its word)."
        ),
    ] = "punkt",
    ground_truth: Annotated[
        Path | None,
        typer.Option(
            help="Object lines {image_id|image, objects} or a saved ground truth (default: shipped for the standard lists)."
        ),
    ] = None,
    coco: Annotated[
        Path | None,
        typer.Option(
            help="COCO's annotations_trainvalYEAR.zip, or the folder of its instances_/captions_ files: build the ground truth from them."
        ),
    ] = None,
    year: Annotated[
        str,
        typer.Option(
            help="COCO annotation year for --coco: 2014 (most papers) or 2017 (PAI, SPIN)."
        ),
    ] = "2014",
    coco_sha256: Annotated[
        str | None,
        typer.Option(help="Pin for --coco given as COCO's annotations zip: its sha256 (a differing zip is refused)."),
    ] = None,
    truncate_incomplete: Annotated[
        bool,
        typer.Option(
            "--truncate-incomplete",
            help="Drop what follows each caption's last full stop (OPERA's short-caption protocol).",
        ),
    ] = False,
    against: Annotated[
        Path | None,
        typer.Option(
            help="A second run on the same images: paired differences (this - that) with CIs."
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="For a caption file: opera, llava-captions or lmms-eval-chair.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder for chair_summary.json and chair_<family>.jsonl (per caption)."
        ),
    ] = None,
    bootstrap: ResamplesOption = 1000,
    seed: SeedOption = 0,
    overwrite: Annotated[
        bool, typer.Option(help="Replace existing output files.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON.")
    ] = False,
) -> None:
    """CHAIR_s, CHAIR_i, recall and length of captions, per normaliser family, with image-bootstrap CIs."""
    from halluprobe.audit.overlap import chair_overlap_lines
    from halluprobe.audit.table import bootstrap_settings
    from halluprobe.captions.chair.evaluate import chair_results
    from halluprobe.captions.chair.families import counting_options, family_named
    from halluprobe.captions.chair.held_out import chair_held_out
    from halluprobe.captions.chair.inputs import caption_source, ground_truth_for, read_captions
    from halluprobe.captions.chair.scoring import caption_lines, paired_comparison, score_captions
    from halluprobe.files import write_atomic
    from halluprobe.formatting import format_ratio
    from halluprobe.rundir import RunDir

    with errors():
        refuse_over_limit("--bootstrap", bootstrap, MAX_RESAMPLES)
        names = list(counting_options(family, tokenizer, allow_both=True)[0])
        outputs = chair_outputs(names, with_ground_truth=coco is not None)
        if out is not None:  # every file the verb writes is checked before any input is read
            refuse_non_folder(out)
            for name in outputs.values():
                refuse_existing(out / name, overwrite=overwrite)
        caps, settings = read_captions(captions, fmt)
        other = read_captions(against, fmt)[0] if against is not None else None
        truths = {name: ground_truth_for(name, ground_truth, coco, year, coco_sha256, tokenizer=tokenizer) for name in names}
        results, per_caption = chair_results(caps, settings, names, truths.__getitem__, truncate=truncate_incomplete,
                                             n_resamples=bootstrap, seed=seed, tokenizer=tokenizer)  # fmt: skip
        if other is not None:
            results = results.with_paired({
                name: paired_comparison(per_caption[name], score_captions(other, truth, family_named(name, tokenizer=tokenizer),
                                                                          truncate=truncate_incomplete),
                                        str(against), n_resamples=bootstrap, seed=seed)
                for name, truth in truths.items()
            })  # fmt: skip
        runs_images = [x.image for x in RunDir(captions).read_samples()] if captions.is_dir() and not as_json else None
        held = None if as_json else chair_held_out(results, per_caption, names=runs_images, n_resamples=bootstrap, seed=seed)
        summary_json = json.dumps(results.model_dump(mode="json"), indent=2, ensure_ascii=False)
        if out is not None:
            from halluprobe.report.chair import chair_latex_table, chair_section

            if coco is not None:  # built from the annotations: cached as small JSON for --ground-truth
                for name, truth in truths.items():
                    truth.save(out / outputs[f"ground_truth:{name}"])
            for name, scores in per_caption.items():
                write_atomic(out / outputs[f"captions:{name}"], caption_lines(scores))
            write_atomic(out / outputs["summary"], summary_json + "\n")
            source = caption_source(captions)
            used = bootstrap_settings(bootstrap, seed)
            write_atomic(out / outputs["report"], chair_section(results, per_caption, source, bootstrap=used))
            write_atomic(out / outputs["table"], chair_latex_table(results, source, bootstrap=used))
    if as_json:
        typer.echo(summary_json)
        return
    for name, entry in results.families.items():
        s = entry.summary
        cells = [f"{m} {format_ratio(s.value(m), getattr(s.ci, m), digits=1, ci_digits=1, scale=100 if m != 'length' else 1, missing='n/a')}"
                 for m in ("chair_s", "chair_i", "recall", "length")]  # fmt: skip
        typer.echo(f"{name}: n={s.n} " + "  ".join(cells))
        for metric, d in entry.paired.metrics().items() if entry.paired is not None else ():
            if d.diff is not None:
                scale = 1 if metric == "length" else 100
                typer.echo(f"  {metric} - against: {format_ratio(d.diff, d.ci, digits=1, ci_digits=1, scale=scale)}")
    if held is not None:  # captions of COCO images: how many are train2017, CHAIR over val2017's alone
        for line in chair_overlap_lines(held):
            typer.echo(line)
    gt = results.families[names[0]].summary.settings.ground_truth
    typer.echo(f"ground truth: {gt.source if gt else None}{' ' + gt.year if gt and gt.year else ''}; prompt: {settings.prompt}; "
               f"max_new_tokens: {settings.max_new_tokens}; truncate_incomplete: {truncate_incomplete}")  # fmt: skip
    if out is not None:
        typer.echo(
            f"{out}: chair_summary.json, chair_report.md, chair_table.tex, "
            + ", ".join(f"chair_{n.removeprefix('chair@')}.jsonl" for n in names)
        )


def chair_outputs(families: list[str], *, with_ground_truth: bool) -> dict[str, str]:
    """Every file ``chair --out`` writes, by role: checked all together before any is written."""
    short = [name.removeprefix("chair@") for name in families]
    return {
        "summary": "chair_summary.json", "report": "chair_report.md", "table": "chair_table.tex",
        **{f"captions:{name}": f"chair_{s}.jsonl" for name, s in zip(families, short)},
        **({f"ground_truth:{name}": f"ground_truth_{s}.json" for name, s in zip(families, short)} if with_ground_truth else {}),
    }  # fmt: skip
