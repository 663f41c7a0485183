"""The hf backend's engines: one object per ``answer()`` call, holding all of that call's state.

An engine is built from the call's :class:`~halluprobe.records.GenerateConfig` (new tokens,
top-k, stop strings, correction signals) on the backend's :class:`~halluprobe.backends.hf.core.ModelCore`
and its shared :class:`~halluprobe.backends.hf.core.Batching`. Two engines give the same numbers
(tests hold them within 1e-4 in fp32):

- :class:`PlainEngine`: each batch of full prompts, left-padded, runs from scratch.
- :class:`PrefixCacheEngine`: per image, the prompt tokens its questions share run once and
  their KV cache is reused for each batch of the questions' own suffixes; identical prompts
  about one image are computed once; an image whose prompts share no prefix goes through the
  plain engine's batches. See docs/design/prefix-cache.md.

Either way every readout comes from one pass per batch (:meth:`ModelCore.first_step`). A call
that decodes with a method or by sampling gets the decoding loop's engine instead: after each
image's cached prefix (hf_decode_prefix.PrefixDecodeEngine) when the prefix cache is on, else on
full prompts (hf_decode_engine.DecodeEngine).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from halluprobe.backends.hf.core import (
    Batching,
    FirstStep,
    ModelCore,
    error_response,
    is_oom,
)
from halluprobe.backends.hf.decode_engine import DecodeEngine
from halluprobe.backends.hf.decode_prefix import PrefixDecodeEngine
from halluprobe.backends.hf.image_rows import (
    Encoded,
    ImageRows,
    RowQueue,
    ahead_images,
    distinct_prompts,
    encoded_images,
)
from halluprobe.backends.hf.packed import PackedRows
from halluprobe.backends.hf.prefix import rows_inputs, suffix_inputs
from halluprobe.backends.hf.signal_passes import LayerSignals, SignalPasses
from halluprobe.backends.hf.signals import parse_signals
from halluprobe.records import GenerateConfig, Request, Response

__all__ = ["PlainEngine", "PrefixCacheEngine", "build_engine"]

log = logging.getLogger(__name__)

Key = tuple[str, int]


def build_engine(core: ModelCore, batching: Batching, config: GenerateConfig, *, prefix_cache: bool) -> PlainEngine | DecodeEngine:
    """The engine of one call; an unknown or unrecordable signal is refused here (InputError),
    before any request runs."""
    if config.decodes:  # a decoding method or sampling: the decoding loop, after cached prefixes or on full prompts
        return (PrefixDecodeEngine if prefix_cache else DecodeEngine)(core, batching, config)
    engine = PrefixCacheEngine if prefix_cache else PlainEngine
    return engine(core, batching, config)


class PlainEngine:
    """Full prompts, left-padded, in batches of ``batching.size``; see the module docstring."""

    def __init__(self, core: ModelCore, batching: Batching, config: GenerateConfig) -> None:
        self.core = core
        self.batching = batching
        self.max_new_tokens = config.max_new_tokens
        self.top_k = config.top_k
        self.stops = config.stops
        plan = parse_signals(config.signals, core.n_layers)
        self.signals: SignalPasses | None = SignalPasses(core, plan, batching) if plan.any else None
        self._stopping: Any = None

    @property
    def stopping(self) -> Any:
        """The call's stopping criteria (its stop strings, or EOS only), built on first use."""
        if self._stopping is None:
            self._stopping = self.core.stopping_criteria(self.stops)
        return self._stopping

    def answer(self, requests: Sequence[Request]) -> Iterator[list[Response]]:
        """Answer ``requests``, batch by batch. Questions about one image sit together (across
        splits): each image is read once."""
        order = sorted(range(len(requests)), key=lambda i: requests[i].image_path)
        yield from self.answer_sorted([requests[i] for i in order])

    def answer_sorted(self, pending: Sequence[Request]) -> Iterator[list[Response]]:
        yield from self.batching.run(pending, self._answer_batch, self.core.empty_device_cache)

    def base_pass(self, inputs: dict[str, Any]) -> tuple[FirstStep, LayerSignals]:
        """The batch's first step and, when DoLa's layers are asked, each row's ``layer:N``
        signals from the same pass's hidden states (no pass of their own; dropped here)."""
        wants_layers = self.signals is not None and bool(self.signals.plan.layers)
        step = self.core.first_step(
            inputs, self.max_new_tokens, self.stopping if self.max_new_tokens > 0 else None, hidden_states=wants_layers
        )
        if not wants_layers:
            return step, None
        assert self.signals is not None
        by_layer = self.signals.layers(step)
        step.hidden_states = None
        return step, by_layer

    def _halve(self) -> None:
        self.batching.halve()
        self.core.empty_device_cache()

    def _answer_batch(self, batch: Sequence[Request]) -> list[Response]:
        core = self.core
        started = time.perf_counter()
        images, errors = core.load_images(batch)
        ok = [r for i, r in enumerate(batch) if i not in errors]
        results: dict[Key, Response] = {batch[i].key: error_response(batch[i], msg) for i, msg in errors.items()}
        if ok:
            try:
                inputs = core.to_device(core.inputs.encode([r.prompt for r in ok], images))
                step, by_layer = self.base_pass(inputs)
                signals = None
                if self.signals is not None:
                    signals = self.signals.for_full_prompts(inputs, ok, images, by_layer)
            except Exception as err:
                if is_oom(err):
                    raise
                log.exception("batch failed")
                for r in ok:
                    results[r.key] = error_response(r, f"{type(err).__name__}: {err}")
            else:
                latency = (time.perf_counter() - started) / len(batch)
                rows = [[r] for r in ok]
                responses = core.responses(rows, step.logits, step.texts, latency, self.top_k)
                results.update(_with_signals(responses, rows, signals))
        return [results[r.key] for r in batch]


class PrefixCacheEngine(PlainEngine):
    """Each image's shared prefix once; batches of suffix rows, of several images each, after
    their images' caches (hf/image_rows.py). With correction signals, one image at a time."""

    def answer_sorted(self, pending: Sequence[Request]) -> Iterator[list[Response]]:
        if self.signals is not None:  # the signals' passes run per image (its noised and instruction prefixes)
            for _, group in itertools.groupby(pending, key=lambda r: r.image_path):
                yield from self._answer_image(list(group))
            return
        queue = RowQueue(across_images=self.core.stacks_caches)
        groups = (list(grouped) for _, grouped in itertools.groupby(pending, key=lambda r: r.image_path))
        for group, encoded in encoded_images(self.core, groups, self.max_new_tokens, ahead_images(self.batching.size)):
            yield from self._queue_image(group, encoded, queue)
            while queue.full(self.batching.size):
                yield from self._answer_rows(queue)
        while len(queue):
            yield from self._answer_rows(queue)

    def _queue_image(self, group: list[Request], encoded: Encoded | list[Response], queue: RowQueue) -> Iterator[list[Response]]:
        """Queue the rows of an image whose distinct prompts are ``encoded``, or answer its
        requests here (an unreadable image, a failed encoding, prompts that share no prefix)."""
        by_prompt = distinct_prompts(group)
        if isinstance(encoded, list):
            yield encoded
            return
        if encoded.shared is None:
            self.core.say_once("prompts share no image prefix (or it exceeds a sliding-attention window); answering them with full prompts")
            yield from PlainEngine.answer_sorted(self, group)
            return
        rows = list(by_prompt.values())
        queue.add(ImageRows(group[0].image_path, encoded.image, encoded.shared, rows, list(range(len(rows))), encoded.seconds))

    def _answer_rows(self, queue: RowQueue) -> Iterator[list[Response]]:
        """The next batch of queued rows: the prefixes of images new to it, then one pass and its
        greedy steps over one row per image (packed) or over every row (stacked, ``generate``).
        Out of memory halves the batch and takes it again."""
        core = self.core
        rows = queue.peek(self.batching.size)
        started = time.perf_counter()
        setup = sum(image.seconds for image in dict.fromkeys(row.image for row in rows) if image.state is None)
        failed: list[tuple[Request, str]] = []
        try:
            failed = queue.start_images(rows, lambda images: core.run_prefixes([image.shared.prefix for image in images]))
            if not failed and core.packs([row.image for row in rows], text=self.max_new_tokens > 0):
                # one row per image, its questions in slots (hf/packed.py); an image's rows sit together in the queue
                packed = PackedRows.of([row.image.state for row in rows], [row.suffix for row in rows])
                step = core.packed_step(packed, self.max_new_tokens, self.stopping if self.max_new_tokens > 0 else None)
            elif not failed:
                states, suffixes = [row.image.state for row in rows], [row.suffix for row in rows]
                inputs: dict[str, Any] | None = rows_inputs(core.model, states, suffixes, self.max_new_tokens, core.pad_id, room=True)
                step, _ = self.base_pass(inputs)
                inputs = None  # the stacked cache
        except Exception as err:
            inputs = None  # drop the expanded cache before retrying smaller
            if is_oom(err) and self.batching.size > 1:
                self._halve()
                return
            if is_oom(err):
                raise
            log.exception("batch failed")
            queue.done(rows)
            yield [error_response(r, f"{type(err).__name__}: {err}") for row in rows for r in row.requests]
            return
        if failed:  # an image whose prefix failed: its rows are errors; the batch is formed again
            yield [error_response(r, message) for r, message in failed]
            return
        queue.done(rows)
        groups = [row.requests for row in rows]
        n = sum(len(g) for g in groups)
        latency = (time.perf_counter() - started + setup) / n
        responses = core.responses(groups, step.logits, step.texts, latency, self.top_k)
        yield [responses[r.key] for g in groups for r in g]

    def _answer_image(self, group: list[Request]) -> Iterator[list[Response]]:
        """Answer every request about one image: the shared prefix once, then suffix batches."""
        core = self.core
        started = time.perf_counter()
        image = core.load_image(group[0].image_path)
        if isinstance(image, str):
            yield [error_response(r, image) for r in group]
            return
        by_prompt = distinct_prompts(group)  # identical prompts about one image: one computation
        prompts = list(by_prompt)
        try:
            shared = core.inputs.encode_shared(prompts, image)
            if shared is not None and not core.fits_window(shared, self.max_new_tokens):
                shared = None
            prefix = core.run_prefix(shared.prefix) if shared is not None else None
            extra = None
            if shared is not None and prefix is not None and self.signals is not None:
                extra = self.signals.prefixes(shared, prefix, image, [by_prompt[p][0] for p in prompts])
        except Exception as err:
            if is_oom(err):
                raise
            log.exception("image %s failed", group[0].image_path)
            yield [error_response(r, f"{type(err).__name__}: {err}") for r in group]
            return
        if shared is None or prefix is None:
            core.say_once(
                "prompts share no image prefix (or it exceeds a sliding-attention window); "
                "answering them with full prompts"
            )
            yield from PlainEngine.answer_sorted(self, group)
            return
        setup_seconds = time.perf_counter() - started  # the image, its prefix and the signals' prefixes
        start = 0
        while start < len(prompts):
            chunk = prompts[start : start + self.batching.size]
            batch_started = time.perf_counter()
            rows = [by_prompt[p] for p in chunk]
            inputs: dict[str, Any] | None = None
            try:
                suffixes = shared.suffixes[start : start + len(chunk)]
                inputs = suffix_inputs(core.model, prefix, suffixes, self.max_new_tokens, core.pad_id)
                step, by_layer = self.base_pass(inputs)
                inputs = None  # the expanded cache: free it before the signals' passes build theirs
                signals = None
                if extra is not None and self.signals is not None:
                    signals = self.signals.for_suffixes(prefix, extra, start, suffixes, by_layer, image)
            except Exception as err:
                if is_oom(err) and self.batching.size > 1:
                    inputs = None  # drop the expanded cache before retrying smaller
                    self._halve()
                    continue
                if is_oom(err):
                    raise
                log.exception("batch failed")
                yield [error_response(r, f"{type(err).__name__}: {err}") for row in rows for r in row]
            else:
                n = sum(len(row) for row in rows)
                # latency: this batch's own time plus its share of the image's prefix passes
                share = setup_seconds * len(chunk) / len(prompts)
                latency = (time.perf_counter() - batch_started + share) / n
                responses = core.responses(rows, step.logits, step.texts, latency, self.top_k)
                responses = _with_signals(responses, rows, signals)
                yield [responses[r.key] for row in rows for r in row]
            start += len(chunk)


def _with_signals(
    responses: dict[Key, Response], rows: list[list[Request]], signals: list[dict[str, Any]] | None
) -> dict[Key, Response]:
    """Each row's signals onto the responses of its requests (a row may answer several)."""
    if signals is None:
        return responses
    for row, signal in zip(rows, signals):
        for r in row:
            responses[r.key] = responses[r.key].model_copy(update={"signals": signal})
    return responses
