"""ask.ask: the one request path checks the backend's side of the contract, each failure alone."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from halluprobe.ask import ask
from halluprobe.errors import RuntimeFailure
from halluprobe.records import GenerateConfig, Request, Response, TokenSets

CONFIG = GenerateConfig(max_new_tokens=0, top_k=1)


class _Backend:
    """Answers with whatever ``script`` makes of the requests, in one batch per list it returns."""

    def __init__(self, script: Callable[[Sequence[Request]], list[list[Response]]]) -> None:
        self.script = script

    def info(self) -> dict[str, Any]:
        return {"model": "contract"}

    def token_sets(self) -> TokenSets | None:
        return None

    def render_prompt(self, question: str, template: str | None, *, image: bool = True) -> str:
        return question

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        yield from self.script(requests)


def _requests(n: int) -> list[Request]:
    return [Request(split="s", question_id=i, image_path=f"{i}.jpg", prompt=f"q{i}") for i in range(n)]


def _answer(request: Request) -> Response:
    return Response(split=request.split, question_id=request.question_id, text="yes")


def test_every_request_answered_once_passes_batch_by_batch() -> None:
    backend = _Backend(lambda rs: [[_answer(r) for r in rs[:2]], [_answer(r) for r in rs[2:]]])
    batches = list(ask(backend, _requests(3), CONFIG))
    assert [[r.question_id for r in b] for b in batches] == [[0, 1], [2]]


def test_no_request_never_calls_the_backend() -> None:
    def fails(requests: Sequence[Request]) -> list[list[Response]]:
        raise AssertionError("the backend was called")

    assert list(ask(_Backend(fails), [], CONFIG)) == []


def test_two_requests_with_one_key_are_refused_before_the_backend_runs() -> None:
    calls: list[int] = []

    def script(requests: Sequence[Request]) -> list[list[Response]]:
        calls.append(1)
        return [[_answer(r) for r in requests]]

    twice = [*_requests(2), _requests(1)[0].model_copy(update={"prompt": "another"})]
    with pytest.raises(RuntimeFailure, match="two requests share a key"):
        list(ask(_Backend(script), twice, CONFIG))
    assert calls == []


def test_an_answer_to_a_question_not_asked_fails() -> None:
    stranger = Request(split="s", question_id=99, image_path="x.jpg", prompt="q")
    backend = _Backend(lambda rs: [[_answer(r) for r in rs], [_answer(stranger)]])
    with pytest.raises(RuntimeFailure, match=r"answered \('s', 99\), which was not asked"):
        list(ask(backend, _requests(2), CONFIG))


def test_a_question_answered_twice_fails_and_the_batches_before_it_came_through() -> None:
    backend = _Backend(lambda rs: [[_answer(rs[0])], [_answer(rs[1]), _answer(rs[0])]])
    got: list[list[Response]] = []
    with pytest.raises(RuntimeFailure, match=r"answered \('s', 0\) twice"):
        for batch in ask(backend, _requests(2), CONFIG):
            got.append(batch)
    assert [[r.question_id for r in b] for b in got] == [[0]]  # persisted before the failure


def test_a_question_left_unanswered_fails_after_the_last_batch() -> None:
    backend = _Backend(lambda rs: [[_answer(r) for r in rs[:-1]]])
    got: list[list[Response]] = []
    with pytest.raises(RuntimeFailure, match=r"left 1 request\(s\) unanswered, e.g. \('s', 2\)"):
        for batch in ask(backend, _requests(3), CONFIG):
            got.append(batch)
    assert sum(len(b) for b in got) == 2
