"""The seam between a transformers model folder and the forward pass.

:class:`VLMInputs` renders prompts and turns ``(prompts, images)`` into a left-padded batch
for ``model(**inputs)`` and ``model.generate(**inputs)``. hf/load.py builds it for a model
folder (``load_processor``) and loads the model (``load_model``).

Two ways to build inputs, chosen when the folder is loaded:

- ``processor``: the family's own processor (image-token expansion, pixel values and extras
  are the processor's business). ``AutoProcessor`` where it can be built; for families whose
  processor owns a video processor (LLaVA-OneVision, Qwen2-VL, Qwen2.5-VL, SmolVLM, InternVL),
  every one of which needs torchvision (never installed here: it breaks the CPU torch), the
  family's processor class is assembled from the saved tokenizer, image processor and
  processor settings with no video part (:func:`_processor_without_video`).
- ``grid``: the fallback when no processor can be built: ``AutoImageProcessor`` +
  ``AutoTokenizer`` + the model config, for models whose image processor yields
  ``image_grid_thw`` (Qwen2-VL style). Each image placeholder is expanded to
  ``prod(grid_thw) // merge_size**2`` copies of the image token (what
  ``Qwen2VLProcessor.replace_image_token`` does), and ``mm_token_type_ids`` (1 on image
  tokens, 0 elsewhere) is added because transformers 5.x computes multimodal RoPE from it.

Only the model types of :data:`halluprobe.backends.families.FAMILIES` load (each tested on a
tiny random-weight build with a real tokenizer, tests/test_families.py); any other gets an
:class:`InputError` naming them. Family quirks handled here: InstructBLIP's processor puts the
image (query) tokens in front by itself and keeps its image token as an ``AddedToken``, and its
Q-Former text is right-padded; PaliGemma's processor adds training ``labels``, dropped; Gemma
3's prompt names the image ``<start_of_image>``, expanded into ``<image_soft_token>`` runs;
Gemma 3, Idefics3 and SmolVLM take a batch's images grouped per prompt.

:meth:`VLMInputs.encode_shared` serves the prefix-cache engine: the prompts about one image,
encoded with the image preprocessed once and split at their longest common token prefix
(:class:`SharedPrefix`); the prefix plus a prompt's suffix are exactly :meth:`VLMInputs.encode`'s
ids for that prompt.

Prompts (docs/design/runs-and-readouts.md): :meth:`VLMInputs.render_prompt` returns the exact text that, passed
with the image to :meth:`VLMInputs.encode`, gives the model inputs (before image-token
expansion). torch and transformers are imported inside functions only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from halluprobe.backends.families import Family
from halluprobe.errors import InputError, RuntimeFailure

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

__all__ = [
    "IMAGE_MARKER",
    "LLAVA_TEMPLATE",
    "DType",
    "Device",
    "SharedPrefix",
    "VLMInputs",
]

DType = Literal["auto", "float32", "bfloat16", "float16"]
Device = Literal["cpu", "cuda", "auto"]

# The generic image marker in prompt formats; replaced by the model's own placeholder.
IMAGE_MARKER = "<image>"
# LLaVA-1.5's POPE evaluation prompt (conv_vicuna_v1 without a system line).
LLAVA_TEMPLATE = "USER: <image>\n{question}\nASSISTANT:"

# Processors that want the images of a batch grouped per prompt.
_NESTED_IMAGES = frozenset({"gemma3", "idefics3", "smolvlm"})

# Per-token tensors of an encoding (shape [batch, seq]): what a prefix slice cuts.
_TOKEN_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")


@dataclass
class SharedPrefix:
    """Several prompts about one image, split into the tokens they share and their own tails.

    ``prefix`` holds the model inputs of the shared part (``input_ids`` and the other per-token
    tensors cut to ``[1, prefix_len]``, plus ``pixel_values`` and the family's image extras),
    ready for one forward pass. ``suffixes[i]`` are the remaining token ids of prompt ``i``
    (never empty: the last token must be computed to read its logits). Concatenating
    ``prefix["input_ids"][0]`` and ``suffixes[i]`` gives exactly the ids :meth:`VLMInputs.encode`
    gives prompt ``i`` alone.
    """

    prefix: dict[str, torch.Tensor]
    suffixes: list[list[int]]

    @property
    def prefix_len(self) -> int:
        return int(self.prefix["input_ids"].shape[1])


@dataclass
class VLMInputs:
    """Prompt rendering and batch encoding for one model folder.

    ``mode`` is ``"processor"`` (the model's ``AutoProcessor``) or ``"grid"`` (image processor
    + tokenizer, image tokens expanded from ``image_grid_thw``); see the module docstring.
    """

    tokenizer: Any
    mode: Literal["processor", "grid"]
    image_token: str
    image_token_id: int
    image_placeholder: str
    processor: Any = None
    image_processor: Any = None
    chat_template: str | None = None
    model_type: str | None = None
    family: Family | None = None

    @property
    def image_in_prompt(self) -> bool:
        """False where the processor puts the image tokens in front by itself (InstructBLIP)."""
        return self.family is None or self.family.image_in_prompt

    def render_prompt(self, question: str, template: str | None = None, *, image: bool = True) -> str:
        """The exact prompt text for ``question``, before image-token expansion.

        ``template``: ``None`` = the model's chat template with one user turn (the image, then
        the question) and the generation prompt, or, for a family that ships no chat template,
        its documented prompt format (PaliGemma ``<image>answer en {question}``, InstructBLIP
        the question itself); ``"chat"`` = the chat template, required; ``"llava"`` =
        :data:`LLAVA_TEMPLATE`; any other string must contain ``{question}`` and is filled by
        plain substitution (other braces are kept as written). In the non-chat forms
        ``<image>`` stands for the model's image placeholder (``<image>`` for LLaVA,
        ``<|vision_start|><|image_pad|><|vision_end|>`` for Qwen2-VL); a format without it gets
        the placeholder and a newline in front, as LLaVA's own code does. A family whose
        processor puts the image tokens in front itself (InstructBLIP) gets no placeholder.

        ``image=False``: the same prompt without the image (the ``no-image`` correction signal);
        refused for a family that cannot run one (``Family.no_image_reason``).
        """
        if not image and self.family is not None and self.family.no_image_reason is not None:
            raise InputError(f"{self.model_type}: {self.family.no_image_reason}, so a prompt without the image cannot be run")
        default = self.family.default_prompt if self.family is not None else None
        if template == "chat" or (template is None and (self.chat_template or default is None)):
            return self._render_chat(question, image=image)
        fmt = (default or "") if template is None else LLAVA_TEMPLATE if template == "llava" else template
        if "{question}" not in fmt:
            raise InputError(f"prompt template must be 'chat', 'llava' or contain '{{question}}': {template!r}")
        if not self.image_in_prompt or not image:
            fmt = fmt.replace(IMAGE_MARKER + "\n", "").replace(IMAGE_MARKER, "")
            if not image:
                return fmt.replace(self.image_placeholder + "\n", "").replace(self.image_placeholder, "").replace("{question}", question)
        elif IMAGE_MARKER not in fmt and self.image_placeholder not in fmt:
            fmt = IMAGE_MARKER + "\n" + fmt
        if IMAGE_MARKER != self.image_placeholder:
            fmt = fmt.replace(IMAGE_MARKER, self.image_placeholder)
        return fmt.replace("{question}", question)

    def _render_chat(self, question: str, *, image: bool = True) -> str:
        if not self.chat_template:
            raise InputError(
                "this model has no chat template; pass template='llava' or a format containing '{question}'"
            )
        parts: list[dict[str, str]] = [{"type": "image"}] if image else []
        messages = [{"role": "user", "content": [*parts, {"type": "text", "text": question}]}]
        # A processor assembled without its video part (see _processor_without_video) renders
        # through its tokenizer: same template, same messages, and no video settings to read.
        with_processor = self.mode == "processor" and getattr(self.processor, "video_processor", True) is not None
        owner = self.processor if with_processor else self.tokenizer
        text = owner.apply_chat_template(
            messages, chat_template=self.chat_template, add_generation_prompt=True, tokenize=False
        )
        if not isinstance(text, str):  # some versions return a list for a single conversation
            text = text[0]
        return text

    def encode(self, prompts: Sequence[str], images: Sequence[Image]) -> dict[str, torch.Tensor]:
        """Tokenize ``prompts`` with ``images`` into a left-padded batch of tensors.

        ``images`` are consumed in order, one per image placeholder across the batch (usually
        one per prompt). Returns ``input_ids``, ``attention_mask``, ``pixel_values`` and the
        model family's extras (``image_grid_thw``, ``mm_token_type_ids`` for Qwen2-VL).
        """
        prompts = list(prompts)
        images = [im.convert("RGB") if im.mode != "RGB" else im for im in images]
        if not prompts:
            raise InputError("encode() needs at least one prompt")
        n_markers = sum(p.count(self.image_token) for p in prompts) if self.image_in_prompt else len(prompts)
        if n_markers != len(images):
            raise InputError(
                f"{n_markers} image placeholders ({self.image_token!r}) in the prompts but {len(images)} images"
            )
        add_special = self._add_special_tokens(prompts)
        if self.mode == "processor":
            if images and self.model_type in _NESTED_IMAGES:
                # one list of images per prompt: these processors read a flat list as one sample
                it = iter(images)
                images = [[next(it) for _ in range(p.count(self.image_token))] for p in prompts]
            batch = self.processor(
                text=prompts,
                images=images or None,
                return_tensors="pt",
                padding=True,
                padding_side="left",
                add_special_tokens=add_special,
            )
            out = dict(batch.items())
            out.pop("labels", None)  # PaliGemma's processor adds training labels; a forward pass must not get them
            qformer_tokenizer = getattr(self.processor, "qformer_tokenizer", None)
            if qformer_tokenizer is not None and "qformer_input_ids" in out:
                # InstructBLIP's Q-Former (BERT, absolute positions) reads the question: padded on
                # the right, as it was trained, so a row's numbers do not depend on its batch.
                qformer = qformer_tokenizer(prompts, padding=True, padding_side="right", return_tensors="pt")
                out["qformer_input_ids"] = qformer["input_ids"]
                out["qformer_attention_mask"] = qformer["attention_mask"]
            return out
        return self._encode_grid(prompts, images, add_special)

    def encode_shared(self, prompts: Sequence[str], image: Image) -> SharedPrefix | None:
        """Encode prompts that all show ``image`` once: the image is preprocessed once, and the
        longest common token prefix (which holds every image token) is returned apart from each
        prompt's tail. See :class:`SharedPrefix`.

        The split is found on token ids, not on text, so chat templates and tokenizers that
        merge characters across the question boundary are handled. The other prompts are
        tokenized with the image token repeated as in the first prompt's ids; where that does
        not reproduce the processor's ids (a family that expands the placeholder into more than
        copies of one token: Gemma 3, Idefics3, SmolVLM, InternVL) the processor encodes each
        prompt. Returns ``None`` when the prompts cannot share a prefix: a family whose prompts
        carry no image placeholder (InstructBLIP), a prompt without exactly one, or an image
        token after the shared part (the image follows the question); the caller then encodes
        each prompt in full.
        """
        prompts = list(prompts)
        if not prompts:
            raise InputError("encode_shared() needs at least one prompt")
        if not self.image_in_prompt or any(p.count(self.image_token) != 1 for p in prompts):
            return None
        # The first prompt goes through the full path: pixel values, extras and the
        # reference ids that the cheaper tokenizer-only encoding below must reproduce. The
        # image is preprocessed once, whichever way the other prompts are encoded.
        once = _image_processed_once(self.processor) if self.mode == "processor" else contextlib.nullcontext()
        with once:
            first = self.encode(prompts[:1], [image])
            ids0 = first["input_ids"][0].tolist()
            n_image = ids0.count(self.image_token_id)
            # Each prompt tokenized with its one placeholder, which then becomes n_image ids:
            # the image token is an added token, so the text on either side tokenizes alone
            # (tokenizing hundreds of placeholders per prompt was most of an image's encoding).
            # The first prompt's ids are checked against the processor's below.
            encoded = self.tokenizer(prompts, add_special_tokens=self._add_special_tokens(prompts))
            token_lists = [_expanded(list(t), self.image_token_id, n_image) for t in encoded["input_ids"]]
            if token_lists[0] != ids0:
                # The processor expands the placeholder into more than copies of the image token
                # (Gemma 3's start/end-of-image block, Idefics3's crop grid, InternVL's <img>
                # tags): let it encode every prompt, each with the same, already processed image.
                token_lists = [ids0] + [self.encode([p], [image])["input_ids"][0].tolist() for p in prompts[1:]]
        # at least one token of each prompt stays in its suffix: its logits are the readout
        n = min(len(os.path.commonprefix(token_lists)), min(len(t) for t in token_lists) - 1)
        if any(self.image_token_id in t[n:] for t in token_lists):
            return None
        prefix = {k: (v[:, :n] if k in _TOKEN_KEYS else v) for k, v in first.items()}
        return SharedPrefix(prefix=prefix, suffixes=[t[n:] for t in token_lists])

    def _add_special_tokens(self, prompts: list[str]) -> bool:
        # A chat template that writes BOS itself must not get a second one from the tokenizer.
        bos = getattr(self.tokenizer, "bos_token", None)
        starts = [bool(bos) and p.startswith(bos) for p in prompts]
        if any(starts) and not all(starts):
            raise InputError("some prompts start with the BOS token and some do not; render them the same way")
        return not all(starts)

    def _encode_grid(self, prompts: list[str], images: list[Image], add_special: bool) -> dict[str, torch.Tensor]:

        out: dict[str, torch.Tensor] = {}
        counts: list[int] = []
        if images:
            vision = self.image_processor(images=images, return_tensors="pt")
            grid = vision["image_grid_thw"]
            merge = int(getattr(self.image_processor, "merge_size", 1) or 1)
            counts = [int(g.prod().item()) // merge**2 for g in grid]
            out.update(vision.items())
        expanded: list[str] = []
        it = iter(counts)
        for prompt in prompts:
            parts = prompt.split(self.image_token)
            text = parts[0]
            for part in parts[1:]:
                text += self.image_token * next(it) + part
            expanded.append(text)
        enc = self.tokenizer(
            expanded,
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=add_special,
        )
        input_ids = enc["input_ids"]
        image_mask = input_ids == self.image_token_id
        if int(image_mask.sum()) != sum(counts):
            raise RuntimeFailure(
                f"tokenizer split the image token {self.image_token!r}: {int(image_mask.sum())} image tokens "
                f"after tokenization, {sum(counts)} expected"
            )
        out["input_ids"] = input_ids
        out["attention_mask"] = enc["attention_mask"]
        # transformers 5.x builds Qwen2-VL's 3-D rotary positions from this: 0 text, 1 image.
        out["mm_token_type_ids"] = image_mask.to(input_ids.dtype)
        return out


class _FirstOutput:
    """Stands in for a processor's image processor: the first call runs it, later calls get a
    copy of that output (the processor may pop keys from it). Only for calls on one image."""

    def __init__(self, image_processor: Any) -> None:
        self._image_processor = image_processor
        self._output: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._output is None:
            self._output = self._image_processor(*args, **kwargs)
        return type(self._output)(dict(self._output.items()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._image_processor, name)


@contextlib.contextmanager
def _image_processed_once(processor: Any) -> Iterator[None]:
    """While active, ``processor`` preprocesses its (single, repeated) image only once."""
    original = processor.image_processor
    processor.image_processor = _FirstOutput(original)
    try:
        yield
    finally:
        processor.image_processor = original


def _expanded(ids: list[int], image_token_id: int, count: int) -> list[int]:
    """``ids`` with its one ``image_token_id`` repeated ``count`` times (unchanged when it does
    not hold exactly one: the caller's check against the processor's ids then fails)."""
    if ids.count(image_token_id) != 1:
        return ids
    at = ids.index(image_token_id)
    return ids[:at] + [image_token_id] * count + ids[at + 1 :]
