"""An image's questions packed into one row (hf/packed.py), on tiny real LLaVA and Qwen2-VL builds.

With ``core.packs_rows`` on (the default where the model allows it), a prefix-cache batch is
one row per image with its questions in slots behind a 4-D mask. The stacked engine (one row
per question) and the plain engine are the references: first-token log-probabilities within
1e-4 in fp32, the same top tokens and the same greedy texts, at batch sizes that split an
image's questions, with one-image batches and with more images than a batch; every greedy
step's logits equal the full prompt's; a question that meets EOS or a stop string ends there
while its neighbours go on; and a generation config that changes greedy logits, or an attention
that takes no 4-D mask, keeps the stacked rows.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _engines import OBJECTS, PHOTOS, assert_same_responses, tiny_pair, yes_no_requests

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.backend import HFBackend
from halluprobe.backends.hf.packed import PAD, PREFIX, slot_mask, unpackable, worth_packing
from halluprobe.records import GenerateConfig, Request, Response
from halluprobe.tiny import build_tiny_llava, demo_photos

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images_dir, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    return images_dir


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path, qwen2_tokenizer_dir: Path) -> dict[str, dict[str, HFBackend]]:
    out = {}
    for name, path in tiny_pair(tmp_path_factory, llama_tokenizer_dir, qwen2_tokenizer_dir).items():
        stacked = HFBackend(str(path), batch_size=4, dtype="float32", device="cpu", prefix_cache=True)
        assert stacked.core.packing_refused is None and stacked.core.packs_rows  # on by default
        out[name] = {
            "stacked": stacked,
            "plain": HFBackend.on_core(stacked.core, batch_size=4, prefix_cache=False),
        }
    return out


def _answer(backend: HFBackend, requests: list[Request], new_tokens: int, *, packed: bool, stops: tuple[str, ...] | None = None) -> dict[Any, Response]:
    default, backend.core.packs_rows = backend.core.packs_rows, packed
    try:
        config = GenerateConfig(max_new_tokens=new_tokens, top_k=5, stop_strings=stops)
        out = {r.key: r for batch in backend.answer(requests, config) for r in batch}
    finally:
        backend.core.packs_rows = default
    assert len(out) == len(requests)
    return out



class _PackSpy:
    """Counts the packed passes and the images of each (one row per image)."""

    def __init__(self, backend: HFBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.images: list[int] = []
        real = backend.core.packed_step

        def spied(packed: Any, *args: Any, **kwargs: Any) -> Any:
            self.images.append(len(packed.groups))
            return real(packed, *args, **kwargs)

        monkeypatch.setattr(backend.core, "packed_step", spied)


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
@pytest.mark.parametrize("new_tokens", [0, 6])
def test_packed_rows_equal_stacked_rows_and_full_prompts(
    backends: dict[str, dict[str, HFBackend]], photos: Path, model: str, new_tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    stacked, plain = backends[model]["stacked"], backends[model]["plain"]
    requests = yes_no_requests(stacked, photos, PHOTOS, OBJECTS)  # 4 images x 5 distinct questions
    want = _answer(plain, requests, new_tokens, packed=False)
    assert_same_responses(want, _answer(stacked, requests, new_tokens, packed=False), texts=new_tokens > 0)
    # 3 rows split every image's questions over batches; 7 mixes images; 1 is one question per
    # batch; 64 is every image in one batch
    for size in (1, 3, 7, 64):
        spy = _PackSpy(stacked, monkeypatch)
        stacked.batching.size = size
        try:
            got = _answer(stacked, requests, new_tokens, packed=True)
        finally:
            stacked.batching.size = 4
            monkeypatch.undo()
        assert_same_responses(want, got, texts=new_tokens > 0)
        # one packed pass per batch of distinct questions (5 per image, in image order), a row per image
        assert spy.images == [len({row // 5 for row in range(start, min(start + size, 20))}) for start in range(0, 20, size)]


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
def test_every_greedy_step_of_a_packed_batch_matches_full_prompts(backends: dict[str, dict[str, HFBackend]], photos: Path, model: str) -> None:
    """Each question's logits at each of 5 greedy steps equal a forward pass over its full prompt
    plus its own greedy tokens so far (within 1e-4)."""
    from halluprobe.backends.hf.packed import PackedRows, packed_first_step

    stacked = backends[model]["stacked"]
    core = stacked.core
    groups, full = [], []
    for image_name in PHOTOS[:3]:
        image = core.load_image(str(photos / image_name))
        prompts = [stacked.render_prompt(f"Is there a {name} in the image?", None) for name in OBJECTS[:4]]
        shared = core.inputs.encode_shared(prompts, image)
        assert shared is not None
        groups.append((core.run_prefix(shared.prefix), shared.suffixes))
        full.extend((prompt, image) for prompt in prompts)
    seen: list[Any] = []
    real_forward = core.model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = real_forward(*args, **kwargs)
        seen.append(out.logits.detach().clone())
        return out

    core.model.forward = forward
    try:
        packed = PackedRows(tuple((prefix, tuple(tuple(suffix) for suffix in suffixes)) for prefix, suffixes in groups))
        first, texts = packed_first_step(core.model, core.tokenizer, packed, 5, None, core.pad_id, keep_logits=bool(core.keep_last))
    finally:
        del core.model.forward
    assert texts is not None and len(texts) == len(full) == first.shape[0]
    assert len(seen) == 5  # the suffix pass and 4 steps: nothing stopped early
    per_step = [seen[0]] + seen[1:]  # [images, slots, vocab] each
    for question, (prompt, image) in enumerate(full):
        row, slot = divmod(question, 4)
        ids = core.inputs.encode([prompt], [image])
        tokens = []
        for step in range(5):
            logits = per_step[step][row, slot]
            inputs = core.to_device(dict(ids))
            if tokens:
                extra = torch.tensor([tokens], dtype=torch.long)
                inputs["input_ids"] = torch.cat([inputs["input_ids"], extra], dim=-1)
                inputs["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(extra)], dim=-1)
                if "mm_token_type_ids" in inputs:
                    inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(extra)], dim=-1)
            with torch.inference_mode():
                reference = core.model(**inputs).logits[0, -1]
            assert torch.allclose(logits, reference, atol=1e-4), (question, step, (logits - reference).abs().max())
            tokens.append(int(reference.argmax()))
        assert texts[question] == core.tokenizer.decode(tokens, skip_special_tokens=True)


def test_a_question_that_meets_eos_or_a_stop_string_ends_there(backends: dict[str, dict[str, HFBackend]], photos: Path) -> None:
    """Greedy text stops per question, as generate stops a row: EOS (here a token some questions
    produce at their second step) and stop strings, while the batch's other questions go on.
    (LLaVA only: the tiny Qwen2-VL's greedy text is one newline repeated, the same for every
    question; its stop at the first newline is in the test above.)"""
    stacked, plain = backends["llava"]["stacked"], backends["llava"]["plain"]
    requests = yes_no_requests(stacked, photos, PHOTOS, OBJECTS)
    free = _answer(plain, requests, 6, packed=False, stops=())
    second = [stacked.core.tokenizer(r.text, add_special_tokens=False).input_ids for r in free.values()]
    eos_id = next(ids[1] for ids in second if len(ids) > 2)
    generation = stacked.core.model.generation_config
    old = generation.eos_token_id
    generation.eos_token_id = eos_id
    try:
        want = _answer(plain, requests, 6, packed=False, stops=())
        stacked.batching.size = 7
        got = _answer(stacked, requests, 6, packed=True, stops=())
    finally:
        generation.eos_token_id = old
        stacked.batching.size = 4
    assert_same_responses(want, got, texts=True)
    assert len({len(r.text) for r in want.values()}) > 1  # some stopped early, some did not
    stop = next(r.text[2] for r in free.values() if len(r.text) > 3)  # a character some texts hold
    want = _answer(plain, requests, 6, packed=False, stops=(stop,))
    stacked.batching.size = 7
    try:
        got = _answer(stacked, requests, 6, packed=True, stops=(stop,))
    finally:
        stacked.batching.size = 4
    assert_same_responses(want, got, texts=True)
    assert any(stop in r.text for r in want.values())


def test_slot_mask_keeps_questions_apart() -> None:
    """Row 0: prefix of 2 (one left pad), two slots of width 2 (the second padded); the queries
    are the slots' four columns."""
    owner = torch.tensor([[PAD, PREFIX, PREFIX, 0, 0, PAD, 1]])
    mask = slot_mask(owner, torch.tensor([3, 4, 5, 6]), torch.float32)[0, 0] == 0
    assert mask.tolist() == [
        [False, True, True, True, False, False, False],  # slot 0's first token: prefix and itself
        [False, True, True, True, True, False, False],  # slot 0's second: and its first
        [True, True, True, False, False, True, False],  # a pad: the prefix, pads, itself (finite, never read)
        [False, True, True, False, False, False, True],  # slot 1: prefix and itself, not slot 0
    ]


class _PassSpy:
    """Which pass answered each batch: ``packed`` (one row per image) or ``stacked`` (first_step)."""

    def __init__(self, backend: HFBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.passes: list[str] = []
        core = backend.core
        for name, label in (("packed_step", "packed"), ("first_step", "stacked")):
            real = getattr(core, name)

            def spied(*args: Any, _real: Any = real, _label: str = label, **kwargs: Any) -> Any:
                self.passes.append(_label)
                return _real(*args, **kwargs)

            monkeypatch.setattr(core, name, spied)


def test_a_config_that_changes_greedy_logits_packs_first_token_readouts_only(
    backends: dict[str, dict[str, HFBackend]], photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen2-VL-Instruct ships repetition_penalty=1.05: generate's greedy text differs from the
    packed loop's, so a run with text keeps stacked rows; its first-token logits come from one
    forward pass, which the generation config does not touch: those still pack."""
    stacked, plain = backends["qwen2vl"]["stacked"], backends["qwen2vl"]["plain"]
    core, model = stacked.core, stacked.core.model
    assert unpackable(model, text=True) is None and stacked.info()["packed_text"] is True
    requests = yes_no_requests(stacked, photos, PHOTOS, OBJECTS)
    model.generation_config.repetition_penalty = 1.05
    monkeypatch.setattr(core, "text_packing_refused", unpackable(model, text=True))
    try:
        assert "repetition_penalty" in (core.text_packing_refused or "") and unpackable(model, text=False) is None
        assert stacked.info()["packed_rows"] is True and stacked.info()["packed_text"] is False
        for new_tokens, used in ((0, "packed"), (3, "stacked")):
            spy = _PassSpy(stacked, monkeypatch)
            got = _answer(stacked, requests, new_tokens, packed=True)
            assert set(spy.passes) == {used}, new_tokens
            assert_same_responses(_answer(plain, requests, new_tokens, packed=False), got, texts=new_tokens > 0)
    finally:
        model.generation_config.repetition_penalty = 1.0


def test_an_attention_without_4d_masks_keeps_stacked_rows(backends: dict[str, dict[str, HFBackend]]) -> None:
    model = backends["qwen2vl"]["stacked"].core.model
    config = model.config.get_text_config()
    old = config._attn_implementation
    config._attn_implementation = "flash_attention_2"
    try:
        assert "4-D mask" in (unpackable(model, text=False) or "")
    finally:
        config._attn_implementation = old


def test_a_batch_with_most_slots_empty_keeps_stacked_rows(
    backends: dict[str, dict[str, HFBackend]], photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One image asked 5 questions beside three asked one: packed, 4 rows of 5 slots for 8
    questions; stacked rows do less. Four images asked 5 each pack. Numbers equal either way."""
    stacked, plain = backends["llava"]["stacked"], backends["llava"]["plain"]
    assert worth_packing([5, 5, 5, 5]) and worth_packing([5, 3]) and not worth_packing([5, 1, 1, 1])
    uniform = yes_no_requests(stacked, photos, PHOTOS, OBJECTS)[:20]  # the random split: 5 per image
    skewed = uniform[:5] + [uniform[5], uniform[10], uniform[15]]
    stacked.batching.size = 64
    try:
        for requests, used in ((uniform, "packed"), (skewed, "stacked")):
            spy = _PassSpy(stacked, monkeypatch)
            got = _answer(stacked, requests, 4, packed=True)
            assert spy.passes == [used]
            assert_same_responses(_answer(plain, requests, 4, packed=False), got, texts=True)
    finally:
        stacked.batching.size = 4


def test_a_model_refused_at_load_keeps_stacked_rows(
    tmp_path: Path, llama_tokenizer_dir: Path, photos: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ModelCore takes ``unpackable``'s refusal when it loads the model (flash attention, as
    ``unpackable`` sees it here: the tiny build itself runs sdpa): every batch runs stacked rows,
    and ``info()`` says so. (The test above asks ``unpackable`` only; this one fails where the
    core ignores it.)"""

    def flash(model: Any, *, text: bool) -> str | None:
        seen = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"), generation_config=model.generation_config)
        return unpackable(seen, text=text)

    monkeypatch.setattr("halluprobe.backends.hf.core.unpackable", flash)
    caplog.set_level("INFO", logger="halluprobe.backends.hf.core")
    path = build_tiny_llava(tmp_path / "llava", llama_tokenizer_dir, seed=0, image_size=112)
    backend = HFBackend(str(path), batch_size=7, dtype="float32", device="cpu", prefix_cache=True)
    assert "4-D mask" in (backend.core.packing_refused or "") and not backend.core.packs_rows
    assert backend.info()["packed_rows"] is False and backend.info()["packed_text"] is False
    requests = yes_no_requests(backend, photos, PHOTOS, OBJECTS)
    for new_tokens in (0, 3):
        spy = _PassSpy(backend, monkeypatch)
        got = {r.key: r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=new_tokens, top_k=5)) for r in batch}
        assert spy.passes and set(spy.passes) == {"stacked"}, new_tokens
        assert len(got) == len(requests) and all(r.error is None for r in got.values())
    said = [r.getMessage() for r in caplog.records if "stay in rows of their own" in r.getMessage()]
    assert len(said) == 1 and "4-D mask" in said[0]  # the reason, once for the loaded model


def test_a_stop_string_begun_by_the_question_ends_it_where_generate_does(backends: dict[str, dict[str, HFBackend]], photos: Path) -> None:
    """generate's stop strings read the prompt too: one that starts in the question's last
    characters and ends in its first generated token stops it there. The packed loop reads each
    slot's suffix beside its tokens for that reason."""
    stacked, plain = backends["llava"]["stacked"], backends["llava"]["plain"]
    requests = yes_no_requests(stacked, photos, PHOTOS, OBJECTS)
    free = _answer(plain, requests, 6, packed=False, stops=())
    first = requests[0]
    stop = first.prompt[-2:] + (free[first.key].text or "")[:1]  # the prompt's "T:" and the first generated letter
    want = _answer(plain, requests, 6, packed=False, stops=(stop,))
    assert len(want[first.key].text or "") < len(free[first.key].text or "")  # generate stopped it early
    got = _answer(stacked, requests, 6, packed=True, stops=(stop,))
    assert_same_responses(want, got, texts=True)
