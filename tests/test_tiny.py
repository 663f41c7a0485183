"""The tiny model builders: real architectures, real tokenizers, seeded weights, real photos.

Fixtures ``llama_tokenizer_dir`` and ``qwen2_tokenizer_dir`` (session, tests/conftest.py) are
saved REAL vocabularies (LLaMA-2 and Qwen2 from llama.cpp's GGUF files).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from halluprobe import tiny  # noqa: E402
from halluprobe.tiny import DEMO_PHOTOS, build_tiny_llava, demo_photos  # noqa: E402
from halluprobe.tiny_qwen2vl import QWEN2VL_SPECIAL_TOKENS, build_tiny_qwen2vl, write_qwen2vl_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

# Builders should take under 2 s each once transformers is imported; the asserted bound
# leaves room for a loaded machine.
BUILD_BOUND_S = 5.0


def _load(model_dir: Path) -> Any:
    from transformers import AutoModelForImageTextToText

    model, info = AutoModelForImageTextToText.from_pretrained(
        str(model_dir), local_files_only=True, dtype=torch.float32, output_loading_info=True
    )
    # every saved tensor is read back and nothing is freshly initialised
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    return model.eval()


def _in_memory(model_dir: Path, *, seed: int) -> Any:
    """The folder's architecture initialised in memory after ``torch.manual_seed(seed)``."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForImageTextToText.from_config(config).eval()


def _weights(model_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def _same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _timed(build: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = build()
    return result, time.perf_counter() - start


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    result, seconds = _timed(lambda: demo_photos(tmp_path_factory.mktemp("photos")))
    assert seconds < BUILD_BOUND_S
    return result


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> Path:
    return build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory, qwen2_tokenizer_dir: Path) -> Path:
    return build_tiny_qwen2vl(tmp_path_factory.mktemp("qwen2vl"), qwen2_tokenizer_dir, seed=0)


def _image(photos: tuple[Path, Path], name: str) -> Any:
    from PIL import Image

    with Image.open(photos[0] / name) as im:
        return im.convert("RGB")


# --- LLaVA ------------------------------------------------------------------------------------


def test_tiny_llava_layout_follows_llava_1_5(llava_dir: Path, photos: tuple[Path, Path]) -> None:
    from transformers import AutoConfig, AutoProcessor

    config = AutoConfig.from_pretrained(llava_dir, local_files_only=True)
    assert config.model_type == "llava"
    assert config.image_token_index == 32000
    assert config.text_config.vocab_size == 32064
    assert config.text_config.pad_token_id == 32001
    assert config.vision_config.hidden_size == 64 and config.vision_config.num_hidden_layers == 2
    assert config.text_config.hidden_size == 64 and config.text_config.num_hidden_layers == 2

    processor = AutoProcessor.from_pretrained(llava_dir, local_files_only=True)
    assert type(processor).__name__ == "LlavaProcessor"
    assert type(processor.image_processor).__name__ == "CLIPImageProcessorPil"  # no torchvision
    tok = processor.tokenizer
    assert tok.convert_tokens_to_ids(["<image>", "<pad>"]) == [32000, 32001]
    assert tok.pad_token == "<pad>" and tok.padding_side == "left"
    # the real LLaMA-2 vocabulary is untouched
    assert tok.convert_tokens_to_ids(["yes", "▁Yes", "no", "▁No"]) == [3582, 3869, 1217, 1939]
    ids = tok("USER: <image>\nIs there a cat?").input_ids
    assert ids[0] == tok.bos_token_id and ids.count(32000) == 1  # <image> is never split
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is there a cat?"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == "USER: <image>\nIs there a cat? ASSISTANT:"

    enc = processor(images=_image(photos, "chelsea.jpg"), text="USER: <image>\nIs there a cat?", return_tensors="pt")
    assert enc["pixel_values"].shape == (1, 3, 224, 224)
    assert int((enc["input_ids"] == 32000).sum()) == (224 // 14) ** 2  # CLS dropped ("default")


def test_tiny_llava_reloads_to_the_seeded_model(
    llava_dir: Path, llama_tokenizer_dir: Path, photos: tuple[Path, Path], tmp_path: Path
) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(llava_dir, local_files_only=True)
    text = "USER: <image>\nIs there a cup?\nASSISTANT:"
    inputs = processor(images=_image(photos, "coffee.jpg"), text=text, return_tensors="pt")
    model = _load(llava_dir)
    assert 4_000_000 < sum(p.numel() for p in model.parameters()) < 5_000_000
    with torch.no_grad():
        logits = model(**inputs).logits
        # the saved folder reloads to exactly the model built in memory after manual_seed(0)
        assert torch.equal(logits, _in_memory(llava_dir, seed=0)(**inputs).logits)
        assert not torch.allclose(logits, _in_memory(llava_dir, seed=1)(**inputs).logits)
    assert logits.shape[-1] == 32064 and torch.isfinite(logits).all()

    # same seed, same files
    same, seconds = _timed(lambda: build_tiny_llava(tmp_path / "same", llama_tokenizer_dir, seed=0))
    assert seconds < BUILD_BOUND_S
    assert _same_weights(_weights(llava_dir), _weights(same))


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder, seconds = _timed(lambda: tiny.mistral_tokenizer_dir(tmp_path_factory.mktemp("mistral")))
    assert seconds < BUILD_BOUND_S
    return folder


def test_tiny_llava_on_mistral_vocabulary(tmp_path: Path, mistral_dir: Path) -> None:
    from transformers import AutoConfig, AutoProcessor

    model_dir = build_tiny_llava(tmp_path / "m", mistral_dir, seed=0, image_size=112)
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    tok = AutoProcessor.from_pretrained(model_dir, local_files_only=True).tokenizer
    assert config.image_token_index == tok.convert_tokens_to_ids("<image>") == 32000
    assert tok.convert_tokens_to_ids("<pad>") == config.text_config.pad_token_id == 32001
    assert tok.convert_tokens_to_ids(["▁Yes", "▁No"]) == [5592, 1770]  # Mistral v1, not LLaMA-2
    assert config.vision_config.image_size == 112


# --- Qwen2-VL ---------------------------------------------------------------------------------


def test_tiny_qwen2vl_tokenizer_has_the_vision_tokens(qwen_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_dir, local_files_only=True)
    for tid, piece in QWEN2VL_SPECIAL_TOKENS.items():
        assert tok.convert_tokens_to_ids(piece) == tid, piece
    assert tok.convert_ids_to_tokens([151652, 151655]) == ["<|vision_start|>", "<|image_pad|>"]
    # special tokens survive tokenization whole; the text vocabulary is the real Qwen2 one
    ids = tok("<|vision_start|><|image_pad|><|image_pad|><|vision_end|>Yes").input_ids
    assert ids == [151652, 151655, 151655, 151653, 9454]
    assert tok.convert_tokens_to_ids(["Yes", "No", "ĠYes", "ĠNo"]) == [9454, 2753, 7414, 2308]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.decode([151655, 9454], skip_special_tokens=True) == "Yes"
    assert "<|vision_start|><|image_pad|><|vision_end|>" in tok.chat_template

    config = AutoConfig.from_pretrained(qwen_dir, local_files_only=True)
    assert (config.image_token_id, config.vision_start_token_id) == (151655, 151652)
    assert config.text_config.vocab_size == 151936


def test_tiny_qwen2vl_image_processor_is_small_and_pil(qwen_dir: Path, photos: tuple[Path, Path]) -> None:
    from transformers import AutoImageProcessor

    ip = AutoImageProcessor.from_pretrained(qwen_dir, local_files_only=True)
    assert type(ip).__name__ == "Qwen2VLImageProcessorPil"
    for name, *_ in DEMO_PHOTOS:
        grid = ip(images=_image(photos, name), return_tensors="pt")["image_grid_thw"][0]
        tokens = int(grid.prod()) // ip.merge_size**2
        assert 4 <= tokens <= 16, (name, grid.tolist())


def test_tiny_qwen2vl_reloads_to_the_seeded_model(qwen_dir: Path, qwen2_tokenizer_dir: Path, tmp_path: Path) -> None:
    model = _load(qwen_dir)
    n = sum(p.numel() for p in model.parameters())
    assert 9_000_000 < n < 11_000_000, n
    ids = torch.tensor([[151644, 872, 198, 9454, 2753]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        assert torch.equal(logits, _in_memory(qwen_dir, seed=0)(input_ids=ids).logits)
        assert not torch.allclose(logits, _in_memory(qwen_dir, seed=1)(input_ids=ids).logits)
    # tied embeddings: one stored matrix, read by both the input embedding and the head
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()

    same, seconds = _timed(lambda: build_tiny_qwen2vl(tmp_path / "same", qwen2_tokenizer_dir, seed=0))
    assert seconds < BUILD_BOUND_S
    assert _same_weights(_weights(qwen_dir), _weights(same))


# --- Mistral tokenizer and photos -------------------------------------------------------------


def test_mistral_tokenizer_dir_is_mistral_v1(mistral_dir: Path, mistral_tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mistral_dir, local_files_only=True)
    assert len(tok) == 32000
    assert tok.convert_tokens_to_ids(["▁Yes", "▁No", "Yes", "No"]) == [5592, 1770, 5613, 2501]
    assert tok("Yes").input_ids == [1, 5592]  # BOS, then the word-start piece
    # the test-asset copy (checked against SentencePiece itself) encodes the same way
    reference = AutoTokenizer.from_pretrained(mistral_tokenizer_dir, local_files_only=True)
    for text in ("USER: <image>\nIs there a cat in the image?\nASSISTANT: No, there is not.", "a  b\nc 12.5%"):
        assert tok(text).input_ids == reference(text).input_ids
    stamp = (mistral_dir / "tokenizer.json").stat().st_mtime_ns
    assert tiny.mistral_tokenizer_dir(mistral_dir) == mistral_dir  # idempotent: not rebuilt
    assert (mistral_dir / "tokenizer.json").stat().st_mtime_ns == stamp


def test_demo_photos_are_real_and_labelled(photos: tuple[Path, Path]) -> None:
    from PIL import Image

    from halluprobe.benchmarks.coco import COCO_CATEGORY_NAMES

    images_dir, objects_file = photos
    rows = [json.loads(line) for line in objects_file.read_text().splitlines()]
    assert [r["image"] for r in rows] == [name for name, *_ in DEMO_PHOTOS]
    assert {"person", "cat", "cup", "spoon", "motorcycle"} <= {o for r in rows for o in r["objects"]}
    for row in rows:
        assert row["objects"] and set(row["objects"]) <= set(COCO_CATEGORY_NAMES)
        with Image.open(images_dir / row["image"]) as im:
            assert im.format == "JPEG" and im.mode == "RGB" and min(im.size) >= 300
            # a photograph, not a flat test card: a wide spread of grey levels
            assert sum(1 for count in im.convert("L").histogram() if count) > 150


def test_a_broken_tokenizer_config_is_one_line_naming_it(tmp_path: Path) -> None:
    from halluprobe.errors import InputError

    src = tmp_path / "qwen2"
    src.mkdir()
    (src / "tokenizer.json").write_text('{"added_tokens": []}')
    (src / "tokenizer_config.json").write_text('{\n  "eos_token": "<|im_end|>",\n  "pad_token":\n}\n')
    with pytest.raises(InputError) as ei:
        write_qwen2vl_tokenizer(src, tmp_path)
    assert str(ei.value).startswith(f"{src / 'tokenizer_config.json'}:4: tokenizer config is not valid JSON")
