"""The decoding loop on packed rows (issue 33): a prefix-cache batch of the loop runs one row per
image, its questions in slots (hf/packed.py ``PackedBranch``), for greedy decoding, seeded
sampling, VCD, ICD, M3ID, PAI and DoLa. On tiny real LLaVA and Qwen2-VL builds in fp32, every step's
base logits, contrast logits and scores equal the plain engine's on full prompts within 1e-4 and
the tokens are the same, with the base and contrast rows in one pass or a pass each; the stacked
rows (one row per question) give the same steps; PAI amplifies each question's last query in
its slot; a batch whose slots would be mostly empty keeps stacked rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _engines import PackedSpy

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.backends.hf import decode as hf_decode  # noqa: E402
from halluprobe.backends.hf.decode import Decoded, contrast_decode  # noqa: E402
from halluprobe.backends.hf.decode_engine import DecodeEngine  # noqa: E402
from halluprobe.backends.hf.decode_prefix import PrefixDecodeEngine  # noqa: E402
from halluprobe.backends.hf.decode_rules import GreedyRule  # noqa: E402
from halluprobe.backends.hf.packed import PackedBranch, PackedRows  # noqa: E402
from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402
from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl  # noqa: E402

pytestmark = pytest.mark.slow

QUESTIONS = ["Describe the image.", "What is on the table in this picture?", "Is there a cat?"]
STEPS = 5
TOLERANCE = 1e-4
PACKABLE: list[str | None] = [
    None,
    "vcd:alpha=1,beta=0.1",
    "icd:alpha=1,beta=0.1",
    "m3id:lambda=0.5",
    "dola:relative_top=0.1,repetition_penalty=1.5",
    "pai:gamma=1.5,alpha=0.5,start=0,end=2",
]


def _requests(backend: HFBackend, images: list[str], template: str | None) -> list[Request]:
    out = []
    for image in images:
        for question in QUESTIONS:
            variants = {"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {question}", template),
                        "no-image": backend.render_prompt(question, template, image=False)}  # fmt: skip
            out.append(Request(split="s", question_id=len(out), image_path=image, prompt=backend.render_prompt(question, template), variants=variants))
    return out


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    return [str(folder / name) for name in ("astronaut.jpg", "coffee.jpg")]


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path, photos: list[str]) -> tuple[HFBackend, HFBackend, list[Request]]:
    path = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    fast = HFBackend(str(path), dtype="float32", device="cpu")
    assert fast.core.packing_refused is None and fast.core.packs_rows
    return fast, HFBackend.on_core(fast.core, prefix_cache=False), _requests(fast, photos, "llava")


def _engine(backend: HFBackend, spec: str | None, *, joint: bool = True) -> DecodeEngine:
    config = GenerateConfig(max_new_tokens=STEPS, stop_strings=(), decode=spec)
    kind = PrefixDecodeEngine if backend.prefix_cache else DecodeEngine
    return kind(backend.core, backend.batching, config, joint=joint)


def _close(a: Any, b: Any, what: str) -> None:
    assert torch.equal(torch.isinf(a), torch.isinf(b)), what
    finite = ~torch.isinf(a)
    gap = float((a[finite] - b[finite]).abs().max())
    assert gap < TOLERANCE, (what, gap)


def _same_steps(got: Decoded, want: Decoded, label: str) -> None:
    assert got.tokens == want.tokens, label
    assert len(got.base_logits) == len(want.base_logits) == STEPS, label
    assert len(got.contrast_logits) == len(want.contrast_logits), label
    for step in range(STEPS):
        _close(got.base_logits[step], want.base_logits[step], f"{label} base step {step}")
        _close(got.scores[step], want.scores[step], f"{label} scores step {step}")
        if want.contrast_logits:
            _close(got.contrast_logits[step], want.contrast_logits[step], f"{label} contrast step {step}")
    _close(got.first_logits.float(), want.first_logits.float(), f"{label} first step")


def _across_images(backend: HFBackend, engine: DecodeEngine, requests: list[Request]) -> list[tuple[Any, Request]]:
    """Every row of both images, each after its own image's prefixes, in one batch."""
    rows = []
    for image in dict.fromkeys(r.image_path for r in requests):
        group = [r for r in requests if r.image_path == image]
        loaded, errors = backend.core.load_images(group[:1])
        assert not errors
        prefixes = engine.prepare(group, loaded[0])  # type: ignore[attr-defined]
        assert prefixes is not None
        rows.extend((prefixes, r) for r in group)
    return rows


@pytest.mark.parametrize("spec", PACKABLE, ids=lambda s: (s or "greedy").split(":")[0])
def test_packed_rows_take_the_plain_engines_steps(llava: Any, spec: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both images' questions in one batch: packed rows (one row per image; joined, the base and
    contrast images' rows in one pass) and stacked rows each give the plain engine's steps."""
    fast, plain, requests = llava
    images, _ = fast.core.load_images(requests)
    want = _engine(plain, spec, joint=False).decode_full(requests, images, keep_steps=True)
    built = PackedSpy(monkeypatch)
    contrast = spec is not None and spec.startswith(("vcd", "icd"))  # a contrast branch on the prefix cache
    for joint in (False, True):
        engine = _engine(fast, spec, joint=joint)
        rows = _across_images(fast, engine, requests)
        built.rows.clear()
        _same_steps(engine.decode_prefixed(rows, keep_steps=True), want, f"{spec} packed joint={joint}")
        n = len(requests)
        assert built.rows == ([2 * n] if joint and contrast else [n, n] if contrast else [n]), (joint, built.rows)
        monkeypatch.setattr(fast.core, "packs_rows", False)
        built.rows.clear()
        _same_steps(engine.decode_prefixed(rows, keep_steps=True), want, f"{spec} stacked joint={joint}")
        assert built.rows == []
        monkeypatch.setattr(fast.core, "packs_rows", True)


def test_seeded_sampling_on_packed_rows_writes_the_plain_engines_text_at_every_size(llava: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each question draws from its own generator: batches of 2 and 4 rows (an image's questions
    split), and 64 (both images in one packed batch), write the plain engine's texts."""
    fast, plain, requests = llava
    config = GenerateConfig(max_new_tokens=STEPS, stop_strings=(), sample=True, seed=11, temperature=1.0, decode="vcd:alpha=1,beta=0.1")
    want = {r.key: r.text for batch in DecodeEngine(plain.core, plain.batching, config).answer(requests) for r in batch}
    built = PackedSpy(monkeypatch)
    for size in (2, 4, 64):
        monkeypatch.setattr(fast.batching, "size", size)
        got = {r.key: r.text for batch in PrefixDecodeEngine(fast.core, fast.batching, config).answer(requests) for r in batch}
        assert got == want, size
    assert max(built.rows) == 2 * len(requests)  # the batch of 64: both images' base and noised rows, one pass


def test_pai_amplifies_each_questions_last_query_of_a_packed_row(llava: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """PAI amplifies a row's next-token query; a packed row holds a question's last query in each
    slot. Amplified at those columns only, its steps are the plain engine's (the test above); at
    the row's last column only, as for rows of their own, they are not."""
    from halluprobe.backends.hf import signals as hf_signals

    fast, plain, requests = llava
    spec = next(s for s in PACKABLE if s is not None and s.startswith("pai"))
    images, _ = fast.core.load_images(requests)
    want = _engine(plain, spec, joint=False).decode_full(requests, images, keep_steps=True)
    engine = _engine(fast, spec)
    rows = _across_images(fast, engine, requests)
    real = hf_signals.amplified_attention
    monkeypatch.setattr(hf_decode, "amplified_attention", lambda model, setting, columns, queries=None: real(model, setting, columns))
    got = engine.decode_prefixed(rows, keep_steps=True)
    gap = max(float((a - b).abs().max()) for a, b in zip(got.base_logits, want.base_logits))
    assert gap > 1e-3, gap


def test_a_batch_of_mostly_empty_slots_keeps_stacked_rows(llava: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image's three questions beside four images asked one each (here copies of the second
    image's prefixes, each its own packed row): 15 slots for 7 questions, so the loop keeps
    stacked rows, with the plain engine's steps; the first four rows (3 + 1) pack."""
    from dataclasses import replace

    fast, plain, requests = llava
    engine = _engine(fast, None)
    rows = _across_images(fast, engine, requests)
    first, second = rows[:3], rows[3]
    skewed = [*first, *((replace(second[0]), second[1]) for _ in range(4))]
    asked = [r for _, r in skewed]
    images, _ = fast.core.load_images(asked)
    want = _engine(plain, None, joint=False).decode_full(asked, images, keep_steps=True)
    built = PackedSpy(monkeypatch)
    _same_steps(engine.decode_prefixed(skewed, keep_steps=True), want, "skewed")
    assert built.rows == []
    engine.decode_prefixed(skewed[:4])
    assert built.rows == [4]


def test_qwen2_vl_packed_rows_take_the_plain_engines_steps(tmp_path: Path, qwen2_tokenizer_dir: Path, photos: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen2-VL's 3-D rotary positions in slots: greedy, VCD (joined) and M3ID steps equal the
    plain engine's on full prompts, across both images."""
    path = build_tiny_qwen2vl(tmp_path / "qwen2vl", qwen2_tokenizer_dir, seed=0)
    fast = HFBackend(str(path), dtype="float32", device="cpu")
    assert fast.core.packs_rows
    plain = HFBackend.on_core(fast.core, prefix_cache=False)
    requests = _requests(fast, photos, None)
    images, _ = fast.core.load_images(requests)
    built = PackedSpy(monkeypatch)
    for spec in (None, "vcd:alpha=1,beta=0.1", "m3id:lambda=0.5"):
        want = _engine(plain, spec, joint=False).decode_full(requests, images, keep_steps=True)
        engine = _engine(fast, spec)
        _same_steps(engine.decode_prefixed(_across_images(fast, engine, requests), keep_steps=True), want, f"qwen2_vl {spec}")
    assert built.rows == [len(requests), 2 * len(requests), len(requests)]


def test_a_packed_branch_alone_decodes_greedily_as_rows_of_their_own(llava: Any) -> None:
    """contrast_decode on PackedRows with no contrast: the greedy rule's tokens equal stacked
    rows' (the loop's row order is the packed rows' order)."""
    fast, _, requests = llava
    engine = _engine(fast, None)
    rows = _across_images(fast, engine, requests)
    prefixes = [p.prefix for p, _ in rows]
    suffixes = [p.suffixes[p.suffix_of[r.prompt]] for p, r in rows]
    from halluprobe.backends.hf.prefix import rows_inputs

    common = {"max_new_tokens": STEPS, "end_ids": [], "pad_id": fast.core.pad_id}
    packed = contrast_decode(fast.core.model, PackedRows.of(prefixes, suffixes), None, GreedyRule(), **common)
    stacked = contrast_decode(fast.core.model, rows_inputs(fast.core.model, prefixes, suffixes, 0, fast.core.pad_id), None, GreedyRule(), **common)
    assert packed.tokens == stacked.tokens and all(len(t) == STEPS for t in packed.tokens)


def test_out_of_memory_in_a_packed_batch_halves_it_and_loses_nothing(llava: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A packed batch of the loop that runs out of memory is halved and taken again: every
    question answered once, with the texts of an unhurried run."""
    fast, _, requests = llava
    config = GenerateConfig(max_new_tokens=STEPS, stop_strings=(), decode="vcd:alpha=1,beta=0.1")
    monkeypatch.setattr(fast.batching, "size", 8)
    want = {r.key: r.text for batch in PrefixDecodeEngine(fast.core, fast.batching, config).answer(requests) for r in batch}
    real = PackedBranch.first_grid
    sizes: list[int] = []

    def tight(self: PackedBranch, *args: Any, **kwargs: Any) -> Any:
        sizes.append(self.rows)
        if self.rows > 6:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PackedBranch, "first_grid", tight)
    answered = [r for batch in PrefixDecodeEngine(fast.core, fast.batching, config).answer(requests) for r in batch]
    assert sizes[:2] == [12, 8] and fast.batching.size == 2  # 6 base + 6 noised rows joined; 4 + 4; then 2 + 2
    assert sorted(r.key for r in answered) == sorted(want) and {r.key: r.text for r in answered} == want


def test_a_packed_branchs_cache_takes_the_loops_steps_in_place(llava: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stacked cache of a packed branch is made with room for the slots' suffixes and every
    step's new column: each layer keeps the buffer it started with (no copy of the cache a step)."""
    from halluprobe.backends.hf.prefix import _appending_layer

    fast, _, requests = llava
    branches: list[tuple[PackedBranch, list[Any]]] = []
    real = PackedBranch.first_grid

    def kept(self: PackedBranch, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        branches.append((self, [layer.key_room for layer in self.cache.layers]))
        return out

    monkeypatch.setattr(PackedBranch, "first_grid", kept)
    config = GenerateConfig(max_new_tokens=STEPS, stop_strings=(), decode=None)
    monkeypatch.setattr(fast.batching, "size", 64)
    engine = PrefixDecodeEngine(fast.core, fast.batching, config)
    engine.end_ids = []  # every question decodes all its steps
    assert len([r for batch in engine.answer(requests) for r in batch]) == len(requests)
    assert len(branches) == 1
    branch, buffers = branches[0]
    assert branch.fed == STEPS - 1
    for layer, buffer in zip(branch.cache.layers, buffers, strict=True):
        assert type(layer) is _appending_layer() and layer.key_room is buffer
        assert layer.keys.shape[-2] == buffer.shape[-2]  # the room was exactly what the steps took


@pytest.mark.parametrize(
    "spec,sample",
    [(None, False), ("vcd:alpha=1,beta=0.1", False), ("icd:alpha=1,beta=0.1", False), ("dola:relative_top=0.1,repetition_penalty=1.5", False),
     ("pai:gamma=1.5,alpha=0.5,start=0,end=2", False), (None, True)],
    ids=["greedy", "vcd", "icd", "dola", "pai", "sampling"],
)
def test_uneven_packed_rows_keep_the_loops_row_order(llava: Any, spec: str | None, sample: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last question of one image (its other rows in an earlier batch), then every question
    of the next with one asked twice: the short image first, so its row's empty slots sit
    between the questions (row order is the asked slots', not the grid's flattened order). Each
    row takes the plain engine's steps: its own tokens fed back, its own logits, early layers,
    seen tokens and generator."""
    fast, plain, requests = llava
    first, second = requests[:3], requests[3:]
    again = second[0].model_copy(update={"question_id": len(requests)})
    batch = [first[-1], *second, again]
    config = GenerateConfig(max_new_tokens=STEPS, stop_strings=(), decode=spec, sample=sample, seed=5 if sample else None)
    images, _ = fast.core.load_images(batch)
    want = DecodeEngine(plain.core, plain.batching, config, joint=False).decode_full(batch, images, keep_steps=True)
    engine = PrefixDecodeEngine(fast.core, fast.batching, config)
    rows = [(engine.prepare(first, images[0]), first[-1])]
    prefixes = engine.prepare([*second, again], images[1])
    rows += [(prefixes, r) for r in [*second, again]]
    built = PackedSpy(monkeypatch)
    _same_steps(engine.decode_prefixed(rows, keep_steps=True), want, f"{spec} sample={sample} uneven")
    contrast = spec is not None and spec.startswith(("vcd", "icd"))
    assert built.rows == [2 * len(batch) if contrast else len(batch)]
    assert built.images == [4 if contrast else 2]  # one packed row per image and branch


def test_a_batch_stops_with_its_last_row_and_takes_no_more_steps_than_the_plain_engines(llava: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33's "fewer wasted steps", counted: with end tokens that stop the rows at different
    steps, every batch of the loop (packed rows across images, or the plain engine's full
    prompts) runs exactly as many steps as its longest row needs, and the packed batches take no
    more steps in all than the plain engine's at the same batch size, with the same texts."""
    from halluprobe.backends.hf.decode import _Branch

    fast, plain, requests = llava
    steps = 8
    config = GenerateConfig(max_new_tokens=steps, stop_strings=())
    images, _ = fast.core.load_images(requests)
    free = DecodeEngine(plain.core, plain.batching, config)
    free.end_ids = []
    tokens = free.decode_full(requests, images).tokens  # every row's tokens, nothing ending them
    ends = [tokens[0][1], tokens[4][4]]
    stop = {r.key: next((k + 1 for k, t in enumerate(row) if t in ends), steps) for r, row in zip(requests, tokens)}
    assert len(set(stop.values())) > 2, stop  # rows stop at different steps

    calls: list[int] = []
    for kind in (_Branch, PackedBranch):
        real_step = kind.step

        def counted(self: Any, *args: Any, _real: Any = real_step, **kwargs: Any) -> Any:
            calls.append(1)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(kind, "step", counted)
    batches: list[tuple[list[Any], int]] = []
    real_loop = DecodeEngine.loop

    def loop(self: DecodeEngine, rows: Any, *args: Any, **kwargs: Any) -> Any:
        calls.clear()
        out = real_loop(self, rows, *args, **kwargs)
        batches.append(([r.key for r in rows], len(calls)))
        return out

    monkeypatch.setattr(DecodeEngine, "loop", loop)

    def run(backend: HFBackend, size: int) -> tuple[dict[Any, str | None], list[tuple[list[Any], int]]]:
        monkeypatch.setattr(backend.batching, "size", size)
        batches.clear()
        kind = PrefixDecodeEngine if backend.prefix_cache else DecodeEngine
        engine = kind(backend.core, backend.batching, config)
        engine.end_ids = ends
        texts = {r.key: r.text for batch in engine.answer(requests) for r in batch}
        return texts, list(batches)

    built = PackedSpy(monkeypatch)
    for size in (2, 4, 64):
        want, plain_batches = run(plain, size)
        opened = len(built.rows)
        got, packed_batches = run(fast, size)
        assert len(built.rows) - opened == len(packed_batches), size  # every batch of the prefix engine packed
        assert got == want, size
        for keys, taken in plain_batches + packed_batches:
            assert taken == max(stop[k] for k in keys), (size, keys, taken)
        assert sum(t for _, t in packed_batches) <= sum(t for _, t in plain_batches), (size, packed_batches, plain_batches)
