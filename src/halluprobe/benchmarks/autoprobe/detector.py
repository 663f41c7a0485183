"""Open-vocabulary detector checks: is each candidate object in the image?

A :class:`Detector` scores candidate names on one image: the best box score per candidate, with
the box and the query text that gave it, kept as evidence. :func:`judge` turns a score into a
fate with a dual threshold (the one place that rule lives)::

    score >= t_high          -> "present"       (becomes a "yes" question)
    score <  t_low           -> "hallucinated"  (becomes a "no" question and AttriBait)
    t_low <= score < t_high  -> "uncertain"     (dropped: neither side is trusted)

:class:`OwlDetector` runs OWLv2 (``Owlv2ForObjectDetection``) or OWL-ViT
(``OwlViTForObjectDetection``), chosen by the folder's ``config.json`` ``model_type``, from a
local folder or a hub id. Each candidate is queried in its singular and plural form
("cup", "cups"); a candidate's score is the best sigmoid score over its queries and all
predicted boxes. Boxes are ``[x0, y0, x1, y1]`` in pixels of the original image: OWLv2 pads the
image to a square at the bottom/right before resizing, so its normalised boxes are scaled by
the longer side; OWL-ViT resizes without padding, so by width and height. Image preprocessing
uses the PIL image processors (no torchvision). torch and transformers are imported lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from halluprobe.errors import InputError
from halluprobe.jsonl import read_json_file
from halluprobe.records import FrozenRecord

__all__ = ["Fate", "Detection", "Verdict", "Detector", "check_thresholds", "judge", "query_forms", "OwlDetector"]

logger = logging.getLogger(__name__)

Fate = Literal["present", "hallucinated", "uncertain"]


class Detection(FrozenRecord):
    """The best box for one candidate on one image."""

    object: str
    query: str  # the query text (singular or plural form) that scored best
    score: float
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels of the original image


class Verdict(FrozenRecord):
    object: str
    fate: Fate
    score: float
    query: str
    box: tuple[float, float, float, float]
    t_high: float
    t_low: float


@runtime_checkable
class Detector(Protocol):
    def info(self) -> dict[str, Any]:
        """Model identity (path or id, architecture, revision): written into the manifest."""
        ...

    def detect(self, image_path: str | Path, candidates: Sequence[str]) -> list[Detection]:
        """The best-scoring box per candidate, in the order of ``candidates``."""
        ...


def check_thresholds(*, t_high: float, t_low: float) -> None:
    """InputError unless 0 <= t_low <= t_high <= 1."""
    if not 0.0 <= t_low <= t_high <= 1.0:
        raise InputError(f"thresholds must satisfy 0 <= t_low <= t_high <= 1, got t_low={t_low}, t_high={t_high}")


def judge(detection: Detection, *, t_high: float, t_low: float) -> Verdict:
    """Apply the dual threshold to one detection (see the module docstring)."""
    check_thresholds(t_high=t_high, t_low=t_low)
    if detection.score >= t_high:
        fate: Fate = "present"
    elif detection.score < t_low:
        fate = "hallucinated"
    else:
        fate = "uncertain"
    return Verdict(
        object=detection.object,
        fate=fate,
        score=detection.score,
        query=detection.query,
        box=detection.box,
        t_high=t_high,
        t_low=t_low,
    )


def query_forms(name: str) -> list[str]:
    """The singular name and its plural (head word pluralised by inflect), without duplicates."""
    import inflect

    prefix, _, head = name.rpartition(" ")
    plural_head = inflect.engine().plural_noun(head) or head
    plural = f"{prefix} {plural_head}" if prefix else plural_head
    return [name] if plural == name else [name, plural]


_ARCHITECTURES: dict[str, tuple[str, str, bool]] = {
    # model_type -> (model class, processor class, pads to a square)
    "owlv2": ("Owlv2ForObjectDetection", "Owlv2Processor", True),
    "owlvit": ("OwlViTForObjectDetection", "OwlViTProcessor", False),
}


def _model_type(model: str, local_files_only: bool) -> str:
    config_file = Path(model) / "config.json"
    if config_file.is_file():
        data = read_json_file(config_file, "detector config")
        return str(data.get("model_type", "")) if isinstance(data, dict) else ""
    from transformers import AutoConfig

    return str(AutoConfig.from_pretrained(model, local_files_only=local_files_only).model_type)


class OwlDetector:
    """OWLv2 / OWL-ViT through transformers, from a local folder or a hub id."""

    def __init__(self, model: str | Path, *, device: str = "cpu", local_files_only: bool = False) -> None:
        import transformers

        self._model_id = str(model)
        model_type = _model_type(self._model_id, local_files_only)
        if model_type not in _ARCHITECTURES:
            raise InputError(f"{self._model_id}: detector model_type {model_type!r} is not one of {sorted(_ARCHITECTURES)}")
        model_cls, processor_cls, self._square = _ARCHITECTURES[model_type]
        self._model_type = model_type
        self._processor = getattr(transformers, processor_cls).from_pretrained(
            self._model_id, local_files_only=local_files_only
        )
        self._model = getattr(transformers, model_cls).from_pretrained(self._model_id, local_files_only=local_files_only)
        self._model.to(device).eval()
        self._device = device

    def info(self) -> dict[str, Any]:
        return {
            "detector": self._model_id,
            "model_type": self._model_type,
            "revision": getattr(self._model.config, "_commit_hash", None),
            "image_processor": type(self._processor.image_processor).__name__,
            "device": self._device,
        }

    def detect(self, image_path: str | Path, candidates: Sequence[str]) -> list[Detection]:
        import torch
        from PIL import Image

        if not candidates:
            return []
        with Image.open(image_path) as handle:
            image = handle.convert("RGB")
        width, height = image.size
        owners: list[int] = []
        queries: list[str] = []
        for index, name in enumerate(candidates):
            for form in query_forms(name):
                owners.append(index)
                queries.append(form)
        inputs = self._processor(text=[queries], images=image, return_tensors="pt", padding=True, truncation=True)
        with torch.inference_mode():
            outputs = self._model(**{k: v.to(self._device) for k, v in inputs.items()})
        scores = torch.sigmoid(outputs.logits[0].float())  # [boxes, queries]
        boxes = outputs.pred_boxes[0].float()  # [boxes, 4]: cx, cy, w, h in [0, 1]
        scale_x, scale_y = (max(width, height),) * 2 if self._square else (width, height)
        best: dict[int, Detection] = {}
        for column, (owner, query) in enumerate(zip(owners, queries)):
            row = int(torch.argmax(scores[:, column]))
            score = float(scores[row, column])
            if owner in best and best[owner].score >= score:
                continue
            cx, cy, w, h = (float(v) for v in boxes[row])
            box = (
                max(0.0, (cx - w / 2) * scale_x),
                max(0.0, (cy - h / 2) * scale_y),
                min(float(width), (cx + w / 2) * scale_x),
                min(float(height), (cy + h / 2) * scale_y),
            )
            best[owner] = Detection(object=candidates[owner], query=query, score=score, box=box)
        return [best[i] for i in range(len(candidates))]
