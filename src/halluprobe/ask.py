"""The one request path: every stage that needs a model's answers calls :func:`ask`.

A stage builds its :class:`~halluprobe.records.Request` list (rendered prompt + image path) and
one :class:`~halluprobe.records.GenerateConfig`; the backend receives the whole list and decides
how to batch it. :func:`ask` is the only caller of ``Backend.answer``: it checks that every
response answers a request of the list, once, and that none is left unanswered, so a backend
bug surfaces here as one clear failure instead of a silently shorter run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from halluprobe.backends.base import Backend
from halluprobe.errors import RuntimeFailure
from halluprobe.records import GenerateConfig, QuestionKey, Request, Response

__all__ = ["ask"]


def ask(backend: Backend, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
    """Yield the backend's responses to ``requests`` batch by batch (persist each as it comes)."""
    if not requests:
        return
    expected: set[QuestionKey] = {r.key for r in requests}
    if len(expected) != len(requests):
        raise RuntimeFailure("two requests share a key (split, question_id): each must be asked once")
    answered: set[QuestionKey] = set()
    for batch in backend.answer(requests, config):
        for response in batch:
            if response.key not in expected:
                raise RuntimeFailure(f"the backend answered {response.key}, which was not asked")
            if response.key in answered:
                raise RuntimeFailure(f"the backend answered {response.key} twice")
            answered.add(response.key)
        yield batch
    if len(answered) != len(expected):
        missing = sorted(expected - answered)
        raise RuntimeFailure(f"the backend left {len(missing)} request(s) unanswered, e.g. {missing[0]}")
