"""The packed rows' greedy loop (hf/packed.py) ends each question at its first stop, on a scripted
model: a question that meets EOS keeps that length while its neighbour goes on, even where its
later (unread) tokens meet EOS again. The tiny real models' tests (tests/test_packed_rows.py)
never produce a second stop in a stopped slot, so they pass with the length taken at the last
stop instead of the first."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.packed import PREFIX, _greedy

pytestmark = pytest.mark.slow  # torch (no model is built)

EOS, VOCAB = 0, 10


class _Scripted:
    """A model whose step ``n`` (after the suffix pass) gives each slot the token ``script[slot][n]``."""

    def __init__(self, script: list[list[int]]) -> None:
        self.script = script
        self.calls = 0
        self.generation_config = SimpleNamespace(eos_token_id=EOS)

    def __call__(self, **_: Any) -> Any:
        self.calls += 1
        logits = torch.zeros((1, len(self.script), VOCAB))
        for slot, tokens in enumerate(self.script):
            logits[0, slot, tokens[self.calls]] = 1.0
        return SimpleNamespace(logits=logits)


def _first_logits(tokens: list[int]) -> Any:
    logits = torch.zeros((1, len(tokens), VOCAB))
    for slot, token in enumerate(tokens):
        logits[0, slot, token] = 1.0
    return logits


def test_a_slot_keeps_its_first_eos_while_its_neighbour_goes_on() -> None:
    script = [
        [EOS, 7, EOS, 7, 7],
        [5, 6, 8, EOS, 9],
    ]  # slot 0 meets EOS at steps 1 and 3
    model = _Scripted(script)
    owner = torch.tensor([[PREFIX, PREFIX, 0, 1]])
    steps = _greedy(
        model,
        None,
        _first_logits([tokens[0] for tokens in script]),
        owner,
        torch.tensor([[0, 1]]),
        torch.tensor([[3, 3]]),
        torch.tensor([[False, False]]),
        torch.zeros((1, 2, 1), dtype=torch.long),
        None,
        lambda positions: positions,
        5,
        torch.float32,
    )
    assert steps == [[EOS], [5, 6, 8, EOS]]
    assert model.calls == 3  # the batch ends when its last question does
