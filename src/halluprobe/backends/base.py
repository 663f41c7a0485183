"""The backend seam: a Protocol and the one name -> "module:Class" registry.

A backend receives the whole list of requests and decides how to batch them (local models:
synchronous batches; servers: concurrency inside the backend). It never sees benchmark
internals: only rendered prompts and image paths.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from halluprobe.errors import InputError
from halluprobe.records import Request, Response, TokenSets

__all__ = ["Backend", "BACKENDS", "load_backend"]

# One name, one place: a new backend is one module plus one line here.
BACKENDS: dict[str, str] = {
    "hf": "halluprobe.backends.hf:HFBackend",
    "openai": "halluprobe.backends.openai_compat:OpenAIBackend",
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

    def render_prompt(self, question: str, template: str | None) -> str:
        """The exact text that, passed with the image, gives the model's inputs."""
        ...

    def answer(
        self, requests: Sequence[Request], *, max_new_tokens: int, top_k: int
    ) -> Iterator[list[Response]]:
        """Answer every request; yield responses batch by batch so the caller can persist them.

        ``max_new_tokens`` = 0 asks for first-token readouts only (no text continuation).
        """
        ...


def load_backend(name: str, **options: Any) -> Backend:
    """Instantiate a registered backend; the heavy import happens only here."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise InputError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**options)
