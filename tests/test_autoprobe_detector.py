"""Auto-Probe detector: a tiny random-weight OWLv2 with the real CLIP BPE tokenizer, and the
dual-threshold rule on given scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from halluprobe.benchmarks.autoprobe.detector import Detection, judge
from halluprobe.errors import InputError

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def owl_dir() -> Path:
    import _autoprobe_assets

    return _autoprobe_assets.tiny_owlv2_dir()


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("skimage")
    from halluprobe.tiny import demo_photos

    return demo_photos(tmp_path_factory.mktemp("photos"))[0]


def _det(score: float) -> Detection:
    return Detection(object="cup", query="cup", score=score, box=(0.0, 0.0, 1.0, 1.0))


@pytest.mark.parametrize(
    ("score", "fate"),
    [(0.9, "present"), (0.5, "present"), (0.4999, "uncertain"), (0.1, "uncertain"), (0.0999, "hallucinated"), (0.0, "hallucinated")],
)
def test_dual_threshold(score: float, fate: str) -> None:
    verdict = judge(_det(score), t_high=0.5, t_low=0.1)
    assert verdict.fate == fate
    assert (verdict.score, verdict.t_high, verdict.t_low) == (score, 0.5, 0.1)


@pytest.mark.parametrize(("t_high", "t_low"), [(0.1, 0.5), (1.5, 0.1), (0.5, -0.1)])
def test_bad_thresholds_are_input_errors(t_high: float, t_low: float) -> None:
    with pytest.raises(InputError, match="t_low"):
        judge(_det(0.3), t_high=t_high, t_low=t_low)


@pytest.mark.parametrize(
    ("name", "forms"),
    [("cup", ["cup", "cups"]), ("person", ["person", "people"]), ("wine glass", ["wine glass", "wine glasses"]),
     ("bus", ["bus", "buses"]), ("sheep", ["sheep"])],
)
def test_queries_are_singular_and_plural(name: str, forms: list[str]) -> None:
    pytest.importorskip("inflect")
    from halluprobe.benchmarks.autoprobe.detector import query_forms

    assert query_forms(name) == forms


def test_clip_tokenizer_is_the_real_vocabulary(owl_dir: Path) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(owl_dir), local_files_only=True)
    tokenizer = processor.tokenizer
    assert len(tokenizer) == 49408
    assert tokenizer("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert tokenizer.pad_token == "!" and tokenizer.pad_token_id == 0
    assert type(processor.image_processor).__name__ == "Owlv2ImageProcessorPil"


def test_tiny_owlv2_round_trips_through_from_pretrained(owl_dir: Path, photos: Path, tmp_path: Path) -> None:
    import torch
    from PIL import Image
    from transformers import Owlv2ForObjectDetection, Owlv2Processor

    processor = Owlv2Processor.from_pretrained(str(owl_dir), local_files_only=True)
    model = Owlv2ForObjectDetection.from_pretrained(str(owl_dir), local_files_only=True).eval()
    model.save_pretrained(str(tmp_path / "again"))
    again = Owlv2ForObjectDetection.from_pretrained(str(tmp_path / "again"), local_files_only=True).eval()
    inputs = processor(text=[["cat", "cups"]], images=Image.open(photos / "chelsea.jpg"), return_tensors="pt", padding=True)
    with torch.inference_mode():
        a, b = model(**inputs), again(**inputs)
    assert a.logits.shape[-1] == 2 and a.pred_boxes.shape[-1] == 4
    assert torch.equal(a.logits, b.logits) and torch.equal(a.pred_boxes, b.pred_boxes)


def test_owl_detector_scores_every_candidate_with_evidence(owl_dir: Path, photos: Path) -> None:
    from PIL import Image

    from halluprobe.benchmarks.autoprobe.detector import OwlDetector

    detector = OwlDetector(owl_dir, local_files_only=True)
    assert detector.info()["model_type"] == "owlv2"
    candidates = ["cup", "cat", "person", "wine glass"]
    detections = detector.detect(photos / "coffee.jpg", candidates)
    assert [d.object for d in detections] == candidates
    with Image.open(photos / "coffee.jpg") as image:
        width, height = image.size
    for d in detections:
        assert 0.0 <= d.score <= 1.0
        assert d.query in (d.object, d.object + "s", "people", "wine glasses")
        x0, y0, x1, y1 = d.box
        assert 0 <= x0 <= x1 <= width and 0 <= y0 <= y1 <= height
    # deterministic: the same weights and image give the same scores
    assert [d.score for d in detector.detect(photos / "coffee.jpg", candidates)] == [d.score for d in detections]
    assert detector.detect(photos / "coffee.jpg", []) == []


@pytest.mark.parametrize("orientation", ["wide", "tall"])
def test_owl_best_box_matches_the_processors_post_processing(owl_dir: Path, photos: Path, tmp_path: Path, orientation: str) -> None:
    """On a non-square image the best box equals transformers' own post-processing of the same
    outputs (OWLv2 pads to a square: target size = the longer side on both axes), clipped to the image."""
    import torch
    import transformers
    from PIL import Image

    from halluprobe.benchmarks.autoprobe.detector import OwlDetector

    with Image.open(photos / "coffee.jpg") as handle:
        image = handle.convert("RGB")
    image = image.crop((0, 0, image.width, image.height * 2 // 3)) if orientation == "wide" else image.transpose(Image.Transpose.ROTATE_90)
    width, height = image.size
    assert (width > height) == (orientation == "wide") and width != height
    path = tmp_path / "photo.png"
    image.save(path)

    (detection,) = OwlDetector(owl_dir, local_files_only=True).detect(path, ["sheep"])  # one query form: "sheep"
    processor = transformers.Owlv2Processor.from_pretrained(str(owl_dir), local_files_only=True)
    model = transformers.Owlv2ForObjectDetection.from_pretrained(str(owl_dir), local_files_only=True).eval()
    inputs = processor(text=[["sheep"]], images=image, return_tensors="pt")
    with torch.inference_mode():
        outputs = model(**inputs)
    side = max(width, height)
    (result,) = processor.image_processor.post_process_object_detection(outputs, threshold=0.0, target_sizes=[(side, side)])
    best = int(torch.argmax(result["scores"]))
    x0, y0, x1, y1 = (float(v) for v in result["boxes"][best])
    expected = (max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1))
    assert detection.query == "sheep"
    assert detection.score == pytest.approx(float(result["scores"][best]), abs=1e-6)
    assert detection.box == pytest.approx(expected, abs=1e-3)


def test_a_non_owl_folder_is_refused(tmp_path: Path) -> None:
    from halluprobe.benchmarks.autoprobe.detector import OwlDetector

    (tmp_path / "config.json").write_text('{"model_type": "llava"}')
    with pytest.raises(InputError, match="not one of"):
        OwlDetector(tmp_path, local_files_only=True)
