"""The Typer apps and the plumbing every verb shares: errors, progress, logging, --config.

Exit 0 ok, 1 runtime failure, 2 bad usage or bad input (one line naming file:line).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Optional

import typer

from halluprobe.errors import InputError, RuntimeFailure

__all__ = [
    "app",
    "build_app",
    "data_app",
    "ConfigOption",
    "UnknownOption",
    "ResamplesOption",
    "MAX_RESAMPLES",
    "refuse_over_limit",
    "SeedOption",
    "console",
    "errors",
    "fail",
    "progress",
]

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


def _load_config(ctx: typer.Context, _param: Any, value: Optional[Path]) -> Optional[Path]:
    """``--config FILE.toml`` fills the defaults below flags and environment variables."""
    if value is None:
        return None
    from halluprobe.tomlfile import read_toml

    try:
        data = read_toml(value, "the config file")
    except InputError as err:
        raise typer.BadParameter(str(err)) from None
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

# Options several verbs share: declared once.
UNKNOWN_POLICIES = ("wrong", "no", "yes", "drop")
UnknownOption = Annotated[
    Literal[UNKNOWN_POLICIES], typer.Option(help="Unknown answers: wrong (never correct), no, yes, or drop.")  # type: ignore[valid-type]
]
ResamplesOption = Annotated[int, typer.Option(min=0, help="Bootstrap resamples (images are resampled; at most 100,000).")]
# a bound on work a flag sets: far beyond what a 95% CI needs, and refused in one line up front
MAX_RESAMPLES = 100_000


def refuse_over_limit(flag: str, value: int, limit: int) -> None:
    """One line (exit 2) before any work when ``value`` is over ``limit``."""
    if value > limit:
        raise InputError(f"{flag} {value} is over the limit of {limit:,}")
SeedOption = Annotated[int, typer.Option(min=0, help="Bootstrap seed (0 or more).")]


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # piped output (logs, CI, a file to paste from) gets a width that fits the metric table
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def fail(err: Exception) -> NoReturn:
    code = 2 if isinstance(err, InputError) else 1
    print(f"error: {err}", file=sys.stderr)
    raise typer.Exit(code)


@contextmanager
def errors() -> Iterator[None]:
    try:
        yield
    except (InputError, RuntimeFailure) as err:
        fail(err)


@contextmanager
def progress(description: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
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
        console=console(stderr=True),
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
        handlers=[RichHandler(console=console(stderr=True), show_path=False, show_time=False)],
        force=True,
    )


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress details.")] = False) -> None:
    _setup_logging(verbose)
