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

from halluprobe.backends.hf.packed import _greedy

pytestmark = pytest.mark.slow  # torch (no model is built)

EOS, VOCAB = 0, 10


class _Scripted:
    """A packed branch whose step ``n`` (after the suffix pass) gives each slot the token
    ``script[slot][n]``: the parts of hf_packed.PackedBranch the greedy loop reads."""

    def __init__(self, script: list[list[int]]) -> None:
        self.script = script
        self.calls = 0
        self.model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=EOS))
        self.asked = torch.ones((1, len(script)), dtype=torch.bool)
        self.tails = torch.zeros((1, len(script), 1), dtype=torch.long)

    def next_grid(self, tokens: Any) -> tuple[Any, list[Any]]:
        assert tokens.shape == self.asked.shape
        self.calls += 1
        return _logits([slot[self.calls] for slot in self.script]), []


def _logits(tokens: list[int]) -> Any:
    logits = torch.zeros((1, len(tokens), VOCAB))
    for slot, token in enumerate(tokens):
        logits[0, slot, token] = 1.0
    return logits


def test_a_slot_keeps_its_first_eos_while_its_neighbour_goes_on() -> None:
    script = [
        [EOS, 7, EOS, 7, 7],
        [5, 6, 8, EOS, 9],
    ]  # slot 0 meets EOS at steps 1 and 3
    branch = _Scripted(script)
    steps = _greedy(branch, _logits([tokens[0] for tokens in script]), None, 5)  # type: ignore[arg-type]
    assert steps == [[EOS], [5, 6, 8, EOS]]
    assert branch.calls == 3  # the batch ends when its last question does
