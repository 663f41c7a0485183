"""The backend seam: a Protocol and the one name -> "module:Class" registry.

A backend receives the whole list of requests and decides how to batch them (local models:
synchronous batches; servers: concurrency inside the backend). It never sees benchmark
internals: only rendered prompts and image paths.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from halluprobe.errors import InputError
from halluprobe.records import DecodeSpec, GenerateConfig, Request, Response, TokenSets

__all__ = ["Backend", "BACKENDS", "CountsRequests", "DecodesText", "RecordsSignals", "backend_class", "backend_options", "load_backend"]

# One name, one place: a new backend is one module plus one line here.
BACKENDS: dict[str, str] = {
    "hf": "halluprobe.backends.hf.backend:HFBackend",
    "openai": "halluprobe.backends.openai.backend:OpenAIBackend",
    "scripted": "halluprobe.backends.scripted:ScriptedBackend",
}


@runtime_checkable
class Backend(Protocol):
    """What the runner needs from a model."""

    def info(self) -> dict[str, Any]:
        """Model id or path, revision, dtype, device: written into run.json."""
        ...

    def token_sets(self) -> TokenSets | None:
        """Yes/no token sets derived from the model's own tokenizer (None when it has none)."""
        ...

    def render_prompt(self, question: str, template: str | None, *, image: bool = True) -> str:
        """The exact text that, passed with the image, gives the model's inputs (``image=False``:
        the same prompt without the image, for the ``no-image`` correction signal)."""
        ...

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        """Answer every request with the settings of ``config``; yield responses batch by batch
        so the caller can persist them. Callers go through :func:`halluprobe.ask.ask`."""
        ...


# Optional capabilities: a backend has one when it defines the method; callers ask with
# ``isinstance(backend, RecordsSignals)``, never by probing attributes one by one.


@runtime_checkable
class RecordsSignals(Protocol):
    """A backend that records correction signals (``GenerateConfig.signals``) beside its answers."""

    def check_signals(self, signals: Sequence[str]) -> None:
        """InputError for a signal it cannot record (checked before any request runs)."""
        ...


@runtime_checkable
class DecodesText(Protocol):
    """A backend with a decoding loop: answers decoded with a method or sampled
    (``GenerateConfig.decode`` / ``sample``)."""

    def check_decoding(self, config: GenerateConfig) -> None:
        """InputError for a method or setting this model cannot run (checked before any request)."""
        ...

    def decoding_settings(self, spec: DecodeSpec) -> dict[str, Any]:
        """Every setting ``spec`` decodes with on this model (defaults and layers resolved): run.json's record."""
        ...


@runtime_checkable
class CountsRequests(Protocol):
    """A backend that counts its requests (a server backend): written to ``requests.json``."""

    def request_stats(self) -> dict[str, Any]:
        """Attempts, outcomes and retries of the requests sent so far."""
        ...


def backend_class(name: str) -> type:
    """The class registered as ``name``; its module is imported here (the heavy imports of a
    backend happen in its constructor)."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise InputError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)  # type: ignore[no-any-return]


def backend_options(name: str) -> list[str]:
    """The options a backend declares: its constructor's keyword parameters (``model`` aside)."""
    params = inspect.signature(backend_class(name)).parameters.values()
    return [p.name for p in params if p.name != "model" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def load_backend(name: str, **options: Any) -> Backend:
    """Instantiate a registered backend. An option it does not declare is refused (exit 2),
    naming the valid ones: a misspelt ``--backend-option`` never passes silently."""
    valid = backend_options(name)
    unknown = sorted(set(options) - set(valid) - {"model"})
    if unknown:
        raise InputError(f"unknown option {', '.join(map(repr, unknown))} for the {name} backend; valid: {', '.join(sorted(valid))}")
    return backend_class(name)(**options)  # type: ignore[no-any-return]
