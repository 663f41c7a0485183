"""The correction signals' passes of one ``answer()`` call (hf backend).

:class:`SignalPasses` is built per call from its :class:`~halluprobe.backends.hf.signals.SignalPlan`
(``GenerateConfig.signals``) and runs the contrast passes beside an engine's base pass: on full
prompts (the plain engine, and the prefix engine's fallback) or from an image's cached prefixes
(the prefix-cache engine). DoLa's layers come from the base pass's hidden states either way.
Both give each row's signals in the same order. See docs/design/prefix-cache.md.

torch is imported inside the methods.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halluprobe.backends.hf.core import Batching, FirstStep, ModelCore
from halluprobe.backends.hf.prefix import Prefix, cropped_cache, next_position, suffix_inputs
from halluprobe.backends.hf.signals import SignalPlan, amplified_attention, layer_signals, noised_inputs, step_signal
from halluprobe.errors import InputError
from halluprobe.records import Request, SignalLogprobs

if TYPE_CHECKING:
    from halluprobe.backends.hf.inputs import SharedPrefix

__all__ = ["LayerSignals", "SignalPasses", "SignalPrefixes"]

# each row's ``layer:N`` signals of a base pass (None: the layers signal is not asked)
LayerSignals = list[dict[str, SignalLogprobs]] | None


@dataclass
class SignalPrefixes:
    """One image's inputs for its correction signals on the prefix-cache engine, per prompt of
    the image in order (its suffix batches slice them)."""

    noised: Prefix | None = None  # the image's prefix with noised pixels (VCD)
    instruction: Prefix | None = None  # the instruction variants' shared prefix (ICD); None: full prompts
    instruction_suffixes: list[list[int]] = field(default_factory=list)  # after ``instruction``
    instruction_prompts: list[str] = field(default_factory=list)  # the full variants (the fallback)
    no_image_prompts: list[str] = field(default_factory=list)  # run in full: short text prompts


class SignalPasses:
    """The signals of one call; ``plan.layers`` also tells the base pass to keep hidden states."""

    def __init__(self, core: ModelCore, plan: SignalPlan, batching: Batching) -> None:
        self.core = core
        self.plan = plan
        self.batching = batching

    def layers(self, step: FirstStep) -> list[dict[str, SignalLogprobs]] | None:
        """DoLa's ``layer:N`` signals of each row, from the base pass's first-step hidden states
        (``None`` when the layers are not asked)."""
        if not self.plan.layers:
            return None
        if step.hidden_states is None:
            raise RuntimeError("the layers signal needs the base pass's hidden states")
        return layer_signals(self.core.model, step.hidden_states, self.plan.layers, self.core.candidates, step.logits)

    # -- full prompts ------------------------------------------------------------------------------

    def for_full_prompts(
        self, inputs: dict[str, Any], requests: Sequence[Request], images: list[Any], by_layer: LayerSignals
    ) -> list[dict[str, Any]]:
        """The signals of a batch of full prompts (one image each): DoLa's layers from the base
        pass, the others from extra forward passes (noised pixels, the question under a
        disturbing instruction or without the image, amplified image attention)."""
        import torch

        core, plan = self.core, self.plan
        out: list[dict[str, Any]] = [{} for _ in requests]
        if plan.noise_step is not None:
            try:
                noised = core.logits(noised_inputs(inputs, [r.image_path for r in requests], plan.noise_step))
            except InputError:  # tiles of several images in one tensor (InternVL): each prompt alone
                noised = torch.cat([self._noised_prompt_logits(r, image) for r, image in zip(requests, images)])
            self._put(out, "noised", noised)
        if plan.layers:
            _put_layers(out, by_layer)
        if plan.instruction:
            self._put(out, "instruction", core.prompt_logits([r.variants["instruction"] for r in requests], images))
        if plan.no_image:
            for signal, no_image in zip(out, self.no_image([r.variants["no-image"] for r in requests])):
                signal["no-image"] = no_image
        if plan.pai is not None:
            self._put(out, "attention", self.amplified_logits(inputs, inputs["input_ids"] == core.inputs.image_token_id))
        return out

    def _noised_prompt_logits(self, request: Request, image: Any) -> Any:
        """The noised pass of one full prompt (its pixel tensor is one image's, however tiled)."""
        assert self.plan.noise_step is not None
        inputs = self.core.to_device(self.core.inputs.encode([request.prompt], [image]))
        return self.core.logits(noised_inputs(inputs, [request.image_path], self.plan.noise_step))

    def no_image(self, prompts: list[str]) -> list[SignalLogprobs]:
        """The no-image signal of each prompt. A prompt without the image does not depend on the
        image, so each distinct one runs once per loaded model (POPE: about one per object name,
        not one per question); the core keeps them."""
        core, memo = self.core, self.core.no_image_cache
        todo = [p for p in dict.fromkeys(prompts) if p not in memo]
        for start in range(0, len(todo), self.batching.size):
            chunk = todo[start : start + self.batching.size]
            logits = core.prompt_logits(chunk, [])
            for row, prompt in enumerate(chunk):
                memo[prompt] = step_signal(logits[row], core.candidates)
        return [memo[p] for p in prompts]

    def amplified_logits(self, inputs: dict[str, Any], image_columns: Any) -> Any:
        """PAI's pass: ``image_columns`` [batch, key length] marks the image tokens' keys."""
        assert self.plan.pai is not None
        with amplified_attention(self.core.model, self.plan.pai, image_columns):
            return self.core.logits(inputs)

    def _put(self, out: list[dict[str, Any]], name: str, logits: Any) -> None:
        """Row ``i`` of a pass's last-position logits as signal ``name`` of ``out[i]``."""
        for row, signal in enumerate(out):
            signal[name] = step_signal(logits[row], self.core.candidates)

    # -- cached prefixes -----------------------------------------------------------------------------

    def prefixes(self, shared: SharedPrefix, prefix: Prefix, image: Any, requests: list[Request], noised: Prefix | None = None) -> SignalPrefixes:
        """The image's inputs for the asked signals (``requests[i]`` holds prompt i's variants):
        a second prefix with noised pixels (VCD; ``noised`` where a batched pass made it), the
        instruction variants' own shared prefix (ICD), continued from the image's prefix
        ``prefix`` where it can be, else a pass of its own (``None`` where the variants share
        none: full prompts then)."""
        core, plan = self.core, self.plan
        extra = SignalPrefixes()
        if plan.noise_step is not None:
            extra.noised = noised if noised is not None else core.run_prefix(noised_inputs(shared.prefix, [requests[0].image_path], plan.noise_step))
        if plan.instruction:
            extra.instruction_prompts = [r.variants["instruction"] for r in requests]
            variants = core.inputs.encode_shared(extra.instruction_prompts, image)
            if variants is not None and core.fits_window(variants, 0):
                extra.instruction = self._continued_prefix(prefix, variants)
                if extra.instruction is None:
                    extra.instruction = core.run_prefix(variants.prefix)
                extra.instruction_suffixes = variants.suffixes
            else:
                core.say_once("the instruction variants share no image prefix; their signal runs on full prompts")
        if plan.no_image:
            extra.no_image_prompts = [r.variants["no-image"] for r in requests]
        return extra

    def _continued_prefix(self, base: Prefix, shared: SharedPrefix) -> Prefix | None:
        """``shared``'s prefix from ``base``'s cache: the positions both hold (the template head
        and the image tokens) are cropped from it, the rest, text after the image (ICD's
        instruction), runs as a suffix pass, so the image is not read again. ``None`` where
        that cannot hold: an image token after the common part, or a cache that cannot be
        cropped (sliding-window layers keep only their tail)."""
        import torch

        core = self.core
        mine, theirs = shared.prefix["input_ids"][0].tolist(), base.input_ids[0].tolist()
        common = len(os.path.commonprefix([mine, theirs]))
        if common == 0 or core.inputs.image_token_id in mine[common:]:
            return None
        cropped = cropped_cache(core.model.config, base.cache, common)
        if cropped is None:
            return None
        inputs = core.to_device(shared.prefix)
        position, mrope = next_position(core.model, inputs)
        tail = mine[common:]
        # the tail is text after the image: its positions count on, one per token, to ``position``
        head = Prefix(cache=cropped, input_ids=inputs["input_ids"][:, :common], next_position=position - len(tail), mrope=mrope)
        if not tail:
            return head
        with torch.inference_mode():
            out = core.model(**suffix_inputs(core.model, head, [tail], 0, core.pad_id), use_cache=True, **core.keep_last)
        return Prefix(cache=out.past_key_values, input_ids=inputs["input_ids"], next_position=position, mrope=mrope)

    def for_suffixes(
        self,
        prefix: Prefix,
        extra: SignalPrefixes,
        start: int,
        suffixes: list[list[int]],
        by_layer: LayerSignals,
        image: Any,
    ) -> list[dict[str, Any]]:
        """The signals of the suffix batch ``suffixes`` (the image's prompts from ``start`` on),
        from the image's cached prefixes: the noised prefix, DoLa's layers from the base pass,
        the instruction variants' prefix, PAI over the image's prefix. Only the question without
        the image runs in full (a short text prompt, once per distinct one). The signals' order
        is :meth:`for_full_prompts`'s."""
        core, plan = self.core, self.plan
        rows = slice(start, start + len(suffixes))
        out: list[dict[str, Any]] = [{} for _ in suffixes]
        if extra.noised is not None:
            self._put(out, "noised", core.logits(self._suffixes(extra.noised, suffixes)))
        if plan.layers:
            _put_layers(out, by_layer)
        if plan.instruction:
            if extra.instruction is not None:
                logits = core.logits(self._suffixes(extra.instruction, extra.instruction_suffixes[rows]))
            else:
                logits = core.prompt_logits(extra.instruction_prompts[rows], [image] * len(suffixes))
            self._put(out, "instruction", logits)
        if plan.no_image:
            for signal, no_image in zip(out, self.no_image(extra.no_image_prompts[rows])):
                signal["no-image"] = no_image
        if plan.pai is not None:
            inputs = self._suffixes(prefix, suffixes)
            self._put(out, "attention", self.amplified_logits(inputs, self._image_columns(prefix, inputs)))
        return out

    def _suffixes(self, prefix: Prefix, suffixes: list[list[int]]) -> dict[str, Any]:
        return suffix_inputs(self.core.model, prefix, suffixes, 0, self.core.pad_id)

    def _image_columns(self, prefix: Prefix, inputs: dict[str, Any]) -> Any:
        """PAI's image keys for a suffix pass: [batch, prefix + suffix width], True on the
        prefix's image tokens, False on the suffix columns (text and padding)."""
        import torch

        rows, width = inputs["input_ids"].shape
        image = (prefix.input_ids == self.core.inputs.image_token_id).expand(rows, -1)
        return torch.cat([image, torch.zeros((rows, width), dtype=torch.bool, device=image.device)], dim=-1)


def _put_layers(out: list[dict[str, Any]], by_layer: LayerSignals) -> None:
    """DoLa's ``layer:N`` signals of the base pass into each row's signals."""
    if by_layer is None:
        raise RuntimeError("the layers signal needs the base pass's hidden states")
    for signal, layers in zip(out, by_layer):
        signal.update(layers)
