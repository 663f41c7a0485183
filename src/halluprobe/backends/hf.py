"""transformers backend: any model that AutoProcessor + AutoModelForImageTextToText load.

Two engines give the same numbers (tests hold them within 1e-4 in fp32):

- **prefix cache** (default): questions are grouped by image. For each image the image is
  preprocessed once, the prompt tokens that all its questions share (the image tokens and the
  template text around them, found as the longest common token prefix) run once, and their
  KV cache is reused for the questions' own suffixes, in batches of ``batch_size``. Identical
  prompts about one image are computed once. Only one image's cache is held at a time.
- **plain** (``prefix_cache=False``): each batch of full prompts, left-padded, runs from scratch.

Either way every readout comes from one pass per batch: ``generate(output_logits=True)`` gives
the raw logits of the first generated step (all logit readouts) and the greedy continuation
(the text rules), stopping at '.', newline or EOS; with no text rule asked, one forward pass.
The fast path calls the same ``generate`` with the expanded cache, explicit positions and the
prefix ids in front, so decoding settings, stop rules and padding behave exactly as in the
plain path. See docs/design/prefix-cache.md.

Correction signals (``GenerateConfig.signals``, hf_signals.py): DoLa's layers are read from the
base pass's hidden states on both engines. The plain engine runs every other signal as one
extra pass over the batch's full prompts. The prefix-cache engine runs none with the image in
full: the noised signal from a second prefix per image (noised pixels), the instruction
variants from their own shared prefix per image (the image's prefix cache continued with the
instruction's text where the cache can be cropped), PAI as a suffix pass over the image's
cached prefix, each batched like the questions' suffixes; the question without the image
(short text) runs in full, once per distinct prompt.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from halluprobe.errors import InputError
from halluprobe.files import read_rgb_image
from halluprobe.readouts.logits import candidate_ids
from halluprobe.readouts.tokensets import derive_token_sets
from halluprobe.records import (
    YES_NO_STOP_STRINGS,
    GenerateConfig,
    Request,
    Response,
    SignalLogprobs,
    TokenLogprob,
    TokenSets,
)

if TYPE_CHECKING:
    import torch

    from halluprobe.backends.hf_inputs import SharedPrefix

__all__ = ["HFBackend", "STOP_STRINGS"]

log = logging.getLogger(__name__)

STOP_STRINGS = YES_NO_STOP_STRINGS  # the yes/no default of GenerateConfig.stop_strings


def _is_oom(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()


@dataclass
class _Prefix:
    """One image's shared prefix after its forward pass (device tensors)."""

    cache: Any  # DynamicCache with batch 1
    input_ids: torch.Tensor  # [1, P]
    next_position: int  # position of the first suffix token (on every rotary axis)
    mrope: bool  # positions are [3, B, L] (Qwen2-VL multimodal rotary)


@dataclass
class _SignalPrefixes:
    """One image's inputs for its correction signals on the prefix-cache engine, per prompt of
    the image in order (its suffix batches slice them)."""

    noised: _Prefix | None = None  # the image's prefix with noised pixels (VCD)
    instruction: _Prefix | None = None  # the instruction variants' shared prefix (ICD); None: full prompts
    instruction_suffixes: list[list[int]] = field(default_factory=list)  # after ``instruction``
    instruction_prompts: list[str] = field(default_factory=list)  # the full variants (the fallback)
    no_image_prompts: list[str] = field(default_factory=list)  # run in full: short text prompts


class HFBackend:
    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 8,
        dtype: str = "auto",
        device: str = "auto",
        load_in_4bit: bool = False,
        trust_remote_code: bool = False,
        prefix_cache: bool = True,
    ) -> None:
        from halluprobe.backends.hf_inputs import load_model, load_processor

        self._model_id = model
        self._batch_size = max(1, batch_size)
        self._prefix_cache = prefix_cache
        self._inputs = load_processor(model, trust_remote_code=trust_remote_code)
        self._model = load_model(
            model, dtype=dtype, device=device, trust_remote_code=trust_remote_code, load_in_4bit=load_in_4bit
        )
        self._tokenizer = self._inputs.tokenizer
        self._sets = derive_token_sets(self._tokenizer)
        n_logits = self._model.get_output_embeddings().weight.shape[0]
        self._candidates = [i for i in candidate_ids(self._sets) if i < n_logits]
        self._pieces = self._tokenizer.convert_ids_to_tokens(list(range(len(self._tokenizer))))
        # stop strings travel with each call (GenerateConfig); their criteria are built once per
        # set, on first use: building one preprocesses the whole vocabulary
        self._stops: tuple[str, ...] = STOP_STRINGS
        self._stopping: dict[tuple[str, ...], Any] = {}
        # A forward pass needs the last position's logits only: skip the [batch, seq, vocab] rest.
        params = inspect.signature(self._model.forward).parameters
        self._keep_last: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        pad = self._tokenizer.pad_token_id
        if pad is None:
            pad = getattr(self._model.generation_config, "pad_token_id", None)
        self._pad_id = int(pad) if isinstance(pad, int) else 0
        self._fallback_logged = False
        self._no_image: dict[str, SignalLogprobs] = {}  # prompt without the image -> its signal
        self._instruction_fallback_logged = False
        self._plan: Any = None  # the current call's signals (hf_signals.SignalPlan of GenerateConfig.signals)
        self._window = _sliding_window(self._model.config)
        family = self._inputs.family
        if prefix_cache and family is not None and family.engine == "plain":
            # said once, here: a shared cache would be silently wrong for this family
            log.info("%s (%s): no prefix cache, %s; every prompt runs in full", model, family.name, family.why_plain)
            self._prefix_cache = False

    # -- Backend protocol ----------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        config = self._model.config
        return {
            "model": self._model_id,
            "architecture": (config.architectures or [type(self._model).__name__])[0],
            "revision": getattr(config, "_commit_hash", None),
            "dtype": str(self._model.dtype).removeprefix("torch."),
            "device": str(self._model.device),
            "batch_size": self._batch_size,
            "prefix_cache": self._prefix_cache,
        }

    def token_sets(self) -> TokenSets:
        return self._sets

    def render_prompt(self, question: str, template: str | None, *, image: bool = True) -> str:
        return self._inputs.render_prompt(question, template, image=image)

    def check_signals(self, signals: Sequence[str]) -> None:
        """InputError for a correction signal this backend cannot record (before any request)."""
        from halluprobe.backends.hf_signals import parse_signals

        parse_signals(signals, len(self._model.get_decoder().layers))

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        from halluprobe.backends.hf_signals import parse_signals

        max_new_tokens, top_k = config.max_new_tokens, config.top_k
        self._stops = config.stops
        # the correction signals of this call, checked before any request runs
        self._plan = parse_signals(config.signals, len(self._model.get_decoder().layers))
        # Questions about one image sit together (across splits): each image is read once.
        order = sorted(range(len(requests)), key=lambda i: requests[i].image_path)
        pending = [requests[i] for i in order]
        if not self._prefix_cache:
            yield from self._answer_plain(pending, max_new_tokens, top_k)
            return
        for _, group in itertools.groupby(pending, key=lambda r: r.image_path):
            yield from self._answer_image(list(group), max_new_tokens, top_k)

    # -- plain engine: full prompts, left-padded batches ---------------------------------------

    def _answer_plain(self, pending: Sequence[Request], max_new_tokens: int, top_k: int) -> Iterator[list[Response]]:
        start = 0
        while start < len(pending):
            batch = pending[start : start + self._batch_size]
            try:
                yield self._answer_batch(batch, max_new_tokens, top_k)
            except RuntimeError as err:
                if not _is_oom(err) or self._batch_size == 1:
                    raise
                self._halve_batch()
                continue
            start += len(batch)

    def _answer_batch(self, batch: Sequence[Request], max_new_tokens: int, top_k: int) -> list[Response]:
        started = time.perf_counter()
        images, errors = self._load_images(batch)
        ok = [r for i, r in enumerate(batch) if i not in errors]
        results: dict[tuple[str, int], Response] = {
            batch[i].key: _error(batch[i], msg) for i, msg in errors.items()
        }
        if ok:
            try:
                inputs = self._inputs.encode([r.prompt for r in ok], images)
                inputs = {k: v.to(self._model.device) if hasattr(v, "to") else v for k, v in inputs.items()}
                first_logits, texts, by_layer = self._base_pass(inputs, max_new_tokens)
                signals = self._signals(inputs, ok, images, by_layer)
            except Exception as err:
                if _is_oom(err):
                    raise
                log.exception("batch failed")
                for r in ok:
                    results[r.key] = _error(r, f"{type(err).__name__}: {err}")
            else:
                latency = (time.perf_counter() - started) / len(batch)
                rows = [[r] for r in ok]
                responses = self._responses(rows, first_logits, texts, latency, top_k)
                results.update(_with_signals(responses, rows, signals))
        return [results[r.key] for r in batch]

    def _signals(
        self, inputs: dict[str, Any], requests: Sequence[Request], images: list[Any], by_layer: list[dict[str, Any]] | None
    ) -> list[dict[str, Any]] | None:
        """The correction signals of a batch of full prompts (one image each): DoLa's layers as
        the base pass gave them (``by_layer``), the others from extra forward passes (noised
        pixels, the question under a disturbing instruction or without the image, amplified
        image attention)."""
        if not self._wants_signals:
            return None
        import torch

        from halluprobe.backends.hf_signals import noised_inputs

        plan = self._plan
        out: list[dict[str, Any]] = [{} for _ in requests]
        if plan.noise_step is not None:
            try:
                noised = self._logits(noised_inputs(inputs, [r.image_path for r in requests], plan.noise_step))
            except InputError:  # tiles of several images in one tensor (InternVL): each prompt alone
                noised = torch.cat([self._noised_prompt_logits(r, image) for r, image in zip(requests, images)])
            self._put(out, "noised", noised)
        if plan.layers:
            _put_layers(out, by_layer)
        if plan.instruction:
            self._put(out, "instruction", self._prompt_logits([r.variants["instruction"] for r in requests], images))
        if plan.no_image:
            for signal, no_image in zip(out, self._no_image_signals([r.variants["no-image"] for r in requests])):
                signal["no-image"] = no_image
        if plan.pai is not None:
            self._put(out, "attention", self._amplified_logits(inputs, inputs["input_ids"] == self._inputs.image_token_id))
        return out

    def _noised_prompt_logits(self, request: Request, image: Any) -> Any:
        """The noised pass of one full prompt (its pixel tensor is one image's, however tiled)."""
        from halluprobe.backends.hf_signals import noised_inputs

        assert self._plan is not None and self._plan.noise_step is not None
        inputs = self._inputs.encode([request.prompt], [image])
        inputs = {k: v.to(self._model.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        return self._logits(noised_inputs(inputs, [request.image_path], self._plan.noise_step))

    def _put(self, out: list[dict[str, Any]], name: str, logits: Any) -> None:
        """Row ``i`` of a pass's last-position logits as signal ``name`` of ``out[i]``."""
        from halluprobe.backends.hf_signals import step_signal

        for row, signal in enumerate(out):
            signal[name] = step_signal(logits[row], self._candidates)

    def _logits(self, inputs: dict[str, Any]) -> Any:
        """Last-position logits of one forward pass: full prompts, or suffixes after a cached prefix."""
        import torch

        with torch.inference_mode():
            return self._model(**inputs, use_cache="past_key_values" in inputs, **self._keep_last).logits[:, -1, :]

    def _prompt_logits(self, prompts: list[str], images: list[Any]) -> Any:
        """Last-position logits of full prompts (a signal's variant of the question)."""
        inputs = self._inputs.encode(prompts, images)
        return self._logits({k: v.to(self._model.device) if hasattr(v, "to") else v for k, v in inputs.items()})

    def _no_image_signals(self, prompts: list[str]) -> list[SignalLogprobs]:
        """The no-image signal of each prompt. A prompt without the image does not depend on the
        image, so each distinct one runs once per loaded model (POPE: about one per object name,
        not one per question)."""
        from halluprobe.backends.hf_signals import step_signal

        todo = [p for p in dict.fromkeys(prompts) if p not in self._no_image]
        for start in range(0, len(todo), self._batch_size):
            chunk = todo[start : start + self._batch_size]
            logits = self._prompt_logits(chunk, [])
            for row, prompt in enumerate(chunk):
                self._no_image[prompt] = step_signal(logits[row], self._candidates)
        return [self._no_image[p] for p in prompts]

    def _amplified_logits(self, inputs: dict[str, Any], image_columns: Any) -> Any:
        """PAI's pass: ``image_columns`` [batch, key length] marks the image tokens' keys."""
        from halluprobe.backends.hf_signals import amplified_attention

        with amplified_attention(self._model, self._plan.pai, image_columns):
            return self._logits(inputs)

    def _base_pass(
        self, inputs: dict[str, Any], max_new_tokens: int
    ) -> tuple[Any, list[str] | None, list[dict[str, Any]] | None]:
        """``_forward``'s logits and continuations, plus, when DoLa's layers are asked, each row's
        ``layer:N`` signals from the same pass's first-step hidden states (no pass of their own;
        the hidden states are dropped here)."""
        if self._plan is None or not self._plan.layers:
            first_logits, texts = self._forward(inputs, max_new_tokens)
            return first_logits, texts, None
        from halluprobe.backends.hf_signals import layer_signals

        first_logits, texts, hidden = self._first_step(inputs, max_new_tokens, hidden_states=True)
        return first_logits, texts, layer_signals(self._model, hidden, self._plan.layers, self._candidates, first_logits)

    @property
    def _wants_signals(self) -> bool:
        return self._plan is not None and self._plan.any

    # -- prefix-cache engine: one image at a time -----------------------------------------------

    def _answer_image(self, group: list[Request], max_new_tokens: int, top_k: int) -> Iterator[list[Response]]:
        """Answer every request about one image: the shared prefix once, then suffix batches."""
        started = time.perf_counter()
        image = self._load_image(group[0].image_path)
        if isinstance(image, str):
            yield [_error(r, image) for r in group]
            return
        # Identical prompts about one image are one computation (POPE's splits repeat questions).
        by_prompt: dict[str, list[Request]] = {}
        for r in group:
            by_prompt.setdefault(r.prompt, []).append(r)
        prompts = list(by_prompt)
        try:
            shared = self._inputs.encode_shared(prompts, image)
            if shared is not None and not self._fits_window(shared, max_new_tokens):
                shared = None
            prefix = self._run_prefix(shared) if shared is not None else None
            extra = None
            if shared is not None and self._wants_signals:
                extra = self._signal_prefixes(shared, prefix, image, [by_prompt[p][0] for p in prompts])
        except Exception as err:
            if _is_oom(err):
                raise
            log.exception("image %s failed", group[0].image_path)
            yield [_error(r, f"{type(err).__name__}: {err}") for r in group]
            return
        if shared is None or prefix is None:
            if not self._fallback_logged:
                log.info(
                    "prompts share no image prefix (or it exceeds a sliding-attention window); "
                    "answering them with full prompts"
                )
                self._fallback_logged = True
            yield from self._answer_plain(group, max_new_tokens, top_k)
            return
        setup_seconds = time.perf_counter() - started  # the image, its prefix and the signals' prefixes
        start = 0
        while start < len(prompts):
            chunk = prompts[start : start + self._batch_size]
            batch_started = time.perf_counter()
            rows = [by_prompt[p] for p in chunk]
            inputs: dict[str, Any] | None = None
            try:
                suffixes = shared.suffixes[start : start + len(chunk)]
                inputs = self._suffix_inputs(prefix, suffixes, max_new_tokens)
                first_logits, texts, by_layer = self._base_pass(inputs, max_new_tokens)
                inputs = None  # the expanded cache: free it before the signals' passes build theirs
                signals = None
                if extra is not None:
                    signals = self._suffix_signals(prefix, extra, start, suffixes, by_layer, image)
            except Exception as err:
                if _is_oom(err) and self._batch_size > 1:
                    inputs = None  # drop the expanded cache before retrying smaller
                    self._halve_batch()
                    continue
                if _is_oom(err):
                    raise
                log.exception("batch failed")
                yield [_error(r, f"{type(err).__name__}: {err}") for row in rows for r in row]
            else:
                n = sum(len(row) for row in rows)
                # latency: this batch's own time plus its share of the image's prefix passes
                share = setup_seconds * len(chunk) / len(prompts)
                latency = (time.perf_counter() - batch_started + share) / n
                responses = _with_signals(self._responses(rows, first_logits, texts, latency, top_k), rows, signals)
                yield [responses[r.key] for row in rows for r in row]
            start += len(chunk)

    def _fits_window(self, shared: SharedPrefix, new_tokens: int) -> bool:
        """False when a sliding-attention layer's cache would drop prefix tokens that a full
        prompt (its longest suffix plus ``new_tokens``) still sees."""
        longest = shared.prefix_len + max(len(s) for s in shared.suffixes) + new_tokens
        return self._window is None or longest <= self._window

    def _signal_prefixes(self, shared: SharedPrefix, prefix: _Prefix, image: Any, requests: list[Request]) -> _SignalPrefixes:
        """The image's inputs for the asked correction signals (``requests[i]`` holds prompt i's
        variants): a second prefix with noised pixels (VCD), the instruction variants' own
        shared prefix (ICD), continued from the image's prefix ``prefix`` where it can be, else
        a pass of its own (``None`` where the variants share none: full prompts then)."""
        from halluprobe.backends.hf_signals import noised_inputs

        plan = self._plan
        extra = _SignalPrefixes()
        if plan.noise_step is not None:
            noised = noised_inputs(shared.prefix, [requests[0].image_path], plan.noise_step)
            extra.noised = self._run_prefix(replace(shared, prefix=noised))
        if plan.instruction:
            extra.instruction_prompts = [r.variants["instruction"] for r in requests]
            variants = self._inputs.encode_shared(extra.instruction_prompts, image)
            if variants is not None and self._fits_window(variants, 0):
                extra.instruction = self._continued_prefix(prefix, variants)
                if extra.instruction is None:
                    extra.instruction = self._run_prefix(variants)
                extra.instruction_suffixes = variants.suffixes
            elif not self._instruction_fallback_logged:
                log.info("the instruction variants share no image prefix; their signal runs on full prompts")
                self._instruction_fallback_logged = True
        if plan.no_image:
            extra.no_image_prompts = [r.variants["no-image"] for r in requests]
        return extra

    def _continued_prefix(self, base: _Prefix, shared: SharedPrefix) -> _Prefix | None:
        """``shared``'s prefix from ``base``'s cache: the positions both hold (the template head
        and the image tokens) are cropped from it, the rest, text after the image (ICD's
        instruction), runs as a suffix pass, so the image is not read again. ``None`` where
        that cannot hold: an image token after the common part, or a cache that cannot be
        cropped (sliding-window layers keep only their tail)."""
        import torch

        mine, theirs = shared.prefix["input_ids"][0].tolist(), base.input_ids[0].tolist()
        common = len(os.path.commonprefix([mine, theirs]))
        if common == 0 or self._inputs.image_token_id in mine[common:]:
            return None
        cropped = self._cropped_cache(base.cache, common)
        if cropped is None:
            return None
        device = self._model.device
        inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in shared.prefix.items()}
        next_position, mrope = self._next_position(inputs)
        tail = mine[common:]
        # the tail is text after the image: its positions count on, one per token, to next_position
        head = _Prefix(
            cache=cropped, input_ids=inputs["input_ids"][:, :common], next_position=next_position - len(tail), mrope=mrope
        )
        if not tail:
            return head
        with torch.inference_mode():
            out = self._model(**self._suffix_inputs(head, [tail], 0), use_cache=True, **self._keep_last)
        return _Prefix(cache=out.past_key_values, input_ids=inputs["input_ids"], next_position=next_position, mrope=mrope)

    def _suffix_signals(
        self,
        prefix: _Prefix,
        extra: _SignalPrefixes,
        start: int,
        suffixes: list[list[int]],
        by_layer: list[dict[str, Any]] | None,
        image: Any,
    ) -> list[dict[str, Any]]:
        """The correction signals of the suffix batch ``suffixes`` (the image's prompts from
        ``start`` on), from the image's cached prefixes: the noised prefix, DoLa's layers from
        the base pass, the instruction variants' prefix, PAI over the image's prefix. Only the
        question without the image runs in full (a short text prompt, once per distinct one). The signals' order is
        the plain engine's (``_signals``)."""
        plan = self._plan
        rows = slice(start, start + len(suffixes))
        out: list[dict[str, Any]] = [{} for _ in suffixes]
        if extra.noised is not None:
            self._put(out, "noised", self._logits(self._suffix_inputs(extra.noised, suffixes, 0)))
        if plan.layers:
            _put_layers(out, by_layer)
        if plan.instruction:
            if extra.instruction is not None:
                logits = self._logits(self._suffix_inputs(extra.instruction, extra.instruction_suffixes[rows], 0))
            else:
                logits = self._prompt_logits(extra.instruction_prompts[rows], [image] * len(suffixes))
            self._put(out, "instruction", logits)
        if plan.no_image:
            for signal, no_image in zip(out, self._no_image_signals(extra.no_image_prompts[rows])):
                signal["no-image"] = no_image
        if plan.pai is not None:
            inputs = self._suffix_inputs(prefix, suffixes, 0)
            self._put(out, "attention", self._amplified_logits(inputs, self._image_columns(prefix, inputs)))
        return out

    def _image_columns(self, prefix: _Prefix, inputs: dict[str, Any]) -> Any:
        """PAI's image keys for a suffix pass: [batch, prefix + suffix width], True on the
        prefix's image tokens, False on the suffix columns (text and padding)."""
        import torch

        rows, width = inputs["input_ids"].shape
        image = (prefix.input_ids == self._inputs.image_token_id).expand(rows, -1)
        return torch.cat([image, torch.zeros((rows, width), dtype=torch.bool, device=image.device)], dim=-1)

    def _run_prefix(self, shared: SharedPrefix) -> _Prefix:
        import torch

        device = self._model.device
        inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in shared.prefix.items()}
        with torch.inference_mode():
            out = self._model(**inputs, use_cache=True, **self._keep_last)
        next_position, mrope = self._next_position(inputs)
        return _Prefix(
            cache=out.past_key_values,
            input_ids=inputs["input_ids"],
            next_position=next_position,
            mrope=mrope,
        )

    def _next_position(self, prefix: dict[str, Any]) -> tuple[int, bool]:
        """Position of the first token after the prefix, and whether positions are 3-D.

        Text after the image continues from the largest prefix position + 1 on all three
        multimodal rotary axes (what ``get_rope_index`` gives text tokens); 1-D models count on.
        """
        get_rope_index = getattr(getattr(self._model, "model", None), "get_rope_index", None)
        if get_rope_index is None or "mm_token_type_ids" not in prefix:
            return int(prefix["input_ids"].shape[1]), False
        params = inspect.signature(get_rope_index).parameters
        positions, _ = get_rope_index(**{k: v for k, v in prefix.items() if k in params})
        return int(positions.max()) + 1, True

    def _suffix_inputs(self, prefix: _Prefix, suffixes: list[list[int]], max_new_tokens: int) -> dict[str, Any]:
        """Model inputs for a batch of suffixes after the cached prefix.

        Suffixes are left-padded, so the pads sit between prefix and suffix: every row's last
        token is the last column (read its logits there; generation appends after it). The
        mask is [prefix ones | suffix mask] and positions are explicit, counting real tokens
        only, so a row's numbers do not depend on its neighbours' lengths. ``generate`` gets the
        prefix ids in front (it slices off what the cache covers); a plain forward gets the
        suffix only.
        """
        import torch

        device = self._model.device
        rows, width = len(suffixes), max(len(s) for s in suffixes)
        ids = torch.full((rows, width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for row, suffix in enumerate(suffixes):
            ids[row, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            mask[row, width - len(suffix) :] = 1
        positions = prefix.next_position + (mask.cumsum(-1) - 1).clamp(min=0)
        if prefix.mrope:
            positions = positions.unsqueeze(0).expand(3, rows, width)
        prefix_len = prefix.input_ids.shape[1]
        attention = torch.cat([torch.ones((rows, prefix_len), dtype=torch.long), mask], dim=-1)
        ids = ids.to(device)
        if max_new_tokens > 0:
            ids = torch.cat([prefix.input_ids.expand(rows, -1), ids], dim=-1)
        with torch.inference_mode():
            cache = self._expand_cache(prefix.cache, rows)
        return {
            "input_ids": ids,
            "attention_mask": attention.to(device),
            "position_ids": positions.to(device),
            "past_key_values": cache,
        }

    def _expand_cache(self, cache: Any, rows: int) -> Any:
        """A fresh DynamicCache holding ``rows`` copies of the batch-1 prefix cache.

        Built anew for every batch: the forward pass appends to it, and the prefix must stay
        as it is for the image's next batch.
        """
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        expanded = DynamicCache(config=self._model.config)
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
        return DynamicCache(data, config=self._model.config)

    def _cropped_cache(self, cache: Any, length: int) -> Any:
        """A DynamicCache of a batch-1 prefix cache's first ``length`` positions (views: a
        forward pass appends by copying), or ``None`` unless every layer is a plain
        DynamicLayer."""
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cropped = DynamicCache(config=self._model.config)
        layers = (*cropped.layers, *cache.layers)
        if len(cropped.layers) != len(cache.layers) or any(type(layer) is not DynamicLayer for layer in layers):
            return None
        for mine, theirs in zip(cropped.layers, cache.layers):
            mine.lazy_initialization(theirs.keys, theirs.values)
            mine.keys = theirs.keys[:, :, :length]
            mine.values = theirs.values[:, :, :length]
        return cropped

    # -- shared -------------------------------------------------------------------------------

    def _halve_batch(self) -> None:
        self._batch_size = max(1, self._batch_size // 2)
        log.warning("out of memory: batch size halved to %d", self._batch_size)
        self._empty_cache()

    def _empty_cache(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _load_image(self, path: str) -> Any:
        """The RGB image, or an error message (an unreadable image is a per-sample error)."""
        return read_rgb_image(path)

    def _load_images(self, batch: Sequence[Request]) -> tuple[list[Any], dict[int, str]]:
        images: list[Any] = []
        errors: dict[int, str] = {}
        cache: dict[str, Any] = {}
        for i, request in enumerate(batch):
            path = request.image_path
            if path not in cache:
                cache[path] = self._load_image(path)
            if isinstance(cache[path], str):
                errors[i] = cache[path]
            else:
                images.append(cache[path])
        return images, errors

    def _responses(
        self,
        rows: Sequence[Sequence[Request]],
        first_logits: Any,
        texts: list[str] | None,
        latency: float,
        top_k: int,
    ) -> dict[tuple[str, int], Response]:
        """Responses from a batch's first-step logits: row ``i`` answers every request in ``rows[i]``."""
        import torch

        logprobs = torch.log_softmax(first_logits.float(), dim=-1).cpu()
        cand = torch.tensor(self._candidates, dtype=torch.long)
        top = torch.topk(logprobs, k=min(top_k, logprobs.shape[-1]), dim=-1)
        values = logprobs[:, cand].tolist()
        # an overflow (fp16 logits beyond 65504 are inf; inf - inf is NaN) makes a row's
        # log-probabilities non-finite: that row's samples are errors, never NaN readouts
        broken = (
            torch.isnan(logprobs).any(dim=-1)
            | ~torch.isfinite(top.values).all(dim=-1)
            | ~torch.isfinite(logprobs[:, cand]).all(dim=-1)
        ).tolist()
        out: dict[tuple[str, int], Response] = {}
        for row, requests in enumerate(rows):
            if broken[row]:
                message = (
                    "the first-token log-probabilities are not finite (NaN or inf: a float16 overflow?); "
                    "try --dtype bfloat16 or float32"
                )
                for r in requests:
                    out[r.key] = _error(r, message)
                continue
            first_token = [
                TokenLogprob(id=int(i), piece=self._piece(int(i)), logprob=float(v))
                for v, i in zip(top.values[row].tolist(), top.indices[row].tolist())
            ]
            candidates = {str(i): float(v) for i, v in zip(self._candidates, values[row])}
            for r in requests:
                out[r.key] = Response(
                    split=r.split,
                    question_id=r.question_id,
                    first_token=first_token,
                    candidates=candidates,
                    text=texts[row] if texts is not None else None,
                    latency_s=latency,
                )
        return out

    def _piece(self, token_id: int) -> str:
        return self._pieces[token_id] if token_id < len(self._pieces) else f"<id {token_id}>"

    def _stopping_criteria(self) -> Any:
        """Stop at the stop strings ('.', newline by default) or EOS. Built once: passing
        ``stop_strings`` to every ``generate`` call would redo a ~0.3 s pass over the vocabulary
        per batch. With no stop strings (descriptions, open-ended answers) only EOS or
        ``max_new_tokens`` end a continuation. The set is the current call's (GenerateConfig)."""
        stops = self._stops
        if stops not in self._stopping:
            from transformers import StoppingCriteriaList, StopStringCriteria

            criteria = [StopStringCriteria(self._tokenizer, list(stops))] if stops else []
            self._stopping[stops] = StoppingCriteriaList(criteria)
        return self._stopping[stops]

    def _forward(self, inputs: dict[str, Any], max_new_tokens: int) -> tuple[Any, list[str] | None]:
        """Raw first-step logits [batch, vocab] and, when asked, the greedy continuations.

        ``inputs`` is a full encoded batch, or (prefix cache) suffix inputs with
        ``past_key_values``; ``input_ids`` then starts with the cached prefix when generating.
        """
        first_logits, texts, _ = self._first_step(inputs, max_new_tokens, hidden_states=False)
        return first_logits, texts

    def _first_step(
        self, inputs: dict[str, Any], max_new_tokens: int, *, hidden_states: bool
    ) -> tuple[Any, list[str] | None, Any]:
        """``_forward``'s two results and, with ``hidden_states``, the first step's hidden states
        (embeddings, then every layer; [batch, positions of that step, hidden] each)."""
        import torch

        wanted: dict[str, Any] = {"output_hidden_states": True} if hidden_states else {}
        with torch.inference_mode():
            if max_new_tokens <= 0:
                out = self._model(**inputs, use_cache="past_key_values" in inputs, **wanted, **self._keep_last)
                return out.logits[:, -1, :], None, _text_hidden_states(out) if hidden_states else None
            generated = self._model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                output_logits=True,
                return_dict_in_generate=True,
                stopping_criteria=self._stopping_criteria(),
                pad_token_id=self._tokenizer.pad_token_id,
                **wanted,
            )
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = generated.sequences[:, prompt_len:]
        texts = self._tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return generated.logits[0], texts, generated.hidden_states[0] if hidden_states else None


def _text_hidden_states(out: Any) -> Any:
    """The language model's hidden states of a forward pass (InstructBLIP nests them in its
    ``language_model_outputs``)."""
    states = getattr(out, "hidden_states", None)
    if states is None and getattr(out, "language_model_outputs", None) is not None:
        states = out.language_model_outputs.hidden_states
    if states is None:
        raise RuntimeError(f"{type(out).__name__} gives no hidden states: the layers signal cannot be read")
    return states


def _put_layers(out: list[dict[str, Any]], by_layer: list[dict[str, Any]] | None) -> None:
    """DoLa's ``layer:N`` signals of the base pass (``_base_pass``) into each row's signals."""
    if by_layer is None:
        raise RuntimeError("the layers signal needs the base pass's hidden states")
    for signal, layers in zip(out, by_layer):
        signal.update(layers)


def _with_signals(
    responses: dict[tuple[str, int], Response], rows: list[list[Request]], signals: list[dict[str, Any]] | None
) -> dict[tuple[str, int], Response]:
    """Each row's signals onto the responses of its requests (a row may answer several)."""
    if signals is None:
        return responses
    for row, signal in zip(rows, signals):
        for r in row:
            responses[r.key] = responses[r.key].model_copy(update={"signals": signal})
    return responses


def _sliding_window(config: Any) -> int | None:
    """The text model's sliding-attention window, when any of its layers uses one (Gemma 3)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    window = getattr(text, "sliding_window", None)
    layer_types = getattr(text, "layer_types", None)
    if not isinstance(window, int) or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return window


def _error(request: Request, message: str) -> Response:
    return Response(split=request.split, question_id=request.question_id, error=message)
