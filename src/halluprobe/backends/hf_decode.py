"""Contrastive decoding of free-form text (issue 24, first part): a greedy loop that advances a
base branch and a contrast branch in lockstep, each with its own KV cache, and takes every next
token from the method's per-step rule.

Done here: VCD (the contrast branch is the same prompt with the diffusion-noised pixels of
hf_signals.py, the same schedule and per-image seed as the ``noised`` signal) and ICD (the
contrast branch is the question under the disturbing instruction), both with the offline rule's
step (corrections.py's ``vcd`` / ``icd``): over the tokens whose base probability is at least
``beta`` times the step's largest, ``(1 + alpha) log p_base - alpha log p_contrast``, the argmax
taken. ``alpha`` = 0 is plain greedy decoding (tested against ``generate``'s text). M3ID (the
contrast branch is the question without the image): corrections.py's ``m3id`` at step ``t``
(0 for the first new token), ``log p_base + w_t (log p_base - log p_no_image)`` with
``w_t = (1 - exp(-lambda t)) / exp(-lambda t)``: inert at the first token, not after it.

Not done yet (issue 24): sampling, PAI, DoLa, the prefix-cache engine, ``run --decode``.

Plain engine only: full prompts, left-padded, explicit positions (``cumsum(mask) - 1``, what
``generate`` gives a left-padded batch), one forward pass per branch and step. torch is imported
inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from halluprobe.errors import InputError

__all__ = ["ContrastRule", "Decoded", "M3IDRule", "StepRule", "contrast_decode", "parse_contrast"]

_DEFAULTS = {"vcd": {"alpha": 1.0, "beta": 0.1}, "icd": {"alpha": 1.0, "beta": 0.1}, "m3id": {"lambda": 0.02}}


@dataclass(frozen=True)
class ContrastRule:
    """VCD's / ICD's next-token scores from the base and contrast branches' logits."""

    alpha: float = 1.0
    beta: float = 0.1

    def scores(self, base_logits: Any, contrast_logits: Any, step: int = 0) -> Any:
        """[batch, vocab] scores; ``-inf`` on the tokens the plausibility cut-off drops."""
        import torch

        base = torch.log_softmax(base_logits.float(), dim=-1)
        contrast = torch.log_softmax(contrast_logits.float(), dim=-1)
        scores = (1 + self.alpha) * base - self.alpha * contrast
        if self.beta <= 0:
            return scores
        cutoff = math.log(self.beta) + base.max(dim=-1, keepdim=True).values
        return scores.masked_fill(base < cutoff, -math.inf)


@dataclass(frozen=True)
class M3IDRule:
    """M3ID's next-token scores at step ``step`` from the base and no-image branches' logits."""

    lam: float = 0.02

    def weight(self, step: int) -> float:
        decay = math.exp(-self.lam * step)
        return (1 - decay) / decay

    def scores(self, base_logits: Any, contrast_logits: Any, step: int = 0) -> Any:
        import torch

        base = torch.log_softmax(base_logits.float(), dim=-1)
        w = self.weight(step)
        if w == 0.0:  # the first token: the base pass
            return base
        return base + w * (base - torch.log_softmax(contrast_logits.float(), dim=-1))


StepRule = ContrastRule | M3IDRule


def parse_contrast(spec: str) -> tuple[str, StepRule]:
    """``vcd`` / ``icd:alpha=1,beta=0.1`` / ``m3id:lambda=0.02`` -> (method, rule); InputError
    on anything else."""
    name, _, args = spec.partition(":")
    if name not in _DEFAULTS:
        raise InputError(f"decoding method {name!r}: this engine decodes {', '.join(map(repr, _DEFAULTS))}")
    values = dict(_DEFAULTS[name])
    for part in filter(None, args.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in values:
            raise InputError(f"{name}: parameter {part!r}; known: {', '.join(f'{k}=' for k in values)}")
        try:
            values[key] = float(value)
        except ValueError:
            raise InputError(f"{name}: {key} must be a number, not {value!r}") from None
    if name == "m3id":
        if values["lambda"] < 0:
            raise InputError(f"{name}: lambda >= 0 is needed")
        return name, M3IDRule(lam=values["lambda"])
    if values["alpha"] < 0 or not 0 <= values["beta"] < 1:
        raise InputError(f"{name}: alpha >= 0 and 0 <= beta < 1 are needed")
    return name, ContrastRule(alpha=values["alpha"], beta=values["beta"])


@dataclass
class Decoded:
    """A batch's decoded tokens (each row up to and including its end token), and per step the
    two branches' last-position logits and the scores the token was chosen by."""

    tokens: list[list[int]]
    base_logits: list[Any] = field(default_factory=list)  # per step [batch, vocab]
    contrast_logits: list[Any] = field(default_factory=list)
    scores: list[Any] = field(default_factory=list)


class _Branch:
    """One branch's running state: its KV cache, mask and next positions."""

    def __init__(self, model: Any, inputs: dict[str, Any]) -> None:
        self.model = model
        self.mask = inputs["attention_mask"]
        self.positions = (self.mask.long().cumsum(-1) - 1).clamp(min=0)
        self.cache: Any = None
        self.first = inputs

    def step(self, tokens: Any | None) -> Any:
        """The next position's logits: the prompt on the first call, then the chosen ``tokens``."""
        import torch

        with torch.inference_mode():
            if tokens is None:
                out = self.model(**self.first, position_ids=self.positions, use_cache=True)
            else:
                ones = torch.ones_like(tokens)
                self.mask = torch.cat([self.mask, ones], dim=-1)
                self.positions = self.positions[:, -1:] + 1
                out = self.model(
                    input_ids=tokens, attention_mask=self.mask, position_ids=self.positions,
                    past_key_values=self.cache, use_cache=True,
                )  # fmt: skip
        self.cache = out.past_key_values
        return out.logits[:, -1, :]


def contrast_decode(
    model: Any,
    base_inputs: dict[str, Any],
    contrast_inputs: dict[str, Any],
    rule: StepRule,
    *,
    max_new_tokens: int,
    end_ids: Sequence[int],
    pad_id: int,
    keep_steps: bool = False,
) -> Decoded:
    """Greedy contrastive decoding of a batch: both branches' prompts run once, then one token
    per step in lockstep. A row that emits an end token is done (it is fed ``pad_id`` after, and
    its text stops there). ``keep_steps`` keeps every step's logits and scores (for tests)."""
    import torch

    base, contrast = _Branch(model, base_inputs), _Branch(model, contrast_inputs)
    rows = base_inputs["input_ids"].shape[0]
    out = Decoded(tokens=[[] for _ in range(rows)])
    done = torch.zeros(rows, dtype=torch.bool, device=base_inputs["input_ids"].device)
    ends = torch.tensor(sorted(set(end_ids)), dtype=torch.long, device=done.device)
    tokens = None
    for step in range(max_new_tokens):
        base_logits, contrast_logits = base.step(tokens), contrast.step(tokens)
        scores = rule.scores(base_logits, contrast_logits, step)
        chosen = scores.argmax(dim=-1)
        chosen = torch.where(done, torch.full_like(chosen, pad_id), chosen)
        if keep_steps:
            out.base_logits.append(base_logits.float().cpu())
            out.contrast_logits.append(contrast_logits.float().cpu())
            out.scores.append(scores.cpu())
        for row, token in enumerate(chosen.tolist()):
            if not done[row]:
                out.tokens[row].append(int(token))
        done = done | torch.isin(chosen, ends)
        if bool(done.all()):
            break
        tokens = chosen.unsqueeze(-1)
    return out
