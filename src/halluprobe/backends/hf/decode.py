"""Decoding free-form text with a correction (issue 24): a loop that advances a base branch and
a contrast branch in lockstep, each with its own KV cache, and takes every next token from the
method's per-step rule (the rules and their parsing: hf/decode_rules.py, re-exported here).

The rules: VCD (the contrast branch is the same prompt with the diffusion-noised pixels of
hf/signals.py, the same schedule and per-image seed as the ``noised`` signal) and ICD (the
contrast branch is the question under the disturbing instruction), both with the offline rule's
step (corrections.py's ``vcd`` / ``icd``): over the tokens whose base probability is at least
``beta`` times the step's largest, ``(1 + alpha) log p_base - alpha log p_contrast``, the argmax
taken. ``alpha`` = 0 is plain greedy decoding (tested against ``generate``'s text). M3ID (the
contrast branch is the question without the image): corrections.py's ``m3id`` at step ``t``
(0 for the first new token), ``log p_base + w_t (log p_base - log p_no_image)`` with
``w_t = (1 - exp(-lambda t)) / exp(-lambda t)``: inert at the first token, not after it.

Sampling (:class:`Sampling`): the step's scores (the method's, or the base log-probabilities
for plain decoding) divided by the temperature, cut to the top-k and top-p tokens, one draw per
row from the row's own ``torch.Generator`` (seeded per question by the engine, hf/decode_engine.py),
so a row's text does not depend on its batch.

DoLa (:class:`DoLaRule`): no contrast branch; the base branch's hidden states of the candidate
layers each step, the premature layer chosen per row and step by JSD.

PAI (:class:`PAIRule`): the base branch under hf_signals' amplified attention at every step,
guided against the no-image branch.

Inputs: full prompts, left-padded, explicit positions (``cumsum(mask) - 1``, what ``generate``
gives a left-padded batch; Qwen2-VL's family: the model's own 3-D rotary positions), or suffixes
after an image's cached prefix (hf/decode_prefix.py: ``past_key_values`` and explicit positions),
or an image's questions packed into one row (hf_packed.PackedRows: the branch is a
:class:`~halluprobe.backends.hf.packed.PackedBranch`, which hands the loop a row per question;
joined, the base and contrast images' rows are one batch).
With ``joint`` the base and contrast rows run as one batch of 2B rows, one KV cache and one
forward pass per step, wherever :func:`joined_inputs` can put them together (full prompts
re-left-padded to one width; suffixes after prefixes of one length: VCD's noised prefix; packed
rows always); else one forward pass per branch and step. The first step asks for the last
position's logits only (``logits_to_keep=1``; packed rows: each slot's last column). torch is
imported inside the functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from halluprobe.backends.hf.decode_rules import (
    DoLaRule,
    PAIRule,
    Sampling,
    StepRule,
)
from halluprobe.backends.hf.packed import PackedBranch, PackedRows
from halluprobe.backends.hf.prefix import joined_cache, make_room
from halluprobe.backends.hf.signals import amplified_attention

__all__ = ["JOIN_PADDING", "Decoded", "contrast_decode", "joined_inputs"]



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
    """One branch's running state (or, joined, the base and the contrast rows as one batch): its
    KV cache, mask and next positions. ``inputs`` are full prompts, or suffixes after a cached
    prefix (``past_key_values`` and explicit ``position_ids``: hf_prefix.suffix_inputs)."""

    def __init__(self, model: Any, inputs: dict[str, Any], room: int = 0) -> None:
        self.model = model
        self.room = room  # positions the loop may still append after the first step (hf_prefix.make_room)
        # the first step needs the last position's logits only (what ``generate`` asks for)
        params = inspect.signature(model.forward).parameters
        self.keep_last: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.mask = inputs["attention_mask"]
        positions = inputs.get("position_ids")
        if positions is None:
            positions = _rope_positions(model, inputs)
        self.positions = positions if positions is not None else (self.mask.long().cumsum(-1) - 1).clamp(min=0)
        self.cache: Any = inputs.get("past_key_values")
        self.first = {k: v for k, v in inputs.items() if k not in ("position_ids", "past_key_values")}
        self.stepper = model  # what runs the steps after the first (InstructBLIP: its language model)

    def step(self, tokens: Any | None, hidden: Sequence[int] = ()) -> tuple[Any, list[Any]]:
        """The next position's logits: the prompt on the first call, then the chosen ``tokens``;
        and the last position's hidden states of the layers in ``hidden`` through the final norm
        and the LM head (DoLa's early layers; as hf_signals.layer_signals reads them)."""
        import torch

        wanted = {"output_hidden_states": True} if hidden else {}
        with torch.inference_mode():
            if tokens is None:
                out = self.model(**self.first, position_ids=self.positions, past_key_values=self.cache, use_cache=True, **wanted, **self.keep_last)
                language = getattr(out, "language_model_outputs", None)
                if getattr(out, "past_key_values", None) is None and language is not None:
                    # InstructBLIP: the Q-Former's tokens are in the language model's cache now;
                    # later steps are text only, through the language model itself
                    out, self.stepper = language, self.model.language_model
            else:
                ones = torch.ones_like(tokens)
                self.mask = torch.cat([self.mask, ones], dim=-1)
                self.positions = self.positions[..., -1:] + 1  # [batch, 1], or [3, batch, 1] (multimodal rotary)
                out = self.stepper(
                    input_ids=tokens, attention_mask=self.mask, position_ids=self.positions,
                    past_key_values=self.cache, use_cache=True, **wanted,
                )  # fmt: skip
            early = []
            if hidden:
                states = out.hidden_states
                norm, head = self.model.get_decoder().norm, self.model.get_output_embeddings()
                early = [head(norm(states[n][:, -1, :])) for n in hidden]
        self.cache = out.past_key_values
        if tokens is None and self.cache is not None:
            make_room(self.cache, self.room)  # later steps append in place instead of copying the cache
        return out.logits[:, -1, :], early


def _rope_positions(model: Any, inputs: dict[str, Any]) -> Any:
    """[3, batch, length] multimodal rotary positions of full prompts with an image (Qwen2-VL's
    family: the model's own ``get_rope_index``, padding ignored), else ``None`` (the positions
    count the mask's tokens: ``cumsum(mask) - 1``, what ``generate`` gives a left-padded batch)."""
    get_rope_index = getattr(getattr(model, "model", None), "get_rope_index", None)
    types = inputs.get("mm_token_type_ids")
    if get_rope_index is None or types is None or not bool(types.any()):
        return None
    params = inspect.signature(get_rope_index).parameters
    positions, _ = get_rope_index(**{k: v for k, v in inputs.items() if k in params})
    return positions


# Full prompts join only where re-padding to one width adds at most this share to the tokens the
# two branches' passes compute. The no-image branch (M3ID, PAI) is the image's tokens shorter: on
# a LLaVA-shaped model with 576 image tokens, joining it doubled the loop's time (bench/README.md).
JOIN_PADDING = 0.25
# inputs a joined full-prompt batch may hold: tensors with one entry per image (or none)
_JOINABLE = {"input_ids", "attention_mask", "pixel_values", "image_sizes"}
_SUFFIX_KEYS = {"input_ids", "attention_mask", "position_ids", "past_key_values"}


def joined_inputs(
    model: Any, base: dict[str, Any], contrast: dict[str, Any], pad_id: int, *, max_padding: float = JOIN_PADDING
) -> dict[str, Any] | None:
    """The base rows then the contrast rows as one batch of 2B rows (one KV cache, one forward
    pass per step), or ``None`` where the shapes do not allow it. Full prompts (both branches):
    re-left-padded to one width, positions counted from the mask, the pixels of the rows that
    carry an image in row order (VCD: base then noised; M3ID/PAI: the base rows' only). Suffixes
    after cached prefixes (both branches): the same suffix width and prefix length (VCD's noised
    prefix), the two caches stacked. A cached base with a full-prompt contrast: ``None``; full
    prompts whose re-padding adds more than ``max_padding`` of their tokens: ``None``."""
    import torch


    cached = ("past_key_values" in base, "past_key_values" in contrast)
    if cached == (True, True):
        if set(base) != _SUFFIX_KEYS or set(contrast) != _SUFFIX_KEYS or base["input_ids"].shape != contrast["input_ids"].shape:
            return None
        caches = [base["past_key_values"], contrast["past_key_values"]]
        if caches[0].get_seq_length() != caches[1].get_seq_length():
            return None
        cache = joined_cache(model.config, caches)
        if cache is None:
            return None
        return {
            "input_ids": torch.cat([base["input_ids"], contrast["input_ids"]]),
            "attention_mask": torch.cat([base["attention_mask"], contrast["attention_mask"]]),
            "position_ids": torch.cat([base["position_ids"], contrast["position_ids"]], dim=-2),
            "past_key_values": cache,
        }
    if cached != (False, False) or not set(base) <= _JOINABLE or not set(contrast) <= _JOINABLE:
        return None
    widths = (base["input_ids"].shape[1], contrast["input_ids"].shape[1])
    width = max(widths)
    if 2 * width > (1 + max_padding) * sum(widths):
        return None

    def padded(key: str, inputs: dict[str, Any], value: int) -> Any:
        tensor = inputs[key]
        return torch.nn.functional.pad(tensor, (width - tensor.shape[1], 0), value=value)

    joined = {
        "input_ids": torch.cat([padded("input_ids", base, pad_id), padded("input_ids", contrast, pad_id)]),
        "attention_mask": torch.cat([padded("attention_mask", base, 0), padded("attention_mask", contrast, 0)]),
    }
    for key in ("pixel_values", "image_sizes"):
        parts = [inputs[key] for inputs in (base, contrast) if key in inputs]
        if parts:
            joined[key] = torch.cat(parts)
    return joined


def _key_ids(inputs: dict[str, Any], prefix_ids: Any) -> Any:
    """[rows, keys] the token ids over every key of a branch's first step: the cached prefix's
    (``prefix_ids``: [1, P], or [rows, P] each row's own, left-padded) then the inputs' own."""
    import torch

    ids = inputs["input_ids"]
    if "past_key_values" not in inputs or ids.shape[1] == inputs["attention_mask"].shape[1]:
        return ids
    if prefix_ids is None:
        raise ValueError("a branch after a cached prefix needs the prefix's ids (PAI's image keys, DoLa's seen tokens)")
    prefix_ids = prefix_ids.to(ids.device)
    if prefix_ids.shape[0] not in (1, ids.shape[0]):  # per-row prefix ids [B, P] of a joined 2B-row batch
        prefix_ids = prefix_ids.repeat(ids.shape[0] // prefix_ids.shape[0], 1)
    return torch.cat([prefix_ids.expand(ids.shape[0], -1), ids], dim=-1)


def _open(model: Any, inputs: dict[str, Any] | PackedRows, room: int, pad_id: int) -> _Branch | PackedBranch:
    """A branch over ``inputs``: rows of their own (a dict of model inputs), or packed rows."""
    if isinstance(inputs, PackedRows):
        keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        return PackedBranch(model, inputs, pad_id, room + 1, keep_logits=keep)
    return _Branch(model, inputs, room)


def _together(model: Any, base: dict[str, Any] | PackedRows, contrast: dict[str, Any] | PackedRows, pad_id: int) -> dict[str, Any] | PackedRows | None:
    """The base then the contrast rows as one batch: packed rows always (each image's row is its
    own), rows of their own where :func:`joined_inputs` allows; else ``None``."""
    if isinstance(base, PackedRows) and isinstance(contrast, PackedRows):
        return base.joined(contrast)
    if isinstance(base, dict) and isinstance(contrast, dict):
        return joined_inputs(model, base, contrast, pad_id, max_padding=JOIN_PADDING)
    return None


def _prompt_tokens(inputs: dict[str, Any] | PackedRows, prefix_ids: Any, logits: Any) -> Any:
    """[rows, vocab] the tokens of each row's prompt (padding left out): DoLa's tokens seen."""
    import torch

    seen = torch.zeros_like(logits, dtype=torch.bool)
    if isinstance(inputs, PackedRows):
        prompts = [torch.tensor(ids, device=seen.device) for ids in inputs.prompt_ids()]
    else:
        ids, mask = _key_ids(inputs, prefix_ids), inputs["attention_mask"]
        prompts = [ids[row][mask[row].bool()].to(seen.device) for row in range(ids.shape[0])]
    for row, prompt in enumerate(prompts):
        seen[row, prompt[prompt < seen.shape[-1]]] = True
    return seen


def contrast_decode(
    model: Any,
    base_inputs: dict[str, Any] | PackedRows,
    contrast_inputs: dict[str, Any] | PackedRows | None,
    rule: StepRule,
    *,
    max_new_tokens: int,
    end_ids: Sequence[int],
    pad_id: int,
    keep_steps: bool = False,
    sampling: Sampling | None = None,
    generators: Sequence[Any] = (),
    image_token_id: int | None = None,
    prefix_ids: Any = None,
    joint: bool = False,
) -> Decoded:
    """Contrastive decoding of a batch: both branches' prompts run once, then one token per step
    in lockstep (``contrast_inputs`` None: the base branch alone, plain decoding). Greedy, or with
    ``sampling`` one draw per row from ``generators[row]``. A row that emits an end token is done
    (it is fed ``pad_id`` after, and its text stops there). ``keep_steps`` keeps every step's
    logits and scores (for tests).

    A branch's inputs are full prompts or suffixes after a cached prefix (``prefix_ids``: the
    base branch's prefix ids [1, P]). ``joint``: the base and contrast rows share one forward
    pass per step where :func:`joined_inputs` allows (else two passes, as with ``joint`` False);
    PAI then amplifies the base rows only (the contrast rows' image columns are all False)."""
    import torch

    packed = isinstance(base_inputs, PackedRows)
    rows = base_inputs.rows if isinstance(base_inputs, PackedRows) else base_inputs["input_ids"].shape[0]
    together = _together(model, base_inputs, contrast_inputs, pad_id) if joint and contrast_inputs is not None else None
    room = max_new_tokens - 1
    base: _Branch | PackedBranch
    if together is not None:
        base, contrast = _open(model, together, room, pad_id), None
    else:
        base = _open(model, base_inputs, room, pad_id)
        contrast = _open(model, contrast_inputs, room, pad_id) if contrast_inputs is not None else None
    out = Decoded(tokens=[[] for _ in range(rows)])
    done = torch.zeros(rows, dtype=torch.bool, device=model.device if packed else base_inputs["input_ids"].device)
    ends = torch.tensor(sorted(set(end_ids)), dtype=torch.long, device=done.device)
    tokens = None
    steps: list[Any] = []  # each step's chosen tokens [rows]
    seen: Any = None  # DoLa: [batch, vocab] the tokens its repetition penalty applies to
    columns: Any = None  # PAI: [batch, keys] the image tokens among the base branch's keys
    queries: Any = None  # PAI on packed rows: the query columns amplified (each question's last)
    for step in range(max_new_tokens):
        feed = tokens if together is None or tokens is None else torch.cat([tokens, tokens])
        if isinstance(rule, PAIRule):  # the base branch attends with the image amplified, every step
            if step == 0:
                if image_token_id is None:
                    raise ValueError("PAI needs the image token id to find the image's keys")
                if isinstance(base, PackedBranch):  # each question's last column, its image's columns
                    columns, queries = base.image_columns(image_token_id), base.last_columns
                else:
                    columns = _key_ids(together if together is not None else base_inputs, prefix_ids) == image_token_id
                    columns[rows:] = False  # joined: the contrast rows attend as usual
            else:  # a new column per row, or per slot of a packed row (every query is a question's last)
                new = base.slots if isinstance(base, PackedBranch) else 1
                columns = torch.cat([columns, torch.zeros_like(columns[:, :new])], dim=-1)
                queries = slice(None) if isinstance(base, PackedBranch) else None
            with amplified_attention(model, rule.setting, columns, queries):
                logits, early = base.step(feed)
        else:
            logits, early = base.step(feed, rule.layers if isinstance(rule, DoLaRule) else ())
        if together is not None:
            base_logits, contrast_logits = logits[:rows], logits[rows:]
        else:
            base_logits = logits
            contrast_logits = contrast.step(tokens)[0] if contrast is not None else None
        if step == 0:
            out.first_logits = base_logits
        if isinstance(rule, DoLaRule):
            if step == 0:  # each row's tokens so far: its prompt (padding left out), then what it decodes
                seen = _prompt_tokens(base_inputs, prefix_ids, base_logits)
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
        steps.append(chosen)  # kept on the device: the rows' texts are read once, after the loop
        if isinstance(rule, DoLaRule):
            seen[torch.arange(rows, device=seen.device), chosen] = True
        done = done | torch.isin(chosen, ends)
        if bool(done.all()):  # the step's one host-device synchronisation: the batch stops with its last row
            break
        tokens = chosen.unsqueeze(-1)
    out.tokens = _row_tokens(steps, rows, ends)
    return out


def _row_tokens(steps: list[Any], rows: int, ends: Any) -> list[list[int]]:
    """Each row's chosen tokens, up to and including its first end token (a done row was fed
    padding after it)."""
    import torch

    if not steps:
        return [[] for _ in range(rows)]
    chosen = torch.stack(steps, dim=-1)  # [rows, steps]
    ended = torch.isin(chosen, ends)
    # a row's length: up to its first end token, or every step
    first_end = torch.where(ended.any(-1), ended.int().argmax(-1) + 1, torch.full_like(ended[:, 0], len(steps), dtype=torch.long))
    return [row[:n] for row, n in zip(chosen.tolist(), first_end.tolist())]
