"""The decoding loop on the prefix cache (hf/decode_prefix.py) against the plain engine, and one
forward pass shared by the base and contrast rows against a pass per branch, on the tiny LLaVA
(fp32, real photos, questions of different lengths): every method's per-step base logits,
contrast logits and scores within 1e-4; neutral settings write generate's greedy text on both
engines; `run --open-ended --decode vcd` writes the same text with and without the prefix cache."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _engines import PrefixSpy  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.backends.hf.decode import Decoded  # noqa: E402
from halluprobe.backends.hf.decode_engine import DecodeEngine  # noqa: E402
from halluprobe.backends.hf.decode_prefix import PrefixDecodeEngine  # noqa: E402
from halluprobe.backends.hf.decode_rules import parse_decode_spec  # noqa: E402
from halluprobe.cli import app  # noqa: E402
from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow

QUESTIONS = ["Describe the image.", "What is on the table in this picture?", "Is there a cat?"]
STEPS = 5
# every method the loop runs (None: plain greedy decoding in the loop); the tiny LLaVA has 2 layers
SPECS: list[str | None] = [
    None,
    "vcd:alpha=1,beta=0.1",
    "icd:alpha=1,beta=0.1",
    "m3id:lambda=0.5",
    "pai:gamma=1.5,alpha=0.5,start=0,end=2",
    "dola:relative_top=0.1,repetition_penalty=1.5",
]
NEUTRAL = ["vcd:alpha=0", "icd:alpha=0", "m3id:lambda=0", "pai:gamma=1,alpha=0,start=0"]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> tuple[HFBackend, HFBackend, list[Request], Path]:
    photos, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    images = photos / "images" if (photos / "images").is_dir() else photos
    path = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    fast = HFBackend(str(path), dtype="float32", device="cpu")
    plain = HFBackend.on_core(fast.core, prefix_cache=False)
    names = sorted(p.name for p in images.iterdir())[:2]
    requests = []
    for name in names:
        for question in QUESTIONS:
            variants = {"instruction": fast.render_prompt(f"{ICD_INSTRUCTION} {question}", "llava"),
                        "no-image": fast.render_prompt(question, "llava", image=False)}  # fmt: skip
            requests.append(Request(split="s", question_id=len(requests), image_path=str(images / name),
                                    prompt=fast.render_prompt(question, "llava"), variants=variants))  # fmt: skip
    return fast, plain, requests, path


def _engine(backend: HFBackend, spec: str | None, *, joint: bool = True, steps: int = STEPS) -> DecodeEngine:
    config = GenerateConfig(max_new_tokens=steps, stop_strings=(), decode=spec)
    kind = PrefixDecodeEngine if backend.prefix_cache else DecodeEngine
    return kind(backend.core, backend.batching, config, joint=joint)


def _by_image(backend: HFBackend, requests: list[Request]) -> list[tuple[list[Request], list[Any]]]:
    groups: dict[str, list[Request]] = {}
    for r in requests:
        groups.setdefault(r.image_path, []).append(r)
    out = []
    for rows in groups.values():
        images, errors = backend.core.load_images(rows)
        assert not errors
        out.append((rows, images))
    return out


def _close(a: Any, b: Any, what: str) -> float:
    """The largest difference of two [batch, vocab] steps, -inf where both are -inf."""
    assert torch.equal(torch.isinf(a), torch.isinf(b)), what
    finite = ~torch.isinf(a)
    gap = float((a[finite] - b[finite]).abs().max())
    assert gap < TOLERANCE, (what, gap)
    return gap


def _same_steps(got: Decoded, want: Decoded, label: str) -> None:
    assert got.tokens == want.tokens, label
    assert len(got.scores) == len(want.scores) == STEPS, label
    for step in range(STEPS):
        _close(got.base_logits[step], want.base_logits[step], f"{label} base step {step}")
        _close(got.scores[step], want.scores[step], f"{label} scores step {step}")
        assert len(got.contrast_logits) == len(want.contrast_logits), label
        if want.contrast_logits:
            _close(got.contrast_logits[step], want.contrast_logits[step], f"{label} contrast step {step}")
    _close(got.first_logits.float(), want.first_logits.float(), f"{label} first step")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: (s or "greedy").split(":")[0])
def test_prefix_engine_equals_the_plain_engine_per_step(setup: Any, spec: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per image, every question in one batch (suffixes of different lengths, left-padded after
    the cached prefix): the prefix engine's steps are the plain engine's, joint passes or not."""
    fast, plain, requests, _ = setup
    spy = PrefixSpy(fast, monkeypatch)
    groups = _by_image(fast, requests)
    for rows, images in groups:
        want = _engine(plain, spec, joint=False).decode_batch(rows, images, keep_steps=True)
        for joint in (False, True):
            got = _engine(fast, spec, joint=joint).decode_batch(rows, images, keep_steps=True)
            _same_steps(got, want, f"{spec} joint={joint} {rows[0].image_path}")
    # the prefix path ran (no fallback): the base prefix per image and call; VCD's noised prefix too
    assert spy.prefixes == len(groups) * 2 * (2 if spec is not None and spec.startswith("vcd") else 1)


@pytest.mark.parametrize("spec", [s for s in SPECS if s is not None and not s.startswith("dola")], ids=lambda s: s.split(":")[0])
def test_one_pass_for_base_and_contrast_rows_equals_a_pass_per_branch(setup: Any, spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain engine's joined batch (VCD: the same ids with noised pixels; ICD: longer
    prompts, re-left-padded; M3ID/PAI: the no-image prompts, PAI amplifying the base rows only,
    joined here whatever their padding) against separate passes, every step within 1e-4, the
    same tokens."""
    from halluprobe.backends.hf import decode as hf_decode

    monkeypatch.setattr(hf_decode, "JOIN_PADDING", math.inf)
    joins = []
    real = hf_decode.joined_inputs

    def counted(*args: Any, **kwargs: Any) -> Any:
        joins.append(real(*args, **kwargs) is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_decode, "joined_inputs", counted)
    fast, plain, requests, _ = setup
    for rows, images in _by_image(fast, requests):
        separate = _engine(plain, spec, joint=False).decode_batch(rows, images, keep_steps=True)
        joined = _engine(plain, spec, joint=True).decode_batch(rows, images, keep_steps=True)
        _same_steps(joined, separate, f"{spec} plain joined")
    assert joins and all(joins)  # every joint call ran one batch of 2B rows


def test_joined_inputs_are_one_batch_where_shapes_allow(setup: Any) -> None:
    """VCD's prefix suffixes join (equal caches), ICD's do not (its prefix is longer); full
    prompts always join (re-left-padded)."""
    from halluprobe.backends.hf.decode import joined_inputs

    fast, _, requests, _ = setup
    rows, images = _by_image(fast, requests)[0]
    engine = _engine(fast, "vcd")
    assert isinstance(engine, PrefixDecodeEngine)
    prefixes = engine.prepare(rows, images[0])
    assert prefixes is not None and prefixes.extra.noised is not None
    from halluprobe.backends.hf.prefix import suffix_inputs

    core = fast.core
    suffixes = [prefixes.suffixes[prefixes.suffix_of[r.prompt]] for r in rows]
    base = suffix_inputs(core.model, prefixes.prefix, suffixes, 0, core.pad_id)
    noised = suffix_inputs(core.model, prefixes.extra.noised, suffixes, 0, core.pad_id)
    joined = joined_inputs(core.model, base, noised, core.pad_id)
    assert joined is not None and joined["input_ids"].shape[0] == 2 * len(rows)
    assert joined["past_key_values"].get_seq_length() == prefixes.prefix.input_ids.shape[1]
    icd = _engine(fast, "icd").prepare(rows, images[0])
    assert icd is not None and icd.extra.instruction is not None
    instruction = suffix_inputs(core.model, icd.extra.instruction, [icd.extra.instruction_suffixes[icd.suffix_of[r.prompt]] for r in rows], 0, core.pad_id)
    assert joined_inputs(core.model, base, instruction, core.pad_id) is None
    full = core.inputs.encode([r.prompt for r in rows], images)
    variants = core.inputs.encode([r.variants["no-image"] for r in rows], [])
    assert joined_inputs(core.model, full, variants, core.pad_id) is None  # the no-image rows: mostly padding
    together = joined_inputs(core.model, full, variants, core.pad_id, max_padding=math.inf)
    assert together is not None and together["pixel_values"].shape[0] == len(rows)
    instructions = core.inputs.encode([r.variants["instruction"] for r in rows], images)
    assert joined_inputs(core.model, full, instructions, core.pad_id) is not None
    assert together["input_ids"].shape == (2 * len(rows), full["input_ids"].shape[1])


def test_pai_leaves_rows_without_image_columns_exactly_as_an_unamplified_pass(setup: Any) -> None:
    """amplified_attention over a joined batch whose contrast rows have no image column: those
    rows' logits are exactly eager attention's without the hook; the base rows move."""
    from halluprobe.backends.hf.decode import joined_inputs
    from halluprobe.backends.hf.signals import PaiSetting, amplified_attention

    fast, _, requests, _ = setup
    core = fast.core
    rows, images = _by_image(fast, requests)[0]
    base = core.inputs.encode([r.prompt for r in rows], images)
    joined = joined_inputs(core.model, base, core.inputs.encode([r.variants["no-image"] for r in rows], []), core.pad_id, max_padding=math.inf)
    assert joined is not None
    columns = joined["input_ids"] == core.inputs.image_token_id
    columns[len(rows) :] = False
    positions = (joined["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    config = core.model.get_decoder().config
    with torch.inference_mode():
        with amplified_attention(core.model, PaiSetting(alpha=2.0, start=0, end=2), columns):
            amplified = core.model(**joined, position_ids=positions).logits[:, -1]
        before = config._attn_implementation
        config._attn_implementation = "eager"
        try:
            eager = core.model(**joined, position_ids=positions).logits[:, -1]
        finally:
            config._attn_implementation = before
    assert torch.equal(amplified[len(rows) :], eager[len(rows) :])
    assert float((amplified[: len(rows)] - eager[: len(rows)]).abs().max()) > 1e-3


@pytest.mark.parametrize("spec", NEUTRAL, ids=lambda s: s.split(":")[0])
def test_neutral_settings_write_generates_greedy_text_on_both_engines(setup: Any, spec: str) -> None:
    fast, plain, requests, _ = setup
    config = GenerateConfig(max_new_tokens=8, stop_strings=())
    texts = {}
    for name, backend in (("fast", fast), ("plain", plain)):
        texts[f"generate {name}"] = {r.key: r.text for batch in backend.answer(requests, config) for r in batch}
        texts[f"{spec} {name}"] = {r.key: r.text for batch in backend.answer(requests, config.model_copy(update={"decode": parse_decode_spec(spec)})) for r in batch}
    want = texts["generate plain"]
    assert all(t is not None for t in want.values()) and len(set(want.values())) > 1
    for label, got in texts.items():
        assert got == want, label


def _run(path: Path, bench: Path, images: Path, out: Path, *extra: str) -> Any:
    args = ["run", "--model", str(path), "--benchmark", str(bench), "--images", str(images), "--out", str(out), "--template", "llava",
            "--open-ended", "--max-new-tokens", "6", "--dtype", "float32", "--device", "cpu", *extra]  # fmt: skip
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize("extra", [("--decode", "vcd:alpha=1"), ("--decode", "pai:gamma=1.5,start=0", "--sample", "--seed", "3", "--temperature", "1.5")],
                         ids=["vcd", "pai-sampled"])  # fmt: skip
def test_run_writes_the_same_text_with_and_without_the_prefix_cache(
    setup: Any, tmp_path: Path, extra: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from halluprobe.backends.hf.core import ModelCore

    prefixes = []
    real = ModelCore.run_prefix

    def counted(self: ModelCore, inputs: Any) -> Any:
        prefixes.append(1)
        return real(self, inputs)

    monkeypatch.setattr(ModelCore, "run_prefix", counted)
    _, _, requests, path = setup
    images = Path(requests[0].image_path).parent
    bench = tmp_path / "open.jsonl"
    bench.write_text("".join(json.dumps({"question_id": i, "image": Path(r.image_path).name, "text": q, "label": "yes", "kind": "open"}) + "\n"
                             for i, (r, q) in enumerate(zip(requests, QUESTIONS * 2))))  # fmt: skip
    texts = {}
    for name, engine in (("prefix", ()), ("plain", ("--no-prefix-cache",))):
        result = _run(path, bench, images, tmp_path / name, *extra, "--batch-size", "2", *engine)
        assert result.exit_code == 0, result.output
        samples = RunDir(tmp_path / name).read_samples()
        assert all(s.error is None for s in samples)
        texts[name] = {s.question_id: s.text for s in samples}
        if name == "prefix":  # the prefix path ran: the base prefix per image (and VCD's noised one)
            assert len(prefixes) == 2 * (2 if "vcd:alpha=1" in extra else 1)
        else:
            assert len(prefixes) == 2 * (2 if "vcd:alpha=1" in extra else 1)  # none more on the plain engine
    assert texts["prefix"] == texts["plain"] and len(texts["plain"]) == len(requests)
    # the engine is not part of the fingerprint: a plain run resumes on the prefix engine
    result = _run(path, bench, images, tmp_path / "plain", *extra, "--batch-size", "2", "--resume")
    assert result.exit_code == 0, result.output


def test_a_failing_batch_is_asked_again_row_by_row(setup: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the prefix engine, a batch that fails is decoded row by row: only the row that fails
    alone is an error sample (no plain-decoded text), the others keep the method's text."""
    fast, _, requests, _ = setup
    engine = _engine(fast, "vcd:alpha=1", steps=4)
    want = {r.key: r.text for batch in engine.answer(requests) for r in batch}
    real = PrefixDecodeEngine.decode_prefixed

    def failing(self: PrefixDecodeEngine, rows: Any, *, keep_steps: bool = False) -> Decoded:
        if len(rows) > 1:
            raise RuntimeError("batch failed")
        if rows[0][1].question_id == 1:
            raise RuntimeError("branch failed")
        return real(self, rows, keep_steps=keep_steps)

    monkeypatch.setattr(PrefixDecodeEngine, "decode_prefixed", failing)
    got = {r.key: r for batch in _engine(fast, "vcd:alpha=1", steps=4).answer(requests) for r in batch}
    assert got[requests[1].key].error == "RuntimeError: branch failed" and got[requests[1].key].text is None
    assert {k: r.text for k, r in got.items() if k != requests[1].key} == {k: v for k, v in want.items() if k != requests[1].key}


def test_qwen2_vl_decodes_with_its_multimodal_rotary_positions(tmp_path: Path) -> None:
    """Qwen2-VL (3-D rotary positions): the plain loop's first step is the model's own forward
    (positions from its get_rope_index, padding ignored), and the prefix engine's steps are the
    plain engine's. Before the plain loop took get_rope_index's positions, its steps were off by
    up to 1.7e-2 from the prefix engine's on this build."""
    from _families import build_family

    from halluprobe.tiny import demo_photos

    photos, _ = demo_photos(tmp_path / "photos")
    path = build_family("qwen2_vl", tmp_path / "qwen2_vl")
    fast = HFBackend(str(path), dtype="float32", device="cpu")
    plain = HFBackend.on_core(fast.core, prefix_cache=False)
    image = str(photos / min(p.name for p in photos.iterdir() if p.suffix == ".jpg"))
    rows = [Request(split="s", question_id=i, image_path=image, prompt=fast.render_prompt(q, None),
                    variants={"no-image": fast.render_prompt(q, None, image=False)}) for i, q in enumerate(QUESTIONS)]  # fmt: skip
    images, errors = fast.core.load_images(rows)
    assert not errors
    for spec in (None, "vcd:alpha=1,beta=0.1", "m3id:lambda=0.5"):
        want = _engine(plain, spec, joint=False).decode_batch(rows, images, keep_steps=True)
        _same_steps(_engine(fast, spec).decode_batch(rows, images, keep_steps=True), want, f"qwen2_vl {spec}")
    inputs = fast.core.inputs.encode([r.prompt for r in rows], images)
    assert len({int(m.sum()) for m in inputs["attention_mask"]}) > 1  # left-padded rows
    with torch.inference_mode():
        own = fast.core.model(**inputs).logits[:, -1]
    _close(want.first_logits.float(), own.float(), "qwen2_vl: the loop's first step against the model's own forward")


def test_images_asked_one_question_are_decoded_together_from_full_prompts(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One question per image: no prefix pass (nothing to share; a batch per image would lose
    batching across images), the plain engine's text."""
    fast, plain, requests, _ = setup
    one_each = [requests[0], requests[len(QUESTIONS)]]
    assert one_each[0].image_path != one_each[1].image_path
    spy = PrefixSpy(fast, monkeypatch)
    got = {r.key: r.text for batch in _engine(fast, "vcd:alpha=1").answer(one_each) for r in batch}
    assert spy.prefixes == 0
    assert got == {r.key: r.text for batch in _engine(plain, "vcd:alpha=1").answer(one_each) for r in batch}


def test_instructblip_decodes_through_its_language_model_after_the_first_step(tmp_path: Path) -> None:
    """InstructBLIP (plain engine: its Q-Former reads the question): the first step runs the whole
    model, later steps its language model on the cache the first one left; every step equals the
    full sequence recomputed without a cache, and neutral VCD writes generate's text. (The loop
    failed on this family before: its output nests the language model's cache.)"""
    from _families import build_family

    from halluprobe.tiny import demo_photos

    photos, _ = demo_photos(tmp_path / "photos")
    backend = HFBackend(str(build_family("instructblip", tmp_path / "instructblip")), dtype="float32", device="cpu")
    assert not backend.prefix_cache
    names = sorted(p.name for p in photos.iterdir() if p.suffix == ".jpg")[:2]
    rows = [Request(split="s", question_id=i, image_path=str(photos / n), prompt=backend.render_prompt(q, None))
            for i, (n, q) in enumerate(zip(names, QUESTIONS))]  # fmt: skip
    images, errors = backend.core.load_images(rows)
    assert not errors
    engine = _engine(backend, None, steps=4)
    engine.end_ids = []  # every step, whatever the random model emits
    decoded = engine.decode_batch(rows, images, keep_steps=True)
    model = backend.core.model
    for row, request in enumerate(rows):
        one = backend.core.inputs.encode([request.prompt], [images[row]])
        for step in range(4):
            ids = torch.cat([one["input_ids"], torch.tensor([decoded.tokens[row][:step]], dtype=torch.long)], dim=-1)
            with torch.inference_mode():
                want = model(**{**one, "input_ids": ids, "attention_mask": torch.ones_like(ids)}).logits[0, -1]
            assert float((want - decoded.base_logits[step][row]).abs().max()) < TOLERANCE, (row, step)
    config = GenerateConfig(max_new_tokens=6, stop_strings=())
    generated = {r.key: r.text for batch in backend.answer(rows, config) for r in batch}
    assert generated == {r.key: r.text for batch in backend.answer(rows, config.model_copy(update={"decode": parse_decode_spec("vcd:alpha=0")})) for r in batch}


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: (s or "greedy").split(":")[0])
def test_rows_of_several_images_in_one_batch_equal_the_plain_engine_per_step(setup: Any, spec: str | None) -> None:
    """Issue 33: both images' questions in one batch, each row after its own image's stacked
    caches (VCD's noised ones, ICD's instruction ones): every step equals the plain engine's on
    the same rows' full prompts."""
    fast, plain, requests, _ = setup
    engine = _engine(fast, spec)
    rows = []
    for group, images in _by_image(fast, requests):
        prefixes = engine.prepare(group, images[0])
        assert prefixes is not None
        rows.extend((prefixes, r) for r in group)
    all_images, _ = fast.core.load_images(requests)
    want = _engine(plain, spec, joint=False).decode_full(requests, all_images, keep_steps=True)
    for joint in (False, True):
        got = _engine(fast, spec, joint=joint).decode_prefixed(rows, keep_steps=True)
        _same_steps(got, want, f"{spec} joint={joint} across images")


@pytest.mark.parametrize("spec", [None, "vcd:alpha=1,beta=0.1", "icd:alpha=1,beta=0.1", "dola:relative_top=0.1,repetition_penalty=1.5", "sample"])
def test_batches_across_images_write_the_plain_engines_text_at_every_size(setup: Any, spec: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 2 and 4 rows split an image's three questions; 64 holds every row of both
    images. Greedy and seeded sampling write the plain engine's text at each size."""
    fast, plain, requests, _ = setup
    sample = spec == "sample"
    config = GenerateConfig(max_new_tokens=STEPS, stop_strings=(), decode=None if sample else spec, sample=sample, seed=7 if sample else None, temperature=1.0 if sample else None)
    want = {r.key: r.text for batch in DecodeEngine(plain.core, plain.batching, config).answer(requests) for r in batch}
    assert len(want) == len(requests) and all(t is not None for t in want.values())
    for size in (2, 4, 64):
        monkeypatch.setattr(fast.batching, "size", size)
        batches = [batch for batch in PrefixDecodeEngine(fast.core, fast.batching, config).answer(requests)]
        assert [len(b) for b in batches] == [min(size, len(requests) - i) for i in range(0, len(requests), size)]
        assert {r.key: r.text for batch in batches for r in batch} == want, size


@pytest.mark.parametrize("spec", [None, "vcd:alpha=1,beta=0.1", "m3id:lambda=0.5"], ids=lambda s: (s or "greedy").split(":")[0])
def test_appending_in_place_gives_the_steps_of_copying_caches(setup: Any, spec: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: after the first step the loop's caches append into spare room (make_room)
    instead of concatenating: the same tokens, and every step's logits, as a copying cache."""
    import halluprobe.backends.hf.decode as decode
    from halluprobe.backends.hf.prefix import make_room

    fast, plain, requests, _ = setup
    images, _ = fast.core.load_images(requests)
    made: list[bool] = []

    def spied(cache: Any, room: int) -> bool:
        made.append(make_room(cache, room))
        return made[-1]

    monkeypatch.setattr(decode, "make_room", spied)
    appended = _engine(plain, spec).decode_full(requests, images, keep_steps=True)
    assert made and all(made)
    monkeypatch.setattr(decode, "make_room", lambda cache, room: False)
    copied = _engine(plain, spec).decode_full(requests, images, keep_steps=True)
    assert appended.tokens == copied.tokens
    for a, b in zip(appended.base_logits, copied.base_logits):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("spec", [None, "vcd:alpha=1,beta=0.1", "icd:alpha=1,beta=0.1"], ids=lambda s: (s or "greedy").split(":")[0])
def test_a_batchs_new_images_run_their_prefixes_in_one_pass(setup: Any, spec: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: both images enter the one batch of 64 rows; their base prefixes (and VCD's noised
    prefixes) run as one batched pass each, and the texts are the plain engine's."""
    fast, plain, requests, _ = setup
    config = GenerateConfig(max_new_tokens=STEPS, stop_strings=(), decode=spec)
    want = {r.key: r.text for batch in DecodeEngine(plain.core, plain.batching, config).answer(requests) for r in batch}
    spy = PrefixSpy(fast, monkeypatch)
    monkeypatch.setattr(fast.batching, "size", 64)
    got = {r.key: r.text for batch in PrefixDecodeEngine(fast.core, fast.batching, config).answer(requests) for r in batch}
    assert got == want
    images = len({r.image_path for r in requests})
    kinds = 2 if spec is not None and spec.startswith("vcd") else 1
    assert images == 2 and spy.batched == images * kinds and spy.prefixes >= images * kinds
