"""The hf backend's engine for a call that decodes free-form text with a method or by sampling
(``run --open-ended --decode METHOD:... --sample ...``; issue 24).

Built from the call's :class:`~halluprobe.records.GenerateConfig` when ``decode`` or ``sample``
is set (hf_engines.build_engine). Each batch of full prompts (left-padded, questions about one
image together) runs through :func:`~halluprobe.backends.hf.decode.contrast_decode`: the base
branch, and the method's contrast branch (VCD: the noised image, each image's own tiles where
one pixel tensor holds several images' (InternVL); ICD: the request's ``instruction`` variant;
M3ID: its ``no-image`` variant) in lockstep. Sampling draws each row
from a generator seeded by the run's ``--seed`` and the question's key, so a resumed run (or
another batch size) writes the same text.

A batch that fails is asked again row by row, so a failure is an error on its own sample (asked
again on ``--resume``), never a fallback to plain decoding. The base and contrast rows share one
forward pass per step where shapes allow (``joint``). This is the engine of ``--no-prefix-cache``
and of families whose engine is plain; the prefix-cache variant: hf/decode_prefix.py.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from halluprobe.backends.hf.ahead import BatchAhead
from halluprobe.backends.hf.core import Batching, ModelCore, error_response, is_oom
from halluprobe.backends.hf.decode import Decoded, contrast_decode
from halluprobe.backends.hf.decode_rules import BRANCHES, GreedyRule, Sampling, StepRule, decode_rule
from halluprobe.backends.hf.signals import VCD_NOISE_STEP, noised_inputs
from halluprobe.errors import InputError
from halluprobe.records import GenerateConfig, Request, Response

if TYPE_CHECKING:
    from halluprobe.backends.hf.inputs import VLMInputs

__all__ = ["DecodeEngine", "Prepared", "check_decode_config", "question_seed"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A batch's CPU side, made ahead (hf/ahead.py): its images read (and each unreadable one's
    error), and the readable rows' encoded base and contrast inputs (``base`` ``None``: none)."""

    images: list[Any]
    errors: dict[int, str]
    base: dict[str, Any] | None
    contrast: dict[str, Any] | None


def _keys(batch: Sequence[Request]) -> tuple[tuple[str, int], ...]:
    return tuple(r.key for r in batch)


def question_seed(seed: int, request: Request) -> int:
    """The seed of one question's draws: the run's seed and the question's key, hashed (63 bits)."""
    digest = hashlib.sha256(f"{seed}\0{request.split}\0{request.question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def check_decode_config(core: ModelCore, config: GenerateConfig) -> StepRule:
    """The step rule ``config`` decodes with on this model; InputError for what it cannot run
    (signals beside the loop, sampling without a seed, PAI layers the model lacks, a no-image
    method on a family that cannot leave the image out). Builds nothing of an engine."""
    if config.signals:
        raise InputError("--signals records first-token contrasts of yes/no runs: not with --decode or --sample")
    if config.sample and config.seed is None:
        raise InputError("--sample needs --seed: a sampled run must write the same text when resumed")
    if config.decode is None:
        return GreedyRule()
    rule = decode_rule(config.decode, core.n_layers)  # the spec's fields: parsed where it entered
    if BRANCHES[config.decode.method] == "no-image":
        core.inputs.render_prompt("?", None, image=False)  # InputError for a family that cannot
    return rule


class DecodeEngine:
    """Free-form answers from the decoding loop; see the module docstring."""

    def __init__(self, core: ModelCore, batching: Batching, config: GenerateConfig, *, joint: bool = True) -> None:
        self.rule = check_decode_config(core, config)
        self.method = config.decode.method if config.decode is not None else None
        self.core = core
        self.batching = batching
        self.config = config
        self.sampling = (
            Sampling(temperature=config.temperature or 1.0, top_p=config.top_p, top_k=config.sample_top_k) if config.sample else None
        )
        eos = core.model.generation_config.eos_token_id
        ends = set(eos if isinstance(eos, list) else [eos]) | {core.tokenizer.eos_token_id}
        self.end_ids = sorted(int(i) for i in ends if i is not None)
        # base and contrast rows in one forward pass per step where shapes allow (hf_decode.joined_inputs);
        # False: a pass per branch (the bench compares both)
        self.joint = joint
        self._ready: BatchAhead[Sequence[Request], Prepared] | None = None  # the next batch's CPU side (run_full)

    def answer(self, requests: Sequence[Request]) -> Iterator[list[Response]]:
        order = sorted(range(len(requests)), key=lambda i: requests[i].image_path)
        yield from self.run_full([requests[i] for i in order])

    def run_full(self, requests: Sequence[Request]) -> Iterator[list[Response]]:
        """``requests`` in batches of full prompts through the loop; with ``core.prefetch`` each
        next batch's images are read and encoded on a worker thread meanwhile (hf/ahead.py)."""
        if not self.core.prefetch:
            yield from self.batching.run(requests, self._answer_batch, self.core.empty_device_cache)
            return
        inputs = self.core.worker_inputs()
        self._ready = BatchAhead(lambda batch: self._prepare(batch, inputs))
        try:
            yield from self.batching.run(
                requests, self._answer_batch, self.core.empty_device_cache, lambda batch: self._ready.start(_keys(batch), batch)
            )
        finally:
            self._ready.close()
            self._ready = None

    def _prepare(self, batch: Sequence[Request], inputs: VLMInputs) -> Prepared:
        """A batch's CPU side: its images read, the readable rows' base and contrast inputs."""
        images, errors = self.core.load_images(batch)
        ok = [r for i, r in enumerate(batch) if i not in errors]
        if not ok:
            return Prepared(images, errors, None, None)
        base = inputs.encode([r.prompt for r in ok], images)
        return Prepared(images, errors, base, self._contrast_inputs(ok, images, base, inputs))

    def _answer_batch(self, batch: Sequence[Request]) -> list[Response]:
        started = time.perf_counter()
        ready = self._ready.take(_keys(batch)) if self._ready is not None else None
        images, errors = (ready.images, ready.errors) if ready is not None else self.core.load_images(batch)
        ok = [r for i, r in enumerate(batch) if i not in errors]
        results: dict[tuple[str, int], Response] = {batch[i].key: error_response(batch[i], msg) for i, msg in errors.items()}
        if ok:
            try:
                results.update(self._decode(ok, images, started, ready))
            except Exception as err:
                if is_oom(err):
                    raise
                if len(ok) == 1:
                    log.exception("decoding failed")
                    results[ok[0].key] = error_response(ok[0], f"{type(err).__name__}: {err}")
                else:  # row by row: only the rows that fail alone are errors
                    for r, image in zip(ok, images):
                        results.update(self._answer_one(r, image))
        return [results[r.key] for r in batch]

    def _answer_one(self, request: Request, image: Any) -> dict[tuple[str, int], Response]:
        try:
            return self._decode([request], [image], time.perf_counter())
        except Exception as err:
            if is_oom(err):
                raise
            log.exception("decoding failed")
            return {request.key: error_response(request, f"{type(err).__name__}: {err}")}

    def _contrast_inputs(
        self, rows: Sequence[Request], images: list[Any], base: dict[str, Any], inputs: VLMInputs
    ) -> dict[str, Any] | None:
        branch = BRANCHES[self.method] if self.method is not None else None
        if branch == "noised":
            try:
                return noised_inputs(base, [r.image_path for r in rows], VCD_NOISE_STEP)
            except InputError:
                if len(rows) == 1:
                    raise
                return self._noised_tiles(rows, images, base, inputs)
        if branch is None:
            return None
        missing = next((r for r in rows if branch not in r.variants), None)
        if missing is not None:
            raise ValueError(f"request {missing.key} has no {branch!r} variant for {self.method}")
        return inputs.encode([r.variants[branch] for r in rows], images if branch != "no-image" else [])

    def _noised_tiles(self, rows: Sequence[Request], images: list[Any], base: dict[str, Any], inputs: VLMInputs) -> dict[str, Any]:
        """VCD's contrast inputs where one pixel tensor holds several images' tiles (InternVL):
        each image's tiles (from its prompt alone) noised with its own seed, then stacked in row
        order, the batch's own layout (checked), so a batch gives each row's noise alone."""
        import torch

        alone = [inputs.encode([r.prompt], [image]) for r, image in zip(rows, images)]
        clean = [one["pixel_values"] for one in alone]
        if {p.shape[1:] for p in clean} != {base["pixel_values"].shape[1:]} or not torch.equal(torch.cat(clean), base["pixel_values"]):
            raise InputError(f"the noised signal cannot split this model's pixel tensor {tuple(base['pixel_values'].shape)} by image")
        parts = [noised_inputs(one, [r.image_path], VCD_NOISE_STEP)["pixel_values"] for one, r in zip(alone, rows)]
        return {**base, "pixel_values": torch.cat(parts)}

    def _decode(self, rows: Sequence[Request], images: list[Any], started: float, ready: Prepared | None = None) -> dict[tuple[str, int], Response]:
        core = self.core
        decoded = self.decode_full(rows, images, ready=ready)
        texts = core.tokenizer.batch_decode(decoded.tokens, skip_special_tokens=True)
        latency = (time.perf_counter() - started) / len(rows)
        return core.responses([[r] for r in rows], decoded.first_logits, texts, latency, self.config.top_k)

    def decode_batch(self, rows: Sequence[Request], images: list[Any], *, keep_steps: bool = False) -> Decoded:
        """One batch through the loop (``images``: the rows' images, in order); exceptions pass."""
        return self.decode_full(rows, images, keep_steps=keep_steps)

    def decode_full(self, rows: Sequence[Request], images: list[Any], *, keep_steps: bool = False, ready: Prepared | None = None) -> Decoded:
        """One batch of full prompts through the loop (the prefix engine's way for images it
        cannot or need not share a prefix of), encoded here unless ``ready``; exceptions pass."""
        core = self.core
        if ready is not None and ready.base is not None:
            base, contrast = ready.base, ready.contrast
        else:
            base = core.inputs.encode([r.prompt for r in rows], images)
            contrast = self._contrast_inputs(rows, images, base, core.inputs)
        return self.loop(rows, core.to_device(base), core.to_device(contrast) if contrast is not None else None, keep_steps=keep_steps)

    def loop(
        self, rows: Sequence[Request], base: dict[str, Any], contrast: dict[str, Any] | None, *, keep_steps: bool = False, prefix_ids: Any = None
    ) -> Decoded:
        """The rows' branches (device inputs: full prompts, or suffixes after a cached prefix
        whose ids are ``prefix_ids``) through the loop, each row with its question's generator."""
        import torch

        core = self.core
        generators = []
        if self.sampling is not None:
            assert self.config.seed is not None
            generators = [torch.Generator().manual_seed(question_seed(self.config.seed, r)) for r in rows]
        return contrast_decode(
            core.model, base, contrast, self.rule,
            max_new_tokens=self.config.max_new_tokens, end_ids=self.end_ids, pad_id=core.pad_id,
            sampling=self.sampling, generators=generators, keep_steps=keep_steps, image_token_id=core.inputs.image_token_id,
            prefix_ids=prefix_ids, joint=self.joint,
        )  # fmt: skip
