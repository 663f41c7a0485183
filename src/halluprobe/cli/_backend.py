"""One option group for every verb that loads a model: declared once, validated once.

:func:`with_backend` adds the group's options (``--model``, ``--backend``, the local-model and
server options, ``--backend-option``) to a command and hands it a :class:`BackendSpec`. Each
backend declares its options by its constructor's keyword parameters
(:func:`halluprobe.backends.base.backend_options`); a flag given a non-default value that the
chosen backend does not take, or a ``--backend-option`` key it does not declare, is refused
(exit 2) naming the valid ones.

:func:`with_secondary_backend` adds the same group under a prefix for a second model a verb
loads (``prove score --entail-model M --entail-backend openai --entail-endpoint URL``), so a
secondary model takes every option the model under test takes.
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
from halluprobe.cli._app import fail
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.jsonl import loads

__all__ = ["BackendSpec", "with_backend", "with_secondary_backend", "parse_backend_options", "load_model_backend"]

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


@dataclass(frozen=True)
class _Flag:
    """One option of the group: ``--NAME`` (``decls`` for a flag spelled otherwise), the
    constructor keyword it sets (``None``: not a constructor option), its type and default."""

    name: str
    keyword: str | None
    type: Any
    default: Any
    help: str
    envvar: str | None = None
    decls: tuple[str, ...] = ()
    min: int | None = None


_GROUP: list[_Flag] = [
    _Flag("model", None, str, inspect.Parameter.empty, "Hub id or local folder (openai: the served model name; scripted backend: script JSON).", "HALLUPROBE_MODEL"),
    _Flag("backend", None, Literal[tuple(sorted(BACKENDS))], "hf", "Backend: " + ", ".join(sorted(BACKENDS)) + ".", "HALLUPROBE_BACKEND"),
    _Flag("batch_size", "batch_size", int, 8, "Batch size in questions (each distinct prompt about an image counts once; the prefix-cache engine fills a batch with several images' questions, packed into one row per image where the model allows it); halved on out-of-memory.", "HALLUPROBE_BATCH_SIZE", min=1),
    _Flag("device", "device", str, "auto", "cpu, cuda, cuda:N or auto.", "HALLUPROBE_DEVICE"),
    _Flag("dtype", "dtype", Literal["auto", "float32", "bfloat16", "float16"], "auto", "auto, float32, bfloat16 or float16.", "HALLUPROBE_DTYPE"),
    _Flag("load_in_4bit", "load_in_4bit", bool, False, "Load in 4 bits (needs bitsandbytes)."),
    _Flag("trust_remote_code", "trust_remote_code", bool, False, "Allow the model's own code from the hub."),
    _Flag("prefix_cache", "prefix_cache", bool, True, "Compute each image's prompt prefix once (hf backend).", decls=("--prefix-cache/--no-prefix-cache",)),
    _Flag("endpoint", "endpoints", Optional[list[str]], None, "openai backend: server URL such as http://127.0.0.1:8000/v1 (repeatable: load-balanced).", "HALLUPROBE_ENDPOINT"),
    _Flag("concurrency", "concurrency", int, 32, "openai backend: requests in flight.", "HALLUPROBE_CONCURRENCY", min=1),
    _Flag("api_key_env", "api_key_env", Optional[str], None, "openai backend: NAME of the environment variable holding the API key (never stored)."),
    _Flag("image_url_mode", "image_url_mode", Literal["data", "file"], "data", "openai backend: send images as 'data' URLs, or as 'file' URLs (server shares the file system)."),
    _Flag("no_cache", "no_cache", bool, False, "openai backend: bypass the response cache.", decls=("--no-cache",)),
    _Flag("exact_logprobs", "exact_logprobs", Literal["require", "auto", "off"], "auto", "openai backend: read the yes/no ids' log-probabilities by token id (vLLM, SGLang): 'auto' when --tokenizer is given and the server can, 'require' refuses a server that cannot, 'off' reads the top-K pieces."),
    _Flag("tokenizer", "tokenizer", Optional[str], None, "openai backend: the served model's tokenizer (folder or hub id) for exact log-probabilities."),
    _Flag("server_api", "server_api", Literal["chat", "sglang"], "chat", "openai backend: 'chat' (/v1/chat/completions) or 'sglang' (SGLang's native /generate; needs --tokenizer)."),
    _Flag("backend_option", None, Optional[list[str]], None, "Rare backend option KEY=VALUE (repeatable), e.g. timeout_s=300, max_retries=10."),
]


def _param_name(flag: _Flag, prefix: str | None) -> str:
    return flag.name if prefix is None else f"{prefix}_{flag.name}"


def _flag_text(flag: _Flag, prefix: str | None) -> str:
    """The flag as typed: ``--device``, or ``--entail-device`` in a prefixed group."""
    return "--" + _param_name(flag, prefix).replace("_", "-")


def _parameter(flag: _Flag, prefix: str | None, label: str | None) -> inspect.Parameter:
    """The typer parameter of ``flag``: as declared for the model under test, or (``prefix``)
    ``--PREFIX-NAME`` for a secondary model, optional, without an environment variable."""
    name = _param_name(flag, prefix)
    decls = flag.decls
    kind, default = flag.type, flag.default
    if prefix is not None:
        decls = tuple(_prefixed(d, prefix) for d in decls)
        if flag.name in ("model", "backend"):  # a secondary model is off unless its model is given
            kind, default = Optional[flag.type], None
    option = typer.Option(
        *decls,
        envvar=flag.envvar if prefix is None else None,
        min=flag.min,
        help=flag.help if label is None else f"{label}: {flag.help}",
    )
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind, option], default=default)


def _prefixed(decl: str, prefix: str) -> str:
    """``--no-cache`` -> ``--entail-no-cache``; ``--prefix-cache/--no-prefix-cache`` ->
    ``--entail-prefix-cache/--no-entail-prefix-cache``."""
    dash = prefix.replace("_", "-")
    on, _, off = decl.partition("/")
    on = "--" + dash + "-" + on.removeprefix("--")
    return on if not off else f"{on}/--no-{dash}-{off.removeprefix('--no-')}"


def _spec(values: dict[str, Any], prefix: str | None = None) -> BackendSpec:
    """The group's flags as a spec: refuses a flag set away from its default that the chosen
    backend does not take (naming the backends that do)."""
    name = values["backend"]
    declared = set(backend_options(name))
    options: dict[str, Any] = {}
    for flag in _GROUP:
        if flag.keyword is None:
            continue
        value = values[flag.name]
        if flag.keyword in declared:
            options[flag.keyword] = value
        elif value != flag.default and not (value == [] and flag.default is None):
            owners = [b for b in sorted(BACKENDS) if b != name and flag.keyword in backend_options(b)]
            raise InputError(
                f"{_flag_text(flag, prefix)} is an option of the {' / '.join(owners) or 'other'} backend, not of {name!r}"
            )
    options.update(parse_backend_options(values["backend_option"]))  # unknown keys: refused by load_backend
    return BackendSpec(backend=name, model=values["model"], options=options)


def _wrap(func: F, params: list[inspect.Parameter], build: Callable[[dict[str, Any]], dict[str, Any]]) -> F:
    """``func`` with the command-line parameters ``params``; ``build`` turns the values of the
    group's parameters (popped from the call) into the keyword arguments ``func`` takes instead."""
    names = [p.name for p in params if p.name not in inspect.signature(func).parameters]
    signature = inspect.signature(func, eval_str=True)

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        try:
            kwargs.update(build(values))
        except InputError as err:
            fail(err)
        return func(**kwargs)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]


def with_backend(func: F) -> F:
    """Give a command the backend option group; it receives ``spec: BackendSpec`` instead."""
    signature = inspect.signature(func, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "spec"]
    group = [_parameter(flag, None, None) for flag in _GROUP]
    # the model first (it is required), the rest after the command's own options
    params = [group[0], *[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own], *group[1:]]
    return _wrap(func, params, lambda values: {"spec": _spec(values)})


def with_secondary_backend(prefix: str, *, dest: str, label: str, model_from: str | None = None) -> Callable[[F], F]:
    """The same option group for a secondary model (an entailment judge, an extractor LLM):
    ``--PREFIX-model``, ``--PREFIX-backend`` (default hf), ``--PREFIX-endpoint``, ``--PREFIX-device``
    ... The command receives ``dest``: a :class:`BackendSpec`, or ``None`` when no
    ``--PREFIX-model`` is given (``--PREFIX-backend`` alone is refused).

    ``model_from``: where the backend and model come from another option instead (``probe build
    --extractor llm:BACKEND:MODEL``): the group then has no model or backend flag, and the
    command receives ``dest`` as a function ``(backend, model) -> BackendSpec`` applying the
    group's other flags (validated against that backend).
    """

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values() if p.name != dest]
        flags = [f for f in _GROUP if model_from is None or f.name not in ("model", "backend")]
        params = [*own, *(_parameter(flag, prefix, label) for flag in flags)]

        def build(values: dict[str, Any]) -> dict[str, Any]:
            plain = {flag.name: values[_param_name(flag, prefix)] for flag in flags}
            if model_from is not None:

                def spec_for(backend: str, model: str) -> BackendSpec:
                    return _spec({**plain, "backend": backend, "model": model}, prefix)

                return {dest: spec_for}
            if plain["model"] is None:
                if plain["backend"] is not None:
                    raise InputError(f"--{prefix.replace('_', '-')}-backend needs --{prefix.replace('_', '-')}-model")
                _spec({**plain, "backend": "hf"}, prefix)  # a stray flag of the group is still refused
                return {dest: None}
            return {dest: _spec({**plain, "backend": plain["backend"] or "hf"}, prefix)}

        return _wrap(func, params, build)

    return decorate
