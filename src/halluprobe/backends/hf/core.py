"""The hf backend's model core: the loaded model and what every engine does with it.

:class:`ModelCore` holds what lives as long as the loaded model (processor, model, tokenizer,
yes/no token sets, the stop-string criteria built per stop set, the no-image signals of
prompts already seen) and the passes every engine runs: a forward pass's last-position logits,
the first step (one forward pass, or ``generate`` when text is asked), a prefix pass, the
responses of a batch's first-step logits, and reading images. It holds no setting of a call:
the engines (hf/engines.py) are built per ``answer()`` call and pass theirs in.

Its public methods are the seam the tests use to watch or perturb a pass
(``monkeypatch.setattr(backend.core, "first_step", ...)``): every engine calls the core's
passes through the instance.

torch and transformers are imported inside the methods.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from halluprobe.backends.hf.load import load_model, load_processor
from halluprobe.backends.hf.packed import PackedRows, packed_first_step, unpackable, worth_packing
from halluprobe.backends.hf.prefix import Prefix, next_position, split_cache, stackable
from halluprobe.files import read_rgb_image
from halluprobe.readouts.logits import candidate_ids
from halluprobe.readouts.tokensets import derive_token_sets
from halluprobe.records import Request, Response, SignalLogprobs, TokenLogprob, TokenSets

if TYPE_CHECKING:
    from halluprobe.backends.hf.inputs import SharedPrefix, VLMInputs

__all__ = ["Batching", "FirstStep", "ModelCore", "error_response", "is_oom"]

log = logging.getLogger(__name__)


def is_oom(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()


def error_response(request: Request, message: str) -> Response:
    return Response(split=request.split, question_id=request.question_id, error=message)


@dataclass
class Batching:
    """The batch size of a backend, shared by the engines it builds: out of memory halves it
    for the rest of the backend's life, not only for the call that ran out."""

    size: int

    def halve(self) -> None:
        self.size = max(1, self.size // 2)
        log.warning("out of memory: batch size halved to %d", self.size)

    def run(
        self,
        pending: Sequence[Any],
        answer_batch: Callable[[Sequence[Any]], list[Any]],
        on_halve: Callable[[], None],
        upcoming: Callable[[Sequence[Any]], None] | None = None,
    ) -> Iterator[list[Any]]:
        """``answer_batch`` over ``pending`` in batches of the current size, in order; out of
        memory halves the size (``on_halve`` frees the device) and retries the same batch.
        ``upcoming`` is told each next batch (at the current size) as its predecessor begins."""
        start = 0
        while start < len(pending):
            batch = pending[start : start + self.size]
            following = pending[start + len(batch) : start + len(batch) + self.size]
            if upcoming is not None and len(following):
                upcoming(following)
            try:
                yield answer_batch(batch)
            except RuntimeError as err:
                if not is_oom(err) or self.size == 1:
                    raise
                self.halve()
                on_halve()
                continue
            start += len(batch)


@dataclass
class FirstStep:
    """A batch's first generated step: raw logits [batch, vocab], the greedy continuations
    (``None`` when no text was asked) and, when asked, the step's hidden states (embeddings,
    then every layer; [batch, positions of that step, hidden] each)."""

    logits: Any
    texts: list[str] | None
    hidden_states: Any = None


class ModelCore:
    """One loaded model and its processor; see the module docstring."""

    def __init__(
        self, model: str, *, dtype: str, device: str, trust_remote_code: bool, load_in_4bit: bool
    ) -> None:

        self.model_id = model
        self.inputs: VLMInputs = load_processor(model, trust_remote_code=trust_remote_code)
        self.model: Any = load_model(
            model, dtype=dtype, device=device, trust_remote_code=trust_remote_code, load_in_4bit=load_in_4bit
        )
        self.tokenizer: Any = self.inputs.tokenizer
        self.token_sets: TokenSets = derive_token_sets(self.tokenizer)
        n_logits = self.model.get_output_embeddings().weight.shape[0]
        self.candidates: list[int] = [i for i in candidate_ids(self.token_sets) if i < n_logits]
        self._pieces = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        # built once per stop set, on first use: building one preprocesses the whole vocabulary
        self._stopping: dict[tuple[str, ...], Any] = {}
        # A forward pass needs the last position's logits only: skip the [batch, seq, vocab] rest.
        params = inspect.signature(self.model.forward).parameters
        self.keep_last: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = getattr(self.model.generation_config, "pad_token_id", None)
        self.pad_id = int(pad) if isinstance(pad, int) else 0
        self.sliding_window = _sliding_window(self.model.config)
        # rows of several images share a batch only where their prefix caches can be stacked
        self.stacks_caches = _stackable_cache_layers(self.model.config)
        # prompt without the image -> its signal: it does not depend on the image, so each
        # distinct one runs once per loaded model
        self.no_image_cache: dict[str, SignalLogprobs] = {}
        self._said: set[str] = set()
        # the next images' CPU side on a worker thread while the accelerator runs (hf/ahead.py)
        self.prefetch: bool = self.model.device.type != "cpu"
        # a batch of questions as one row per image, its questions in slots (hf/packed.py): no
        # copy of an image's prefix per question (on a 7B model most of a step's memory traffic)
        self.packing_refused = unpackable(self.model, text=False) if self.stacks_caches else "its cache layers cannot be stacked"
        self.text_packing_refused = self.packing_refused or unpackable(self.model, text=True)  # greedy continuations too
        self.packs_rows: bool = self.packing_refused is None
        self._worker_inputs: VLMInputs | None = None

    def worker_inputs(self) -> VLMInputs:
        """A copy of the processor for the worker thread of hf/ahead.py (a fast tokenizer must
        not be used by two threads at once), made on first use."""
        if self._worker_inputs is None:
            self._worker_inputs = copy.deepcopy(self.inputs)
        return self._worker_inputs

    @property
    def n_layers(self) -> int:
        return len(self.model.get_decoder().layers)

    def say_once(self, message: str) -> None:
        """Log ``message`` once per loaded model (a fallback is worth one line, not one per image)."""
        if message not in self._said:
            self._said.add(message)
            log.info(message)

    # -- passes ---------------------------------------------------------------------------------

    def to_device(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return {k: v.to(self.model.device) if hasattr(v, "to") else v for k, v in inputs.items()}

    def logits(self, inputs: dict[str, Any]) -> Any:
        """Last-position logits of one forward pass: full prompts, or suffixes after a cached prefix."""
        import torch

        with torch.inference_mode():
            return self.model(**inputs, use_cache="past_key_values" in inputs, **self.keep_last).logits[:, -1, :]

    def prompt_logits(self, prompts: list[str], images: list[Any]) -> Any:
        """Last-position logits of full prompts (a signal's variant of the question)."""
        return self.logits(self.to_device(self.inputs.encode(prompts, images)))

    def first_step(
        self, inputs: dict[str, Any], max_new_tokens: int, stopping: Any = None, *, hidden_states: bool = False
    ) -> FirstStep:
        """The first step's raw logits and, with ``max_new_tokens`` > 0, the greedy continuations
        (stopping by ``stopping``, a ``StoppingCriteriaList`` from :meth:`stopping_criteria`).

        ``inputs`` is a full encoded batch, or (prefix cache) suffix inputs with
        ``past_key_values``; ``input_ids`` then starts with the cached prefix when generating.
        """
        import torch

        wanted: dict[str, Any] = {"output_hidden_states": True} if hidden_states else {}
        with torch.inference_mode():
            if max_new_tokens <= 0:
                out = self.model(**inputs, use_cache="past_key_values" in inputs, **wanted, **self.keep_last)
                return FirstStep(out.logits[:, -1, :], None, _text_hidden_states(out) if hidden_states else None)
            generated = self.model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                output_logits=True,
                return_dict_in_generate=True,
                stopping_criteria=stopping,
                pad_token_id=self.tokenizer.pad_token_id,
                **wanted,
            )
        prompt_len = inputs["input_ids"].shape[1]
        texts = self.tokenizer.batch_decode(generated.sequences[:, prompt_len:], skip_special_tokens=True)
        return FirstStep(generated.logits[0], texts, generated.hidden_states[0] if hidden_states else None)

    def packs(self, images: Sequence[object], *, text: bool) -> bool:
        """Whether a batch whose rows belong to ``images`` (an entry per row, an image's rows
        together) runs as one row per image (hf/packed.py), saying once why not; ``text``:
        ``generate``'s greedy continuations too (the generation config's refusals)."""
        refused = self.text_packing_refused if text else self.packing_refused
        if refused is not None or not self.packs_rows:
            if refused is not None and self.stacks_caches:
                self.say_once(f"an image's questions stay in rows of their own: {refused}")
            return False
        return worth_packing(list(Counter(map(id, images)).values()))

    def packed_step(self, packed: PackedRows, max_new_tokens: int, stopping: Any = None) -> FirstStep:
        """:meth:`first_step` of every row of ``packed``, in order, one row per image (hf/packed.py)."""
        logits, texts = packed_first_step(self.model, self.tokenizer, packed, max_new_tokens, stopping, self.pad_id, keep_logits=bool(self.keep_last))
        return FirstStep(logits, texts)

    def run_prefix(self, prefix_inputs: dict[str, Any]) -> Prefix:
        """One image's shared prefix (``SharedPrefix.prefix``) through the model, its cache kept."""
        import torch

        inputs = self.to_device(prefix_inputs)
        with torch.inference_mode():
            out = self.model(**inputs, use_cache=True, **self.keep_last)
        position, mrope = next_position(self.model, inputs)
        return Prefix(cache=out.past_key_values, input_ids=inputs["input_ids"], next_position=position, mrope=mrope)

    def run_prefixes(self, prefixes: Sequence[dict[str, Any]]) -> list[Prefix]:
        """Several images' shared prefixes: those whose inputs have one shape (every tensor one row
        of the same size: LLaVA-1.5's fixed image token count) run as one batch, their caches then
        split into per-image views; the others one by one (:meth:`run_prefix`)."""
        import torch

        out: list[Prefix | None] = [None] * len(prefixes)
        groups: dict[Any, list[int]] = {}
        for i, inputs in enumerate(prefixes):
            groups.setdefault(_batchable_shape(inputs), []).append(i)
        for shape, members in groups.items():
            if shape is None or len(members) == 1 or not self.stacks_caches:
                for i in members:
                    out[i] = self.run_prefix(prefixes[i])
                continue
            joined = {k: torch.cat([prefixes[i][k] for i in members]) if hasattr(prefixes[members[0]][k], "shape") else prefixes[members[0]][k]
                      for k in prefixes[members[0]]}  # fmt: skip
            inputs = self.to_device(joined)
            with torch.inference_mode():
                cache = self.model(**inputs, use_cache=True, **self.keep_last).past_key_values
            caches = split_cache(self.model.config, cache)
            if caches is None:
                for i in members:
                    out[i] = self.run_prefix(prefixes[i])
                continue
            for row, (i, one) in enumerate(zip(members, caches)):
                ids = inputs["input_ids"][row : row + 1]
                position, mrope = next_position(self.model, {k: v[row : row + 1] if hasattr(v, "shape") else v for k, v in inputs.items()})
                out[i] = Prefix(cache=one, input_ids=ids, next_position=position, mrope=mrope)
        return [p for p in out if p is not None]

    def fits_window(self, shared: SharedPrefix, new_tokens: int) -> bool:
        """False when a sliding-attention layer's cache would drop prefix tokens that a full
        prompt (its longest suffix plus ``new_tokens``) still sees."""
        longest = shared.prefix_len + max(len(s) for s in shared.suffixes) + new_tokens
        return self.sliding_window is None or longest <= self.sliding_window

    def stopping_criteria(self, stops: tuple[str, ...]) -> Any:
        """Stop at ``stops`` ('.', newline for yes/no answers) or EOS; with no stop strings
        (descriptions, open-ended answers) only EOS or ``max_new_tokens`` end a continuation.
        Built once per set: passing ``stop_strings`` to every ``generate`` call would redo a
        ~0.3 s pass over the vocabulary per batch."""
        if stops not in self._stopping:
            from transformers import StoppingCriteriaList, StopStringCriteria

            criteria = [StopStringCriteria(self.tokenizer, list(stops))] if stops else []
            self._stopping[stops] = StoppingCriteriaList(criteria)
        return self._stopping[stops]

    # -- images and responses ---------------------------------------------------------------------

    def load_image(self, path: str) -> Any:
        """The RGB image, or an error message (an unreadable image is a per-sample error)."""
        return read_rgb_image(path)

    def load_images(self, batch: Sequence[Request]) -> tuple[list[Any], dict[int, str]]:
        """The images of a batch's readable requests, and the error of each unreadable one."""
        images: list[Any] = []
        errors: dict[int, str] = {}
        cache: dict[str, Any] = {}
        for i, request in enumerate(batch):
            path = request.image_path
            if path not in cache:
                cache[path] = self.load_image(path)
            if isinstance(cache[path], str):
                errors[i] = cache[path]
            else:
                images.append(cache[path])
        return images, errors

    def responses(
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
        cand = torch.tensor(self.candidates, dtype=torch.long)
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
                    out[r.key] = error_response(r, message)
                continue
            first_token = [
                TokenLogprob(id=int(i), piece=self._piece(int(i)), logprob=float(v))
                for v, i in zip(top.values[row].tolist(), top.indices[row].tolist())
            ]
            candidates = {str(i): float(v) for i, v in zip(self.candidates, values[row])}
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

    def empty_device_cache(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _text_hidden_states(out: Any) -> Any:
    """The language model's hidden states of a forward pass (InstructBLIP nests them in its
    ``language_model_outputs``)."""
    states = getattr(out, "hidden_states", None)
    if states is None and getattr(out, "language_model_outputs", None) is not None:
        states = out.language_model_outputs.hidden_states
    if states is None:
        raise RuntimeError(f"{type(out).__name__} gives no hidden states: the layers signal cannot be read")
    return states


def _batchable_shape(inputs: dict[str, Any]) -> Any:
    """The key under which prefix inputs run as one batch: every tensor's shape (each with one
    row), or ``None`` where a tensor has no row dimension of 1 (Qwen2-VL's patch list)."""
    shapes = []
    for key, value in sorted(inputs.items()):
        shape = tuple(getattr(value, "shape", ()))
        if not shape or shape[0] != 1:
            return None
        shapes.append((key, shape))
    return tuple(shapes)


def _stackable_cache_layers(config: Any) -> bool:
    """Whether this model's KV cache is plain DynamicLayers (no sliding-window or other layer
    kinds), which hf_prefix.stacked_cache can stack across images."""
    from transformers import DynamicCache

    return stackable(DynamicCache(config=config))


def _sliding_window(config: Any) -> int | None:
    """The text model's sliding-attention window, when any of its layers uses one (Gemma 3)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    window = getattr(text, "sliding_window", None)
    layer_types = getattr(text, "layer_types", None)
    if not isinstance(window, int) or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return window
