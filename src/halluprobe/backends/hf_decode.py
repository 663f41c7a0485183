"""Decoding free-form text with a correction (issue 24): a loop that advances a base branch and
a contrast branch in lockstep, each with its own KV cache, and takes every next token from the
method's per-step rule (the rules and their parsing: hf_decode_rules.py, re-exported here).

The rules: VCD (the contrast branch is the same prompt with the diffusion-noised pixels of
hf_signals.py, the same schedule and per-image seed as the ``noised`` signal) and ICD (the
contrast branch is the question under the disturbing instruction), both with the offline rule's
step (corrections.py's ``vcd`` / ``icd``): over the tokens whose base probability is at least
``beta`` times the step's largest, ``(1 + alpha) log p_base - alpha log p_contrast``, the argmax
taken. ``alpha`` = 0 is plain greedy decoding (tested against ``generate``'s text). M3ID (the
contrast branch is the question without the image): corrections.py's ``m3id`` at step ``t``
(0 for the first new token), ``log p_base + w_t (log p_base - log p_no_image)`` with
``w_t = (1 - exp(-lambda t)) / exp(-lambda t)``: inert at the first token, not after it.

Sampling (:class:`Sampling`): the step's scores (the method's, or the base log-probabilities
for plain decoding) divided by the temperature, cut to the top-k and top-p tokens, one draw per
row from the row's own ``torch.Generator`` (seeded per question by the engine, hf_decode_engine.py),
so a row's text does not depend on its batch.

DoLa (:class:`DoLaRule`): no contrast branch; the base branch's hidden states of the candidate
layers each step, the premature layer chosen per row and step by JSD.

PAI (:class:`PAIRule`): the base branch under hf_signals' amplified attention at every step,
guided against the no-image branch.

Not done yet (issue 24): the prefix-cache engine; one forward pass shared by base and contrast rows.

Plain engine only: full prompts, left-padded, explicit positions (``cumsum(mask) - 1``, what
``generate`` gives a left-padded batch), one forward pass per branch and step. torch is imported
inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from halluprobe.backends.hf_decode_rules import (
    BRANCHES,
    ContrastRule,
    DoLaRule,
    GreedyRule,
    M3IDRule,
    PAIRule,
    Sampling,
    StepRule,
    contrast_branch,
    dola_layers,
    parse_contrast,
    parse_decode,
)
from halluprobe.backends.hf_signals import amplified_attention

__all__ = [
    "BRANCHES",
    "ContrastRule",
    "Decoded",
    "DoLaRule",
    "GreedyRule",
    "M3IDRule",
    "PAIRule",
    "Sampling",
    "StepRule",
    "contrast_branch",
    "contrast_decode",
    "dola_layers",
    "parse_contrast",
    "parse_decode",
]



@dataclass
class Decoded:
    """A batch's decoded tokens (each row up to and including its end token), and per step the
    two branches' last-position logits and the scores the token was chosen by."""

    tokens: list[list[int]]
    first_logits: Any = None  # the base branch's first step [batch, vocab] (the first-token record)
    base_logits: list[Any] = field(default_factory=list)  # per step [batch, vocab]
    contrast_logits: list[Any] = field(default_factory=list)
    scores: list[Any] = field(default_factory=list)
    early_logits: list[list[Any]] = field(default_factory=list)  # DoLa: per step, the candidate layers' logits


class _Branch:
    """One branch's running state: its KV cache, mask and next positions."""

    def __init__(self, model: Any, inputs: dict[str, Any]) -> None:
        self.model = model
        self.mask = inputs["attention_mask"]
        self.positions = (self.mask.long().cumsum(-1) - 1).clamp(min=0)
        self.cache: Any = None
        self.first = inputs

    def step(self, tokens: Any | None, hidden: Sequence[int] = ()) -> tuple[Any, list[Any]]:
        """The next position's logits: the prompt on the first call, then the chosen ``tokens``;
        and the last position's hidden states of the layers in ``hidden`` through the final norm
        and the LM head (DoLa's early layers; as hf_signals.layer_signals reads them)."""
        import torch

        wanted = {"output_hidden_states": True} if hidden else {}
        with torch.inference_mode():
            if tokens is None:
                out = self.model(**self.first, position_ids=self.positions, use_cache=True, **wanted)
            else:
                ones = torch.ones_like(tokens)
                self.mask = torch.cat([self.mask, ones], dim=-1)
                self.positions = self.positions[:, -1:] + 1
                out = self.model(
                    input_ids=tokens, attention_mask=self.mask, position_ids=self.positions,
                    past_key_values=self.cache, use_cache=True, **wanted,
                )  # fmt: skip
            early = []
            if hidden:
                states = out.hidden_states
                norm, head = self.model.get_decoder().norm, self.model.get_output_embeddings()
                early = [head(norm(states[n][:, -1, :])) for n in hidden]
        self.cache = out.past_key_values
        return out.logits[:, -1, :], early


def contrast_decode(
    model: Any,
    base_inputs: dict[str, Any],
    contrast_inputs: dict[str, Any] | None,
    rule: StepRule,
    *,
    max_new_tokens: int,
    end_ids: Sequence[int],
    pad_id: int,
    keep_steps: bool = False,
    sampling: Sampling | None = None,
    generators: Sequence[Any] = (),
    image_token_id: int | None = None,
) -> Decoded:
    """Contrastive decoding of a batch: both branches' prompts run once, then one token per step
    in lockstep (``contrast_inputs`` None: the base branch alone, plain decoding). Greedy, or with
    ``sampling`` one draw per row from ``generators[row]``. A row that emits an end token is done
    (it is fed ``pad_id`` after, and its text stops there). ``keep_steps`` keeps every step's
    logits and scores (for tests)."""
    import torch

    base = _Branch(model, base_inputs)
    contrast = _Branch(model, contrast_inputs) if contrast_inputs is not None else None
    rows = base_inputs["input_ids"].shape[0]
    out = Decoded(tokens=[[] for _ in range(rows)])
    done = torch.zeros(rows, dtype=torch.bool, device=base_inputs["input_ids"].device)
    ends = torch.tensor(sorted(set(end_ids)), dtype=torch.long, device=done.device)
    tokens = None
    seen: Any = None  # DoLa: [batch, vocab] the tokens its repetition penalty applies to
    columns: Any = None  # PAI: [batch, keys] the image tokens among the base branch's keys
    for step in range(max_new_tokens):
        if isinstance(rule, PAIRule):  # the base branch attends with the image amplified, every step
            if step == 0:
                if image_token_id is None:
                    raise ValueError("PAI needs the image token id to find the image's keys")
                columns = base_inputs["input_ids"] == image_token_id
            else:
                columns = torch.cat([columns, torch.zeros_like(columns[:, :1])], dim=-1)
            with amplified_attention(model, rule.setting, columns):
                base_logits, early = base.step(tokens)
        else:
            base_logits, early = base.step(tokens, rule.layers if isinstance(rule, DoLaRule) else ())
        contrast_logits = contrast.step(tokens)[0] if contrast is not None else None
        if step == 0:
            out.first_logits = base_logits
        if isinstance(rule, DoLaRule):
            if step == 0:  # each row's tokens so far: its prompt (padding left out), then what it decodes
                seen = torch.zeros_like(base_logits, dtype=torch.bool)
                for row in range(rows):
                    prompt = base_inputs["input_ids"][row][base_inputs["attention_mask"][row].bool()]
                    seen[row, prompt[prompt < seen.shape[-1]].to(seen.device)] = True
            scores = rule.dola_scores(base_logits, early, seen)
            if keep_steps:
                out.early_logits.append([e.float().cpu() for e in early])
        else:
            scores = rule.scores(base_logits, contrast_logits, step)
        chosen = scores.argmax(dim=-1) if sampling is None else sampling.choose(scores, generators)
        chosen = torch.where(done, torch.full_like(chosen, pad_id), chosen)
        if keep_steps:
            out.base_logits.append(base_logits.float().cpu())
            if contrast_logits is not None:
                out.contrast_logits.append(contrast_logits.float().cpu())
            out.scores.append(scores.cpu())
        for row, token in enumerate(chosen.tolist()):
            if not done[row]:
                out.tokens[row].append(int(token))
        if isinstance(rule, DoLaRule):
            seen[torch.arange(rows, device=seen.device), chosen] = True
        done = done | torch.isin(chosen, ends)
        if bool(done.all()):
            break
        tokens = chosen.unsqueeze(-1)
    return out
