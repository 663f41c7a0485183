"""One truth for both implementations (issue 24 item 3): at the first new token of yes/no
questions, the decoding loop's scores on the yes/no ids are the offline rule's (corrections.py,
same name and settings; DoLa with repetition_penalty 1, the loop's own setting, since the
penalty applies to the prompt's tokens already at the first step) read from signals recorded by a
yes/no run, so wherever the loop decodes
a yes/no piece it is the offline rule's best yes/no id; neutral settings give the plain engine's
greedy text. On the tiny LLaVA and on the demo model (which answers Yes/No), on both engines
(every other family: test_decode_truth_families.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _decode_truth import agreement, neutral_is_greedy, record_signals, truth_requests  # noqa: E402

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.demo import DEMO_MODEL_DIR  # noqa: E402
from halluprobe.records import Request  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow

SPECS = ["pai:gamma=1.5,alpha=0.5,start=0,end=2", "pai:gamma=1,alpha=0.5,start=0,end=2", "dola:relative_top=0.1,repetition_penalty=1", "dola:relative_top=0,repetition_penalty=1", "vcd:alpha=1,beta=0.1", "vcd:alpha=2.5,beta=0", "icd:alpha=1,beta=0.1", "icd:alpha=0.5,beta=0.3", "m3id:lambda=0.02", "m3id:lambda=1"]
# the specs that must move the first token's yes/no scores (M3ID is inert there by its rule; PAI at
# gamma 1 moves them only through the amplified attention, which is small on these models)
MOVING = [spec for spec in SPECS if not spec.startswith(("m3id", "pai:gamma=1,"))]
SIGNALS = ("noised", "instruction", "no-image", "layers", "attention:0.5,0,2")  # PAI's signal: the pai specs' alpha and layers


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> tuple[HFBackend, list[Request]]:
    photos, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    images = photos / "images" if (photos / "images").is_dir() else photos
    path = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    backend = HFBackend(str(path), dtype="float32", device="cpu", prefix_cache=False)
    names = sorted(p.name for p in images.iterdir())
    items = [(str(images / n), f"Is there a {obj} in the image?") for n in names[:3] for obj in ("cat", "cup")]
    return backend, truth_requests(backend, items, "llava")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[HFBackend, list[Request]]:
    from halluprobe.benchmarks.objects import read_objects
    from halluprobe.benchmarks.pope import build_pope
    from halluprobe.benchmarks.synthetic import write_synthetic

    scenes = write_synthetic(tmp_path_factory.mktemp("scenes"), n_images=4, seed=7, overwrite=True)
    build = build_pope(read_objects(scenes.annotations), name="synthetic", n_images=4, per_image=2, seed=0)
    backend = HFBackend(str(DEMO_MODEL_DIR), dtype="float32", device="cpu", prefix_cache=False)
    items = [(str(scenes.images_dir / q.image), q.text) for q in build.splits["random"]][:8]
    return backend, truth_requests(backend, items, "llava")


def _agreement(plain: HFBackend, requests: list[Request]) -> tuple[int, int]:
    """(rows checked, rows whose decoded token is a yes/no id) over every spec on both engines
    (the plain one's and the prefix cache's, on the one loaded model); asserts each."""
    recorded = record_signals(plain, requests, SIGNALS)
    counts = []
    for backend in _engines(plain):
        for spec in SPECS:
            counts.append(agreement(backend, requests, recorded, spec))
            if spec in MOVING:  # the setting moves the yes/no scores: the agreement is not the base pass's
                assert counts[-1].moved > 1e-3, (spec, counts[-1].moved)
    return sum(c.checked for c in counts), sum(c.yes_no for c in counts)


def _engines(plain: HFBackend) -> tuple[HFBackend, HFBackend]:
    return plain, HFBackend.on_core(plain.core, prefix_cache=True)


def test_tiny_llava_loop_is_the_offline_rule_at_the_first_token(tiny: tuple[HFBackend, list[Request]]) -> None:
    checked, _ = _agreement(*tiny)
    assert checked == 2 * len(SPECS) * len(tiny[1])
    for backend in _engines(tiny[0]):
        neutral_is_greedy(backend, tiny[1])


def test_demo_model_loop_is_the_offline_rule_and_decodes_yes_no(demo: tuple[HFBackend, list[Request]]) -> None:
    checked, yes_no = _agreement(*demo)
    assert yes_no == checked > 0  # the demo model answers Yes/No: every decoded token is checked against the rule's argmax
    for backend in _engines(demo[0]):
        neutral_is_greedy(backend, demo[1])
