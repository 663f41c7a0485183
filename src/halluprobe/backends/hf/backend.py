"""transformers backend: any model that AutoProcessor + AutoModelForImageTextToText load.

Three parts (docs/design/prefix-cache.md):

- :class:`~halluprobe.backends.hf.core.ModelCore` (hf/core.py): the loaded model and processor,
  and the passes every engine runs (a forward pass, the first step, a prefix pass, the
  responses of a batch's first-step logits, reading images).
- an engine per ``answer()`` call (hf/engines.py), built from the call's ``GenerateConfig``
  and holding all of that call's state: the prefix-cache engine (default: each image's shared
  prompt prefix runs once, its KV cache reused for the questions' suffixes) or the plain engine
  (``prefix_cache=False``: full prompts, left-padded batches). Both give the same numbers
  (tests hold them within 1e-4 in fp32). A call whose config sets ``decode`` or ``sample``
  gets the decoding loop's engine instead (hf/decode_engine.py, docs/design/decoding.md).
- the correction signals' passes of a call (hf/signal_passes.py, hf/signals.py).

:class:`HFBackend` itself holds only what outlives a call: the core, the batch size (halved on
out of memory for the rest of its life) and which engine it builds. Nothing of a call's
settings is kept on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from halluprobe.backends.hf.core import Batching, ModelCore
from halluprobe.backends.hf.decode_engine import DecodeEngine, check_decode_config
from halluprobe.backends.hf.decode_rules import rule_settings
from halluprobe.backends.hf.engines import PlainEngine, build_engine
from halluprobe.backends.hf.signals import parse_signals
from halluprobe.records import DecodeSpec, GenerateConfig, Request, Response, TokenSets

__all__ = ["HFBackend"]

log = logging.getLogger(__name__)


class HFBackend:
    """A local transformers model; implements :class:`~halluprobe.backends.base.Backend`,
    :class:`~halluprobe.backends.base.RecordsSignals` and :class:`~halluprobe.backends.base.DecodesText`."""

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
        core = ModelCore(model, dtype=dtype, device=device, trust_remote_code=trust_remote_code, load_in_4bit=load_in_4bit)
        self._init(core, batch_size, prefix_cache)

    def _init(self, core: ModelCore, batch_size: int, prefix_cache: bool) -> None:
        self.core = core
        self.batching = Batching(max(1, batch_size))
        self.prefix_cache = prefix_cache
        family = core.inputs.family
        if prefix_cache and family is not None and family.engine == "plain":
            # said once, here: a shared cache would be silently wrong for this family
            log.info("%s (%s): no prefix cache, %s; every prompt runs in full", core.model_id, family.name, family.why_plain)
            self.prefix_cache = False

    @classmethod
    def on_core(cls, core: ModelCore, *, batch_size: int = 8, prefix_cache: bool = True) -> HFBackend:
        """Another backend on an already loaded model (e.g. the other engine, for comparing them):
        the model, its stop criteria and kept no-image signals are shared, the batch size is its own."""
        backend = cls.__new__(cls)
        backend._init(core, batch_size, prefix_cache)
        return backend

    # -- Backend protocol ----------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        model = self.core.model
        config = model.config
        return {
            "model": self.core.model_id,
            "architecture": (config.architectures or [type(model).__name__])[0],
            "revision": getattr(config, "_commit_hash", None),
            "dtype": str(model.dtype).removeprefix("torch."),
            "device": str(model.device),
            "batch_size": self.batching.size,
            "prefix_cache": self.prefix_cache,
            # an image's questions in one row (hf/packed.py; numbers equal to stacked rows' within
            # 1e-4): for first-token readouts and the decoding loop, and for generate's greedy
            # continuations too; what the model allows: a call with correction signals keeps a
            # row per question
            "packed_rows": self.prefix_cache and self.core.packs_rows,
            "packed_text": self.prefix_cache and self.core.packs_rows and self.core.text_packing_refused is None,
        }

    def token_sets(self) -> TokenSets:
        return self.core.token_sets

    def render_prompt(self, question: str, template: str | None, *, image: bool = True) -> str:
        return self.core.inputs.render_prompt(question, template, image=image)

    def check_signals(self, signals: Sequence[str]) -> None:
        """InputError for a correction signal this backend cannot record (before any request)."""

        parse_signals(signals, self.core.n_layers)

    # -- DecodesText protocol (the run plan asks before the run dir is written) -------------

    def check_decoding(self, config: GenerateConfig) -> None:
        """InputError for a ``decode`` / ``sample`` setting this model cannot run; no engine is built."""
        check_decode_config(self.core, config)

    def decoding_settings(self, spec: DecodeSpec) -> dict[str, Any]:
        """Every setting of ``spec`` as this model's loop decodes it (defaults and layers included)."""
        return rule_settings(spec, self.core.n_layers)

    def engine(self, config: GenerateConfig) -> PlainEngine | DecodeEngine:
        """The engine of one call with ``config`` (its signals checked here, before any request)."""
        return build_engine(self.core, self.batching, config, prefix_cache=self.prefix_cache)

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        yield from self.engine(config).answer(requests)
