"""Tiny real VLM architectures with random weights, real tokenizers, and real demo photos.

The offline demo and the tests need models that load through the same code path as real
checkpoints (``AutoProcessor`` / ``AutoModelForImageTextToText`` on a local folder) but build
in well under a second. These builders write such folders:

- :func:`build_tiny_llava`: ``LlavaForConditionalGeneration`` (CLIP vision + LLaMA text) in the
  LLaVA-1.5 layout: ``<image>`` and ``<pad>`` added to a 32000-piece vocabulary, the embedding
  padded to a multiple of 64 (32064), and a chat template that renders
  ``USER: <image>\\n{question} ASSISTANT:``.
- :func:`build_tiny_qwen2vl`: ``Qwen2VLForConditionalGeneration`` on the Qwen2 vocabulary with
  the Qwen2-VL special tokens, its chat template, and a PIL image processor with small pixel
  bounds so an image costs a handful of tokens. transformers 5.x cannot construct
  ``Qwen2VLProcessor`` without torchvision (its video processor), so the folder holds the
  tokenizer and the image processor side by side; ``backends.hf_inputs`` assembles the inputs.
- :func:`build_tiny_clip`: ``CLIPModel`` (the ``clip`` correction signal's scorer) on the CLIP
  BPE vocabulary, with the PIL image processor.
- :func:`mistral_tokenizer_dir`: the Mistral v1 SentencePiece tokenizer shipped in
  ``mistral-common``, saved as a transformers tokenizer folder.
- :func:`demo_photos`: real photographs shipped with scikit-image plus a POPE-style objects
  file naming the COCO categories really visible in each.

Weights are random: answers are meaningless, but shapes, token ids, padding and position
handling are those of the real architectures. Nothing here downloads anything.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError
from halluprobe.jsonl import read_json_file

__all__ = [
    "DEMO_PHOTOS",
    "LLAVA_CHAT_TEMPLATE",
    "QWEN2VL_CHAT_TEMPLATE",
    "QWEN2VL_SPECIAL_TOKENS",
    "build_tiny_clip",
    "build_tiny_llava",
    "build_tiny_qwen2vl",
    "demo_photos",
    "mistral_tokenizer_dir",
]

logger = logging.getLogger(__name__)

# LLaVA-1.5 conversation format as rendered by llava-hf's processors: images first, then the
# text, then "ASSISTANT:" (no newline before it; the original repo's conv_vicuna_v1 with an
# empty system prompt gives the same single-turn string apart from the system line).
LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] + ' ' }}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}"
    "{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' ' }}"
    "{% endfor %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

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

# (file name, skimage loader, COCO categories really visible). Only objects a COCO annotator
# would box are listed: the astronaut's flag and helmet, the cameraman's camera and the
# rocket photo have no COCO category, so they are left out rather than guessed.
DEMO_PHOTOS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("astronaut.jpg", "astronaut", ("person",)),
    ("coffee.jpg", "coffee", ("cup", "spoon")),
    ("chelsea.jpg", "chelsea", ("cat",)),
    ("motorcycle.jpg", "stereo_motorcycle", ("motorcycle",)),
    ("camera.jpg", "camera", ("person",)),
)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _seeded_init(seed: int, build: Any) -> Any:
    """Run ``build()`` under a forked, seeded RNG: same seed, same weights; global RNG untouched."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _ensure_dir(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out


def build_tiny_llava(
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    *,
    seed: int = 0,
    image_size: int = 224,
) -> Path:
    """Write a random-weight LLaVA-1.5-shaped model folder and return its path.

    ``tokenizer_dir`` holds a LLaMA-family tokenizer (LLaMA-2 or Mistral v1, 32000 pieces).
    ``<image>`` and ``<pad>`` are added as LLaVA-1.5 does (ids 32000 and 32001 on a 32000
    vocabulary) unless the tokenizer already has them; ``image_token_index`` is whatever id
    the tokenizer gives ``<image>``.
    """
    from tokenizers import AddedToken
    from transformers import (
        AutoTokenizer,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    out = _ensure_dir(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    # Added in LLaVA-1.5's order so a 32000 vocabulary gives <image>=32000, <pad>=32001.
    if "<image>" not in tokenizer.get_vocab():
        tokenizer.add_tokens([AddedToken("<image>", special=True, normalized=False)], special_tokens=True)
    if tokenizer.pad_token is None:
        tokenizer.add_special_tokens({"pad_token": "<pad>"})
    # Batched generation pads on the left; 5.x saves this only from init_kwargs.
    tokenizer.padding_side = "left"
    tokenizer.init_kwargs["padding_side"] = "left"
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    pad_token_id = tokenizer.pad_token_id
    vocab_size = _round_up(len(tokenizer), 64)  # LLaVA-1.5 pads 32002 -> 32064

    patch_size = 14
    vision = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=image_size,
        patch_size=patch_size,
        projection_dim=64,
    )
    text = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        pad_token_id=pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_token_id,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )
    model = _seeded_init(seed, lambda: LlavaForConditionalGeneration(config))
    model.eval()

    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,  # CLIP's CLS token; "default" drops it again
        chat_template=LLAVA_CHAT_TEMPLATE,
    )
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))
    return out


def build_tiny_clip(
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    *,
    seed: int = 0,
    image_size: int = 56,
    patch_size: int = 14,
    vision: tuple[int, int, int] = (32, 2, 4),
    text: tuple[int, int, int] = (32, 2, 4),
    projection_dim: int = 32,
) -> Path:
    """Write a random-weight ``CLIPModel`` folder with a ``CLIPProcessor`` (PIL image processor);
    ``tokenizer_dir`` holds a CLIP BPE tokenizer. ``vision`` and ``text``: (width, layers, heads)
    of the towers, whose feed-forward is 4 x the width as in CLIP; the defaults are tiny, and
    openai/clip-vit-large-patch14's shapes are ``vision=(1024, 24, 16), text=(768, 12, 12),
    projection_dim=768, image_size=224``."""
    from transformers import AutoTokenizer, CLIPConfig, CLIPModel, CLIPProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    out = _ensure_dir(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))

    def tower(shape: tuple[int, int, int]) -> dict[str, int]:
        width, layers, heads = shape
        return {"hidden_size": width, "intermediate_size": 4 * width, "num_hidden_layers": layers, "num_attention_heads": heads}

    config = CLIPConfig(
        text_config={
            **tower(text),
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 77,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={**tower(vision), "image_size": image_size, "patch_size": patch_size},
        projection_dim=projection_dim,
    )
    model = _seeded_init(seed, lambda: CLIPModel(config)).eval()
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
        ),
        tokenizer=tokenizer,
    )
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))
    return out


def _write_qwen2vl_tokenizer(tokenizer_dir: str | Path, out: Path, extra_tokens: dict[int, str] | None = None) -> int:
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


def _qwen2vl_language(vocab_len: int, hidden: int = 64) -> dict[str, Any]:
    """The text model and the vision token ids of a tiny Qwen2-VL-family config (Qwen2-VL,
    Qwen2.5-VL), on a tokenizer written by :func:`_write_qwen2vl_tokenizer`."""
    ids = {piece: tid for tid, piece in QWEN2VL_SPECIAL_TOKENS.items()}
    return {
        "text_config": {
            "vocab_size": _round_up(vocab_len, 64),
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

    out = _ensure_dir(out_dir)
    vocab_len = _write_qwen2vl_tokenizer(tokenizer_dir, out)
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
        **_qwen2vl_language(vocab_len, hidden),
    )
    model = _seeded_init(seed, lambda: Qwen2VLForConditionalGeneration(config))
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


def mistral_tokenizer_dir(out_dir: str | Path) -> Path:
    """Save mistral-common's v1 SentencePiece tokenizer (32000 pieces) as a transformers folder.

    Idempotent: a folder that already holds ``tokenizer.json`` is returned as is (the
    SentencePiece conversion is the slow part, about 2 s).
    """
    import mistral_common
    from transformers import LlamaTokenizer

    out = _ensure_dir(out_dir)
    if (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file():
        return out
    source = Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1"
    if not source.is_file():
        raise FileNotFoundError(f"mistral-common does not ship {source.name} here: {source}")
    with tempfile.TemporaryDirectory(prefix="halluprobe-mistral-") as tmp:
        shutil.copyfile(source, Path(tmp) / "tokenizer.model")
        # transformers 5.x builds the tokenizer without a BOS post-processor unless asked;
        # Mistral (like LLaMA) prepends <s>.
        tokenizer = LlamaTokenizer.from_pretrained(tmp, add_bos_token=True, legacy=False)
    tokenizer.save_pretrained(str(out))
    return out


def demo_photos(out_dir: str | Path) -> tuple[Path, Path]:
    """Save scikit-image's real photographs as JPEG files and a POPE-style objects file.

    Returns ``(images_dir, objects_file)``: ``images_dir`` holds the photos, ``objects_file``
    is JSON Lines ``{"image": name, "objects": [COCO category, ...]}``, one line per photo.
    """
    import numpy as np
    from PIL import Image
    from skimage import data

    out = _ensure_dir(out_dir)
    images_dir = out / "images"
    images_dir.mkdir(exist_ok=True)
    lines = []
    for name, loader, objects in DEMO_PHOTOS:
        array = getattr(data, loader)()
        if isinstance(array, tuple):  # stereo_motorcycle: (left, right, disparity)
            array = array[0]
        image = Image.fromarray(np.asarray(array)).convert("RGB")
        image.save(images_dir / name, format="JPEG", quality=90)
        lines.append(json.dumps({"image": name, "objects": list(objects)}))
    objects_file = out / "objects.jsonl"
    objects_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return images_dir, objects_file
