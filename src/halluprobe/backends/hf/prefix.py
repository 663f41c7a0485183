"""The prefix cache's tensors: one image's cached prefix and the suffix batches after it.

Pure tensor work on a loaded model (no forward pass here; the model core runs them): the
position after a prefix (1-D, or Qwen2-VL's 3-D multimodal rotary positions), a batch of
left-padded suffixes with its mask, explicit positions and a broadcast copy of the prefix's
KV cache, and a cropped view of a cache. See docs/design/prefix-cache.md.

torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "Prefix",
    "cropped_cache",
    "expand_cache",
    "image_runs",
    "joined_cache",
    "make_room",
    "next_position",
    "padded_prefix_ids",
    "rows_inputs",
    "split_cache",
    "stackable",
    "stacked_cache",
    "suffix_inputs",
]


@dataclass
class Prefix:
    """One image's shared prefix after its forward pass (device tensors)."""

    cache: Any  # DynamicCache with batch 1
    input_ids: torch.Tensor  # [1, P]
    next_position: int  # position of the first suffix token (on every rotary axis)
    mrope: bool  # positions are [3, B, L] (Qwen2-VL multimodal rotary)


def next_position(model: Any, prefix: dict[str, Any]) -> tuple[int, bool]:
    """Position of the first token after the prefix, and whether positions are 3-D.

    Text after the image continues from the largest prefix position + 1 on all three
    multimodal rotary axes (what ``get_rope_index`` gives text tokens); 1-D models count on.
    """
    get_rope_index = getattr(getattr(model, "model", None), "get_rope_index", None)
    if get_rope_index is None or "mm_token_type_ids" not in prefix:
        return int(prefix["input_ids"].shape[1]), False
    params = inspect.signature(get_rope_index).parameters
    positions, _ = get_rope_index(**{k: v for k, v in prefix.items() if k in params})
    return int(positions.max()) + 1, True


def suffix_inputs(
    model: Any, prefix: Prefix, suffixes: list[list[int]], max_new_tokens: int, pad_id: int
) -> dict[str, Any]:
    """Model inputs for a batch of suffixes after one image's cached prefix (:func:`rows_inputs`
    with every row on ``prefix``)."""
    return rows_inputs(model, [prefix] * len(suffixes), suffixes, max_new_tokens, pad_id)


def rows_inputs(
    model: Any,
    prefixes: Sequence[Prefix],
    suffixes: Sequence[list[int]],
    max_new_tokens: int,
    pad_id: int,
    *,
    room: bool = False,
) -> dict[str, Any]:
    """Model inputs for a batch of rows, row ``i`` being ``suffixes[i]`` after the cached prefix
    ``prefixes[i]`` (rows of one image sit together and share its ``Prefix`` object).

    Suffixes are left-padded, so the pads sit between prefix and suffix: every row's last
    token is the last column (read its logits there; generation appends after it). Prefixes
    of several images are left-padded too, to the longest: the mask is [zeros | the row's
    prefix ones | its suffix mask] and positions are explicit, counting real tokens only from
    the row's own prefix, so a row's numbers do not depend on its neighbours. ``generate``
    gets the prefix ids in front (it slices off what the cache covers); a plain forward gets
    the suffix only. One image's rows get broadcast views of its cache (:func:`expand_cache`);
    several images' rows a stacked copy (:func:`stacked_cache`). With ``room`` the cache takes
    the suffixes and ``max_new_tokens`` more positions in place (:func:`make_room`): no
    ``torch.cat`` copy of the whole cache at each of ``generate``'s steps.
    """
    import torch

    device = model.device
    rows, width = len(suffixes), max(len(s) for s in suffixes)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for row, suffix in enumerate(suffixes):
        ids[row, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
        mask[row, width - len(suffix) :] = 1
    starts = torch.tensor([p.next_position for p in prefixes], dtype=torch.long).unsqueeze(-1)
    positions = starts + (mask.cumsum(-1) - 1).clamp(min=0)
    if prefixes[0].mrope:
        positions = positions.unsqueeze(0).expand(3, rows, width)
    longest = max(p.input_ids.shape[1] for p in prefixes)
    prefix_mask = torch.zeros((rows, longest), dtype=torch.long)
    for row, prefix in enumerate(prefixes):
        prefix_mask[row, longest - prefix.input_ids.shape[1] :] = 1
    attention = torch.cat([prefix_mask, mask], dim=-1)
    ids = ids.to(device)
    if max_new_tokens > 0:
        ids = torch.cat([padded_prefix_ids(prefixes, pad_id).to(device), ids], dim=-1)
    runs = image_runs(prefixes)
    extra = width + max(max_new_tokens, 0) if room else 0
    with torch.inference_mode():
        if len(runs) == 1:
            cache = expand_cache(model.config, prefixes[0].cache, rows)
            if extra:
                make_room(cache, extra)  # the one copy of the broadcast rows that the first append made
        else:
            cache = stacked_cache(model.config, [(prefixes[start].cache, count) for start, count in runs], longest, room=extra)
            if cache is None:
                raise ValueError("these cache layers cannot be stacked across images")
    return {
        "input_ids": ids,
        "attention_mask": attention.to(device),
        "position_ids": positions.to(device),
        "past_key_values": cache,
    }


def image_runs(prefixes: Sequence[Prefix]) -> list[tuple[int, int]]:
    """(first row, row count) of each run of rows on one prefix object."""
    runs: list[tuple[int, int]] = []
    for row, prefix in enumerate(prefixes):
        if runs and prefixes[runs[-1][0]] is prefix:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((row, 1))
    return runs


def padded_prefix_ids(prefixes: Sequence[Prefix], pad_id: int) -> torch.Tensor:
    """[rows, longest prefix] each row's prefix ids, left-padded with ``pad_id`` (one image's
    rows: its ids, broadcast)."""
    import torch

    if all(p is prefixes[0] for p in prefixes):
        return prefixes[0].input_ids.expand(len(prefixes), -1)
    longest = max(p.input_ids.shape[1] for p in prefixes)
    device = prefixes[0].input_ids.device
    out = torch.full((len(prefixes), longest), pad_id, dtype=torch.long, device=device)
    for row, prefix in enumerate(prefixes):
        out[row, longest - prefix.input_ids.shape[1] :] = prefix.input_ids[0].to(device)
    return out


def stackable(cache: Any) -> bool:
    """Whether a prefix cache's layers can be stacked with other images' (plain DynamicLayers:
    sliding-window layers keep a tail whose padding would not line up)."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


def stacked_cache(config: Any, runs: Sequence[tuple[Any, int]], length: int, *, room: int = 0) -> Any:
    """A DynamicCache whose rows are, in order, ``count`` copies of each batch-1 ``cache`` of
    ``runs``, each left-padded with zeros to ``length`` positions (their mask is 0 there), or
    ``None`` unless every layer is a plain DynamicLayer. One copy of the keys and values; with
    ``room``, into buffers that take ``room`` more positions in place (:func:`make_room`)."""
    from transformers import DynamicCache

    stacked = DynamicCache(config=config)
    if any(len(cache.layers) != len(stacked.layers) or not stackable(cache) for cache, _ in runs) or not stackable(stacked):
        return None
    rows = sum(count for _, count in runs)
    for i, mine in enumerate(stacked.layers):
        first = runs[0][0].layers[i].keys
        heads, dim = first.shape[1], first.shape[3]
        padded = any(cache.layers[i].keys.shape[2] != length for cache, _ in runs)
        make = first.new_zeros if padded else first.new_empty  # every position written: no fill
        keys = make((rows, heads, length + room, dim))
        values = make((rows, heads, length + room, runs[0][0].layers[i].values.shape[3]))
        row = 0
        for cache, count in runs:
            layer = cache.layers[i]
            size = layer.keys.shape[2]
            keys[row : row + count, :, length - size : length] = layer.keys
            values[row : row + count, :, length - size : length] = layer.values
            row += count
        mine.lazy_initialization(keys, values)
        if room:
            mine.__class__ = _appending_layer()
            mine.key_room, mine.value_room = keys, values
        mine.keys, mine.values = keys[:, :, :length], values[:, :, :length]
    return stacked


def expand_cache(config: Any, cache: Any, rows: int) -> Any:
    """A fresh DynamicCache holding ``rows`` copies of the batch-1 prefix cache.

    Built anew for every batch: the forward pass appends to it, and the prefix must stay
    as it is for the image's next batch.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    expanded = DynamicCache(config=config)
    if len(expanded.layers) == len(cache.layers) and all(type(layer) is DynamicLayer for layer in expanded.layers):
        # Broadcast views, not copies: the forward pass's own append (torch.cat) makes the
        # one copy per row that it needs anyway, and never writes into the prefix.
        for mine, theirs in zip(expanded.layers, cache.layers):
            mine.lazy_initialization(theirs.keys, theirs.values)
            mine.keys = theirs.keys.expand(rows, -1, -1, -1)
            mine.values = theirs.values.expand(rows, -1, -1, -1)
        return expanded
    # sliding-window and other layer kinds: the public constructor (copies once more)
    data = [(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in cache.layers]
    return DynamicCache(data, config=config)


def split_cache(config: Any, cache: Any) -> list[Any] | None:
    """One batch-1 DynamicCache per row of ``cache`` (views of its keys and values: several
    images' prefixes run as one batch), or ``None`` unless every layer is a plain DynamicLayer."""
    from transformers import DynamicCache

    if not stackable(cache):
        return None
    rows = cache.layers[0].keys.shape[0]
    out = []
    for row in range(rows):
        one = DynamicCache(config=config)
        if len(one.layers) != len(cache.layers) or not stackable(one):
            return None
        for mine, theirs in zip(one.layers, cache.layers):
            mine.lazy_initialization(theirs.keys, theirs.values)
            mine.keys, mine.values = theirs.keys[row : row + 1], theirs.values[row : row + 1]
        out.append(one)
    return out


_APPENDING: list[type] = []  # the DynamicLayer subclass below, made on first use (transformers imported then)


def make_room(cache: Any, room: int) -> bool:
    """Let ``cache`` take ``room`` more positions without copying: each plain DynamicLayer's keys
    and values move (one copy) into a buffer with ``room`` spare positions, and the layer then
    appends in place. A DynamicLayer appends by ``torch.cat``, a copy of the whole cache per
    step: on a 7B model at 64 rows, most of a decoding step's memory traffic. False (nothing
    changed) unless every layer is a plain DynamicLayer."""
    if room <= 0 or not stackable(cache) or any(not layer.is_initialized for layer in cache.layers):
        return False
    appending = _appending_layer()
    for layer in cache.layers:
        layer.__class__ = appending
        layer.reserve(room)
    return True


def _appending_layer() -> type:
    if not _APPENDING:
        from transformers.cache_utils import DynamicLayer

        class AppendingLayer(DynamicLayer):
            """A DynamicLayer whose keys and values are views of buffers with spare positions:
            ``update`` writes the new positions in place (``make_room``)."""

            def reserve(self, room: int) -> None:
                length = self.keys.shape[-2]
                self.key_room = self.keys.new_empty((*self.keys.shape[:-2], length + room, self.keys.shape[-1]))
                self.value_room = self.values.new_empty((*self.values.shape[:-2], length + room, self.values.shape[-1]))
                self.key_room[..., :length, :] = self.keys
                self.value_room[..., :length, :] = self.values
                self.keys, self.values = self.key_room[..., :length, :], self.value_room[..., :length, :]

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
                length, new = self.keys.shape[-2], key_states.shape[-2]
                if length + new > self.key_room.shape[-2]:
                    self.reserve(max(new, length))  # out of room: double it
                self.key_room[..., length : length + new, :] = key_states
                self.value_room[..., length : length + new, :] = value_states
                self.keys = self.key_room[..., : length + new, :]
                self.values = self.value_room[..., : length + new, :]
                return self.keys, self.values

        _APPENDING.append(AppendingLayer)
    return _APPENDING[0]


def cropped_cache(config: Any, cache: Any, length: int) -> Any:
    """A DynamicCache of a batch-1 prefix cache's first ``length`` positions (views: a
    forward pass appends by copying), or ``None`` unless every layer is a plain
    DynamicLayer."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cropped = DynamicCache(config=config)
    layers = (*cropped.layers, *cache.layers)
    if len(cropped.layers) != len(cache.layers) or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    for mine, theirs in zip(cropped.layers, cache.layers):
        mine.lazy_initialization(theirs.keys, theirs.values)
        mine.keys = theirs.keys[:, :, :length]
        mine.values = theirs.values[:, :, :length]
    return cropped


def joined_cache(config: Any, caches: list[Any]) -> Any:
    """A DynamicCache whose rows are the rows of ``caches`` in order (equal lengths; the
    decoding loop's base and contrast rows in one batch), or ``None`` unless every layer is a
    plain DynamicLayer."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    joined = DynamicCache(config=config)
    layers = [*joined.layers, *(layer for cache in caches for layer in cache.layers)]
    if any(len(cache.layers) != len(joined.layers) for cache in caches) or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    for i, mine in enumerate(joined.layers):
        keys = torch.cat([cache.layers[i].keys for cache in caches])
        values = torch.cat([cache.layers[i].values for cache in caches])
        mine.lazy_initialization(keys, values)
        mine.keys, mine.values = keys, values
    return joined
