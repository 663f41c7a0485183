"""One option group for every verb that loads a model: declared once, validated once.

:func:`with_backend` adds the group's options (``--model``, ``--backend``, the local-model and
server options, ``--backend-option``) to a command and hands it a :class:`BackendSpec`. Each
backend declares its options by its constructor's keyword parameters
(:func:`halluprobe.backends.base.backend_options`); a flag given a non-default value that the
chosen backend does not take, or a ``--backend-option`` key it does not declare, is refused
(exit 2) naming the valid ones.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional, TypeVar

import typer

from halluprobe.backends.base import BACKENDS, Backend, backend_options, load_backend
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.jsonl import loads

from halluprobe.cli._app import fail

__all__ = ["BackendSpec", "with_backend", "parse_backend_options", "load_model_backend"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class BackendSpec:
    """Which backend, which model, and the constructor options the flags gave it."""

    backend: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Backend:
        return load_model_backend(self.backend, self.model, **self.options)


def parse_backend_options(pairs: Optional[list[str]]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs for rare backend options; a value is read as JSON when it parses."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--backend-option must be KEY=VALUE, not {pair!r}")
        try:
            options[key.strip()] = loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def load_model_backend(name: str, model: str, **options: Any) -> Backend:
    """Instantiate a backend; a model that cannot be loaded is one line and exit 1."""
    try:
        return load_backend(name, model=model, **options)
    except (InputError, RuntimeFailure):
        raise
    except OSError as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RuntimeFailure(f"cannot load model {model!r}: {first_line}") from None


# (parameter name, constructor keyword, annotation, default); the flag is --parameter-name.
_GROUP: list[tuple[str, str | None, Any, Any]] = [
    ("model", None, Annotated[str, typer.Option(envvar="HALLUPROBE_MODEL", help="Hub id or local folder (openai: the served model name; scripted backend: script JSON).")], inspect.Parameter.empty),
    ("backend", None, Annotated[Literal[tuple(sorted(BACKENDS))], typer.Option(envvar="HALLUPROBE_BACKEND", help="Backend: " + ", ".join(sorted(BACKENDS)) + ".")], "hf"),
    ("batch_size", "batch_size", Annotated[int, typer.Option(envvar="HALLUPROBE_BATCH_SIZE", min=1, help="Batch size (halved on out-of-memory).")], 8),
    ("device", "device", Annotated[str, typer.Option(envvar="HALLUPROBE_DEVICE", help="cpu, cuda, cuda:N or auto.")], "auto"),
    ("dtype", "dtype", Annotated[Literal["auto", "float32", "bfloat16", "float16"], typer.Option(envvar="HALLUPROBE_DTYPE", help="auto, float32, bfloat16 or float16.")], "auto"),
    ("load_in_4bit", "load_in_4bit", Annotated[bool, typer.Option(help="Load in 4 bits (needs bitsandbytes).")], False),
    ("trust_remote_code", "trust_remote_code", Annotated[bool, typer.Option(help="Allow the model's own code from the hub.")], False),
    ("prefix_cache", "prefix_cache", Annotated[bool, typer.Option("--prefix-cache/--no-prefix-cache", help="Compute each image's prompt prefix once (hf backend).")], True),
    ("endpoint", "endpoints", Annotated[Optional[list[str]], typer.Option(envvar="HALLUPROBE_ENDPOINT", help="openai backend: server URL such as http://127.0.0.1:8000/v1 (repeatable: load-balanced).")], None),
    ("concurrency", "concurrency", Annotated[int, typer.Option(envvar="HALLUPROBE_CONCURRENCY", min=1, help="openai backend: requests in flight.")], 32),
    ("api_key_env", "api_key_env", Annotated[Optional[str], typer.Option(help="openai backend: NAME of the environment variable holding the API key (never stored).")], None),
    ("image_url_mode", "image_url_mode", Annotated[Literal["data", "file"], typer.Option(help="openai backend: send images as 'data' URLs, or as 'file' URLs (server shares the file system).")], "data"),
    ("no_cache", "no_cache", Annotated[bool, typer.Option("--no-cache", help="openai backend: bypass the response cache.")], False),
    ("backend_option", None, Annotated[Optional[list[str]], typer.Option(help="Rare backend option KEY=VALUE (repeatable), e.g. timeout_s=300, max_retries=10.")], None),
]
_NAMES = [name for name, *_ in _GROUP]


def _spec(values: dict[str, Any]) -> BackendSpec:
    name = values["backend"]
    declared = set(backend_options(name))
    options: dict[str, Any] = {}
    for param, keyword, _, default in _GROUP:
        if keyword is None:
            continue
        value = values[param]
        if keyword in declared:
            options[keyword] = value
        elif value != default and not (value == [] and default is None):
            flag = "--" + param.replace("_", "-")
            owners = [b for b in sorted(BACKENDS) if b != name and keyword in backend_options(b)]
            raise InputError(f"{flag} is an option of the {' / '.join(owners) or 'other'} backend, not of {name!r}")
    options.update(parse_backend_options(values["backend_option"]))  # unknown keys: refused by load_backend
    return BackendSpec(backend=name, model=values["model"], options=options)


def with_backend(func: F) -> F:
    """Give a command the backend option group; it receives ``spec: BackendSpec`` instead."""
    signature = inspect.signature(func, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "spec"]
    group = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)
        for name, _, annotation, default in _GROUP
    ]
    # the model first (it is required), the rest after the command's own options
    params = [group[0], *[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own], *group[1:]]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _NAMES}
        try:
            spec = _spec(values)
        except InputError as err:
            fail(err)
        return func(spec=spec, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]
