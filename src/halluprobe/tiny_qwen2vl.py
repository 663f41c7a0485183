"""A tiny Qwen2-VL with random weights on the real Qwen2 vocabulary (the LLaVA, CLIP and
Mistral builders: :mod:`halluprobe.tiny`).

:func:`build_tiny_qwen2vl` writes ``Qwen2VLForConditionalGeneration`` with the Qwen2-VL special
tokens, its chat template, and a PIL image processor with small pixel bounds so an image costs a
handful of tokens. transformers 5.x cannot construct ``Qwen2VLProcessor`` without torchvision
(its video processor), so the folder holds the tokenizer and the image processor side by side;
``backends/hf/inputs.py`` assembles the inputs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError
from halluprobe.jsonl import read_json_file
from halluprobe.tiny import ensure_dir, round_up, seeded_init

__all__ = ["QWEN2VL_CHAT_TEMPLATE", "QWEN2VL_SPECIAL_TOKENS", "build_tiny_qwen2vl", "qwen2vl_language", "write_qwen2vl_tokenizer"]

# Qwen2-VL-Instruct's chat template (default system turn, vision placeholders inline).
QWEN2VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen2-VL's added tokens after the Qwen2 base vocabulary (151643 pieces).
QWEN2VL_SPECIAL_TOKENS: dict[int, str] = {
    151643: "<|endoftext|>",
    151644: "<|im_start|>",
    151645: "<|im_end|>",
    151646: "<|object_ref_start|>",
    151647: "<|object_ref_end|>",
    151648: "<|box_start|>",
    151649: "<|box_end|>",
    151650: "<|quad_start|>",
    151651: "<|quad_end|>",
    151652: "<|vision_start|>",
    151653: "<|vision_end|>",
    151654: "<|vision_pad|>",
    151655: "<|image_pad|>",
    151656: "<|video_pad|>",
}


def write_qwen2vl_tokenizer(tokenizer_dir: str | Path, out: Path, extra_tokens: dict[int, str] | None = None) -> int:
    """Write ``tokenizer_dir``'s Qwen2 tokenizer into ``out`` with Qwen2-VL's special tokens
    (and ``extra_tokens``, more placeholder ids given names, for other Qwen2-based families).

    The Qwen2 GGUF vocabulary names ids past 151645 ``[PAD151646]`` ...; Qwen2-VL gives some of
    them its vision tokens. The pieces are renamed in ``tokenizer.json`` (ids unchanged), so the
    text vocabulary stays the real one. Only the small ``added_tokens`` array is parsed; the
    11 MB rest is edited as text (renaming whole JSON string literals), because parsing and
    re-serialising it, or loading it through transformers, costs over a second each time.
    Returns the vocabulary length.
    """
    src = Path(tokenizer_dir)
    if not (src / "tokenizer.json").is_file():
        # a slow-format folder (vocab.json + merges.txt): let transformers convert it once
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(out))
        src = out
    text = (src / "tokenizer.json").read_text(encoding="utf-8")
    config_path = src / "tokenizer_config.json"
    config = read_json_file(config_path, "tokenizer config") if config_path.is_file() else {}
    if not isinstance(config, dict):
        raise InputError("tokenizer config: expected a JSON object", config_path)

    key = re.search(r'"added_tokens"\s*:\s*', text)
    if key is None:
        raise ValueError(f"{tokenizer_dir}: tokenizer.json has no added_tokens")
    added, end = json.JSONDecoder().raw_decode(text, key.end())
    by_id = {t["id"]: t for t in added}
    decoder = config.get("added_tokens_decoder") or {}
    rest = text[end:]
    for tid, piece in {**QWEN2VL_SPECIAL_TOKENS, **(extra_tokens or {})}.items():
        entry = by_id.get(tid)
        if entry is None:
            raise ValueError(
                f"{tokenizer_dir}: id {tid} is not an added token; expected a Qwen2 vocabulary "
                "with 151936 ids (e.g. llama.cpp's ggml-vocab-qwen2.gguf)"
            )
        old = entry["content"]
        if old != piece:
            # the placeholder may also be a key of model.vocab (GGUF conversions put it there)
            old_literal = json.dumps(old, ensure_ascii=False)
            if rest.count(old_literal) > 1:
                raise ValueError(f"{tokenizer_dir}: {old!r} occurs more than once outside added_tokens")
            rest = rest.replace(old_literal, json.dumps(piece, ensure_ascii=False))
        entry.update(content=piece, special=True, normalized=False, lstrip=False, rstrip=False)
        if str(tid) in decoder:
            decoder[str(tid)].update(content=piece, special=True, normalized=False)
    text = text[: key.end()] + json.dumps(added, ensure_ascii=False) + rest

    # Qwen2-VL-Instruct's settings: stop on <|im_end|>, pad with <|endoftext|>, no BOS.
    config.update(eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left")
    config.pop("chat_template", None)  # written as chat_template.jinja below
    (out / "tokenizer.json").write_text(text, encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "chat_template.jinja").write_text(QWEN2VL_CHAT_TEMPLATE, encoding="utf-8")
    # added tokens follow the base vocabulary, so the last one closes the id range
    return max(by_id) + 1


def qwen2vl_language(vocab_len: int, hidden: int = 64) -> dict[str, Any]:
    """The text model and the vision token ids of a tiny Qwen2-VL-family config (Qwen2-VL,
    Qwen2.5-VL), on a tokenizer written by :func:`write_qwen2vl_tokenizer`."""
    ids = {piece: tid for tid, piece in QWEN2VL_SPECIAL_TOKENS.items()}
    return {
        "text_config": {
            "vocab_size": round_up(vocab_len, 64),
            "hidden_size": hidden,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,  # grouped-query attention, as in Qwen2-VL-2B
            "max_position_embeddings": 4096,
            "max_window_layers": 2,
            # head_dim 16 -> 8 rotary frequencies split over (temporal, height, width)
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            "tie_word_embeddings": True,
        },
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "tie_word_embeddings": True,  # as Qwen2-VL-2B; halves the parameter count here
    }


def build_tiny_qwen2vl(out_dir: str | Path, tokenizer_dir: str | Path, *, seed: int = 0) -> Path:
    """Write a random-weight Qwen2-VL-shaped model folder (about 10 M parameters); return its path.

    ``tokenizer_dir`` holds a Qwen2 tokenizer (151936 pieces incl. placeholders, e.g. the
    llama.cpp GGUF vocabulary). The image processor keeps images between 4 and 16 merged
    tokens (``min_pixels``/``max_pixels``) so a forward pass stays small.
    """
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = ensure_dir(out_dir)
    vocab_len = write_qwen2vl_tokenizer(tokenizer_dir, out)
    patch_size, merge_size, temporal_patch_size = 14, 2, 2
    hidden = 64
    config = Qwen2VLConfig(
        vision_config={
            "depth": 2,
            "embed_dim": 64,
            "hidden_size": hidden,  # the merger projects to the text width
            "mlp_ratio": 2,
            "num_heads": 4,
            "patch_size": patch_size,
            "spatial_merge_size": merge_size,
            "temporal_patch_size": temporal_patch_size,
        },
        **qwen2vl_language(vocab_len, hidden),
    )
    model = seeded_init(seed, lambda: Qwen2VLForConditionalGeneration(config))
    model.eval()

    factor = patch_size * merge_size
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=4 * factor * factor,
        max_pixels=16 * factor * factor,
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=temporal_patch_size,
    )
    model.save_pretrained(str(out))
    image_processor.save_pretrained(str(out))
    return out
