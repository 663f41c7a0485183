"""Signals for inference-time corrections, captured by the hf backend beside the plain pass.

A signal is a contrast input's first step, reduced to what the corrections read at score time
(:class:`~halluprobe.records.SignalLogprobs`: the yes/no ids' log-probabilities, the step's
largest logit and log-normaliser, and for early layers their Jensen-Shannon divergence from the
final layer). Signals the hf backend captures:

- ``noised`` (VCD): the same prompt with the preprocessed pixel tensor diffusion-noised with
  VCD's schedule, ``betas = sigmoid(linspace(-6, 6, 1000)) * (0.5e-2 - 1e-5) + 1e-5``,
  ``x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps`` at step 500 (``noised:STEP`` for another),
  ``eps`` drawn from a generator seeded by the image file's sha256, so the noise of an image
  does not depend on the batch it is in.
- ``attention:ALPHA,START,END`` (PAI): a pass in which the last query row's attention to the
  image tokens is amplified before the softmax, ``A + alpha |A|``, in the text model's layers
  ``[START, END)``; eager attention for that pass only (a registered attention function that
  does eager attention with the amplification; the model's own implementation is put back).
- ``instruction`` (ICD): the same image with the question under a disturbing instruction
  (rendered by the runner: ``Request.variants["instruction"]``).
- ``no-image`` (M3ID, PAI's refinement): the question rendered without the image
  (``Request.variants["no-image"]``), run with no pixels.
- ``layers`` (DoLa): the first-step logits of early layers, through the model's final norm and
  LM head: every 2nd layer of the first half (``layers:0,2,4`` to choose; on the command line
  ``--signals layers:0;2;4``), stored as
  ``layer:N`` (N = 0 is the embedding output).

How the hf backend's engines run them (hf/backend.py): DoLa's layers come from the base pass itself
(``output_hidden_states``: the first step's hidden states at the last position), no pass of
their own. The plain engine runs each other signal as one extra pass over the batch's full
prompts. The prefix-cache engine reads them from cached prefixes: the noised signal from a
second prefix per image (the noised pixels), the instruction variants from their own shared
prefix per image (the image's prefix cache continued with the instruction's text; full
prompts where the variants share none), PAI as a suffix pass over the image's prefix, its
image columns (:func:`amplified_attention`) spanning the prefix's and the suffix's keys; only
the question without the image (a short text prompt, its shared head a few template tokens)
runs in full.

torch is imported inside the functions.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from halluprobe.errors import InputError
from halluprobe.records import SignalLogprobs

__all__ = [
    "HF_SIGNALS",
    "PaiSetting",
    "SignalPlan",
    "parse_signals",
    "noise_seed",
    "add_diffusion_noise",
    "step_signal",
    "layer_signals",
    "amplified_attention",
]

HF_SIGNALS = ("noised", "layers", "attention", "instruction", "no-image")
VCD_NOISE_STEP = 500
_VCD_STEPS = 1000


@dataclass(frozen=True)
class PaiSetting:
    alpha: float
    start: int
    end: int


def _parse_pai(signal: str, arg: str, n_layers: int) -> PaiSetting:
    parts = arg.split(",") if arg else []
    try:
        alpha, start, end = float(parts[0]), int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        raise InputError(f"signal {signal!r}: write attention:ALPHA,START,END (on the command line attention:0.5;2;16)") from None
    if not 0 <= start < end <= n_layers:
        raise InputError(f"signal {signal!r}: the layers [START, END) must lie in [0, {n_layers}]")
    return PaiSetting(alpha, start, end)


@dataclass(frozen=True)
class SignalPlan:
    """What the extra passes of one call are."""

    noise_step: int | None = None
    layers: tuple[int, ...] = ()
    pai: PaiSetting | None = None
    instruction: bool = False
    no_image: bool = False

    @property
    def any(self) -> bool:
        return self.noise_step is not None or bool(self.layers) or self.pai is not None or self.instruction or self.no_image


def parse_signals(signals: Sequence[str], n_layers: int) -> SignalPlan:
    """The plan of a ``GenerateConfig.signals`` tuple; InputError for one this backend cannot record."""
    noise_step: int | None = None
    layers: list[int] = []
    pai: PaiSetting | None = None
    instruction = no_image = False
    for signal in signals:
        name, _, arg = signal.partition(":")
        if name == "attention":
            pai = _parse_pai(signal, arg, n_layers)
            continue
        if name == "instruction":
            instruction = True
            continue
        if name == "no-image":
            no_image = True
            continue
        if name == "noised":
            try:
                noise_step = int(arg) if arg else VCD_NOISE_STEP
            except ValueError:
                raise InputError(f"signal {signal!r}: the noise step must be an integer") from None
            if not 0 <= noise_step < _VCD_STEPS:
                raise InputError(f"signal {signal!r}: the noise step must lie in [0, {_VCD_STEPS})")
        elif name == "layers":
            try:
                layers = [int(x) for x in arg.split(",")] if arg else list(range(0, max(1, n_layers // 2), 2))
            except ValueError:
                raise InputError(f"signal {signal!r}: layers are integers, e.g. layers:0,2,4") from None
            bad = [n for n in layers if not 0 <= n < n_layers]
            if bad:
                raise InputError(f"signal {signal!r}: the model has layers 0..{n_layers - 1} (0: the embeddings)")
        else:
            raise InputError(f"the hf backend records the signals {', '.join(HF_SIGNALS)}, not {signal!r}")
    return SignalPlan(noise_step=noise_step, layers=tuple(layers), pai=pai, instruction=instruction, no_image=no_image)


@functools.lru_cache(maxsize=4096)  # an image is asked about many times (POPE: 18 questions)
def noise_seed(image_path: str) -> int:
    """A seed from the image file's bytes: the same image gets the same noise in any batch."""
    digest = hashlib.sha256()
    with open(image_path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return int.from_bytes(digest.digest()[:8], "big") & ((1 << 63) - 1)


def add_diffusion_noise(pixels: Any, step: int, seed: int) -> Any:
    """VCD's forward diffusion of one image's preprocessed pixels to ``step``."""
    import torch

    betas = torch.sigmoid(torch.linspace(-6, 6, _VCD_STEPS, dtype=torch.float64)) * (0.5e-2 - 1e-5) + 1e-5
    abar = torch.cumprod(1 - betas, dim=0)[step]
    generator = torch.Generator(device="cpu").manual_seed(seed)
    eps = torch.randn(pixels.shape, generator=generator, dtype=torch.float32).to(device=pixels.device, dtype=pixels.dtype)
    return (math.sqrt(float(abar)) * pixels + math.sqrt(float(1 - abar)) * eps).to(pixels.dtype)


def noised_inputs(inputs: dict[str, Any], image_paths: Sequence[str], step: int) -> dict[str, Any]:
    """The model inputs with each image's pixels noised (one image per row)."""
    import torch

    pixels = inputs["pixel_values"]
    seeds = [noise_seed(p) for p in image_paths]
    if "image_grid_thw" in inputs:  # Qwen2-VL family: rows of patches, image after image
        sizes = [int(torch.prod(thw)) for thw in inputs["image_grid_thw"]]
        if len(sizes) != len(seeds):
            raise InputError("the noised signal needs one image per prompt")
        parts = torch.split(pixels, sizes, dim=0)
        noised = torch.cat([add_diffusion_noise(part, step, seed) for part, seed in zip(parts, seeds)], dim=0)
    elif pixels.dim() >= 4 and pixels.shape[0] == len(seeds):
        noised = torch.stack([add_diffusion_noise(row, step, seed) for row, seed in zip(pixels, seeds)])
    elif len(seeds) == 1:  # one image's tiles (InternVL, LLaVA-NeXT crops): the whole tensor is its own
        noised = add_diffusion_noise(pixels, step, seeds[0])
    else:
        raise InputError(f"the noised signal cannot split this model's pixel tensor {tuple(pixels.shape)} by image")
    return {**inputs, "pixel_values": noised}


def step_signal(logits: Any, ids: Sequence[int], jsd: float | None = None) -> SignalLogprobs:
    """One row's last-position logits -> the stored signal (float32 arithmetic)."""
    import torch

    row = logits.float()
    normaliser = torch.logsumexp(row, dim=-1)
    values = (row[list(ids)] - normaliser).tolist()
    return SignalLogprobs(
        candidates={str(i): float(v) for i, v in zip(ids, values)},
        max_logit=float(row.max()),
        log_normaliser=float(normaliser),
        jsd=jsd,
    )


def _jsd(p_log: Any, q_log: Any) -> float:
    """Jensen-Shannon divergence of two distributions given as log-probabilities."""
    import torch

    m_log = torch.logsumexp(torch.stack([p_log, q_log]), dim=0) - math.log(2.0)
    kl_pm = torch.sum(torch.exp(p_log) * (p_log - m_log))
    kl_qm = torch.sum(torch.exp(q_log) * (q_log - m_log))
    return float(0.5 * (kl_pm + kl_qm))


def layer_signals(model: Any, hidden_states: Sequence[Any], layers: Sequence[int], ids: Sequence[int], final_logits: Any) -> list[dict[str, SignalLogprobs]]:
    """Per row: ``layer:N`` signals from the last position's hidden state of layer N, through the
    final norm and the LM head, each with its JSD from the final layer's distribution."""
    import torch

    norm = model.get_decoder().norm
    head = model.get_output_embeddings()
    final_log = torch.log_softmax(final_logits.float(), dim=-1)
    out: list[dict[str, SignalLogprobs]] = [{} for _ in range(final_logits.shape[0])]
    with torch.inference_mode():
        for n in layers:
            logits = head(norm(hidden_states[n][:, -1, :])).float()
            early_log = torch.log_softmax(logits, dim=-1)
            for row in range(logits.shape[0]):
                out[row][f"layer:{n}"] = step_signal(logits[row], ids, jsd=_jsd(final_log[row], early_log[row]))
    return out


_PAI_NAME = "halluprobe_pai"
_pai_state: dict[str, Any] = {}  # the setting and image columns of the pass in progress


def _pai_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float, dropout: float = 0.0, **_: Any) -> tuple[Any, Any]:
    """Eager attention, with the pre-softmax weights on image tokens amplified (``A + alpha |A|``)
    in the chosen layers, for the last query row (a row's next-token query), or for the query
    rows ``amplified_attention`` was given (packed rows: each question's last query)."""
    import torch

    repeat = query.shape[1] // key.shape[1]
    if repeat > 1:  # grouped-query attention; repeat_interleave(1) would still copy the whole cache, per layer and step
        key = key.repeat_interleave(repeat, dim=1)
        value = value.repeat_interleave(repeat, dim=1)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask[:, :, :, : key.shape[-2]]
    setting: PaiSetting = _pai_state["setting"]
    layer = getattr(module, "layer_idx", None)
    if layer is not None and setting.start <= layer < setting.end:
        columns = _pai_state["image_columns"]
        if columns.shape != (weights.shape[0], weights.shape[-1]):
            # with a cached prefix the keys are prefix + suffix: the mask must cover both
            raise ValueError(
                f"PAI's image columns {tuple(columns.shape)} do not match the attention's keys {tuple(weights.shape)}"
            )
        # only the image columns change: a masked column holds the dtype's minimum, and
        # alpha * |min| * 0 there would overflow to inf * 0 = NaN for alpha > 1
        queries = _pai_state.get("queries")
        queries = slice(-1, None) if queries is None else queries  # the last query row unless told
        picked = weights[:, :, queries, :]
        weights[:, :, queries, :] = torch.where(columns[:, None, None, :], picked + setting.alpha * picked.abs(), picked)
    weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


@contextmanager
def amplified_attention(model: Any, setting: PaiSetting, image_columns: Any, queries: Any = None) -> Iterator[None]:
    """Within the block, the text model attends with PAI's amplification (eager attention);
    its own attention implementation is put back after. ``image_columns`` ([batch, keys], bool)
    marks the image tokens among the keys: with a cached prefix the keys are the prefix's and
    the suffix's columns, padding included. ``queries``: the query rows amplified (an index
    tensor or a slice; packed rows hold several questions a row), else the last."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import eager_mask

    AttentionInterface.register(_PAI_NAME, _pai_attention)
    AttentionMaskInterface.register(_PAI_NAME, eager_mask)
    config = model.get_decoder().config
    before = config._attn_implementation
    _pai_state.update(setting=setting, image_columns=image_columns, queries=queries)
    config._attn_implementation = _PAI_NAME
    try:
        yield
    finally:
        config._attn_implementation = before
        _pai_state.clear()
