"""One truth for both implementations (issue 24 item 3): at the first new token of yes/no
questions, the decoding loop's scores on the yes/no ids are the offline rule's (corrections.py,
same name and settings; DoLa with repetition_penalty 1, the loop's own setting, since the
penalty applies to the prompt's tokens already at the first step) read from signals recorded by a
yes/no run, so wherever the loop decodes
a yes/no piece it is the offline rule's best yes/no id; neutral settings give the plain engine's
greedy text. On the tiny LLaVA and on the demo model (which answers Yes/No)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from halluprobe.backends.hf import HFBackend  # noqa: E402
from halluprobe.backends.hf_decode import parse_decode  # noqa: E402
from halluprobe.backends.hf_decode_engine import DecodeEngine  # noqa: E402
from halluprobe.demo import DEMO_MODEL_DIR  # noqa: E402
from halluprobe.readouts.corrections import CORRECTIONS  # noqa: E402
from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request, Sample  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow

SPECS = ["pai:gamma=1.5,alpha=0.5,start=0,end=2", "pai:gamma=1,alpha=0.5,start=0,end=2", "dola:relative_top=0.1,repetition_penalty=1", "dola:relative_top=0,repetition_penalty=1", "vcd:alpha=1,beta=0.1", "vcd:alpha=2.5,beta=0", "icd:alpha=1,beta=0.1", "icd:alpha=0.5,beta=0.3", "m3id:lambda=0.02", "m3id:lambda=1"]
SIGNALS = ("noised", "instruction", "no-image", "layers", "attention:0.5,0,2")  # PAI's signal: the pai specs' alpha and layers


def _requests(backend: HFBackend, items: list[tuple[str, str]]) -> list[Request]:
    out = []
    for i, (image, question) in enumerate(items):
        variants = {"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {question}", "llava"),
                    "no-image": backend.render_prompt(question, "llava", image=False)}  # fmt: skip
        out.append(Request(split="s", question_id=i, image_path=image, prompt=backend.render_prompt(question, "llava"), variants=variants))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> tuple[HFBackend, list[Request]]:
    photos, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    images = photos / "images" if (photos / "images").is_dir() else photos
    path = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    backend = HFBackend(str(path), dtype="float32", device="cpu", prefix_cache=False)
    names = sorted(p.name for p in images.iterdir())
    items = [(str(images / n), f"Is there a {obj} in the image?") for n in names[:3] for obj in ("cat", "cup")]
    return backend, _requests(backend, items)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[HFBackend, list[Request]]:
    from halluprobe.benchmarks.objects import read_objects
    from halluprobe.benchmarks.pope import build_pope
    from halluprobe.benchmarks.synthetic import write_synthetic

    scenes = write_synthetic(tmp_path_factory.mktemp("scenes"), n_images=4, seed=7, overwrite=True)
    build = build_pope(read_objects(scenes.annotations), name="synthetic", n_images=4, per_image=2, seed=0)
    backend = HFBackend(str(DEMO_MODEL_DIR), dtype="float32", device="cpu", prefix_cache=False)
    items = [(str(scenes.images_dir / q.image), q.text) for q in build.splits["random"]][:8]
    return backend, _requests(backend, items)


def _images(backend: HFBackend, requests: list[Request]) -> list[Any]:
    images, errors = backend.core.load_images(requests)
    assert not errors
    return images


def _agreement(backend: HFBackend, requests: list[Request]) -> tuple[int, int]:
    """(rows checked, rows whose decoded token is a yes/no id) over every spec; asserts each."""
    recorded = [r for batch in backend.answer(requests, GenerateConfig(max_new_tokens=0, signals=SIGNALS, instruction=ICD_INSTRUCTION)) for r in batch]
    by_key = {r.key: r for r in recorded}
    sets = backend.token_sets()
    ids = [*sets.yes_ids, *sets.no_ids]
    images = _images(backend, requests)
    checked = yes_no = 0
    for spec in SPECS:
        name, params = parse_decode(spec)
        engine = backend.engine(GenerateConfig(max_new_tokens=1, stop_strings=(), decode=spec))
        assert isinstance(engine, DecodeEngine)
        decoded = engine.decode_batch(requests, images, keep_steps=True)
        for row, request in enumerate(requests):
            response = by_key[request.key]
            assert response.error is None and response.candidates is not None
            sample = Sample(split="s", question_id=request.question_id, image="x", object=None, label="yes", prompt=request.prompt,
                            first_token=response.first_token, candidates=response.candidates, signals=response.signals)  # fmt: skip
            base = {i: response.candidates[str(i)] for i in ids}
            offline = CORRECTIONS[name].rule(base, response.first_token[0].logprob, sample, {**params, "t": 0.0}, sets)  # type: ignore[misc]
            assert offline is not None
            loop = decoded.scores[0][row]
            for i in ids:  # the same per-id scores (-inf where the plausibility cut-off drops an id)
                if offline[i] == float("-inf"):
                    assert loop[i].item() == float("-inf"), (spec, row, i)
                else:
                    assert abs(loop[i].item() - offline[i]) < 1e-4, (spec, row, i)
            token = decoded.tokens[row][0]
            checked += 1
            if token in ids:
                yes_no += 1
                assert token == max(ids, key=lambda i: offline[i]), (spec, row)
    return checked, yes_no


def _neutral_is_greedy(backend: HFBackend, requests: list[Request]) -> None:
    plain = GenerateConfig(max_new_tokens=4, stop_strings=())
    want = {r.key: r.text for batch in backend.answer(requests, plain) for r in batch}
    for spec in ("vcd:alpha=0", "icd:alpha=0,beta=0", "m3id:lambda=0"):
        got = {r.key: r.text for batch in backend.answer(requests, plain.model_copy(update={"decode": spec})) for r in batch}
        assert got == want, spec


def test_tiny_llava_loop_is_the_offline_rule_at_the_first_token(tiny: tuple[HFBackend, list[Request]]) -> None:
    checked, _ = _agreement(*tiny)
    assert checked == len(SPECS) * len(tiny[1])
    _neutral_is_greedy(*tiny)


def test_demo_model_loop_is_the_offline_rule_and_decodes_yes_no(demo: tuple[HFBackend, list[Request]]) -> None:
    checked, yes_no = _agreement(*demo)
    assert yes_no == checked > 0  # the demo model answers Yes/No: every decoded token is checked against the rule's argmax
    _neutral_is_greedy(*demo)
