"""Free-text generation through any halluprobe backend, with bounded JSON retries.

Backends answer :class:`~halluprobe.records.Request` lists with up to ``max_new_tokens`` of greedy
text; Auto-Probe reuses that path for descriptions, JSON extraction and AttriBait generation. The
backend seam has no system role: a system prompt is put in front of the user text, separated by
a blank line, and the exact rendered prompt is recorded. Generation asks with no stop strings
(``GenerateConfig(stop_strings=())``), so a description does not stop at its first '.'.

:func:`generate_json` asks, validates each answer with a caller's parser, and re-asks only the
invalid ones, at most ``max_retries`` times, with the validation error appended to the prompt.
An answer still invalid after the last retry is returned with its error: never a crash, never a
silent drop.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from halluprobe.ask import ask
from halluprobe.backends.base import Backend
from halluprobe.jsonl import loads
from halluprobe.records import GenerateConfig, Request

__all__ = ["GenerationItem", "Generated", "compose_prompt", "generate", "generate_json", "parse_json_object", "RETRY_SUFFIX"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_SUFFIX = "\n\nYour previous answer was not valid ({error}). Answer again with the JSON object only."
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


@dataclass(frozen=True)
class GenerationItem:
    key: str
    image_path: str
    text: str  # the user text (system prompt already composed in, see compose_prompt)


@dataclass
class Generated(Generic[T]):
    key: str
    prompt: str  # the rendered prompt of the last attempt
    raw: list[str | None] = field(default_factory=list)  # every attempt's text
    value: T | None = None
    error: str | None = None

    @property
    def attempts(self) -> int:
        return len(self.raw)


def compose_prompt(user: str, system: str | None = None) -> str:
    """The text handed to ``render_prompt``: the system prompt, a blank line, the user prompt."""
    return f"{system.strip()}\n\n{user}" if system and system.strip() else user


def generate(
    backend: Backend, items: Sequence[GenerationItem], *, max_new_tokens: int, template: str | None = None
) -> dict[str, tuple[str, str | None, str | None]]:
    """key -> (rendered prompt, text or None, error or None), one greedy generation per item."""
    requests = []
    prompts: dict[int, tuple[str, str]] = {}
    for index, item in enumerate(items):
        prompt = backend.render_prompt(item.text, template)
        prompts[index] = (item.key, prompt)
        requests.append(Request(split="autoprobe", question_id=index, image_path=item.image_path, prompt=prompt))
    out: dict[str, tuple[str, str | None, str | None]] = {}
    for batch in ask(backend, requests, GenerateConfig(max_new_tokens=max_new_tokens, top_k=1, stop_strings=())):
        for response in batch:
            key, prompt = prompts[response.question_id]
            error = response.error
            if error is None and response.text is None:
                error = "the backend returned no text"
            out[key] = (prompt, response.text if error is None else None, error)
    return out


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text`` (code fences and text around the braces tolerated); ValueError else."""
    stripped = _FENCE.sub("", text.strip())
    start, end = stripped.find("{"), stripped.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object found")
    try:
        value = loads(stripped[start : end + 1])
    except json.JSONDecodeError as err:
        raise ValueError(f"malformed JSON: {err.msg} at column {err.colno}") from None
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def generate_json(
    backend: Backend,
    items: Sequence[GenerationItem],
    parse: Callable[[str], T],
    *,
    max_new_tokens: int,
    max_retries: int = 2,
    template: str | None = None,
) -> list[Generated[T]]:
    """Generate, validate with ``parse`` (raises ValueError with a reason), re-ask the invalid ones."""
    results = {item.key: Generated[T](key=item.key, prompt="") for item in items}
    pending = list(items)
    errors: dict[str, str] = {}
    for attempt in range(max_retries + 1):
        if not pending:
            break
        asked = [
            item if attempt == 0 else GenerationItem(item.key, item.image_path, item.text + RETRY_SUFFIX.format(error=errors[item.key]))
            for item in pending
        ]
        answers = generate(backend, asked, max_new_tokens=max_new_tokens, template=template)
        retry: list[GenerationItem] = []
        for item in pending:
            prompt, text, error = answers.get(item.key, ("", None, "the backend returned no response"))
            result = results[item.key]
            result.prompt = prompt
            result.raw.append(text)
            if error is None and text is not None:
                try:
                    result.value = parse(text)
                    result.error = None
                    continue
                except ValueError as err:
                    error = str(err)
            result.error = f"attempt {attempt + 1}: {error}"
            errors[item.key] = str(error)
            if error is not None and not error.startswith("cannot read image"):
                retry.append(item)
        pending = retry
    for result in results.values():
        if result.error is not None:
            logger.warning("%s: no valid answer after %d attempt(s): %s", result.key, result.attempts, result.error)
    return list(results.values())
