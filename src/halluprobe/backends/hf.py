"""transformers backend: any model that AutoProcessor + AutoModelForImageTextToText load.

Every readout comes from one ``generate`` call per batch: the raw logits of the first generated
step give the first-token log-probabilities (all logit readouts), and the greedy continuation
gives the text for the text rules. With no text rule asked, one forward pass is run instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from halluprobe.readouts.logits import candidate_ids
from halluprobe.readouts.tokensets import derive_token_sets
from halluprobe.records import Request, Response, TokenLogprob, TokenSets

__all__ = ["HFBackend", "STOP_STRINGS"]

log = logging.getLogger(__name__)

# A yes/no answer needs a few tokens: stop at a sentence end or a newline (EOS stops anyway).
STOP_STRINGS = (".", "\n")


def _is_oom(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()


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
        **_: Any,
    ) -> None:
        from halluprobe.backends.hf_inputs import load_model, load_processor

        self._model_id = model
        self._batch_size = max(1, batch_size)
        self._inputs = load_processor(model, trust_remote_code=trust_remote_code)
        self._model = load_model(
            model, dtype=dtype, device=device, trust_remote_code=trust_remote_code, load_in_4bit=load_in_4bit
        )
        self._tokenizer = self._inputs.tokenizer
        self._sets = derive_token_sets(self._tokenizer)
        n_logits = self._model.get_output_embeddings().weight.shape[0]
        self._candidates = [i for i in candidate_ids(self._sets) if i < n_logits]
        self._pieces = self._tokenizer.convert_ids_to_tokens(list(range(len(self._tokenizer))))
        self._stopping: Any = None  # built on first use: it preprocesses the whole vocabulary

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
        }

    def token_sets(self) -> TokenSets:
        return self._sets

    def render_prompt(self, question: str, template: str | None) -> str:
        return self._inputs.render_prompt(question, template)

    def answer(self, requests: Sequence[Request], *, max_new_tokens: int, top_k: int) -> Iterator[list[Response]]:
        # Questions about one image sit together: each image is read once per batch.
        order = sorted(range(len(requests)), key=lambda i: requests[i].image_path)
        pending = [requests[i] for i in order]
        start = 0
        while start < len(pending):
            batch = pending[start : start + self._batch_size]
            try:
                yield self._answer_batch(batch, max_new_tokens, top_k)
            except RuntimeError as err:
                if not _is_oom(err) or self._batch_size == 1:
                    raise
                self._batch_size = max(1, self._batch_size // 2)
                log.warning("out of memory: batch size halved to %d", self._batch_size)
                self._empty_cache()
                continue
            start += len(batch)

    # -- internals -----------------------------------------------------------------------

    def _empty_cache(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _load_images(self, batch: Sequence[Request]) -> tuple[list[Any], dict[int, str]]:
        from PIL import Image

        images: list[Any] = []
        errors: dict[int, str] = {}
        cache: dict[str, Any] = {}
        for i, request in enumerate(batch):
            path = request.image_path
            if path not in cache:
                try:
                    with Image.open(path) as img:
                        cache[path] = img.convert("RGB")
                except Exception as err:  # any unreadable image is a per-sample error
                    cache[path] = f"cannot read image {path}: {type(err).__name__}: {err}"
            if isinstance(cache[path], str):
                errors[i] = cache[path]
            else:
                images.append(cache[path])
        return images, errors

    def _answer_batch(self, batch: Sequence[Request], max_new_tokens: int, top_k: int) -> list[Response]:
        import torch

        started = time.perf_counter()
        images, errors = self._load_images(batch)
        ok = [r for i, r in enumerate(batch) if i not in errors]
        results: dict[tuple[str, int], Response] = {
            batch[i].key: Response(split=batch[i].split, question_id=batch[i].question_id, error=msg)
            for i, msg in errors.items()
        }
        if ok:
            try:
                inputs = self._inputs.encode([r.prompt for r in ok], images)
                inputs = {k: v.to(self._model.device) if hasattr(v, "to") else v for k, v in inputs.items()}
                first_logits, texts = self._forward(inputs, max_new_tokens)
            except Exception as err:
                if _is_oom(err):
                    raise
                log.exception("batch failed")
                for r in ok:
                    results[r.key] = Response(split=r.split, question_id=r.question_id, error=f"{type(err).__name__}: {err}")
            else:
                logprobs = torch.log_softmax(first_logits.float(), dim=-1).cpu()
                elapsed = (time.perf_counter() - started) / len(batch)
                cand = torch.tensor(self._candidates, dtype=torch.long)
                for row, r in enumerate(ok):
                    top = torch.topk(logprobs[row], k=min(top_k, logprobs.shape[-1]))
                    values = logprobs[row, cand].tolist()
                    results[r.key] = Response(
                        split=r.split,
                        question_id=r.question_id,
                        first_token=[
                            TokenLogprob(id=int(i), piece=self._piece(int(i)), logprob=float(v))
                            for v, i in zip(top.values.tolist(), top.indices.tolist())
                        ],
                        candidates={str(i): float(v) for i, v in zip(self._candidates, values)},
                        text=texts[row] if texts is not None else None,
                        latency_s=elapsed,
                    )
        return [results[r.key] for r in batch]

    def _piece(self, token_id: int) -> str:
        return self._pieces[token_id] if token_id < len(self._pieces) else f"<id {token_id}>"

    def _stopping_criteria(self) -> Any:
        """Stop at '.', newline (or EOS). Built once: passing ``stop_strings`` to every
        ``generate`` call would redo a ~0.3 s pass over the vocabulary per batch."""
        if self._stopping is None:
            from transformers import StoppingCriteriaList, StopStringCriteria

            self._stopping = StoppingCriteriaList([StopStringCriteria(self._tokenizer, list(STOP_STRINGS))])
        return self._stopping

    def _forward(self, inputs: dict[str, Any], max_new_tokens: int) -> tuple[Any, list[str] | None]:
        """Raw first-step logits [batch, vocab] and, when asked, the greedy continuations."""
        import torch

        with torch.inference_mode():
            if max_new_tokens <= 0:
                out = self._model(**inputs, use_cache=False)
                return out.logits[:, -1, :], None
            generated = self._model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                output_logits=True,
                return_dict_in_generate=True,
                stopping_criteria=self._stopping_criteria(),
                pad_token_id=self._tokenizer.pad_token_id,
            )
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = generated.sequences[:, prompt_len:]
        texts = self._tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        return generated.logits[0], texts
