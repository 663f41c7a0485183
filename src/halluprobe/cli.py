"""The one CLI: a verb per stage. Exit 0 ok, 1 runtime failure, 2 bad usage or bad input.

Options come from flags, then ``HALLUPROBE_*`` environment variables, then ``--config FILE.toml``
(keys are option names with underscores), then defaults.
"""

from __future__ import annotations

import json
import logging
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from halluprobe.errors import InputError, RuntimeFailure

__all__ = ["app", "main"]

log = logging.getLogger("halluprobe")

app = typer.Typer(
    name="halluprobe",
    help="Measure object hallucination in vision-language models (POPE and more), and audit the measurement.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
build_app = typer.Typer(help="Build a benchmark from object annotations.", no_args_is_help=True)
data_app = typer.Typer(help="Download official benchmark files and the images they use.", no_args_is_help=True)
app.add_typer(build_app, name="build")
app.add_typer(data_app, name="data")


# -- shared plumbing ---------------------------------------------------------------------


def _load_config(ctx: typer.Context, _param: Any, value: Optional[Path]) -> Optional[Path]:
    """``--config FILE.toml`` fills the defaults below flags and environment variables."""
    if value is None:
        return None
    try:
        data = tomllib.loads(value.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise typer.BadParameter(f"{value}: {err}") from None
    section = data.get(ctx.info_name or "", data)  # a [run] table, or top-level keys
    ctx.default_map = {**(ctx.default_map or {}), **{k.replace("-", "_"): v for k, v in section.items()}}
    return value


ConfigOption = Annotated[
    Optional[Path],
    typer.Option(
        "--config",
        help="TOML file of option defaults (flags and HALLUPROBE_* variables win).",
        callback=_load_config,
        is_eager=True,
        exists=True,
        dir_okay=False,
    ),
]


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # piped output (logs, CI, a file to paste from) gets a width that fits the metric table
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def _fail(err: Exception) -> None:
    code = 2 if isinstance(err, InputError) else 1
    print(f"error: {err}", file=sys.stderr)
    raise typer.Exit(code)


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except (InputError, RuntimeFailure) as err:
        _fail(err)


@contextmanager
def _progress(description: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on a terminal; silent otherwise (logs and CI stay clean)."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=_console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=_console(stderr=True), show_path=False, show_time=False)],
        force=True,
    )


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress details.")] = False) -> None:
    _setup_logging(verbose)


# -- build -------------------------------------------------------------------------------


@build_app.command("pope")
def build_pope_cmd(
    objects: Annotated[Path, typer.Option(help="COCO instances JSON, or JSON Lines of {\"image\", \"objects\"}.")],
    out: Annotated[Path, typer.Option(help="Output directory.")],
    name: Annotated[str, typer.Option(help="Prefix of the output files.")] = "coco",
    images: Annotated[int, typer.Option(help="Number of images to sample.")] = 500,
    per_image: Annotated[int, typer.Option(help="Positive (and negative) questions per image.")] = 3,
    seed: Annotated[int, typer.Option(help="Sampling seed: same inputs and seed, byte-identical files.")] = 0,
    positives: Annotated[str, typer.Option(help="Positives per image: 'first' (as POPE) or 'random'.")] = "first",
    template: Annotated[str, typer.Option(help="Question template; {} is the object.")] = "Is there a {} in the image?",
    overwrite: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
) -> None:
    """Build the random, popular and adversarial POPE splits from object annotations."""
    from halluprobe.benchmarks.objects import read_objects
    from halluprobe.benchmarks.pope import build_pope, write_pope

    if positives not in ("first", "random"):
        _fail(InputError(f"--positives must be 'first' or 'random', not {positives!r}"))
    if "{}" not in template:
        _fail(InputError(f"--template must contain '{{}}' for the object: {template!r}"))
    with _errors():
        index = read_objects(objects)
        build = build_pope(
            index, name=name, n_images=images, per_image=per_image, seed=seed, positives=positives, template=template  # type: ignore[arg-type]
        )
        paths = write_pope(build, out, overwrite=overwrite)
    for path in paths:
        typer.echo(str(path))


# -- data --------------------------------------------------------------------------------


@data_app.command("pope")
def data_pope_cmd(
    out: Annotated[Path, typer.Option(help="Directory for the three official COCO POPE files.")],
    coco_images: Annotated[
        Optional[Path], typer.Option(help="Also fetch the COCO val2014 images these questions use, into this directory.")
    ] = None,
) -> None:
    """Fetch the official COCO POPE files (pinned sha256, cached) and, optionally, their images."""
    from halluprobe.benchmarks.sources import fetch_coco_images, fetch_pope

    with _errors():
        with _progress("POPE files") as progress:
            paths = fetch_pope(out, progress=progress)
        for path in paths:
            typer.echo(str(path))
        if coco_images is not None:
            with _progress("COCO images") as progress:
                report = fetch_coco_images(list(paths), coco_images, progress=progress)
            typer.echo(f"{coco_images}: {report}")


# -- run ---------------------------------------------------------------------------------


def _read_benchmarks(files: list[Path]) -> tuple[list[Any], dict[str, tuple[Path, str]]]:
    from halluprobe.benchmarks.pope import read_questions, split_name
    from halluprobe.rundir import sha256_file

    questions: list[Any] = []
    fingerprints: dict[str, tuple[Path, str]] = {}
    for path in files:
        if not path.is_file():
            raise InputError("benchmark file not found", path)
        split = split_name(path)
        if split in fingerprints:
            raise InputError(f"two benchmark files give the split {split!r}", path)
        questions.extend(read_questions(path, split=split))
        fingerprints[split] = (path.resolve(), sha256_file(path))
    return questions, fingerprints


def _limit(questions: list[Any], limit: Optional[int]) -> list[Any]:
    from halluprobe.runner import limit_questions

    return limit_questions(questions, limit)


def _backend_options(pairs: Optional[list[str]]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs for rare backend options; a value is read as JSON when it parses."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--backend-option must be KEY=VALUE, not {pair!r}")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def _load_backend(name: str, model: str, **options: Any) -> Any:
    """Instantiate a backend; a model that cannot be loaded is one line and exit 1."""
    from halluprobe.backends.base import load_backend

    try:
        return load_backend(name, model=model, **options)
    except (InputError, RuntimeFailure):
        raise
    except OSError as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RuntimeFailure(f"cannot load model {model!r}: {first_line}") from None


# Server options shared by the verbs that run a model (run, diagnose): declared once.
EndpointOption = Annotated[
    Optional[list[str]],
    typer.Option(envvar="HALLUPROBE_ENDPOINT", help="openai backend: server URL such as http://127.0.0.1:8000/v1 (repeatable: load-balanced)."),
]
ConcurrencyOption = Annotated[int, typer.Option(envvar="HALLUPROBE_CONCURRENCY", help="openai backend: requests in flight.")]
ApiKeyEnvOption = Annotated[
    Optional[str], typer.Option(help="openai backend: NAME of the environment variable holding the API key (never stored).")
]
ImageUrlModeOption = Annotated[
    str, typer.Option(help="openai backend: send images as 'data' URLs, or as 'file' URLs (server shares the file system).")
]
NoCacheOption = Annotated[bool, typer.Option("--no-cache", help="openai backend: bypass the response cache.")]
BackendOptionOption = Annotated[
    Optional[list[str]], typer.Option(help="Rare backend option KEY=VALUE (repeatable), e.g. timeout_s=300, max_retries=10.")
]


def _server_options(
    backend: str, endpoint: list[str] | None, concurrency: int, api_key_env: str | None, image_url_mode: str, no_cache: bool
) -> dict[str, Any]:
    """The openai backend's constructor options from its flags; --endpoint with another backend is refused."""
    if backend == "openai":
        return dict(
            endpoints=endpoint or [], concurrency=concurrency, api_key_env=api_key_env,
            image_url_mode=image_url_mode, no_cache=no_cache,
        )  # fmt: skip
    if endpoint:
        raise InputError(f"--endpoint is for --backend openai, not {backend!r}")
    return {}


@app.command("run")
def run_cmd(
    model: Annotated[str, typer.Option(envvar="HALLUPROBE_MODEL", help="Hub id or local folder (scripted backend: script JSON).")],
    benchmark: Annotated[list[Path], typer.Option(help="Benchmark file (repeatable); *_pope_{split}.json gives split {split}.")],
    images: Annotated[Path, typer.Option(envvar="HALLUPROBE_IMAGES", help="Images root the benchmark's image paths are relative to.")],
    out: Annotated[Path, typer.Option(help="Run directory to write.")],
    backend: Annotated[str, typer.Option(envvar="HALLUPROBE_BACKEND", help="Backend: hf, openai or scripted.")] = "hf",
    template: Annotated[
        Optional[str], typer.Option(help="Prompt: 'chat' (the processor's chat template), 'llava', or a format with {question}.")
    ] = None,
    text_rules: Annotated[
        str, typer.Option(help="Comma-separated text rules read from the greedy continuation ('' for none: logits only).")
    ] = "pope,exact,yorn,strict",
    max_new_tokens: Annotated[int, typer.Option(help="Greedy continuation length for the text rules (open-ended: the answer's cap).")] = 8,
    open_ended: Annotated[
        bool, typer.Option("--open-ended", help="Open questions (PROVE): full greedy answers, no stop at '.', no yes/no readouts.")
    ] = False,
    top_k: Annotated[int, typer.Option(help="First-token alternatives stored per sample.")] = 10,
    batch_size: Annotated[int, typer.Option(envvar="HALLUPROBE_BATCH_SIZE", help="Batch size (halved on out-of-memory).")] = 8,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N questions of each split.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue an existing run dir, skipping answered questions.")] = False,
    force: Annotated[bool, typer.Option(help="With --resume: continue even if the header fingerprint differs.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing run dir.")] = False,
    device: Annotated[str, typer.Option(envvar="HALLUPROBE_DEVICE", help="cpu, cuda, cuda:N or auto.")] = "auto",
    dtype: Annotated[str, typer.Option(envvar="HALLUPROBE_DTYPE", help="auto, float32, bfloat16 or float16.")] = "auto",
    load_in_4bit: Annotated[bool, typer.Option(help="Load in 4 bits (needs bitsandbytes).")] = False,
    trust_remote_code: Annotated[bool, typer.Option(help="Allow the model's own code from the hub.")] = False,
    prefix_cache: Annotated[
        bool, typer.Option("--prefix-cache/--no-prefix-cache", help="Compute each image's prompt prefix once (hf backend).")
    ] = True,
    endpoint: EndpointOption = None,
    concurrency: ConcurrencyOption = 32,
    api_key_env: ApiKeyEnvOption = None,
    image_url_mode: ImageUrlModeOption = "data",
    no_cache: NoCacheOption = False,
    backend_option: BackendOptionOption = None,
    shard: Annotated[
        Optional[str], typer.Option(help="Answer only shard I of N (I/N, 0 <= I < N; by image); `halluprobe merge` joins them.")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Run a model on benchmark files; every readout from one pass per question."""
    from halluprobe.rundir import RunDir
    from halluprobe.runner import RunConfig, make_header, run_questions
    from halluprobe.shards import parse_shard, select_shard

    rules = tuple(r.strip() for r in text_rules.split(",") if r.strip())
    engine_options: dict[str, Any] = dict(
        batch_size=batch_size,
        dtype=dtype,
        device=device,
        load_in_4bit=load_in_4bit,
        trust_remote_code=trust_remote_code,
        prefix_cache=prefix_cache,
    )
    with _errors():
        part = parse_shard(shard) if shard is not None else None
        engine_options.update(_server_options(backend, endpoint, concurrency, api_key_env, image_url_mode, no_cache))
        if open_ended:
            engine_options["stop_strings"] = []  # only EOS or --max-new-tokens end an answer
        engine_options.update(_backend_options(backend_option))
        if not images.is_dir():
            raise InputError("images root is not a directory", images)
        questions, fingerprints = _read_benchmarks(benchmark)
        questions = select_shard(_limit(questions, limit), part)
        cfg = RunConfig(
            model=model,
            backend=backend,
            template=template,
            text_rules=rules,
            max_new_tokens=max_new_tokens,
            top_k=top_k,
            limit=limit,
            resume=resume,
            force=force,
            overwrite=overwrite,
            shard=str(part) if part else None,
            open_ended=open_ended,
        )
        rundir = RunDir(out)
        if rundir.exists() and not (resume or overwrite):
            raise InputError("run directory already holds a run; pass --resume or --overwrite", rundir.header_path)
        engine = _load_backend(backend, model, **engine_options)
        header = make_header(cfg, engine, fingerprints, images)
        with _progress("questions") as progress:
            summary = run_questions(engine, questions, images, rundir, cfg, header, progress=progress)
    typer.echo(
        f"{out}: {summary.answered} answered, {summary.skipped} already done, {summary.errors} errors "
        f"(of {summary.total})"
    )


# -- merge -------------------------------------------------------------------------------


@app.command("merge")
def merge_cmd(
    rundirs: Annotated[list[Path], typer.Argument(help="Run directories of the shards (`halluprobe run --shard I/N`).")],
    out: Annotated[Path, typer.Option(help="Run directory to write.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing run dir at --out.")] = False,
) -> None:
    """Merge shard run dirs into one: same header fingerprint, every question exactly once."""
    from halluprobe.shards import merge_rundirs

    with _errors():
        summary = merge_rundirs(rundirs, out, overwrite=overwrite)
    typer.echo(f"{summary.out}: {summary.questions} questions from {summary.shards} run dirs, {summary.errors} errors")


# -- score -------------------------------------------------------------------------------


_MD_COLUMNS = ("n", "tp", "fp", "tn", "fn", "unknown", "errors", "accuracy", "precision", "recall", "f1", "yes_ratio", "htr")


def _markdown_report(report: Any, title: str) -> str:
    """A table to paste into a paper or an issue: counts beside every ratio, F1 with its CI."""

    def cell(m: Any, col: str) -> str:
        value = getattr(m, col)
        if value is None:
            return "-"
        if isinstance(value, int):
            return str(value)
        ci = m.ci.get(col) if col == "f1" else None
        return f"{value:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")

    lines = [f"**{title}**", "", "| split | " + " | ".join(_MD_COLUMNS) + " |", "|---" * (len(_MD_COLUMNS) + 1) + "|"]
    for name, m in [*report.splits.items(), ("pooled", report.pooled), ("macro", report.macro)]:
        lines.append(f"| {name} | " + " | ".join(cell(m, c) for c in _MD_COLUMNS) + " |")
    boot = report.bootstrap
    if boot:
        lines += ["", f"95% CIs: bootstrap over images, {boot.get('n_resamples')} resamples, seed {boot.get('seed')}."]
    return "\n".join(lines)


def _print_report(report: Any, title: str) -> None:
    from rich.table import Table

    def fmt(value: Optional[float], ci: Any = None) -> str:
        if value is None:
            return "-"
        text = f"{value:.4f}"
        if ci:
            text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
        return text

    table = Table(title=title)
    for col in ("split", "n", "TP", "FP", "TN", "FN", "unk", "err", "acc", "prec", "rec", "F1 [95% CI]", "yes", "HTR", "AUROC"):
        table.add_column(col, justify="right" if col != "split" else "left")
    rows = [*report.splits.items(), ("pooled", report.pooled), ("macro", report.macro)]
    for name, m in rows:
        table.add_row(
            name,
            str(m.n),
            str(m.tp),
            str(m.fp),
            str(m.tn),
            str(m.fn),
            str(m.unknown),
            str(m.errors),
            fmt(m.accuracy),
            fmt(m.precision),
            fmt(m.recall),
            fmt(m.f1, m.ci.get("f1")),
            fmt(m.yes_ratio),
            fmt(m.htr),
            fmt(m.auroc),
        )
    _console().print(table)


@app.command("score")
def score_cmd(
    rundir: Annotated[Optional[Path], typer.Argument(help="Run directory written by `halluprobe run`.")] = None,
    readout: Annotated[str, typer.Option(help="Readout to score: dynamic, legacy_2tok, legacy_8tok, text:RULE.")] = "dynamic",
    unknown: Annotated[str, typer.Option(help="Unknown answers: wrong (never correct), no, yes, or drop.")] = "wrong",
    answers: Annotated[Optional[Path], typer.Option(help="Third-party answers file ({question, answer} lines).")] = None,
    labels: Annotated[Optional[Path], typer.Option(help="POPE-format labels file for --answers.")] = None,
    rule: Annotated[str, typer.Option(help="Text rule for --answers: pope, exact, yorn or strict.")] = "pope",
    force_invalid: Annotated[bool, typer.Option(help="Score a legacy readout even where its ids are invalid.")] = False,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples (images are resampled).")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the score object as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table to paste into a paper.")] = False,
) -> None:
    """Score a run dir (writes RUNDIR/metrics.json) or a third-party answers file."""
    from halluprobe.scoring import score_answers_file, score_rundir

    if unknown not in ("wrong", "no", "yes", "drop"):
        _fail(InputError(f"--unknown must be wrong, no, yes or drop, not {unknown!r}"))
    with _errors():
        if answers is not None or labels is not None:
            if answers is None or labels is None or rundir is not None:
                raise InputError("third-party scoring takes --answers FILE and --labels FILE, and no RUNDIR")
            report = score_answers_file(answers, labels, rule=rule, policy=unknown, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
            title = f"{answers.name}: text:{rule}, unknown={unknown}"
        else:
            if rundir is None:
                raise InputError("give a RUNDIR, or --answers and --labels")
            report = score_rundir(
                rundir, readout=readout, policy=unknown, force_invalid=force_invalid, n_resamples=resamples, seed=seed  # type: ignore[arg-type]
            )
            title = f"{rundir}: {readout}, unknown={unknown}"
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    elif markdown:
        typer.echo(_markdown_report(report, title))
    else:
        _print_report(report, title)


# -- diagnose ----------------------------------------------------------------------------


@app.command("diagnose")
def diagnose_cmd(
    model: Annotated[str, typer.Option(envvar="HALLUPROBE_MODEL", help="Hub id or local folder (scripted backend: script JSON).")],
    benchmark: Annotated[list[Path], typer.Option(help="Benchmark file (repeatable).")],
    images: Annotated[Path, typer.Option(envvar="HALLUPROBE_IMAGES", help="Images root.")],
    sample: Annotated[int, typer.Option(help="Questions to run (a seeded sample over all files).")] = 100,
    max_offset: Annotated[float, typer.Option(help="Fail (exit 1) above this off-set argmax rate.")] = 0.01,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    backend: Annotated[str, typer.Option(envvar="HALLUPROBE_BACKEND", help="Backend: hf, openai or scripted.")] = "hf",
    template: Annotated[Optional[str], typer.Option(help="Prompt: 'chat', 'llava', or a format with {question}.")] = None,
    batch_size: Annotated[int, typer.Option(envvar="HALLUPROBE_BATCH_SIZE", help="Batch size.")] = 8,
    device: Annotated[str, typer.Option(envvar="HALLUPROBE_DEVICE", help="cpu, cuda, cuda:N or auto.")] = "auto",
    dtype: Annotated[str, typer.Option(envvar="HALLUPROBE_DTYPE", help="auto, float32, bfloat16 or float16.")] = "auto",
    trust_remote_code: Annotated[bool, typer.Option(help="Allow the model's own code from the hub.")] = False,
    endpoint: EndpointOption = None,
    concurrency: ConcurrencyOption = 32,
    api_key_env: ApiKeyEnvOption = None,
    image_url_mode: ImageUrlModeOption = "data",
    no_cache: NoCacheOption = False,
    backend_option: BackendOptionOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check a model and template before trusting a logit readout: token sets and off-set argmax rate."""
    from halluprobe.diagnose import diagnose, sample_questions

    with _errors():
        if not images.is_dir():
            raise InputError("images root is not a directory", images)
        if sample < 1:
            raise InputError(f"--sample must be at least 1, not {sample}")
        questions, fingerprints = _read_benchmarks(benchmark)
        chosen = sample_questions(questions, sample, seed)
        options = dict(batch_size=batch_size, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
        options.update(_server_options(backend, endpoint, concurrency, api_key_env, image_url_mode, no_cache))
        options.update(_backend_options(backend_option))
        engine = _load_backend(backend, model, **options)
        with _progress("diagnose") as progress:
            result = diagnose(
                engine, chosen, images, fingerprints, model=model, backend_name=backend, template=template, progress=progress
            )
    rate = result.offset_rate
    failed = rate is None or rate > max_offset
    sets = result.token_sets
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "n": result.n,
                    "errors": result.errors,
                    "offset_rate": rate,
                    "max_offset": max_offset,
                    "ok": not failed,
                    "offset_pieces": result.offset_pieces.most_common(),
                    "first_pieces": result.first_pieces.most_common(),
                    "yes_pieces": sets.yes_pieces if sets else None,
                    "no_pieces": sets.no_pieces if sets else None,
                    "legacy_valid": sets.legacy_valid if sets else None,
                    "prompt": result.prompt_example,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
    else:
        if sets is not None and sets.keyed_by == "piece":
            typer.echo("yes / no sets: derived per sample from the returned top-logprob pieces (no vocabulary)")
        elif sets is not None:
            typer.echo("yes set: " + ", ".join(f"{p!r}={i}" for p, i in zip(sets.yes_pieces, sets.yes_ids)))
            typer.echo("no set:  " + ", ".join(f"{p!r}={i}" for p, i in zip(sets.no_pieces, sets.no_ids)))
            typer.echo(f"legacy LLaMA ids: {'valid' if sets.legacy_valid else 'INVALID for this vocabulary'}")
        typer.echo(f"prompt: {result.prompt_example!r}")
        typer.echo("first pieces: " + ", ".join(f"{p!r} {c}" for p, c in result.first_pieces.most_common(8)))
        if rate is not None:
            typer.echo(f"off-set argmax: {result.offset} of {result.answered} ({100 * rate:.1f}%), {result.errors} errors")
    if failed:
        if rate is None:
            message = f"no question was answered ({result.errors} errors)"
        else:
            worst = ", ".join(f"{p!r} ({c})" for p, c in result.offset_pieces.most_common(5))
            message = (
                f"the first token's argmax lies outside the yes/no sets on {100 * rate:.1f}% of questions "
                f"(limit {100 * max_offset:.1f}%): {worst}; logit readouts would read the tail of the "
                "distribution: fix the template or the token sets"
            )
        print(f"error: {message}", file=sys.stderr)
        raise typer.Exit(1)


# -- audit and report --------------------------------------------------------------------


@app.command("audit")
def audit_cmd(
    rundirs: Annotated[list[Path], typer.Argument(help="Run directories (several: compared side by side).")],
    labels: Annotated[
        Optional[list[Path]], typer.Option(help="Alternative labels (e.g. RePOPE), matched by split and question_id; repeatable.")
    ] = None,
    headline: Annotated[str, typer.Option(help="The readout the others are compared with.")] = "dynamic",
    unknown: Annotated[str, typer.Option(help="Unknown answers: wrong, no, yes or drop.")] = "wrong",
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples (images are resampled).")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the audit object as JSON.")] = False,
) -> None:
    """Audit run dirs: every readout side by side, paired tests, token diagnostic, convergence,
    hallucination profile, relabelling. Writes RUNDIR/audit.json; reads run dirs only."""
    from halluprobe.audit import audit_run, compare_runs, summarise_audit, write_audit

    if unknown not in ("wrong", "no", "yes", "drop"):
        _fail(InputError(f"--unknown must be wrong, no, yes or drop, not {unknown!r}"))
    audits = []
    with _errors():
        for rundir in rundirs:
            audit = audit_run(
                rundir, headline=headline, labels=labels or (), policy=unknown, n_resamples=resamples, seed=seed  # type: ignore[arg-type]
            )
            write_audit(rundir, audit)
            audits.append(audit)
        comparison = (
            compare_runs(rundirs, readout=headline, policy=unknown, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
            if len(rundirs) > 1
            else None
        )
    if as_json:
        payload: Any = audits[0] if comparison is None else {"audits": audits, "comparison": comparison}
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    for rundir, audit in zip(rundirs, audits):
        typer.echo(f"{rundir}/audit.json")
        for line in summarise_audit(audit):
            typer.echo(f"  {line}")
    if comparison is not None:
        typer.echo(json.dumps(comparison.get("paired", {}), indent=2))


@app.command("report")
def report_cmd(
    rundirs: Annotated[list[Path], typer.Argument(help="Run directories (several become a leaderboard).")],
    out: Annotated[Path, typer.Option(help="HTML file to write; a Markdown twin is written beside it.")] = Path("report.html"),
    labels: Annotated[Optional[list[Path]], typer.Option(help="Alternative labels files for the relabelling section.")] = None,
    headline: Annotated[str, typer.Option(help="Headline readout.")] = "dynamic",
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
) -> None:
    """Write one self-contained HTML page (and Markdown) from run dirs: tables, tests and plots."""
    from halluprobe.audit import audit_run, compare_runs
    from halluprobe.report import render_report

    with _errors():
        audits = [
            audit_run(rundir, headline=headline, labels=labels or (), n_resamples=resamples, seed=seed) for rundir in rundirs
        ]
        comparison = compare_runs(rundirs, readout=headline, n_resamples=resamples, seed=seed) if len(rundirs) > 1 else None
        html, md = render_report(rundirs, out, audits=audits, comparison=comparison)
    typer.echo(str(html))
    typer.echo(str(md))


# -- tokens ------------------------------------------------------------------------------


@app.command("tokens")
def tokens_cmd(
    path: Annotated[str, typer.Argument(help="Model or tokenizer folder, or hub id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    trust_remote_code: Annotated[bool, typer.Option(help="Allow the tokenizer's own code from the hub.")] = False,
) -> None:
    """Show the yes/no token sets derived from a tokenizer, and whether the legacy LLaMA ids hold."""
    from halluprobe.readouts.tokensets import derive_token_sets, describe_token_sets, load_tokenizer

    with _errors():
        try:
            tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code)
        except (InputError, RuntimeFailure):
            raise
        except (OSError, ValueError) as err:
            raise InputError(f"cannot load a tokenizer: {err}", path) from None
        info = describe_token_sets(derive_token_sets(tokenizer))
    if as_json:
        typer.echo(json.dumps(info, indent=2, ensure_ascii=False))
        return
    typer.echo(f"vocabulary: {info['vocab_size']} pieces, fingerprint {info['tokenizer_fingerprint'][:16]}")
    typer.echo("yes set: " + ", ".join(f"{p!r}={i}" for p, i in zip(info["yes_pieces"], info["yes_ids"])))
    typer.echo("no set:  " + ", ".join(f"{p!r}={i}" for p, i in zip(info["no_pieces"], info["no_ids"])))
    verdict = "valid" if info["legacy_valid"] else "INVALID for this vocabulary"
    typer.echo(f"legacy LLaMA ids (3582/1217 and the 8-token set): {verdict}")
    if not info["legacy_valid"]:
        typer.echo("  " + ", ".join(f"{i}={p!r}" for i, p in info["legacy_pieces"].items()))


# -- prove (PROVE: open questions scored on scene graphs) ---------------------------------

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
    from halluprobe.benchmarks.pope import write_questions
    from halluprobe.benchmarks.prove.data import read_prove
    from halluprobe.records import Question

    with _errors():
        items = read_prove(data)
        if out.exists() and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", out)
        questions = [
            Question(split="prove", question_id=i, image=it.image, text=it.question, label="yes", metadata={"kind": "open", "prove_id": it.question_id})
            for i, it in enumerate(items)
        ]
        write_questions(out, questions)
    typer.echo(f"{out}: {len(items)} open questions")


@prove_app.command("score")
def prove_score_cmd(
    data: Annotated[Path, typer.Option(help="PROVE file (JSON array or JSON Lines).")],
    responses: Annotated[Path, typer.Option(help="Run directory, or a JSON / JSON Lines file of {question_id, response}.")],
    out: Annotated[Path, typer.Option(help="Directory for scores.jsonl and summary.json.")],
    embedder: Annotated[str, typer.Option(help="SentenceTransformer name or path (default: the bundled all-MiniLM-L6-v2).")] = "all-MiniLM-L6-v2",
    match_threshold: Annotated[float, typer.Option(help="tscore: a response tuple below this text similarity may be confirmed visually.")] = 0.7,
    entail_backend: Annotated[Optional[str], typer.Option(help="Visual entailment backend (hf, openai, scripted); off when not given.")] = None,
    entail_model: Annotated[Optional[str], typer.Option(help="Model of the entailment backend.")] = None,
    entail_threshold: Annotated[float, typer.Option(help="p_yes (dynamic readout) at or above which a tuple counts as seen.")] = 0.5,
    images: Annotated[Optional[Path], typer.Option(help="Images root (visual entailment only).")] = None,
    extractor: Annotated[str, typer.Option(help="Response tuples: 'spacy' (offline rules) or 'lm' (a model through a backend).")] = "spacy",
    extractor_backend: Annotated[str, typer.Option(help="--extractor lm: backend (hf, scripted).")] = "hf",
    extractor_model: Annotated[Optional[str], typer.Option(help="--extractor lm: model (scripted: script JSON).")] = None,
    extractor_image: Annotated[Optional[Path], typer.Option(help="--extractor lm: image shown to a VLM with the text prompt.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the tuple-extraction cache.")] = False,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples (by image) for the CIs.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """hscore and tscore of free-form responses; response tuples from the file, else extracted."""
    from halluprobe.benchmarks.prove.data import read_prove
    from halluprobe.benchmarks.prove.evaluate import read_responses, score_responses, write_scores
    from halluprobe.benchmarks.prove.extraction import LMExtractor, SpacyExtractor, TupleCache
    from halluprobe.benchmarks.prove.scoring import BackendEntailment, SentenceEmbedder, summarize

    with _errors():
        items = read_prove(data)
        answers = read_responses(responses, items)
        tuple_extractor: Any
        if extractor == "spacy":
            tuple_extractor = SpacyExtractor()
        elif extractor == "lm":
            if extractor_model is None or extractor_image is None:
                raise InputError("--extractor lm needs --extractor-model and --extractor-image")
            engine = _load_backend(extractor_backend, extractor_model, stop_strings=[])
            tuple_extractor = LMExtractor(engine, image_path=str(extractor_image), backend_name=extractor_backend)
        else:
            raise InputError(f"--extractor must be 'spacy' or 'lm', not {extractor!r}")
        entail = None
        if entail_backend is not None:
            if entail_model is None or images is None:
                raise InputError("--entail-backend needs --entail-model and --images")
            entail = BackendEntailment(_load_backend(entail_backend, entail_model), images)
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
            "entailment": None if entail is None else {"backend": entail_backend, "model": entail_model, "threshold": entail_threshold},
            "data": str(data),
            "responses": str(responses),
        }
        summary = summarize(scores, n_resamples=bootstrap, seed=seed, settings=settings)
        write_scores(out, scores, summary, overwrite=overwrite)
    if as_json:
        typer.echo(summary.model_dump_json(indent=2))
        return

    def fmt(v: Optional[float], ci: Any) -> str:
        return "n/a" if v is None else f"{100 * v:.2f}" + ("" if ci is None else f" [{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]")

    typer.echo(f"hscore {fmt(summary.hscore, summary.ci.get('hscore'))} (n={summary.n_hscore})")
    typer.echo(f"tscore {fmt(summary.tscore, summary.ci.get('tscore'))} (n={summary.n_tscore})")
    typer.echo(f"errors {summary.errors} of {summary.n}; correlation(h, t) pearson {summary.correlation.get('pearson')}")
    typer.echo(f"{out}: scores.jsonl, summary.json")


@prove_app.command("build")
def prove_build_cmd(
    captions: Annotated[Path, typer.Option(help='Captions and scene graphs: JSON / JSON Lines of {"image", "caption", "tuples"}.')],
    model: Annotated[str, typer.Option(help="The question-writing model (scripted backend: script JSON).")],
    images: Annotated[Path, typer.Option(help="Images root the captions' image paths are relative to.")],
    out: Annotated[Path, typer.Option(help="Directory for prove.jsonl, dropped.jsonl and build.json.")],
    backend: Annotated[str, typer.Option(help="Backend: hf, openai or scripted.")] = "hf",
    template: Annotated[Optional[str], typer.Option(help="Prompt template (as for run).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Length cap of the model's answer.")] = 1024,
    dup_threshold: Annotated[float, typer.Option(help="Drop a question this similar (cosine) to one kept for the same image.")] = 0.9,
    embedder: Annotated[str, typer.Option(help="SentenceTransformer for near-duplicate questions.")] = "all-MiniLM-L6-v2",
    overwrite: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
) -> None:
    """PROVE construction: LM question/answer pairs kept only when their sandboxed program returns the answer."""
    from halluprobe.benchmarks.prove.build import build_outputs, build_prove, read_captions, write_build
    from halluprobe.benchmarks.prove.extraction import SpacyExtractor
    from halluprobe.benchmarks.prove.scoring import SentenceEmbedder

    with _errors():
        records = read_captions(captions)
        build_outputs(out, overwrite=overwrite)  # refused before the model runs (write_build checks again)
        engine = _load_backend(backend, model, stop_strings=[])
        result = build_prove(
            records, engine, images_root=images, embedder=SentenceEmbedder(embedder), extractor=SpacyExtractor(),
            template=template, max_new_tokens=max_new_tokens, dup_threshold=dup_threshold,
        )  # fmt: skip
        settings = {"model": model, "backend": backend, "dup_threshold": dup_threshold, "embedder": embedder}
        write_build(out, result, settings, overwrite=overwrite)
    typer.echo(" ".join(f"{k}={v}" for k, v in result.counts().items()))
    typer.echo(f"{out}: prove.jsonl, dropped.jsonl, build.json")


# -- demo --------------------------------------------------------------------------------


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option(help="Directory for the demo's files.")] = Path("halluprobe-demo"),
) -> None:
    """Offline demo: synthetic scenes, POPE built from them, the tiny trained demo VLM, every readout.

    Generates held-out scenes, builds the random / popular / adversarial splits, runs the demo model shipped with halluprobe (a LLaVA trained by tools/train_demo_model.py), then scores, audits and writes report.html. Deterministic; about 15 s on 2 CPU cores.
    """
    from halluprobe.demo import run_demo

    with _errors():
        with _progress("demo questions") as progress:
            result = run_demo(out, progress=progress)
    for title, report in result.reports:
        _print_report(report, title)
    typer.echo(result.summary)
    typer.echo(f"demo done in {result.seconds:.0f} s")


# -- probe (Auto-Probe, issue 7) ---------------------------------------------------------

probe_app = typer.Typer(help="Auto-Probe: questions from objects the model itself hallucinates.", no_args_is_help=True)
app.add_typer(probe_app, name="probe")


def _probe_backend(backend: str, model: str, backend_option: Optional[list[str]]) -> Any:
    options = _backend_options(backend_option)
    options.setdefault("stop_strings", [])  # descriptions run to EOS or max_new_tokens, not to the first '.'
    return _load_backend(backend, model, **options)


@probe_app.command("induce")
def probe_induce(
    images: Annotated[Path, typer.Option(help="Folder of images to describe.")],
    model: Annotated[str, typer.Option(help="Model under test: local folder or id (scripted: the script file).")],
    prompts: Annotated[Path, typer.Option(help="Prompt-set TOML file (system, prompts, epochs, json_mode...).")],
    out: Annotated[Path, typer.Option(help="Descriptions JSON Lines file (append-only; resumed).")],
    backend: Annotated[str, typer.Option(help="hf | openai | scripted.")] = "hf",
    backend_option: Annotated[Optional[list[str]], typer.Option(help="KEY=VALUE backend option (repeatable).")] = None,
) -> None:
    """Describe every image with hallucination-inducing prompts; descriptions go to a JSONL file."""
    from halluprobe.benchmarks.autoprobe.induction import induce, list_images, load_prompt_set

    with _errors():
        prompt_set = load_prompt_set(prompts)
        list_images(images)  # bad input before the model loads
        engine = _probe_backend(backend, model, backend_option)
        with _progress("descriptions") as progress:
            result = induce(engine, images, prompt_set, out, backend_name=backend, model=model, progress=progress)
    typer.echo(f"{result.written} description(s) written to {result.path} ({result.skipped} already there, {result.errors} error(s))")


@probe_app.command("build")
def probe_build(
    images: Annotated[Path, typer.Option(help="Folder of images.")],
    model: Annotated[str, typer.Option(help="Model under test: local folder or id (scripted: the script file).")],
    detector: Annotated[str, typer.Option(help="OWLv2 / OWL-ViT detector: local folder or hub id.")],
    out: Annotated[Path, typer.Option(help="Output folder (descriptions are resumed; the rest is rewritten).")],
    prompts: Annotated[Optional[Path], typer.Option(help="Prompt-set TOML file (default: one detailed-description prompt).")] = None,
    backend: Annotated[str, typer.Option(help="Backend of the model under test: hf | openai | scripted.")] = "hf",
    extractor: Annotated[str, typer.Option(help="'spacy' (offline noun chunks) or 'llm:BACKEND:MODEL'.")] = "spacy",
    attribait: Annotated[str, typer.Option(help="Who writes AttriBait questions: 'model' (the model under test), 'llm:BACKEND:MODEL' or 'none'.")] = "model",
    t_high: Annotated[float, typer.Option(help="Detector score at or above which an object is present.")] = 0.3,
    t_low: Annotated[float, typer.Option(help="Detector score below which an object is hallucinated.")] = 0.1,
    max_retries: Annotated[int, typer.Option(help="Re-asks of a model whose JSON answer is invalid.")] = 2,
    backend_option: Annotated[Optional[list[str]], typer.Option(help="KEY=VALUE option of the model-under-test backend (repeatable).")] = None,
) -> None:
    """Induce, extract, clean, detect, and write existence + AttriBait questions with a manifest."""
    from halluprobe.benchmarks.autoprobe.build import ProbeBuildConfig, build_probe, parse_llm_spec
    from halluprobe.benchmarks.autoprobe.detector import OwlDetector, check_thresholds
    from halluprobe.benchmarks.autoprobe.induction import PromptSet, list_images, load_prompt_set

    with _errors():
        prompt_set = load_prompt_set(prompts) if prompts is not None else PromptSet(name="default", prompts=[_DEFAULT_PROBE_PROMPT])
        list_images(images)
        extractor_spec = None if extractor == "spacy" else parse_llm_spec(extractor)
        attribait_spec = None if attribait in ("none", "model") else parse_llm_spec(attribait)
        check_thresholds(t_high=t_high, t_low=t_low)
        config = ProbeBuildConfig(images=images, out=out, prompt_set=prompt_set, backend=backend, model=model,
                                  extractor=extractor, attribait=attribait, detector=detector, t_high=t_high,
                                  t_low=t_low, max_retries=max_retries)  # fmt: skip
        engine = _probe_backend(backend, model, backend_option)
        extractor_engine = _probe_backend(*extractor_spec, None) if extractor_spec else None
        attribait_engine = _probe_backend(*attribait_spec, None) if attribait_spec else None
        try:
            owl = OwlDetector(detector, local_files_only=Path(detector).exists())
        except OSError as err:
            raise RuntimeFailure(f"cannot load detector {detector!r}: {str(err).strip().splitlines()[0]}") from None
        with _progress("descriptions") as progress:
            result = build_probe(config, model_backend=engine, detector=owl, extractor_backend=extractor_engine,
                                 attribait_backend=attribait_engine, progress=progress)  # fmt: skip
    counts = result.counts
    typer.echo(
        f"{counts['existence_questions']} existence question(s) ({counts['present']} present, {counts['hallucinated']} hallucinated), "
        f"{counts['attribait_questions']} AttriBait question(s); {counts['dropped_cleaning']} object(s) dropped by cleaning, "
        f"{counts['dropped_uncertain']} uncertain, {counts['dropped_unreadable']} on unreadable images; manifest: {out / 'manifest.json'}"
    )


@probe_app.command("choice")
def probe_choice(
    questions: Annotated[Path, typer.Option(help="AttriBait multiple-choice file (autoprobe_attribait.jsonl).")],
    images: Annotated[Path, typer.Option(help="Images root the questions' image names are relative to.")],
    model: Annotated[str, typer.Option(help="Model under test: local folder or id (scripted: the script file).")],
    out: Annotated[Path, typer.Option(help="JSON Lines file of answered questions (refused if it exists, unless --overwrite).")],
    backend: Annotated[str, typer.Option(help="hf | openai | scripted.")] = "hf",
    template: Annotated[Optional[str], typer.Option(help="Prompt template for render_prompt (default: the model's chat template).")] = None,
    top_k: Annotated[int, typer.Option(help="First-token alternatives read for the letter scores.")] = 50,
    existence_run: Annotated[Optional[Path], typer.Option(help="Run dir of the existence questions: adds the consistency table.")] = None,
    backend_option: Annotated[Optional[list[str]], typer.Option(help="KEY=VALUE backend option (repeatable).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False,
) -> None:
    """Answer AttriBait questions: letter logit and text readouts, accuracy, and the consistency table."""
    from halluprobe.benchmarks.autoprobe.choice import choice_metrics, consistency_table, evaluate_choices
    from halluprobe.benchmarks.autoprobe.questions import read_choice_questions
    from halluprobe.files import write_atomic
    from halluprobe.readouts.tokensets import derive_letter_sets, load_tokenizer
    from halluprobe.rundir import RunDir

    with _errors():
        choice_questions = read_choice_questions(questions)
        if not images.is_dir():
            raise InputError("images root is not a directory", images)
        if out.exists() and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", out)
        existence = RunDir(existence_run).read_samples() if existence_run is not None else None
        engine = _load_backend(backend, model, **_backend_options(backend_option))
        sets = engine.token_sets()
        # ids from the model's own tokenizer; a backend reporting pieces (or none) classifies pieces
        letter_ids = derive_letter_sets(load_tokenizer(model)) if backend == "hf" and sets is not None and sets.keyed_by == "id" else None
        samples = evaluate_choices(engine, choice_questions, images, letter_ids=letter_ids, template=template, top_k=top_k)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, "".join(s.model_dump_json() + "\n" for s in samples))
        result: dict[str, Any] = {"metrics": choice_metrics(samples), "letter_ids": letter_ids}
        if existence is not None:
            result["consistency"] = consistency_table(existence, samples)
    typer.echo(json.dumps(result, indent=2))


_DEFAULT_PROBE_PROMPT = "Describe this image in detail, including every object you can see, even small or partly hidden ones."


def main() -> None:
    app()


if __name__ == "__main__":
    main()
