"""An image's questions packed into one row after its cached prefix (issue 33).

A stacked batch (hf/prefix.py ``rows_inputs``) gives every question a row holding its own copy
of its image's prefix cache: at 144 rows on LLaVA-1.5-7B's shape that is ~43 GB of keys and
values, copied once and read again at every greedy step. Here a batch has one row per image
instead: the image's prefix once, then its questions side by side in slots of equal width
(each left-padded in its slot), and each step of the greedy continuation appends one column
per slot. A 4-D attention mask keeps the questions apart (a question sees its image's prefix,
its own earlier tokens and nothing of its neighbours'), and explicit positions count each
question on from its prefix (Qwen2-VL's 3-D text positions included), so every question's
numbers are those of a row of its own.

The greedy loop is this module's own (a ``generate`` call cannot append one column per slot):
the model's forward pass, the argmax, and ``generate``'s stopping rules (EOS from the
generation config, the call's stop strings with the same ``StoppingCriteriaList``). Where the
model's generation config would make ``generate`` change greedy logits (Qwen2-VL-Instruct's
``repetition_penalty``), or its attention cannot take a 4-D mask (flash attention),
:func:`unpackable` says why and the engine keeps stacked rows.

torch is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from halluprobe.backends.hf.prefix import Prefix, stacked_cache

if TYPE_CHECKING:
    import torch

__all__ = ["PAD", "PREFIX", "packed_first_step", "slot_mask", "unpackable", "worth_packing"]

PREFIX = -1  # a column every question of its row attends to (the image's prefix)
PAD = -2  # a column no question attends to (padding); a slot's columns carry the slot's number

# generation-config fields under which ``generate`` applies a logits processor to greedy decoding
# (transformers' GenerationMixin._get_logits_processor), with the values that leave it out
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "sequence_bias": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "exponential_decay_length_penalty": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
    "remove_invalid_values": (None, False),
}

# generation-config fields under which a ``do_sample=False, num_beams=1`` call of ``generate`` is
# not this module's greedy loop (another decoding mode, the config's own stop strings, several
# sequences per row, a time limit), with the values that leave it greedy; on transformers 5.24
# the stacked path raises for each (a hub ``custom_generate`` needing remote code, or stop
# strings without a tokenizer): packing must not answer plain greedy text instead
_GREEDY_MODE: dict[str, tuple[Any, ...]] = {
    "penalty_alpha": (None, 0, 0.0),  # contrastive search (with top_k > 1)
    "dola_layers": (None,),
    "constraints": (None,),
    "force_words_ids": (None,),
    "stop_strings": (None,),
    "num_return_sequences": (None, 1),
    "max_time": (None,),
}


def unpackable(model: Any, *, text: bool) -> str | None:
    """Why ``model``'s questions cannot be packed (a sentence), or ``None`` when they can; with
    ``text``, for greedy continuations too (first-token logits come from one forward pass, which
    the generation config does not touch)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    attention = getattr(config, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", None)
    if attention not in ("sdpa", "eager"):
        return f"attention implementation {attention!r} takes no 4-D mask"
    if not text:
        return None
    generation = getattr(model, "generation_config", None)
    for name, neutral in _NEUTRAL.items():
        value = getattr(generation, name, None)
        if value not in neutral:
            return f"the generation config's {name}={value!r} changes generate's greedy logits"
    for name, neutral in _GREEDY_MODE.items():
        value = getattr(generation, name, None)
        if value not in neutral:
            return f"the generation config's {name}={value!r} makes generate decode otherwise than greedy"
    return None


def worth_packing(questions_per_image: Sequence[int]) -> bool:
    """Whether a batch whose images have these numbers of questions is packed: every image gets
    as many slots as the one with the most, so with most slots empty stacked rows do less work
    (one image of 18 questions beside 46 of one: packed rows 3x the stacked rows' time on the
    CPU). At most half the slots empty; with POPE's 18 questions per image every batch of up to
    19 or of 27 and more packs, while at 20 to 26 one holding a few questions of an image, a
    whole image and a few of a third (4 + 18 + 3 at 25) keeps stacked rows. The bound is not
    tuned on a GPU."""
    return len(questions_per_image) * max(questions_per_image) <= 2 * sum(questions_per_image)


def slot_mask(owner: torch.Tensor, queries: torch.Tensor, dtype: Any) -> torch.Tensor:
    """The additive 4-D mask [rows, 1, queries, columns] of the query columns ``queries`` (the
    last ones of ``owner``): a query sees the prefix, its own slot's columns up to itself, and
    itself (a padding query the prefix, other padding and itself: finite values, never read)."""
    import torch

    columns = torch.arange(owner.shape[1], device=owner.device)
    mine = owner[:, queries]  # [rows, queries]
    same = (owner[:, None, :] == mine[:, :, None]) & (columns[None, :] <= queries[:, None])[None]
    allowed = (owner[:, None, :] == PREFIX) | same | (columns[None, :] == queries[:, None])[None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=owner.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


def packed_first_step(
    model: Any,
    tokenizer: Any,
    groups: Sequence[tuple[Prefix, Sequence[list[int]]]],
    max_new_tokens: int,
    stopping: Any,
    pad_id: int,
    *,
    keep_logits: bool,
) -> tuple[torch.Tensor, list[str] | None]:
    """First-step logits [questions, vocab] of every question of ``groups`` (an image's prefix
    and its questions' suffix ids), in order, and with ``max_new_tokens`` > 0 their greedy
    continuations, as ``ModelCore.first_step`` gives them for rows of their own.
    ``keep_logits``: the model takes ``logits_to_keep``."""
    import torch

    device = model.device
    slots = max(len(suffixes) for _, suffixes in groups)
    width = max(len(suffix) for _, suffixes in groups for suffix in suffixes)
    longest = max(prefix.input_ids.shape[1] for prefix, _ in groups)
    rows, block = len(groups), slots * width
    ids = torch.full((rows, block), pad_id, dtype=torch.long)
    owner = torch.full((rows, longest + block), PAD, dtype=torch.long)
    positions = torch.zeros((rows, block), dtype=torch.long)
    first_new = torch.zeros((rows, slots), dtype=torch.long)  # each slot's first generated position
    slot_owner = torch.full((rows, slots), PAD, dtype=torch.long)
    tails = torch.full((rows, slots, width), pad_id, dtype=torch.long)  # the suffixes, for stop strings
    for row, (prefix, suffixes) in enumerate(groups):
        owner[row, longest - prefix.input_ids.shape[1] : longest] = PREFIX
        for slot, suffix in enumerate(suffixes):
            end = (slot + 1) * width
            start = end - len(suffix)
            ids[row, start:end] = torch.tensor(suffix, dtype=torch.long)
            owner[row, longest + start : longest + end] = slot
            positions[row, start:end] = prefix.next_position + torch.arange(len(suffix))
            first_new[row, slot] = prefix.next_position + len(suffix)
            slot_owner[row, slot] = slot
            tails[row, slot, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
    mrope = groups[0][0].mrope
    owner, slot_owner, first_new = owner.to(device), slot_owner.to(device), first_new.to(device)
    asked = slot_owner != PAD  # [rows, slots]
    dtype = model.dtype

    def spread(pos: torch.Tensor) -> torch.Tensor:  # Qwen2-VL: text positions on all three rotary axes
        return pos.unsqueeze(0).expand(3, *pos.shape) if mrope else pos

    room = block + slots * max(max_new_tokens - 1, 0)
    with torch.inference_mode():
        cache = stacked_cache(model.config, [(prefix.cache, 1) for prefix, _ in groups], longest, room=room)
        if cache is None:
            raise ValueError("these cache layers cannot be stacked across images")
        last = torch.arange(1, slots + 1, device=device) * width - 1  # each slot's last column
        keep = {"logits_to_keep": last} if keep_logits else {}
        out = model(
            input_ids=ids.to(device),
            attention_mask=slot_mask(owner, longest + torch.arange(block, device=device), dtype),
            position_ids=spread(positions.to(device)),
            past_key_values=cache,
            use_cache=True,
            **keep,
        )
        step_logits = out.logits if keep_logits else out.logits[:, last]  # [rows, slots, vocab]
        first = step_logits[asked]  # [questions, vocab], image by image, slot by slot
        if max_new_tokens <= 0:
            return first, None
        steps = _greedy(model, cache, step_logits, owner, slot_owner, first_new, ~asked, tails.to(device), stopping, spread, max_new_tokens, dtype)
    texts = [tokenizer.decode(tokens, skip_special_tokens=True) for tokens in steps]
    return first, [texts[i] for i in asked.flatten().nonzero().flatten().tolist()]


def _greedy(
    model: Any,
    cache: Any,
    step_logits: torch.Tensor,
    owner: torch.Tensor,
    slot_owner: torch.Tensor,
    first_new: torch.Tensor,
    done: torch.Tensor,
    tails: torch.Tensor,
    stopping: Any,
    spread: Any,
    max_new_tokens: int,
    dtype: Any,
) -> list[list[int]]:
    """Each slot's greedy tokens (slot-major within rows), through the step that stopped it, as
    ``generate`` ends a row: EOS of the generation config, ``stopping`` (stop strings) on the
    row's suffix and tokens so far, or ``max_new_tokens``."""
    import torch

    rows, slots = slot_owner.shape
    eos = getattr(model.generation_config, "eos_token_id", None)
    eos_ids = None if eos is None else torch.tensor([eos] if isinstance(eos, int) else list(eos), device=owner.device)
    tokens = step_logits.argmax(-1)  # [rows, slots]
    taken = [tokens]
    length = torch.full((rows, slots), max_new_tokens, dtype=torch.long, device=owner.device)
    for step in range(1, max_new_tokens + 1):
        stopped = torch.zeros_like(done)
        if eos_ids is not None:
            stopped |= torch.isin(tokens, eos_ids)
        if stopping is not None and len(stopping):
            sequences = torch.cat([tails, torch.stack(taken, dim=-1)], dim=-1).flatten(0, 1)
            stopped |= stopping(sequences, None).view(rows, slots)
        length = torch.where(stopped & ~done, step, length)
        done = done | stopped
        if step == max_new_tokens or bool(done.all()):  # one host sync a step, as generate's own
            break
        owner = torch.cat([owner, slot_owner], dim=1)
        queries = owner.shape[1] - slots + torch.arange(slots, device=owner.device)
        out = model(
            input_ids=tokens,
            attention_mask=slot_mask(owner, queries, dtype),
            position_ids=spread(first_new + step - 1),
            past_key_values=cache,
            use_cache=True,
        )
        tokens = out.logits.argmax(-1)
        taken.append(tokens)
    produced = torch.stack(taken, dim=-1).flatten(0, 1).tolist()  # [rows * slots, steps]
    return [seq[:n] for seq, n in zip(produced, length.flatten().tolist())]
