"""Verbs that ask a model: run, merge (of shard runs), diagnose."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from halluprobe.cli._app import ConfigOption, app, errors, progress
from halluprobe.cli._backend import BackendSpec, with_backend
from halluprobe.errors import InputError
from halluprobe.readouts.text import TEXT_RULES
from halluprobe.records import ICD_INSTRUCTION

__all__ = ["run_cmd", "merge_cmd", "diagnose_cmd"]

TemplateOption = Annotated[
    Optional[str], typer.Option(help="Prompt: 'chat' (the processor's chat template), 'llava', or a format with {question}.")
]


def _stores_text(text: bool | None, text_rules: str | None) -> bool:
    """``--text/--no-text``, or the deprecated ``--text-rules`` it replaces (any known rule:
    text; ``''``: none), with a one-line deprecation notice on stderr."""
    if text_rules is None:
        return text is not False
    print(
        "warning: --text-rules is deprecated: every text rule is applied at score time; "
        "use --text (the default) or --no-text",
        file=sys.stderr,
    )
    rules = [r.strip() for r in text_rules.split(",") if r.strip()]
    unknown = [r for r in rules if r not in TEXT_RULES]
    if unknown:
        raise InputError(f"unknown text rule {unknown[0]!r}; known: {', '.join(TEXT_RULES)}")
    if text is not None and text != bool(rules):
        raise InputError(f"--{'' if text else 'no-'}text and --text-rules {text_rules!r} contradict each other")
    return bool(rules)


def _split_signals(text: str) -> tuple[str, ...]:
    """``noised,layers:0;2`` -> ("noised", "layers:0,2"): commas separate signals, so a signal's
    own list (early layers) is written with semicolons."""
    return tuple(s.strip().replace(";", ",") for s in text.split(",") if s.strip())


@app.command("run")
@with_backend
def run_cmd(
    spec: BackendSpec,
    benchmark: Annotated[list[Path], typer.Option(help="Benchmark file (repeatable); *_pope_{split}.json gives split {split}.")],
    images: Annotated[Path, typer.Option(envvar="HALLUPROBE_IMAGES", help="Images root the benchmark's image paths are relative to.")],
    out: Annotated[Path, typer.Option(help="Run directory to write.")],
    template: TemplateOption = None,
    text: Annotated[
        Optional[bool],
        typer.Option(
            "--text/--no-text",
            help="Store the greedy continuation (default), so that every text rule can be applied at score time; "
            "--no-text: logits only.",
        ),
    ] = None,
    text_rules: Annotated[
        Optional[str],
        typer.Option(help="Deprecated: any rule meant --text, '' meant --no-text (every rule is applied at score time).", hidden=True),
    ] = None,
    max_new_tokens: Annotated[
        int, typer.Option(min=0, help="Greedy continuation length for the text rules (open-ended: the answer's cap).")
    ] = 8,
    open_ended: Annotated[
        bool, typer.Option("--open-ended", help="Open questions (PROVE): full greedy answers, no stop at '.', no yes/no readouts.")
    ] = False,
    top_k: Annotated[int, typer.Option(min=1, help="First-token alternatives stored per sample.")] = 10,
    signals: Annotated[
        str,
        typer.Option(
            help="Comma-separated contrast passes stored per question for corrections read at score time "
            "(hf: noised, noised:STEP, layers, layers:N;M, attention:ALPHA;START;END, instruction, no-image; any backend: "
            "clip, with --clip-model): see `halluprobe corrections`."
        ),
    ] = "",
    instruction: Annotated[
        str, typer.Option(help="--signals instruction: the disturbing instruction put in front of each question (ICD's by default).")
    ] = ICD_INSTRUCTION,
    decode: Annotated[
        Optional[str],
        typer.Option(
            help="--open-ended, hf backend: decode every answer with a correction, METHOD:key=value,... "
            "(vcd:alpha=1,beta=0.1, icd:alpha=1,beta=0.1, m3id:lambda=0.02, dola:relative_top=0.1,repetition_penalty=1.2, "
            "pai:gamma=1.1,alpha=0.5,start=2,end=N; the offline rules' names and ranges, plus the loop's own: DoLa's "
            "repetition_penalty, PAI's alpha and layers [start, end))."
        ),
    ] = None,
    sample: Annotated[bool, typer.Option("--sample", help="--open-ended, hf backend: sample the answers (needs --seed).")] = False,
    temperature: Annotated[Optional[float], typer.Option(help="--sample: temperature (> 0; 1 by default).")] = None,
    top_p: Annotated[Optional[float], typer.Option(help="--sample: nucleus mass kept (0 < P <= 1).")] = None,
    sample_top_k: Annotated[
        Optional[int], typer.Option(min=1, help="--sample: draw among the K best tokens (--top-k is the first-token record's).")
    ] = None,
    seed: Annotated[Optional[int], typer.Option(help="--sample: the run's seed (each question's draws are seeded from it and its key).")] = None,
    clip_model: Annotated[
        Optional[str],
        typer.Option(
            help="--signals clip: the CLIP model (a local folder, or a hub id) whose image-object certainty the "
            "clip correction reads; recorded by halluprobe beside any backend."
        ),
    ] = None,
    clip_device: Annotated[str, typer.Option(help="--clip-model: cpu, cuda, cuda:N or auto (a GPU when there is one).")] = "auto",
    limit: Annotated[Optional[int], typer.Option(min=1, help="Only the first N questions of each split.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue an existing run dir, skipping answered questions.")] = False,
    retry_errors: Annotated[
        bool, typer.Option("--retry-errors/--keep-errors", help="With --resume: ask errored samples again.")
    ] = True,
    accept_errors: Annotated[
        bool, typer.Option("--accept-errors", help="Mark the run complete even though some samples are errors.")
    ] = False,
    force: Annotated[bool, typer.Option(help="With --resume: continue even if the header fingerprint differs.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing run dir.")] = False,
    shard: Annotated[
        Optional[str], typer.Option(help="Answer only shard I of N (I/N, 0 <= I < N; by image); `halluprobe merge` joins them.")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Run a model on benchmark files; every readout from one pass per question."""
    from halluprobe.backends.hf.decode_rules import parse_decode_spec
    from halluprobe.clip_signal import ClipScorer
    from halluprobe.run_setup import RunConfig, make_header, plan_run
    from halluprobe.runner import execute_plan
    from halluprobe.shards import parse_shard

    with errors():
        # the edge: each option's text parsed once into what the plan carries
        stores_text = _stores_text(text, text_rules)
        part = parse_shard(shard) if shard is not None else None
        cfg = RunConfig(
            model=spec.model,
            backend=spec.backend,
            template=template,
            text_rules=tuple(TEXT_RULES) if stores_text else (),
            max_new_tokens=max_new_tokens,
            top_k=top_k,
            limit=limit,
            resume=resume,
            force=force,
            overwrite=overwrite,
            shard=str(part) if part else None,
            open_ended=open_ended,
            retry_errors=retry_errors,
            accept_errors=accept_errors,
            signals=_split_signals(signals),
            instruction=instruction,
            decode=parse_decode_spec(decode) if decode is not None else None,
            sample=sample,
            temperature=temperature,
            top_p=top_p,
            sample_top_k=sample_top_k,
            seed=seed,
        )
        plan = plan_run(cfg, benchmark, images, out, shard=part, clip=clip_model is not None)  # every check before any model loads
        scorer = ClipScorer(clip_model, device=clip_device) if clip_model is not None else None
        engine = spec.load()
        header = make_header(plan.config, engine, plan.benchmarks, images, clip=scorer)
        with progress("questions") as bar:
            summary = execute_plan(plan, engine, header, progress=bar, clip=scorer)
    typer.echo(
        f"{out}: {summary.answered} answered, {summary.skipped} already done, {summary.errors} errors "
        f"(of {summary.total})"
    )
    if summary.errors_left and not accept_errors:
        typer.echo(f"{summary.errors_left} errored sample(s) left: `--resume` asks them again (not marked complete)")


@app.command("merge")
def merge_cmd(
    rundirs: Annotated[list[Path], typer.Argument(help="Run directories of the shards (`halluprobe run --shard I/N`).")],
    out: Annotated[Path, typer.Option(help="Run directory to write.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing run dir at --out.")] = False,
) -> None:
    """Merge shard run dirs into one: same header fingerprint, every question exactly once."""
    from halluprobe.shards import merge_rundirs

    with errors():
        summary = merge_rundirs(rundirs, out, overwrite=overwrite)
    typer.echo(f"{summary.out}: {summary.questions} questions from {summary.shards} run dirs, {summary.errors} errors")


@app.command("diagnose")
@with_backend
def diagnose_cmd(
    spec: BackendSpec,
    benchmark: Annotated[list[Path], typer.Option(help="Benchmark file (repeatable).")],
    images: Annotated[Path, typer.Option(envvar="HALLUPROBE_IMAGES", help="Images root.")],
    sample: Annotated[int, typer.Option(min=1, help="Questions to run (a seeded sample over all files).")] = 100,
    max_offset: Annotated[float, typer.Option(min=0.0, max=1.0, help="Fail (exit 1) above this off-set argmax rate.")] = 0.01,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    template: Annotated[Optional[str], typer.Option(help="Prompt: 'chat', 'llava', or a format with {question}.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    cache_check: Annotated[bool, typer.Option("--prefix-cache-check", help="Also ask a few images' questions grouped (concurrent) and one by one, uncached, and compare answer by answer (exit 1 when they differ: vLLM #20261).")] = False,
    cache_images: Annotated[int, typer.Option(min=1, help="Images whose questions the prefix-cache check asks.")] = 4,
    cache_tolerance: Annotated[float, typer.Option(min=0.0, help="Largest log-probability difference the prefix-cache check accepts.")] = 0.02,
) -> None:
    """Check a model and template before trusting a logit readout: token sets and off-set argmax
    rate; against a server, also that its prefix cache answers each question from its own image."""
    from halluprobe.cli._backend import BackendSpec
    from halluprobe.diagnose import diagnose, prefix_cache_check, sample_by_image, sample_questions
    from halluprobe.run_setup import read_benchmarks

    with errors():
        if not images.is_dir():
            raise InputError("images root is not a directory", images)
        questions, fingerprints = read_benchmarks(benchmark)
        chosen = sample_questions(questions, sample, seed)
        engine = spec.load()
        with progress("diagnose") as bar:
            result = diagnose(
                engine, chosen, images, fingerprints, model=spec.model, backend_name=spec.backend, template=template, progress=bar
            )
        check = None
        if cache_check:
            # its own instance without the response cache: both passes must reach the server
            fresh = BackendSpec(spec.backend, spec.model, {**spec.options, "no_cache": True}) if "no_cache" in spec.options else spec
            cache_questions = sample_by_image(questions, cache_images, seed)
            check = prefix_cache_check(fresh.load(), cache_questions, images, template=template, tolerance=cache_tolerance, seed=seed)
    failure = result.failure(max_offset) or (check.verdict() if check is not None and not check.ok else None)
    if as_json:
        payload = result.to_json(max_offset)
        typer.echo(json.dumps({**payload, **({"prefix_cache": check.to_json()} if check is not None else {})}, indent=2, ensure_ascii=False))
    else:
        for line in result.summary_lines() + ([check.verdict()] if check is not None else []):
            typer.echo(line)
    if failure is not None:
        print(f"error: {failure}", file=sys.stderr)
        raise typer.Exit(1)
