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

The decoding loop (hf/decode.py, hf/decode_prefix.py) packs its batches with the same layout:
:class:`PackedRows` describes them and :class:`PackedBranch` runs them, handing the loop one row
per question so that every step rule runs on it unchanged.

torch is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from halluprobe.backends.hf.prefix import Prefix, stacked_cache

if TYPE_CHECKING:
    import torch

__all__ = ["PAD", "PREFIX", "PackedBranch", "PackedRows", "packed_first_step", "slot_mask", "unpackable", "worth_packing"]

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


@dataclass(frozen=True, eq=False)
class PackedRows:
    """A batch's rows laid out one row per image: each group is an image's cached prefix and the
    suffix ids of its rows, in row order (rows of one image sit together)."""

    groups: tuple[tuple[Prefix, tuple[tuple[int, ...], ...]], ...]

    @classmethod
    def of(cls, prefixes: Sequence[Prefix], suffixes: Sequence[Sequence[int]]) -> PackedRows:
        """Row ``i`` is ``suffixes[i]`` after ``prefixes[i]``; consecutive rows holding the same
        ``Prefix`` object share a packed row."""
        groups: list[tuple[Prefix, list[tuple[int, ...]]]] = []
        for prefix, suffix in zip(prefixes, suffixes, strict=True):
            if groups and groups[-1][0] is prefix:
                groups[-1][1].append(tuple(suffix))
            else:
                groups.append((prefix, [tuple(suffix)]))
        return cls(tuple((prefix, tuple(rows)) for prefix, rows in groups))

    @property
    def rows(self) -> int:
        return sum(len(suffixes) for _, suffixes in self.groups)

    def joined(self, other: PackedRows) -> PackedRows:
        """These rows, then ``other``'s, as one batch (the decoding loop's base and contrast rows)."""
        return PackedRows(self.groups + other.groups)

    def prompt_ids(self) -> list[list[int]]:
        """Each row's token ids: its prefix's, then its suffix (DoLa's tokens seen so far)."""
        return [prefix.input_ids[0].tolist() + list(suffix) for prefix, suffixes in self.groups for suffix in suffixes]


class PackedBranch:
    """Rows of :class:`PackedRows` run as one row per image: the prefix caches stacked once, each
    row's suffix in a slot of its image's row (left-padded within the slot) behind
    :func:`slot_mask`, and each step one new column per slot. :meth:`step` speaks in rows (the
    decoding loop's branch interface); :meth:`first_grid` and :meth:`next_grid` in
    [images, slots]. ``new_tokens``: the tokens the rows may decode (room reserved in place)."""

    def __init__(self, model: Any, packed: PackedRows, pad_id: int, new_tokens: int, *, keep_logits: bool) -> None:
        import torch

        groups = packed.groups
        self.model, self.pad_id, self.keep_logits = model, pad_id, keep_logits
        self.rows = packed.rows
        device = model.device
        slots = max(len(suffixes) for _, suffixes in groups)
        width = max(len(suffix) for _, suffixes in groups for suffix in suffixes)
        longest = max(prefix.input_ids.shape[1] for prefix, _ in groups)
        images, block = len(groups), slots * width
        ids = torch.full((images, block), pad_id, dtype=torch.long)
        owner = torch.full((images, longest + block), PAD, dtype=torch.long)
        positions = torch.zeros((images, block), dtype=torch.long)
        first_new = torch.zeros((images, slots), dtype=torch.long)  # each slot's first generated position
        slot_owner = torch.full((images, slots), PAD, dtype=torch.long)
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
        self.groups, self.slots, self.width, self.longest = groups, slots, width, longest
        self.ids, self.positions = ids.to(device), positions.to(device)
        self.last_columns = torch.arange(1, slots + 1, device=device) * width - 1  # each slot's last column in the block
        self.owner, self.slot_owner, self.first_new = owner.to(device), slot_owner.to(device), first_new.to(device)
        self.tails = self.ids.view(images, slots, width)  # each slot's suffix, left-padded (stop strings read it)
        self.asked = self.slot_owner != PAD  # [images, slots]; its True cells in order are the rows
        self.mrope = groups[0][0].mrope
        self.room = block + slots * max(new_tokens - 1, 0)
        self.cache: Any = None
        self.fed = 0  # tokens fed to each slot after the first step

    def image_columns(self, image_token_id: int) -> torch.Tensor:
        """[images, keys] of the first step: True on the prefix's image tokens (PAI's columns)."""
        import torch

        columns = torch.zeros(self.owner.shape, dtype=torch.bool, device=self.owner.device)
        for row, (prefix, _) in enumerate(self.groups):
            columns[row, self.longest - prefix.input_ids.shape[1] : self.longest] = prefix.input_ids[0] == image_token_id
        return columns

    def _spread(self, positions: torch.Tensor) -> torch.Tensor:
        """Qwen2-VL: text positions on all three rotary axes."""
        return positions.unsqueeze(0).expand(3, *positions.shape) if self.mrope else positions

    def _early(self, out: Any, columns: Any, hidden: Sequence[int]) -> list[torch.Tensor]:
        """The hidden states of the layers in ``hidden`` at ``columns``, through the final norm and
        the LM head: [images, slots, vocab] each (DoLa's early layers)."""
        if not hidden:
            return []
        norm, head = self.model.get_decoder().norm, self.model.get_output_embeddings()
        return [head(norm(out.hidden_states[n][:, columns, :])) for n in hidden]

    def first_grid(self, hidden: Sequence[int] = ()) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Every slot's next-token logits after its suffix [images, slots, vocab] (padding slots:
        finite values, never read), and ``hidden``'s early-layer logits."""
        import torch

        model, device = self.model, self.model.device
        wanted = {"output_hidden_states": True} if hidden else {}
        with torch.inference_mode():
            self.cache = stacked_cache(model.config, [(prefix.cache, 1) for prefix, _ in self.groups], self.longest, room=self.room)
            if self.cache is None:
                raise ValueError("these cache layers cannot be stacked across images")
            last = self.last_columns
            keep = {"logits_to_keep": last} if self.keep_logits else {}
            block = self.ids.shape[1]
            out = model(
                input_ids=self.ids,
                attention_mask=slot_mask(self.owner, self.longest + torch.arange(block, device=device), model.dtype),
                position_ids=self._spread(self.positions),
                past_key_values=self.cache,
                use_cache=True,
                **keep,
                **wanted,
            )
            return (out.logits if self.keep_logits else out.logits[:, last]), self._early(out, last, hidden)

    def next_grid(self, tokens: torch.Tensor, hidden: Sequence[int] = ()) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Feed one token per slot (``tokens`` [images, slots]); the logits after it, as
        :meth:`first_grid`."""
        import torch

        wanted = {"output_hidden_states": True} if hidden else {}
        self.owner = torch.cat([self.owner, self.slot_owner], dim=1)
        queries = self.owner.shape[1] - self.slots + torch.arange(self.slots, device=self.owner.device)
        with torch.inference_mode():
            out = self.model(
                input_ids=tokens,
                attention_mask=slot_mask(self.owner, queries, self.model.dtype),
                position_ids=self._spread(self.first_new + self.fed),
                past_key_values=self.cache,
                use_cache=True,
                **wanted,
            )
            early = self._early(out, slice(-self.slots, None), hidden)
        self.fed += 1
        return out.logits, early

    def step(self, tokens: torch.Tensor | None, hidden: Sequence[int] = ()) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The decoding loop's branch step: the rows' next-token logits [rows, vocab] after their
        suffixes (``tokens`` None), or after feeding ``tokens`` [rows, 1]; and ``hidden``'s."""
        import torch

        if tokens is None:
            logits, early = self.first_grid(hidden)
        else:
            grid = torch.full(self.asked.shape, self.pad_id, dtype=tokens.dtype, device=tokens.device)
            grid[self.asked] = tokens[:, 0]
            logits, early = self.next_grid(grid, hidden)
        return logits[self.asked], [e[self.asked] for e in early]


def packed_first_step(
    model: Any, tokenizer: Any, packed: PackedRows, max_new_tokens: int, stopping: Any, pad_id: int, *, keep_logits: bool
) -> tuple[torch.Tensor, list[str] | None]:
    """First-step logits [rows, vocab] of every row of ``packed``, in order, and with
    ``max_new_tokens`` > 0 their greedy continuations, as ``ModelCore.first_step`` gives them for
    rows of their own. ``keep_logits``: the model takes ``logits_to_keep``."""
    branch = PackedBranch(model, packed, pad_id, max_new_tokens, keep_logits=keep_logits)
    step_logits, _ = branch.first_grid()  # [images, slots, vocab]
    first = step_logits[branch.asked]  # [rows, vocab], image by image, slot by slot
    if max_new_tokens <= 0:
        return first, None
    steps = _greedy(branch, step_logits, stopping, max_new_tokens)
    texts = [tokenizer.decode(tokens, skip_special_tokens=True) for tokens in steps]
    return first, [texts[i] for i in branch.asked.flatten().nonzero().flatten().tolist()]


def _greedy(branch: PackedBranch, step_logits: torch.Tensor, stopping: Any, max_new_tokens: int) -> list[list[int]]:
    """Each slot's greedy tokens (slot-major within rows), through the step that stopped it, as
    ``generate`` ends a row: EOS of the generation config, ``stopping`` (stop strings) on the
    row's suffix and tokens so far, or ``max_new_tokens``."""
    import torch

    done = ~branch.asked
    rows, slots = done.shape
    device = done.device
    eos = getattr(branch.model.generation_config, "eos_token_id", None)
    eos_ids = None if eos is None else torch.tensor([eos] if isinstance(eos, int) else list(eos), device=device)
    tokens = step_logits.argmax(-1)  # [rows, slots]
    taken = [tokens]
    length = torch.full((rows, slots), max_new_tokens, dtype=torch.long, device=device)
    for step in range(1, max_new_tokens + 1):
        stopped = torch.zeros_like(done)
        if eos_ids is not None:
            stopped |= torch.isin(tokens, eos_ids)
        if stopping is not None and len(stopping):
            sequences = torch.cat([branch.tails, torch.stack(taken, dim=-1)], dim=-1).flatten(0, 1)
            stopped |= stopping(sequences, None).view(rows, slots)
        length = torch.where(stopped & ~done, step, length)
        done = done | stopped
        if step == max_new_tokens or bool(done.all()):  # one host sync a step, as generate's own
            break
        tokens = branch.next_grid(tokens)[0].argmax(-1)
        taken.append(tokens)
    produced = torch.stack(taken, dim=-1).flatten(0, 1).tolist()  # [rows * slots, steps]
    return [seq[:n] for seq, n in zip(produced, length.flatten().tolist())]
