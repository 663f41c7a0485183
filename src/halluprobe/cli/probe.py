"""Auto-Probe verbs: questions from the objects a model itself hallucinates."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from halluprobe.cli._app import app, errors, progress
from halluprobe.cli._backend import BackendSpec, with_backend, with_secondary_backend
from halluprobe.errors import RuntimeFailure

__all__ = ["probe_app"]

probe_app = typer.Typer(help="Auto-Probe: questions from objects the model itself hallucinates.", no_args_is_help=True)
app.add_typer(probe_app, name="probe")


@probe_app.command("induce")
@with_backend
def probe_induce(
    spec: BackendSpec,
    images: Annotated[Path, typer.Option(help="Folder of images to describe.")],
    prompts: Annotated[Path, typer.Option(help="Prompt-set TOML file (system, prompts, epochs, json_mode...).")],
    out: Annotated[Path, typer.Option(help="Descriptions JSON Lines file (append-only; resumed).")],
) -> None:
    """Describe every image with hallucination-inducing prompts; descriptions go to a JSONL file."""
    from halluprobe.benchmarks.autoprobe.induction import induce, list_images, load_prompt_set
    from halluprobe.files import refuse_non_file

    with errors():
        refuse_non_file(out)  # appending through a dangling link would write wherever it points
        prompt_set = load_prompt_set(prompts)
        list_images(images)  # bad input before the model loads
        engine = spec.load()
        with progress("descriptions") as bar:
            result = induce(engine, images, prompt_set, out, backend_name=spec.backend, model=spec.model, progress=bar)
    typer.echo(f"{result.written} description(s) written to {result.path} ({result.skipped} already there, {result.errors} error(s))")


@probe_app.command("build")
@with_backend
@with_secondary_backend("extractor", dest="extractor_options", label="--extractor llm:BACKEND:MODEL", model_from="--extractor")
@with_secondary_backend("attribait", dest="attribait_options", label="--attribait llm:BACKEND:MODEL", model_from="--attribait")
def probe_build(
    spec: BackendSpec,
    images: Annotated[Path, typer.Option(help="Folder of images.")],
    detector: Annotated[str, typer.Option(help="OWLv2 / OWL-ViT detector: local folder or hub id.")],
    out: Annotated[Path, typer.Option(help="Output folder (descriptions are resumed; the rest is rewritten).")],
    prompts: Annotated[Optional[Path], typer.Option(help="Prompt-set TOML file (default: one detailed-description prompt).")] = None,
    extractor: Annotated[str, typer.Option(help="'spacy' (offline noun chunks) or 'llm:BACKEND:MODEL'.")] = "spacy",
    attribait: Annotated[str, typer.Option(help="Who writes AttriBait questions: 'model' (the model under test), 'llm:BACKEND:MODEL' or 'none'.")] = "model",
    t_high: Annotated[float, typer.Option(help="Detector score at or above which an object is present.")] = 0.3,
    t_low: Annotated[float, typer.Option(help="Detector score below which an object is hallucinated.")] = 0.1,
    max_retries: Annotated[int, typer.Option(help="Re-asks of a model whose JSON answer is invalid.")] = 2,
    extractor_options: Optional[Callable[[str, str], BackendSpec]] = None,
    attribait_options: Optional[Callable[[str, str], BackendSpec]] = None,
) -> None:
    """Induce, extract, clean, detect, and write existence + AttriBait questions with a manifest."""
    from halluprobe.benchmarks.autoprobe.build import ProbeBuildConfig, build_probe, parse_llm_spec
    from halluprobe.benchmarks.autoprobe.detector import OwlDetector, check_thresholds
    from halluprobe.benchmarks.autoprobe.induction import PromptSet, list_images, load_prompt_set
    from halluprobe.files import refuse_non_folder

    with errors():
        refuse_non_folder(out)  # a file or a dangling link at --out: one line before the models load
        prompt_set = load_prompt_set(prompts) if prompts is not None else PromptSet(name="default", prompts=[_DEFAULT_PROBE_PROMPT])
        list_images(images)
        # the llm's backend and model from llm:BACKEND:MODEL, its other options from its own flags
        assert extractor_options is not None and attribait_options is not None
        extractor_spec = None if extractor == "spacy" else extractor_options(*parse_llm_spec(extractor))
        attribait_spec = None if attribait in ("none", "model") else attribait_options(*parse_llm_spec(attribait))
        check_thresholds(t_high=t_high, t_low=t_low)
        config = ProbeBuildConfig(images=images, out=out, prompt_set=prompt_set, backend=spec.backend, model=spec.model,
                                  extractor=extractor, attribait=attribait, detector=detector, t_high=t_high,
                                  t_low=t_low, max_retries=max_retries)  # fmt: skip
        engine = spec.load()
        extractor_engine = extractor_spec.load() if extractor_spec else None
        attribait_engine = attribait_spec.load() if attribait_spec else None
        try:
            owl = OwlDetector(detector, local_files_only=Path(detector).exists())
        except OSError as err:
            raise RuntimeFailure(f"cannot load detector {detector!r}: {str(err).strip().splitlines()[0]}") from None
        with progress("descriptions") as bar:
            result = build_probe(config, model_backend=engine, detector=owl, extractor_backend=extractor_engine,
                                 attribait_backend=attribait_engine, progress=bar)  # fmt: skip
    counts = result.counts
    typer.echo(
        f"{counts['existence_questions']} existence question(s) ({counts['present']} present, {counts['hallucinated']} hallucinated), "
        f"{counts['attribait_questions']} AttriBait question(s); {counts['dropped_cleaning']} object(s) dropped by cleaning, "
        f"{counts['dropped_uncertain']} uncertain, {counts['dropped_unreadable']} on unreadable images; manifest: {out / 'manifest.json'}"
    )


@probe_app.command("choice")
@with_backend
def probe_choice(
    spec: BackendSpec,
    questions: Annotated[Path, typer.Option(help="AttriBait multiple-choice file (autoprobe_attribait.jsonl).")],
    images: Annotated[Path, typer.Option(help="Images root the questions' image names are relative to.")],
    out: Annotated[Path, typer.Option(help="JSON Lines file of answered questions (refused if it exists, unless --overwrite).")],
    template: Annotated[Optional[str], typer.Option(help="Prompt template for render_prompt (default: the model's chat template).")] = None,
    top_k: Annotated[int, typer.Option(help="First-token alternatives read for the letter scores.")] = 50,
    existence_run: Annotated[Optional[Path], typer.Option(help="Run dir of the existence questions: adds the consistency table.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False,
) -> None:
    """Answer AttriBait questions: letter logit and text readouts, accuracy, and the consistency table."""
    from halluprobe.benchmarks.autoprobe.choice import run_choice
    from halluprobe.readouts.tokensets import derive_letter_sets, load_tokenizer

    def load() -> tuple[Any, Optional[dict[str, list[int]]]]:
        engine = spec.load()
        sets = engine.token_sets()
        # ids from the model's own tokenizer; a backend reporting pieces (or none) classifies pieces
        by_id = spec.backend == "hf" and sets is not None and sets.keyed_by == "id"
        return engine, derive_letter_sets(load_tokenizer(spec.model)) if by_id else None

    with errors():
        result = run_choice(load, questions, images, out, template=template, top_k=top_k, existence_run=existence_run, overwrite=overwrite)
    typer.echo(json.dumps(result, indent=2))


_DEFAULT_PROBE_PROMPT = "Describe this image in detail, including every object you can see, even small or partly hidden ones."
