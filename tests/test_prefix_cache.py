"""The prefix-cache engine against the plain engine, on tiny real architectures.

Tiny LLaVA (CLIP + LLaMA, LLaMA-2 vocabulary) and tiny Qwen2-VL (Qwen2 vocabulary, 3-D
multimodal rotary positions), random weights, real photos. The plain engine
(``prefix_cache=False``: every prompt in full, left-padded batches) is the reference: the fast
engine must give the same first-token log-probabilities within 1e-4 (fp32), the same top
tokens, the same greedy continuations and so the same decisions of every readout.

The questions differ in token length (so suffix batches are padded: positions and masks
matter), repeat across two splits (the engine computes an identical prompt once) and span
three images (one prefix cache per image).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _engines import PrefixSpy, decisions
from _resume import assert_same_as_reference, kill_then_resume, reference_samples  # noqa: E402

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.backends.hf.prefix import suffix_inputs  # noqa: E402
from halluprobe.records import GenerateConfig, Question, Request, Response  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.runner import run_questions  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402
from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

PHOTOS = ["astronaut.jpg", "coffee.jpg", "chelsea.jpg"]  # three sizes: Qwen2-VL grids differ
# token lengths differ ("a cup" vs "a dining table ... picture"); the split repeats two texts
QUESTIONS = {
    "random": ["Is there a cup in the image?", "Is there a dining table in this picture?", "Is there a dog?"],
    "popular": ["Is there a cup in the image?", "Is there a traffic light in the image?", "Is there a dog?"],
}
MAX_NEW = 6


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images_dir, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    return images_dir


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> Path:
    # 112 px: 64 image tokens keep the test fast; the split logic does not depend on the count
    return build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory, qwen2_tokenizer_dir: Path) -> Path:
    return build_tiny_qwen2vl(tmp_path_factory.mktemp("qwen2vl"), qwen2_tokenizer_dir, seed=0)


@pytest.fixture(scope="module")
def backends(llava: Path, qwen: Path) -> dict[str, dict[bool, HFBackend]]:
    """One fast and one plain backend per model (building a Qwen2 tokenizer costs ~1 s)."""
    return {
        name: {
            pc: HFBackend(str(path), batch_size=4, dtype="float32", device="cpu", prefix_cache=pc)
            for pc in (True, False)
        }
        for name, path in (("llava", llava), ("qwen2vl", qwen))
    }


def _questions(photos: Path) -> list[Question]:
    out = []
    for split, texts in QUESTIONS.items():
        qid = 0
        for image in PHOTOS:
            for i, text in enumerate(texts):
                qid += 1
                out.append(
                    Question(split=split, question_id=qid, image=image, text=text, label="yes" if i % 2 else "no")
                )
    return out


def _requests(backend: HFBackend, photos: Path, template: str | None) -> list[Request]:
    return [
        Request(
            split=q.split,
            question_id=q.question_id,
            image_path=str(photos / q.image),
            prompt=backend.render_prompt(q.text, template),
        )
        for q in _questions(photos)
    ]


def _answer(
    backend: HFBackend, requests: list[Request], max_new_tokens: int = MAX_NEW
) -> dict[tuple[str, int], Response]:
    out = {r.key: r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=max_new_tokens, top_k=5)) for r in batch}
    assert len(out) == len(requests) and not any(r.error for r in out.values())
    return out


def _assert_same(a: dict[Any, Response], b: dict[Any, Response], *, texts: bool = True) -> None:
    assert a.keys() == b.keys()
    for key, ra in a.items():
        rb = b[key]
        assert ra.candidates.keys() == rb.candidates.keys()
        for token_id, value in ra.candidates.items():
            assert rb.candidates[token_id] == pytest.approx(value, abs=1e-4), (key, token_id)
        assert [t.id for t in ra.first_token[:2]] == [t.id for t in rb.first_token[:2]], key
        for ta, tb in zip(ra.first_token, rb.first_token):
            assert tb.logprob == pytest.approx(ta.logprob, abs=1e-4)
        if texts:
            assert ra.text == rb.text, key


@pytest.mark.parametrize(("model", "template"), [("llava", "llava"), ("llava", None), ("qwen2vl", None)])
def test_fast_path_equals_plain_path(
    backends: dict[str, dict[bool, HFBackend]],
    photos: Path,
    model: str,
    template: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast, plain = backends[model][True], backends[model][False]
    spy = PrefixSpy(fast, monkeypatch)
    requests = _requests(fast, photos, template)
    got, want = _answer(fast, requests), _answer(plain, requests)
    assert spy.prefixes == len(PHOTOS)  # one prefix pass per image, across both splits
    _assert_same(want, got)
    assert decisions(fast, requests, got) == decisions(plain, requests, want)
    if model == "llava":
        # real multi-token continuations, not empty strings that compare equal trivially (the
        # tiny Qwen2-VL, with tied embeddings, repeats its last prompt token "\n" and stops:
        # test_every_generated_step_matches covers its later steps)
        assert sum(len(r.text or "") > 3 for r in got.values()) >= len(got) // 2
    # first-token readouts only: a forward pass instead of generate, same numbers
    _assert_same(_answer(plain, requests, 0), _answer(fast, requests, 0), texts=False)


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
def test_every_generated_step_matches(backends: dict[str, dict[bool, HFBackend]], photos: Path, model: str) -> None:
    """The raw logits of every greedy step, not only the first: the continuation's positions
    (3-D for Qwen2-VL) and masks after the cached prefix are those of the full prompt."""
    from PIL import Image

    fast = backends[model][True]
    prompts = [fast.render_prompt(t, None) for t in QUESTIONS["random"] + QUESTIONS["popular"][1:2]]
    with Image.open(photos / "chelsea.jpg") as im:
        image = im.convert("RGB")
    steps = 5

    def generate(inputs: dict[str, Any]) -> Any:
        with torch.inference_mode():
            return fast.core.model.generate(
                **inputs,
                max_new_tokens=steps,
                min_new_tokens=steps,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=fast.core.tokenizer.pad_token_id,
            )

    core = fast.core
    plain = generate(core.inputs.encode(prompts, [image] * len(prompts)))
    shared = core.inputs.encode_shared(prompts, image)
    assert shared is not None
    cached = generate(suffix_inputs(core.model, core.run_prefix(shared.prefix), shared.suffixes, steps, core.pad_id))
    assert len(plain.logits) == len(cached.logits) == steps
    for want, got in zip(plain.logits, cached.logits):
        assert torch.allclose(torch.log_softmax(want, -1), torch.log_softmax(got, -1), atol=1e-4)
    assert torch.equal(plain.sequences[:, -steps:], cached.sequences[:, -steps:])


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
def test_batch_size_does_not_change_the_fast_path(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lmms-eval #236: scores moved with the batch size. Here 1, 3 and 8 give the same numbers."""
    fast = backends[model][True]
    requests = _requests(fast, photos, None)
    runs = {}
    for size in (1, 3, 8):
        monkeypatch.setattr(fast.batching, "size", size)
        runs[size] = _answer(fast, requests)
    by_size = {size: decisions(fast, requests, r) for size, r in runs.items()}
    assert by_size[1] == by_size[3] == by_size[8]
    _assert_same(runs[1], runs[3])
    _assert_same(runs[1], runs[8])


def test_prompts_without_a_shared_image_prefix_fall_back_to_full_prompts(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image after the question: the question tokens come first, so nothing can be shared."""
    fast, plain = backends["llava"][True], backends["llava"][False]
    spy = PrefixSpy(fast, monkeypatch)
    requests = _requests(fast, photos, "Question: {question}\n<image>\nAnswer:")
    got, want = _answer(fast, requests), _answer(plain, requests)
    assert spy.prefixes == 0
    _assert_same(want, got)


@pytest.mark.parametrize("model", ["llava", "qwen2vl"])
def test_encode_shared_splits_the_ids_of_a_full_encoding(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, model: str
) -> None:
    from PIL import Image

    inputs = backends[model][True].core.inputs
    prompts = [inputs.render_prompt(t, None) for t in QUESTIONS["random"] + QUESTIONS["popular"]]
    with Image.open(photos / "coffee.jpg") as im:
        image = im.convert("RGB")
    shared = inputs.encode_shared(prompts, image)
    assert shared is not None
    prefix_ids = shared.prefix["input_ids"][0].tolist()
    n_image = prefix_ids.count(inputs.image_token_id)
    assert n_image > 1 and all(inputs.image_token_id not in s for s in shared.suffixes)
    assert all(
        v.shape[-1] == shared.prefix_len
        for k, v in shared.prefix.items()
        if k in ("attention_mask", "mm_token_type_ids")
    )
    for prompt, suffix in zip(prompts, shared.suffixes):
        full = inputs.encode([prompt], [image])
        assert prefix_ids + suffix == full["input_ids"][0].tolist()
        assert torch.equal(shared.prefix["pixel_values"], full["pixel_values"])
    # identical prompts share everything but the last token, which must still be computed
    same = inputs.encode_shared([prompts[0], prompts[0]], image)
    assert same is not None and same.suffixes == [same.suffixes[0]] * 2 and len(same.suffixes[0]) == 1


def test_unreadable_image_is_an_error_for_its_questions_only(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, tmp_path: Path
) -> None:
    fast = backends["llava"][True]
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    requests = _requests(fast, photos, None)
    requests += [
        Request(split="random", question_id=100 + i, image_path=str(broken), prompt=requests[i].prompt)
        for i in range(2)
    ]
    out = {r.key: r for batch in fast.answer(requests, GenerateConfig(max_new_tokens=0, top_k=3)) for r in batch}
    assert {k for k, r in out.items() if r.error} == {("random", 100), ("random", 101)}
    assert "cannot read image" in out[("random", 100)].error


def test_killed_and_limited_runs_resume_with_every_question_once(
    backends: dict[str, dict[bool, HFBackend]], photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resume is by key, so the fast engine's image-grouped order must not lose or repeat any."""
    fast = backends["llava"][True]
    questions = _questions(photos)
    config = RunConfig(model="tiny-llava", template="llava", max_new_tokens=MAX_NEW)
    header = make_header(config, fast, {s: (photos / f"{s}.json", "0" * 64) for s in QUESTIONS}, photos)
    expected = reference_samples(fast, questions, photos, RunDir(tmp_path / "reference"), config, header)
    # killed after two batches: the generator dies mid-image, one image's cache half used
    resumed = RunDir(tmp_path / "killed")
    kill_then_resume(fast, questions, photos, resumed, config, header, monkeypatch, die_after=2)

    # limited to the first questions of each split (every image partly done), then grown
    limited = RunDir(tmp_path / "limited")
    first = [q for q in questions if q.question_id <= 4]
    run_questions(fast, first, photos, limited, config, header)
    run_questions(fast, questions, photos, limited, replace(config, resume=True), header)

    for run in (resumed, limited):
        assert_same_as_reference(run, expected, len(questions))
