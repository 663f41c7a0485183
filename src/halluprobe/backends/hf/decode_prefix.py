"""The decoding loop on the prefix cache (issues 24, 33): per image, the prompt tokens its
questions share run once (and VCD's noised prefix once, ICD's instruction prefix once); batches
take the next rows whichever images they belong to (hf/image_rows.py), each row continuing from
its own image's caches through the same lockstep loop and per-step rules as the plain
:class:`~halluprobe.backends.hf.decode_engine.DecodeEngine`: by default one row per image with
its questions in slots (hf_packed.PackedRows), else a row per question (broadcast views for one
image, a stacked copy for several: hf_prefix.rows_inputs) where the model cannot pack or a
batch's slots would be mostly empty (``worth_packing``).

Each method's contrast branch here:

- VCD: the image's prefix with noised pixels (hf_signals.noised_inputs: the ``noised`` signal's
  schedule and per-image seed), run once per image; its suffixes are the base suffixes, so base
  and contrast rows share one forward pass per step (the two prefix caches stacked).
- ICD: the instruction variants of the image's questions share a prefix of their own (template
  head, image tokens, the instruction), continued from the base prefix's cache after the image
  (hf_signal_passes.SignalPasses.prefixes, as the ``instruction`` signal): no second image pass.
  Where the variants share no prefix, the contrast rows run as full prompts (the plain way). Its
  prefix is longer than the base one: in rows of their own the two branches run separate
  passes; packed, they join as one batch (the shorter prefixes left-padded, masked out).
- M3ID, PAI: the question without the image is a short text prompt that shares a few template
  tokens with the others: it runs as full prompts, a pass of its own per step.
- DoLa: no contrast branch.

An image asked one distinct question (a caption per image) has nothing to share: such images
are decoded together, across images, in the plain engine's batches of full prompts; an image
whose prompts share no prefix (or whose prefix, longest suffix and new tokens exceed a sliding-attention
window) in batches of its own full prompts; each logged once. Sampling seeds
each question as the plain engine does, so both engines write the same text. A batch that fails
is asked again row by row; a row that still fails is an error sample, never plain decoding.
torch is imported inside the functions.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from halluprobe.backends.hf.core import Batching, ModelCore, error_response, is_oom
from halluprobe.backends.hf.decode import Decoded
from halluprobe.backends.hf.decode_engine import DecodeEngine
from halluprobe.backends.hf.decode_rules import BRANCHES
from halluprobe.backends.hf.image_rows import Encoded, ImageRows, RowQueue, ahead_images, distinct_prompts, encoded_images
from halluprobe.backends.hf.packed import PackedRows
from halluprobe.backends.hf.prefix import Prefix, padded_prefix_ids, rows_inputs
from halluprobe.backends.hf.signal_passes import SignalPasses, SignalPrefixes
from halluprobe.backends.hf.signals import VCD_NOISE_STEP, SignalPlan, noised_inputs
from halluprobe.records import GenerateConfig, Request, Response

if TYPE_CHECKING:
    from halluprobe.backends.hf.inputs import SharedPrefix

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
        """Images asked several distinct questions: their prefixes once, then batches of rows of
        several images each (hf/image_rows.py). Images asked one (a caption per image): nothing to
        share, so they are decoded together in batches of full prompts, across images too."""
        order = sorted(range(len(requests)), key=lambda i: requests[i].image_path)
        alone: list[Request] = []
        queue = RowQueue(across_images=self.core.stacks_caches)
        shared: list[list[Request]] = []
        for _, grouped in itertools.groupby([requests[i] for i in order], key=lambda r: r.image_path):
            group = list(grouped)
            (alone.extend if len({r.prompt for r in group}) < 2 else shared.append)(group)
        for group, encoded in encoded_images(self.core, shared, self.config.max_new_tokens, ahead_images(self.batching.size)):
            yield from self._queue_image(group, encoded, queue)
            while queue.full(self.batching.size):
                yield from self._answer_queued(queue)
        while len(queue):
            yield from self._answer_queued(queue)
        if alone:
            self.core.say_once("images asked one question share their prefix with no other prompt: decoding them in batches of full prompts")
            yield from self.run_full(alone)

    def _queue_image(self, group: list[Request], encoded: Encoded | list[Response], queue: RowQueue) -> Iterator[list[Response]]:
        """Queue a row per request of an image whose distinct prompts are ``encoded`` (sampling
        draws per question, so identical prompts are decoded apart), or answer its requests here."""
        prompts = list(distinct_prompts(group))
        if isinstance(encoded, list):
            yield encoded
            return
        if encoded.shared is None:
            self.core.say_once("prompts share no image prefix (or it exceeds a sliding-attention window); decoding them from full prompts")
            # not run_full: its worker thread would share the processor copy with encoded_images' worker
            yield from self.batching.run(group, self._answer_batch, self.core.empty_device_cache)
            return
        index = {p: i for i, p in enumerate(prompts)}
        queue.add(ImageRows(group[0].image_path, encoded.image, encoded.shared, [[r] for r in group], [index[r.prompt] for r in group], encoded.seconds))

    def prepare(self, group: Sequence[Request], image: Any) -> ImagePrefixes | None:
        """The image's prefixes for its questions ``group`` (exceptions pass), or ``None`` where
        its prompts share no prefix (or it exceeds a sliding-attention window)."""
        started = time.perf_counter()
        prompts = list(distinct_prompts(group))
        shared = self.core.inputs.encode_shared(prompts, image)
        if shared is None or not self.core.fits_window(shared, self.config.max_new_tokens):
            return None
        return self._prefixes(group, image, shared, prompts, started)

    def _prefixes(
        self, group: Sequence[Request], image: Any, shared: SharedPrefix, prompts: list[str], started: float,
        prefix: Prefix | None = None, noised: Prefix | None = None,
    ) -> ImagePrefixes:  # fmt: skip
        """The image's prefix passes: the base prefix and the method's contrast prefix (``prefix``
        and VCD's ``noised`` prefix where a batched pass made them already)."""
        if prefix is None:
            prefix = self.core.run_prefix(shared.prefix)
        first = {r.prompt: r for r in reversed(group)}  # each prompt's first request holds its variants
        if self._contrast_variant() == "instruction":  # its prefix needs every question's variant
            missing = next((r for r in group if "instruction" not in r.variants), None)
            if missing is not None:
                raise ValueError(f"request {missing.key} has no 'instruction' variant for {self.method}")
        extra = self.prefix_passes.prefixes(shared, prefix, image, [first[p] for p in prompts], noised=noised)
        suffix_of = {p: i for i, p in enumerate(prompts)}
        return ImagePrefixes(image, prefix, extra, suffix_of, shared.suffixes, time.perf_counter() - started)

    def _prepare_queued(self, images: list[ImageRows]) -> list[ImagePrefixes]:
        """The prefixes of a batch's new images: their base prefixes, and VCD's noised ones, each
        kind in one batched pass where their inputs have one shape (``ModelCore.run_prefixes``),
        the other contrast prefixes image by image; each image's time is its share."""
        started = time.perf_counter()
        bases = self.core.run_prefixes([image.shared.prefix for image in images])
        step = self.prefix_passes.plan.noise_step
        noised: list[Prefix | None] = [None] * len(images)
        if step is not None:
            noised = list(self.core.run_prefixes([noised_inputs(image.shared.prefix, [image.path], step) for image in images]))
        out = []
        for image, base, noisy in zip(images, bases, noised, strict=True):
            group = [r for requests in image.requests for r in requests]
            prompts = list(distinct_prompts(group))
            out.append(self._prefixes(group, image.image, image.shared, prompts, time.perf_counter(), prefix=base, noised=noisy))
        share = (time.perf_counter() - started) / len(images)
        return [replace(one, seconds=share) for one in out]

    def _contrast_variant(self) -> str | None:
        return BRANCHES[self.method] if self.method is not None else None

    def decode_rows(self, prefixes: ImagePrefixes, rows: Sequence[Request], *, keep_steps: bool = False) -> Decoded:
        """One batch of one image's questions through the loop after its cached prefixes."""
        return self.decode_prefixed([(prefixes, r) for r in rows], keep_steps=keep_steps)

    def decode_prefixed(self, rows: Sequence[tuple[ImagePrefixes, Request]], *, keep_steps: bool = False) -> Decoded:
        """One batch of rows, each a question after its image's cached prefixes (rows of one image
        together), through the loop: every branch's caches stacked across the batch's images."""
        core = self.core
        index = [p.suffix_of[r.prompt] for p, r in rows]
        suffixes = [p.suffixes[i] for (p, _), i in zip(rows, index)]
        bases = [p.prefix for p, _ in rows]
        packs = core.packs([p for p, _ in rows], text=False)  # the loop applies no generate processor

        def after(prefixes: Sequence[Prefix], tails: Sequence[list[int]]) -> dict[str, Any] | PackedRows:
            if packs:  # one row per image, its questions in slots (hf/packed.py)
                return PackedRows.of(prefixes, tails)
            return rows_inputs(core.model, prefixes, tails, 0, core.pad_id)

        base = after(bases, suffixes)
        contrast: dict[str, Any] | PackedRows | None = None
        branch = self._contrast_variant()
        extras = [p.extra for p, _ in rows]
        if branch == "noised":
            noised = [extra.noised for extra in extras]
            assert all(n is not None for n in noised)
            contrast = after(noised, suffixes)  # type: ignore[arg-type]
        elif branch == "instruction" and all(extra.instruction is not None for extra in extras):
            instruction = [extra.instruction for extra in extras]
            tails = [extra.instruction_suffixes[i] for extra, i in zip(extras, index)]
            contrast = after(instruction, tails)  # type: ignore[arg-type]
        elif branch is not None:  # the no-image question, or instruction variants that share no prefix: full prompts
            images = [p.image for p, _ in rows] if branch != "no-image" else []
            contrast = core.to_device(core.inputs.encode([r.variants[branch] for _, r in rows], images))
        requests = [r for _, r in rows]
        prefix_ids = None if packs else padded_prefix_ids(bases, core.pad_id)
        return self.loop(requests, base, contrast, keep_steps=keep_steps, prefix_ids=prefix_ids)

    def decode_batch(self, rows: Sequence[Request], images: list[Any], *, keep_steps: bool = False) -> Decoded:
        """One batch about one image (``images``: the rows' images, all the same) through the
        prefix path; the plain engine's batch where its prompts share no prefix."""
        if len({r.image_path for r in rows}) != 1:
            raise ValueError("the prefix-cache decoding engine decodes the questions of one image per batch")
        prefixes = self.prepare(rows, images[0])
        if prefixes is None:
            return self.decode_full(rows, images, keep_steps=keep_steps)
        return self.decode_rows(prefixes, rows, keep_steps=keep_steps)

    def _answer_queued(self, queue: RowQueue) -> Iterator[list[Response]]:
        """The next batch of queued rows: the prefixes of images new to it, then the loop over
        every row. Out of memory halves the batch and takes it again; a batch that fails
        otherwise is asked again row by row."""
        rows = queue.peek(self.batching.size)
        started = time.perf_counter()
        setup = sum(image.seconds for image in dict.fromkeys(row.image for row in rows) if image.state is None)
        try:
            failed = queue.start_images(rows, self._prepare_queued)
        except Exception as err:
            if is_oom(err) and self.batching.size > 1:
                self._halve()
                return
            raise
        if failed:  # an image whose prefixes failed: its rows are errors; the batch is formed again
            yield [error_response(r, message) for r, message in failed]
            return
        pairs = [(row.image.state, r) for row in rows for r in row.requests]
        requests = [r for _, r in pairs]
        results: dict[tuple[str, int], Response] = {}
        try:
            results.update(self._respond(self.decode_prefixed(pairs), requests, started, setup))
        except Exception as err:
            if is_oom(err) and self.batching.size > 1:
                self._halve()
                return
            if is_oom(err):
                raise
            if len(pairs) == 1:
                log.exception("decoding failed")
                results[requests[0].key] = error_response(requests[0], f"{type(err).__name__}: {err}")
            else:
                for pair in pairs:
                    r = pair[1]
                    try:
                        results.update(self._respond(self.decode_prefixed([pair]), [r], time.perf_counter(), setup / len(pairs)))
                    except Exception as one_err:
                        if is_oom(one_err):
                            raise
                        log.exception("decoding failed")
                        results[r.key] = error_response(r, f"{type(one_err).__name__}: {one_err}")
        queue.done(rows)
        yield [results[r.key] for r in requests]

    def _halve(self) -> None:
        self.batching.halve()
        self.core.empty_device_cache()

    def _respond(self, decoded: Decoded, rows: Sequence[Request], started: float, share: float) -> dict[tuple[str, int], Response]:
        core = self.core
        texts = core.tokenizer.batch_decode(decoded.tokens, skip_special_tokens=True)
        latency = (time.perf_counter() - started + share) / len(rows)
        return core.responses([[r] for r in rows], decoded.first_logits, texts, latency, self.config.top_k)
