"""Tiny real VLM architectures with random weights, real tokenizers, and real demo photos.

The offline demo and the tests need models that load through the same code path as real
checkpoints (``AutoProcessor`` / ``AutoModelForImageTextToText`` on a local folder) but build
in well under a second. These builders write such folders:

- :func:`build_tiny_llava`: ``LlavaForConditionalGeneration`` (CLIP vision + LLaMA text) in the
  LLaVA-1.5 layout: ``<image>`` and ``<pad>`` added to a 32000-piece vocabulary, the embedding
  padded to a multiple of 64 (32064), and a chat template that renders
  ``USER: <image>\\n{question} ASSISTANT:``.
- :func:`halluprobe.tiny_qwen2vl.build_tiny_qwen2vl`: Qwen2-VL (its own module).
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
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "DEMO_PHOTOS",
    "LLAVA_CHAT_TEMPLATE",
    "build_tiny_clip",
    "build_tiny_llava",
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


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def seeded_init(seed: int, build: Any) -> Any:
    """Run ``build()`` under a forked, seeded RNG: same seed, same weights; global RNG untouched."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def ensure_dir(out_dir: str | Path) -> Path:
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

    out = ensure_dir(out_dir)
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
    vocab_size = round_up(len(tokenizer), 64)  # LLaVA-1.5 pads 32002 -> 32064

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
    model = seeded_init(seed, lambda: LlavaForConditionalGeneration(config))
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

    out = ensure_dir(out_dir)
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
    model = seeded_init(seed, lambda: CLIPModel(config)).eval()
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
        ),
        tokenizer=tokenizer,
    )
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))
    return out


def mistral_tokenizer_dir(out_dir: str | Path) -> Path:
    """Save mistral-common's v1 SentencePiece tokenizer (32000 pieces) as a transformers folder.

    Idempotent: a folder that already holds ``tokenizer.json`` is returned as is (the
    SentencePiece conversion is the slow part, about 2 s).
    """
    import mistral_common
    from transformers import LlamaTokenizer

    out = ensure_dir(out_dir)
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

    out = ensure_dir(out_dir)
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
