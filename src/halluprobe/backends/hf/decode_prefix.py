"""The decoding loop on the prefix cache (issue 24): per image, the prompt tokens its questions
share run once (and VCD's noised prefix once, ICD's instruction prefix once), and every batch of
that image's questions continues from broadcast copies of those caches through the same lockstep
loop and per-step rules as the plain :class:`~halluprobe.backends.hf.decode_engine.DecodeEngine`.

Each method's contrast branch here:

- VCD: the image's prefix with noised pixels (hf_signals.noised_inputs: the ``noised`` signal's
  schedule and per-image seed), run once per image; its suffixes are the base suffixes, so base
  and contrast rows share one forward pass per step (the two prefix caches stacked).
- ICD: the instruction variants of the image's questions share a prefix of their own (template
  head, image tokens, the instruction), continued from the base prefix's cache after the image
  (hf_signal_passes.SignalPasses.prefixes, as the ``instruction`` signal): no second image pass.
  Where the variants share no prefix, the contrast rows run as full prompts (the plain way). Its
  prefix is longer than the base one, so the two branches run separate passes.
- M3ID, PAI: the question without the image is a short text prompt that shares a few template
  tokens with the others: it runs as full prompts, a pass of its own per step.
- DoLa: no contrast branch.

An image asked one distinct question (a caption per image) has nothing to share: such images
are decoded together in the plain engine's batches of full prompts, as is an image whose prompts
share no prefix (or whose prefix, longest suffix and new tokens exceed a sliding-attention
window); each logged once. Sampling seeds
each question as the plain engine does, so both engines write the same text. A batch that fails
is asked again row by row; a row that still fails is an error sample, never plain decoding.
torch is imported inside the functions.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from halluprobe.backends.hf.core import Batching, ModelCore, error_response, is_oom
from halluprobe.backends.hf.decode import Decoded
from halluprobe.backends.hf.decode_engine import DecodeEngine
from halluprobe.backends.hf.decode_rules import BRANCHES
from halluprobe.backends.hf.prefix import Prefix, suffix_inputs
from halluprobe.backends.hf.signal_passes import SignalPasses, SignalPrefixes
from halluprobe.backends.hf.signals import VCD_NOISE_STEP, SignalPlan
from halluprobe.records import GenerateConfig, Request, Response

__all__ = ["ImagePrefixes", "PrefixDecodeEngine"]

log = logging.getLogger(__name__)


@dataclass
class ImagePrefixes:
    """One image's cached prefixes for the loop: the base prefix, the method's contrast prefix
    (``extra``: VCD's noised prefix, ICD's instruction prefix) and each prompt's suffixes."""

    image: Any
    prefix: Prefix
    extra: SignalPrefixes
    suffix_of: dict[str, int]  # prompt -> its index among the image's distinct prompts
    suffixes: list[list[int]]
    seconds: float  # the time the image's prefixes took (shared out over its questions' latency)


class PrefixDecodeEngine(DecodeEngine):
    """Free-form answers from the decoding loop after each image's cached prefix; see the module
    docstring."""

    def __init__(self, core: ModelCore, batching: Batching, config: GenerateConfig, *, joint: bool = True) -> None:
        super().__init__(core, batching, config, joint=joint)
        branch = BRANCHES[self.method] if self.method is not None else None
        plan = SignalPlan(noise_step=VCD_NOISE_STEP if branch == "noised" else None, instruction=branch == "instruction")
        self.prefix_passes = SignalPasses(core, plan, batching)

    def answer(self, requests: Sequence[Request]) -> Iterator[list[Response]]:
        """Images asked several distinct questions: their prefix once, then suffix batches. Images
        asked one (a caption per image): nothing to share, and a batch per image would give up
        batching across images, so they are decoded together in batches of full prompts."""
        order = sorted(range(len(requests)), key=lambda i: requests[i].image_path)
        alone: list[Request] = []
        for _, grouped in itertools.groupby([requests[i] for i in order], key=lambda r: r.image_path):
            group = list(grouped)
            if len({r.prompt for r in group}) < 2:
                alone.extend(group)
                continue
            yield from self._answer_image(group)
        if alone:
            self.core.say_once("images asked one question share their prefix with no other prompt: decoding them in batches of full prompts")
            yield from self.batching.run(alone, self._answer_batch, self.core.empty_device_cache)

    def prepare(self, group: Sequence[Request], image: Any) -> ImagePrefixes | None:
        """The image's prefixes for its questions ``group`` (exceptions pass), or ``None`` where
        its prompts share no prefix (or it exceeds a sliding-attention window)."""
        core = self.core
        started = time.perf_counter()
        prompts = list(dict.fromkeys(r.prompt for r in group))
        shared = core.inputs.encode_shared(prompts, image)
        if shared is None or not core.fits_window(shared, self.config.max_new_tokens):
            return None
        prefix = core.run_prefix(shared.prefix)
        first = {r.prompt: r for r in reversed(group)}  # each prompt's first request holds its variants
        if self._contrast_variant() == "instruction":  # its prefix needs every question's variant
            missing = next((r for r in group if "instruction" not in r.variants), None)
            if missing is not None:
                raise ValueError(f"request {missing.key} has no 'instruction' variant for {self.method}")
        extra = self.prefix_passes.prefixes(shared, prefix, image, [first[p] for p in prompts])
        suffix_of = {p: i for i, p in enumerate(prompts)}
        return ImagePrefixes(image, prefix, extra, suffix_of, shared.suffixes, time.perf_counter() - started)

    def _contrast_variant(self) -> str | None:
        return BRANCHES[self.method] if self.method is not None else None

    def decode_rows(self, prefixes: ImagePrefixes, rows: Sequence[Request], *, keep_steps: bool = False) -> Decoded:
        """One batch of the image's questions through the loop after its cached prefixes."""
        core = self.core
        index = [prefixes.suffix_of[r.prompt] for r in rows]
        base = suffix_inputs(core.model, prefixes.prefix, [prefixes.suffixes[i] for i in index], 0, core.pad_id)
        contrast: dict[str, Any] | None = None
        branch, extra = self._contrast_variant(), prefixes.extra
        if branch == "noised":
            assert extra.noised is not None
            contrast = suffix_inputs(core.model, extra.noised, [prefixes.suffixes[i] for i in index], 0, core.pad_id)
        elif branch == "instruction" and extra.instruction is not None:
            contrast = suffix_inputs(core.model, extra.instruction, [extra.instruction_suffixes[i] for i in index], 0, core.pad_id)
        elif branch is not None:  # the no-image question, or instruction variants that share no prefix: full prompts
            images = [prefixes.image] * len(rows) if branch != "no-image" else []
            contrast = core.to_device(core.inputs.encode([r.variants[branch] for r in rows], images))
        return self.loop(rows, base, contrast, keep_steps=keep_steps, prefix_ids=prefixes.prefix.input_ids)

    def decode_batch(self, rows: Sequence[Request], images: list[Any], *, keep_steps: bool = False) -> Decoded:
        """One batch about one image (``images``: the rows' images, all the same) through the
        prefix path; the plain engine's batch where its prompts share no prefix."""
        if len({r.image_path for r in rows}) != 1:
            raise ValueError("the prefix-cache decoding engine decodes the questions of one image per batch")
        prefixes = self.prepare(rows, images[0])
        if prefixes is None:
            return self.decode_full(rows, images, keep_steps=keep_steps)
        return self.decode_rows(prefixes, rows, keep_steps=keep_steps)

    def _answer_image(self, group: list[Request]) -> Iterator[list[Response]]:
        core = self.core
        image = core.load_image(group[0].image_path)
        if isinstance(image, str):
            yield [error_response(r, image) for r in group]
            return
        try:
            prefixes = self.prepare(group, image)
        except Exception as err:
            if is_oom(err):
                raise
            log.exception("image %s failed", group[0].image_path)
            yield [error_response(r, f"{type(err).__name__}: {err}") for r in group]
            return
        if prefixes is None:
            core.say_once("prompts share no image prefix (or it exceeds a sliding-attention window); decoding them from full prompts")
            yield from self.batching.run(group, self._answer_batch, core.empty_device_cache)
            return
        yield from self.batching.run(group, lambda chunk: self._answer_rows(prefixes, chunk, len(group)), core.empty_device_cache)

    def _answer_rows(self, prefixes: ImagePrefixes, rows: Sequence[Request], questions: int) -> list[Response]:
        """Responses of one batch; a batch that fails is asked again row by row (out of memory passes)."""
        started = time.perf_counter()
        share = prefixes.seconds * len(rows) / questions  # the batch's share of the image's prefix passes
        results: dict[tuple[str, int], Response] = {}
        try:
            results.update(self._respond(self.decode_rows(prefixes, rows), rows, started, share))
        except Exception as err:
            if is_oom(err):
                raise
            if len(rows) == 1:
                log.exception("decoding failed")
                results[rows[0].key] = error_response(rows[0], f"{type(err).__name__}: {err}")
            else:
                for r in rows:
                    try:
                        results.update(self._respond(self.decode_rows(prefixes, [r]), [r], time.perf_counter(), share / len(rows)))
                    except Exception as one_err:
                        if is_oom(one_err):
                            raise
                        log.exception("decoding failed")
                        results[r.key] = error_response(r, f"{type(one_err).__name__}: {one_err}")
        return [results[r.key] for r in rows]

    def _respond(self, decoded: Decoded, rows: Sequence[Request], started: float, share: float) -> dict[tuple[str, int], Response]:
        core = self.core
        texts = core.tokenizer.batch_decode(decoded.tokens, skip_special_tokens=True)
        latency = (time.perf_counter() - started + share) / len(rows)
        return core.responses([[r] for r in rows], decoded.first_logits, texts, latency, self.config.top_k)
