"""backends/hf/backend/inputs.py on the tiny LLaVA (processor path) and tiny Qwen2-VL (grid path).

Real tokenizers (fixtures ``llama_tokenizer_dir`` / ``qwen2_tokenizer_dir``), real photos from
scikit-image, random weights. The batching tests compare every row of a left-padded batch with
the same row run alone: Qwen2-VL's 3-D rotary positions are computed per row from the
attention mask, which is where left padding goes wrong if anything does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from halluprobe.backends.hf.inputs import VLMInputs  # noqa: E402
from halluprobe.backends.hf.load import load_model, load_processor  # noqa: E402
from halluprobe.errors import InputError, RuntimeFailure  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402
from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

QUESTIONS = [
    "Is there a person in the image?",
    "Is there a cup?",
    "Is there a dog in this picture? Please answer with a single word, yes or no.",
]
PHOTOS = ["astronaut.jpg", "coffee.jpg", "chelsea.jpg"]  # three sizes: Qwen2-VL grids differ

LLAVA_CHAT = "USER: <image>\nIs there a cup? ASSISTANT:"
QWEN_CHAT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Is there a cup?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    from PIL import Image

    images_dir, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    out = []
    for name in PHOTOS:
        with Image.open(images_dir / name) as im:
            out.append(im.convert("RGB"))
    return out


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> tuple[Path, VLMInputs, Any]:
    # 112 px: 64 image tokens a row keeps these tests fast (test_tiny covers 224 px)
    path = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    return path, load_processor(str(path)), load_model(str(path), dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory, qwen2_tokenizer_dir: Path) -> tuple[Path, VLMInputs, Any]:
    path = build_tiny_qwen2vl(tmp_path_factory.mktemp("qwen2vl"), qwen2_tokenizer_dir, seed=0)
    return path, load_processor(str(path)), load_model(str(path), dtype="float32", device="cpu")


@pytest.fixture(params=["llava", "qwen"])
def vlm(request: pytest.FixtureRequest) -> tuple[Path, VLMInputs, Any]:
    return request.getfixturevalue(request.param)


# --- loading and prompts ----------------------------------------------------------------------


def test_load_processor_picks_the_path_per_family(llava: Any, qwen: Any) -> None:
    _, lv, _ = llava
    assert (lv.mode, lv.model_type, lv.image_token, lv.image_token_id) == ("processor", "llava", "<image>", 32000)
    assert lv.image_placeholder == "<image>"
    _, qv, _ = qwen
    # AutoProcessor cannot build Qwen2VLProcessor without torchvision (its video processor):
    # the family's class is assembled from its parts, without the video part
    assert (qv.mode, qv.model_type, qv.image_token, qv.image_token_id) == (
        "processor", "qwen2_vl", "<|image_pad|>", 151655
    )
    assert type(qv.processor).__name__ == "Qwen2VLProcessor" and qv.processor.video_processor is None
    assert qv.image_placeholder == "<|vision_start|><|image_pad|><|vision_end|>"
    assert type(qv.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    assert qv.tokenizer.pad_token_id == 151643


def test_grid_fallback_encodes_what_the_processor_encodes(
    qwen: Any, images: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no processor can be built, the grid path (image processor + tokenizer) gives the
    processor's inputs exactly."""
    import halluprobe.backends.hf.load as hf_load

    path, qv, _ = qwen

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise ImportError("no processor here")

    monkeypatch.setattr(hf_load, "_processor_without_video", unavailable)
    grid = load_processor(str(path))
    assert grid.mode == "grid" and grid.processor is None
    prompts = [qv.render_prompt(q, None) for q in QUESTIONS]
    assert [grid.render_prompt(q, None) for q in QUESTIONS] == prompts
    want, got = qv.encode(prompts, images), grid.encode(prompts, images)
    assert set(want) == set(got)
    for key, value in want.items():
        assert torch.equal(value, got[key]), key


def test_render_prompt_snapshots_llava(llava: Any) -> None:
    _, v, _ = llava
    assert v.render_prompt("Is there a cup?", None) == LLAVA_CHAT
    assert v.render_prompt("Is there a cup?", "chat") == LLAVA_CHAT
    assert v.render_prompt("Is there a cup?", "llava") == "USER: <image>\nIs there a cup?\nASSISTANT:"
    assert v.render_prompt("Is there a cup?", "Q: {question} A:") == "<image>\nQ: Is there a cup? A:"
    # plain substitution: other braces stay as written
    assert (
        v.render_prompt("Is there a cup?", '<image> {question} Reply as {"answer": ...}')
        == '<image> Is there a cup? Reply as {"answer": ...}'
    )


def test_render_prompt_snapshots_qwen2vl(qwen: Any) -> None:
    _, v, _ = qwen
    assert v.render_prompt("Is there a cup?", None) == QWEN_CHAT
    assert v.render_prompt("Is there a cup?", "llava") == (
        "USER: <|vision_start|><|image_pad|><|vision_end|>\nIs there a cup?\nASSISTANT:"
    )
    assert v.render_prompt("Is there a cup?", "{question}") == (
        "<|vision_start|><|image_pad|><|vision_end|>\nIs there a cup?"
    )


def test_render_prompt_rejects_a_format_without_question(llava: Any) -> None:
    _, v, _ = llava
    with pytest.raises(InputError, match="question"):
        v.render_prompt("Is there a cup?", "USER: <image> ASSISTANT:")


# --- batches ----------------------------------------------------------------------------------


def _last_logits(model: Any, inputs: dict[str, Any]) -> Any:
    with torch.inference_mode():
        return model(**inputs).logits[:, -1, :].float()


def test_encode_left_pads_and_each_row_equals_its_own_run(vlm: Any, images: list[Any]) -> None:
    """Forward pass and two greedy decode steps: every row of the padded batch equals that
    row run alone (Qwen2-VL: 3-D positions per row from the mask, then per-row rope deltas)."""
    _, v, model = vlm
    prompts = [v.render_prompt(q, None) for q in QUESTIONS]
    batch = v.encode(prompts, images)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape == mask.shape and ids.shape[0] == 3
    lengths = mask.sum(1).tolist()
    assert len(set(lengths)) == 3  # three different lengths: two rows are padded
    assert mask[:, -1].all()  # left padding: every row ends on a real token
    for row, n in enumerate(lengths):
        assert mask[row].tolist() == [0] * (ids.shape[1] - n) + [1] * n
        assert set(ids[row, : ids.shape[1] - n].tolist()) <= {v.tokenizer.pad_token_id}
    assert int((ids == v.image_token_id).sum()) > 3  # placeholders were expanded

    steps = 2
    kwargs = dict(max_new_tokens=steps, do_sample=False, output_logits=True, return_dict_in_generate=True,
                  pad_token_id=v.tokenizer.pad_token_id)
    with torch.inference_mode():
        forward = model(**batch).logits[:, -1, :].float()
        generated = model.generate(**batch, **kwargs)
        assert torch.isfinite(forward).all()
        torch.testing.assert_close(generated.logits[0].float(), forward, atol=1e-5, rtol=0)
        for row in range(3):
            single = v.encode([prompts[row]], [images[row]])
            alone = model.generate(**single, **kwargs)
            for step in range(steps):
                torch.testing.assert_close(
                    generated.logits[step][row].float(), alone.logits[step][0].float(), atol=1e-4, rtol=0
                )
            new_tokens = generated.sequences[row, ids.shape[1]:].tolist()
            assert new_tokens == alone.sequences[0, single["input_ids"].shape[1]:].tolist()


def test_qwen2vl_grid_inputs_are_what_the_model_expects(qwen: Any, images: list[Any]) -> None:
    _, v, model = qwen
    prompts = [v.render_prompt(q, None) for q in QUESTIONS]
    batch = v.encode(prompts, images)
    assert {"input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids"} <= set(batch)
    grid = batch["image_grid_thw"]
    per_image = (grid.prod(-1) // v.image_processor.merge_size**2).tolist()
    per_row = (batch["input_ids"] == 151655).sum(1).tolist()
    assert per_row == per_image and len(set(per_image)) > 1  # three photo shapes, three grids
    assert torch.equal(batch["mm_token_type_ids"], (batch["input_ids"] == 151655).long())
    assert batch["pixel_values"].shape[0] == int(grid.prod(-1).sum())

    # The equality test above can fail: with the image tokens typed as text the model builds
    # 1-D positions for them, and the answer logits move.
    as_text = dict(batch, mm_token_type_ids=torch.zeros_like(batch["mm_token_type_ids"]))
    assert (_last_logits(model, batch) - _last_logits(model, as_text)).abs().max() > 1e-3


def test_encode_checks_placeholders_against_images(vlm: Any, images: list[Any]) -> None:
    _, v, _ = vlm
    prompt = v.render_prompt("Is there a cup?", None)
    with pytest.raises(InputError, match="image"):
        v.encode([prompt, prompt], images[:1])
    with pytest.raises(InputError, match="image"):
        v.encode(["Is there a cup?"], images[:1])


def test_encode_does_not_double_bos(llava: Any, images: list[Any]) -> None:
    _, v, _ = llava
    plain = v.encode(["USER: <image>\nIs there a cup?"], images[:1])["input_ids"][0].tolist()
    assert plain[0] == 1 and plain[1] != 1  # the tokenizer adds BOS
    # a prompt that already starts with BOS (a chat template writing it) gets no second one
    prompt = "<s>USER: <image>\nIs there a cup?"
    with_bos = v.encode([prompt], images[:1])["input_ids"][0].tolist()
    assert with_bos[0] == 1 and with_bos[1] != 1
    assert with_bos.count(32000) == plain.count(32000) == (112 // 14) ** 2


# --- load_model -------------------------------------------------------------------------------


def test_load_model_dtype_and_errors(llava: Any) -> None:
    path, _, model = llava
    assert not model.training and next(model.parameters()).dtype == torch.float32
    bf16 = load_model(str(path), dtype="bfloat16")
    assert next(bf16.parameters()).dtype == torch.bfloat16 and not bf16.training
    with pytest.raises(InputError, match="dtype"):
        load_model(str(path), dtype="float8")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="device"):
        load_model(str(path), device="tpu")  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeFailure, match="CUDA"):
            load_model(str(path), device="cuda")


def test_load_in_4bit_without_bitsandbytes_is_a_clear_error(llava: Any) -> None:
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed")
    with pytest.raises(RuntimeFailure, match="bitsandbytes"):
        load_model(str(llava[0]), load_in_4bit=True)


def test_a_missing_model_folder_fails_offline(tmp_path: Path) -> None:
    with pytest.raises((OSError, ValueError)):
        load_processor(str(tmp_path / "nothing-here"))
