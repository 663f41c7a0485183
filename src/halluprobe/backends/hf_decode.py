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

Sampling (:class:`Sampling`): the step's scores (the method's, or the base log-probabilities
for plain decoding) divided by the temperature, cut to the top-k and top-p tokens, one draw per
row from the row's own ``torch.Generator`` (seeded per question by the engine, hf_decode_engine.py),
so a row's text does not depend on its batch.

DoLa (:class:`DoLaRule`): no contrast branch; the base branch's hidden states of the candidate
layers each step, the premature layer chosen per row and step by JSD.

Not done yet (issue 24): PAI, the prefix-cache engine.

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
from halluprobe.readouts.corrections import parse_correction

__all__ = [
    "BRANCHES",
    "ContrastRule",
    "Decoded",
    "DoLaRule",
    "GreedyRule",
    "M3IDRule",
    "Sampling",
    "StepRule",
    "contrast_branch",
    "contrast_decode",
    "dola_layers",
    "parse_contrast",
    "parse_decode",
]

# each method's contrast branch, named as the request variant / signal it reads
BRANCHES: dict[str, str | None] = {"vcd": "noised", "icd": "instruction", "m3id": "no-image", "dola": None}
# DoLa's repetition penalty: the loop's own setting (the first-token rule has no history to penalise)
_DOLA_PENALTY = ("repetition_penalty", 1.2, 1.0, 10.0)


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


@dataclass(frozen=True)
class GreedyRule:
    """Plain decoding (no method): the base branch's log-probabilities; no contrast branch."""

    def scores(self, base_logits: Any, contrast_logits: Any, step: int = 0) -> Any:
        import torch

        return torch.log_softmax(base_logits.float(), dim=-1)


@dataclass(frozen=True)
class DoLaRule:
    """DoLa's step (Chuang et al., ICLR 2024) from the base branch's own pass, no contrast branch:
    among the candidate ``layers`` (hidden state N through the final norm and the LM head, as the
    ``layer:N`` signal), the premature layer is the one whose next-token distribution is furthest
    (Jensen-Shannon) from the final layer's, per row and step; scores are ``log p_final - log
    p_premature`` on the tokens with ``p_final >= relative_top * max p_final``, then transformers'
    repetition penalty over the row's tokens so far (prompt and generated; a positive score
    divided by it, a negative one multiplied)."""

    layers: tuple[int, ...]
    relative_top: float = 0.1
    repetition_penalty: float = 1.2

    def premature(self, final_logits: Any, early_logits: Sequence[Any]) -> Any:
        """[batch] index into ``layers`` of each row's premature layer (the largest JSD)."""
        import torch

        final = torch.log_softmax(final_logits.float(), dim=-1)
        divergences = []
        for early in early_logits:
            q = torch.log_softmax(early.float(), dim=-1)
            m = torch.logsumexp(torch.stack([final, q]), dim=0) - math.log(2.0)
            divergences.append(0.5 * ((final.exp() * (final - m)).sum(-1) + (q.exp() * (q - m)).sum(-1)))
        return torch.stack(divergences, dim=-1).argmax(dim=-1)

    def dola_scores(self, final_logits: Any, early_logits: Sequence[Any], seen: Any) -> Any:
        """[batch, vocab] scores; ``seen`` [batch, vocab] bool marks each row's tokens so far."""
        import torch

        final = torch.log_softmax(final_logits.float(), dim=-1)
        chosen = self.premature(final_logits, early_logits)
        stacked = torch.stack([torch.log_softmax(e.float(), dim=-1) for e in early_logits], dim=1)
        early = stacked[torch.arange(final.shape[0]), chosen]
        scores = final - early
        if self.relative_top > 0:
            cutoff = math.log(self.relative_top) + final.max(dim=-1, keepdim=True).values
            scores = scores.masked_fill(final < cutoff, -math.inf)
        if self.repetition_penalty != 1.0:
            penalised = torch.where(scores < 0, scores * self.repetition_penalty, scores / self.repetition_penalty)
            scores = torch.where(seen, penalised, scores)
        return scores


StepRule = ContrastRule | M3IDRule | GreedyRule | DoLaRule


def parse_decode(spec: str) -> tuple[str, dict[str, float]]:
    """``vcd:alpha=1,beta=0.1`` -> (method, every parameter): corrections.py's strict parser and
    ranges (the same names and defaults as the offline rule), restricted to the methods this loop
    runs. M3ID's ``t`` is the loop's own step, never given."""
    name, _, rest = spec.partition(":")
    if name not in BRANCHES:
        raise InputError(f"--decode {spec}: the decoding loop runs {', '.join(BRANCHES)} (pai: not yet)")
    penalty: float | None = None
    if name == "dola":  # its repetition penalty is the loop's: parsed here, the rest by corrections.py
        key, default, low, high = _DOLA_PENALTY
        kept = []
        for pair in filter(None, (x.strip() for x in rest.split(","))):
            if pair.partition("=")[0].strip() != key:
                kept.append(pair)
                continue
            if penalty is not None:
                raise InputError(f"{spec}: {key} is given twice")
            try:
                penalty = float(pair.partition("=")[2])
            except ValueError:
                raise InputError(f"{spec}: {key} must be a number, not {pair.partition('=')[2]!r}") from None
            if not low <= penalty <= high:
                raise InputError(f"{spec}: {key} must lie in [{low:g}, {high:g}]")
        rest = ",".join(kept)
        name, params = parse_correction(f"{name}:{rest}" if rest else name)
        params[key] = default if penalty is None else penalty
        return name, params
    name, params = parse_correction(spec)
    if name == "m3id":
        if "t=" in spec.replace(" ", ""):
            raise InputError(f"--decode {spec}: m3id's t is the decoding step, not a setting; give lambda only")
        params.pop("t", None)
    return name, params


def contrast_branch(spec: str) -> str | None:
    """The contrast branch (request variant) a method decodes against; InputError on a bad spec."""
    return BRANCHES[parse_decode(spec)[0]]


def dola_layers(n_layers: int) -> tuple[int, ...]:
    """DoLa's candidate premature layers: the ``layers`` signal's default (every second layer of
    the lower half), so the loop and the offline rule choose among the same layers."""
    return tuple(range(0, max(1, n_layers // 2), 2))


def parse_contrast(spec: str, n_layers: int = 0) -> tuple[str, StepRule]:
    """``vcd`` / ``icd:alpha=1,beta=0.1`` / ``m3id:lambda=0.02`` / ``dola:relative_top=0.1``
    -> (method, rule); InputError on anything else (:func:`parse_decode`). ``n_layers``: the
    text model's layers (DoLa's candidates)."""
    name, p = parse_decode(spec)
    if name == "dola":
        return name, DoLaRule(dola_layers(n_layers), p["relative_top"], p["repetition_penalty"])
    if name == "m3id":
        return name, M3IDRule(lam=p["lambda"])
    return name, ContrastRule(alpha=p["alpha"], beta=p["beta"])


@dataclass(frozen=True)
class Sampling:
    """Seeded sampling of a step's scores: temperature, then top-k, then top-p (nucleus)."""

    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None

    def filtered(self, scores: Any) -> Any:
        """The scores each row draws from (``-inf`` outside its top-k and its top-p mass)."""
        import torch

        scores = scores.float() / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth = torch.topk(scores, self.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, -math.inf)
        if self.top_p is not None and self.top_p < 1:
            ordered, order = torch.sort(scores, dim=-1, descending=True)
            mass = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = mass - torch.softmax(ordered, dim=-1) >= self.top_p  # the mass before it already reaches p
            scores = scores.masked_fill(drop.scatter(-1, order, drop), -math.inf)
        return scores

    def choose(self, scores: Any, generators: Sequence[Any]) -> Any:
        """One token per row, row ``i`` drawn with ``generators[i]`` (on the CPU)."""
        import torch

        probs = torch.softmax(self.filtered(scores), dim=-1).cpu()
        drawn = [int(torch.multinomial(probs[row], 1, generator=g)) for row, g in enumerate(generators)]
        return torch.tensor(drawn, dtype=torch.long, device=scores.device)


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
    for step in range(max_new_tokens):
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
