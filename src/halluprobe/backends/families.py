"""The VLM families the hf backend knows: how each is prompted and which engine it can use.

A family is a transformers ``model_type``. For each one the table says

- ``engine``: ``"prefix_cache"`` when the image and the template text before the question can
  be computed once per image and reused for all its questions (docs/design/prefix-cache.md),
  ``"plain"`` when that would give other numbers than full prompts (``why_plain`` says why);
- ``template``: where the prompt format comes from: the checkpoint's chat template, or a
  documented plain format for families that ship none (``default_prompt``);
- ``image_in_prompt``: whether the prompt text carries the image placeholder, or the processor
  puts the image tokens in front by itself (InstructBLIP).

Every family here is tested natively (tests/test_families.py) on a tiny random-weight build
with a real tokenizer: both engines, batch sizes, resume. A model type not in the table gets
an :class:`~halluprobe.errors.InputError` naming the supported ones: silently running an
unknown family could reuse a cache its attention does not allow.

Families whose checkpoints need ``trust_remote_code`` (their modelling code lives in the
checkpoint, not in transformers) are listed in :data:`REMOTE_CODE`; the documented way to
evaluate them is an OpenAI-compatible server (docs/models.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from halluprobe.errors import InputError
from halluprobe.formatting import markdown_table

__all__ = [
    "FAMILIES",
    "REMOTE_CODE",
    "Engine",
    "Family",
    "RemoteCodeFamily",
    "family_for",
    "family_rows",
    "family_table_markdown",
]

Engine = Literal["prefix_cache", "plain"]


@dataclass(frozen=True)
class Family:
    """One transformers-native VLM family (see the module docstring)."""

    model_type: str
    name: str
    example: str  # a public checkpoint of the family, for the docs and ``halluprobe models``
    engine: Engine
    template: str  # where the prompt comes from, in words
    why_plain: str | None = None
    default_prompt: str | None = None  # used when the checkpoint has no chat template
    image_in_prompt: bool = True
    # why a prompt without the image cannot run (the no-image correction signal), if it cannot
    no_image_reason: str | None = None


_CHAT = "chat template (processor)"

FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family("llava", "LLaVA-1.5", "llava-hf/llava-1.5-7b-hf", "prefix_cache", _CHAT),
        Family("llava_next", "LLaVA-NeXT / LLaVA-1.6", "llava-hf/llava-v1.6-mistral-7b-hf", "prefix_cache", _CHAT),
        Family(
            "llava_onevision", "LLaVA-OneVision", "llava-hf/llava-onevision-qwen2-0.5b-ov-hf", "prefix_cache", _CHAT
        ),
        Family(
            "instructblip",
            "InstructBLIP",
            "Salesforce/instructblip-vicuna-7b",
            "plain",
            "instruction as is: {question} (the processor puts the query tokens in front)",
            why_plain="its Q-Former reads the question, so the image tokens differ per question",
            default_prompt="{question}",
            image_in_prompt=False,
            no_image_reason="its processor puts the image in front of every prompt",
        ),
        Family("qwen2_vl", "Qwen2-VL", "Qwen/Qwen2-VL-2B-Instruct", "prefix_cache", _CHAT),
        Family("qwen2_5_vl", "Qwen2.5-VL", "Qwen/Qwen2.5-VL-3B-Instruct", "prefix_cache", _CHAT),
        Family("idefics3", "Idefics3", "HuggingFaceM4/Idefics3-8B-Llama3", "prefix_cache", _CHAT),
        Family("smolvlm", "SmolVLM", "HuggingFaceTB/SmolVLM-256M-Instruct", "prefix_cache", _CHAT),
        Family(
            "paligemma",
            "PaliGemma",
            "google/paligemma-3b-mix-224",
            "plain",
            "prefix prompt: <image>answer en {question} (no chat template)",
            why_plain="the image and the prompt attend to each other bidirectionally, so the image "
            "tokens' cache depends on the question",
            default_prompt="<image>answer en {question}",
            no_image_reason="its processor requires an image with every prompt",
        ),
        Family("gemma3", "Gemma 3", "google/gemma-3-4b-it", "prefix_cache", _CHAT),
        Family("internvl", "InternVL (-hf)", "OpenGVLab/InternVL3-1B-hf", "prefix_cache", _CHAT),
    )
}


@dataclass(frozen=True)
class RemoteCodeFamily:
    """A family whose checkpoints carry their own modelling code (``trust_remote_code``)."""

    model_type: str
    name: str
    example: str


REMOTE_CODE: dict[str, RemoteCodeFamily] = {
    f.model_type: f
    for f in (
        RemoteCodeFamily("mplug_owl2", "mPLUG-Owl2", "MAGAer13/mplug-owl2-llama2-7b"),
        RemoteCodeFamily("internvl_chat", "InternVL (original)", "OpenGVLab/InternVL2-8B"),
        RemoteCodeFamily("phi3_v", "Phi-3.5-vision", "microsoft/Phi-3.5-vision-instruct"),
    )
}


def family_for(model_type: str | None, model: str = "") -> Family:
    """The family of ``model_type``; an :class:`InputError` naming the supported ones otherwise."""
    family = FAMILIES.get(model_type or "")
    if family is not None:
        return family
    supported = ", ".join(FAMILIES)
    where = f"{model}: " if model else ""
    if model_type in REMOTE_CODE:
        remote = REMOTE_CODE[model_type]
        raise InputError(
            f"{where}{remote.name} ({model_type}) needs remote code, which the hf backend does not run; "
            f"serve it behind an OpenAI-compatible server and use --backend openai (docs/models.md). "
            f"Supported model types: {supported}"
        )
    raise InputError(f"{where}model type {model_type!r} is not supported by the hf backend; supported: {supported}")


def family_rows() -> list[dict[str, str]]:
    """One row per family for ``halluprobe models``: native families first, then remote-code ones."""
    rows = [
        {
            "model_type": f.model_type,
            "family": f.name,
            "example": f.example,
            "engine": "prefix cache" if f.engine == "prefix_cache" else f"plain ({f.why_plain})",
            "template": f.template,
            "support": "native, tested",
        }
        for f in FAMILIES.values()
    ]
    rows += [
        {
            "model_type": f.model_type,
            "family": f.name,
            "example": f.example,
            "engine": "-",
            "template": "-",
            "support": "remote code: use an OpenAI-compatible server",
        }
        for f in REMOTE_CODE.values()
    ]
    return rows


def family_table_markdown() -> str:
    """:func:`family_rows` as a Markdown table (what ``halluprobe models`` prints)."""

    columns = ("model_type", "family", "engine", "template", "support", "example")
    return "\n".join(markdown_table(columns, [[row[c] for c in columns] for row in family_rows()]))
