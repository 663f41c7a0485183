"""PROVE verbs: open questions, free-form answers scored on scene graphs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from halluprobe.cli._app import app, errors
from halluprobe.cli._backend import BackendSpec, with_backend, with_secondary_backend
from halluprobe.errors import InputError
from halluprobe.formatting import format_percent

__all__ = ["prove_app"]

prove_app = typer.Typer(help="PROVE: open questions, scored programmatically on scene graphs.", no_args_is_help=True)
app.add_typer(prove_app, name="prove")


@prove_app.command("questions")
def prove_questions_cmd(
    data: Annotated[Path, typer.Option(help="PROVE file (JSON array or JSON Lines).")],
    out: Annotated[Path, typer.Option(help="Benchmark JSON Lines for `halluprobe run --open-ended`.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output file.")] = False,
) -> None:
    """Write PROVE's questions as benchmark lines (question_id = record index) for `halluprobe run --open-ended`.

    Each line is an open question ("kind": "open", "prove_id": the PROVE question id); its yes/no
    label is a placeholder that nothing scores: a run over these lines must be --open-ended, and
    `halluprobe score` / `audit` refuse such a run. Score it with `halluprobe prove score`.
    """
    from halluprobe.benchmarks.prove.data import open_questions, read_prove
    from halluprobe.benchmarks.question_file import write_questions

    with errors():
        items = read_prove(data)
        if out.exists() and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", out)
        write_questions(out, open_questions(items, source=data))
    typer.echo(f"{out}: {len(items)} open questions")


@prove_app.command("score")
@with_secondary_backend("entail", dest="entail_spec", label="visual entailment (off unless --entail-model)")
@with_secondary_backend("extractor", dest="extractor_spec", label="--extractor lm")
def prove_score_cmd(
    data: Annotated[Path, typer.Option(help="PROVE file (JSON array or JSON Lines).")],
    responses: Annotated[Path, typer.Option(help="Run directory, or a JSON / JSON Lines file of {question_id, response}.")],
    out: Annotated[Path, typer.Option(help="Directory for scores.jsonl and summary.json.")],
    embedder: Annotated[str, typer.Option(help="SentenceTransformer name or path (default: the bundled all-MiniLM-L6-v2).")] = "all-MiniLM-L6-v2",
    match_threshold: Annotated[float, typer.Option(help="tscore: a response tuple below this text similarity may be confirmed visually.")] = 0.7,
    entail_threshold: Annotated[float, typer.Option(help="p_yes (dynamic readout) at or above which a tuple counts as seen.")] = 0.5,
    images: Annotated[Optional[Path], typer.Option(help="Images root (visual entailment only).")] = None,
    extractor: Annotated[str, typer.Option(help="Response tuples: 'spacy' (offline rules) or 'lm' (a model through a backend).")] = "spacy",
    extractor_image: Annotated[Optional[Path], typer.Option(help="--extractor lm: image shown to a VLM with the text prompt.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the tuple-extraction cache.")] = False,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples (by image) for the CIs.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    entail_spec: Optional[BackendSpec] = None,
    extractor_spec: Optional[BackendSpec] = None,
) -> None:
    """hscore and tscore of free-form responses; response tuples from the file, else extracted."""
    from halluprobe.benchmarks.prove.data import read_prove
    from halluprobe.benchmarks.prove.evaluate import read_responses, score_responses, write_scores
    from halluprobe.benchmarks.prove.extraction import LMExtractor, SpacyExtractor, TupleCache
    from halluprobe.benchmarks.prove.scoring import BackendEntailment, SentenceEmbedder, summarize
    from halluprobe.files import refuse_non_folder

    with errors():
        refuse_non_folder(out)  # a file or a dangling link at --out: one line before any work
        items = read_prove(data)
        answers = read_responses(responses, items)
        tuple_extractor: Any
        if extractor == "spacy":
            tuple_extractor = SpacyExtractor()
        elif extractor == "lm":
            if extractor_spec is None or extractor_image is None:
                raise InputError("--extractor lm needs --extractor-model and --extractor-image")
            tuple_extractor = LMExtractor(extractor_spec.load(), image_path=str(extractor_image), backend_name=extractor_spec.backend)
        else:
            raise InputError(f"--extractor must be 'spacy' or 'lm', not {extractor!r}")
        entail = None
        if entail_spec is not None:
            if images is None:
                raise InputError("--entail-model needs --images")
            entail = BackendEntailment(entail_spec.load(), images)
        scores = score_responses(
            items,
            answers,
            SentenceEmbedder(embedder),
            tuple_extractor,
            cache=None if no_cache else TupleCache(),
            entailment=entail,
            match_threshold=match_threshold,
            entail_threshold=entail_threshold,
        )
        settings = {
            "embedder": embedder,
            "extractor": tuple_extractor.identity,
            "match_threshold": match_threshold,
            "entailment": None if entail_spec is None else {"backend": entail_spec.backend, "model": entail_spec.model, "threshold": entail_threshold},
            "data": str(data),
            "responses": str(responses),
        }
        summary = summarize(scores, n_resamples=bootstrap, seed=seed, settings=settings)
        write_scores(out, scores, summary, overwrite=overwrite)
    if as_json:
        typer.echo(summary.model_dump_json(indent=2))
        return

    hscore = format_percent(summary.hscore, summary.ci.get("hscore"), digits=2, missing="n/a")
    tscore = format_percent(summary.tscore, summary.ci.get("tscore"), digits=2, missing="n/a")
    typer.echo(f"hscore {hscore} (n={summary.n_hscore})")
    typer.echo(f"tscore {tscore} (n={summary.n_tscore})")
    typer.echo(f"errors {summary.errors} of {summary.n}; correlation(h, t) pearson {summary.correlation.get('pearson')}")
    typer.echo(f"{out}: scores.jsonl, summary.json")


@prove_app.command("build")
@with_backend
def prove_build_cmd(
    spec: BackendSpec,
    captions: Annotated[Path, typer.Option(help='Captions and scene graphs: JSON / JSON Lines of {"image", "caption", "tuples"}.')],
    images: Annotated[Path, typer.Option(help="Images root the captions' image paths are relative to.")],
    out: Annotated[Path, typer.Option(help="Directory for prove.jsonl, dropped.jsonl and build.json.")],
    template: Annotated[Optional[str], typer.Option(help="Prompt template (as for run).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Length cap of the model's answer.")] = 1024,
    dup_threshold: Annotated[float, typer.Option(help="Drop a question this similar (cosine) to one kept for the same image.")] = 0.9,
    embedder: Annotated[str, typer.Option(help="SentenceTransformer for near-duplicate questions.")] = "all-MiniLM-L6-v2",
    overwrite: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
) -> None:
    """PROVE construction: LM question/answer pairs kept only when their sandboxed program returns the answer."""
    from halluprobe.benchmarks.prove.build import ANSWERS_FILE, build_outputs, build_prove, read_captions, write_build
    from halluprobe.benchmarks.prove.extraction import SpacyExtractor
    from halluprobe.benchmarks.prove.scoring import SentenceEmbedder
    from halluprobe.files import refuse_non_folder

    with errors():
        refuse_non_folder(out)  # a file or a dangling link at --out: one line before the model loads
        records = read_captions(captions)
        build_outputs(out, overwrite=overwrite)  # refused before the model runs (write_build checks again)
        engine = spec.load()
        result = build_prove(
            records, engine, images_root=images, embedder=SentenceEmbedder(embedder), extractor=SpacyExtractor(),
            template=template, max_new_tokens=max_new_tokens, dup_threshold=dup_threshold,
            answers_path=out / ANSWERS_FILE,  # each answer kept as it arrives: a restarted build asks only the rest
        )  # fmt: skip
        settings = {"model": spec.model, "backend": spec.backend, "dup_threshold": dup_threshold, "embedder": embedder}
        write_build(out, result, settings, overwrite=overwrite)
    typer.echo(" ".join(f"{k}={v}" for k, v in result.counts().items()))
    typer.echo(f"{out}: prove.jsonl, dropped.jsonl, build.json")
