"""The training-image overlap of captions of COCO images (docs/design/training-overlap.md): how
many of the captioned images are COCO train2017 images, and CHAIR over the held-out (val2017)
images alone, scored by the same ``summarize`` as the whole set. Object HalBench uses the
counts and the val2017 test here with its own scorer (``captions/objhal/evaluate.py``).

Captions of images with no COCO name (the demo's ``scene_00000.png``, AMBER's) get no record at
all (None), never "0 in train2017"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from halluprobe.benchmarks.coco_split import (
    VAL2017_SHA256,
    ImageOverlap,
    coco_image,
    coco_part,
    image_overlap,
)
from halluprobe.captions.chair.evaluate import ChairResults
from halluprobe.captions.chair.groundtruth import GroundTruthNote, ImageKey
from halluprobe.captions.chair.scoring import CaptionScore, ChairSummary, summarize
from halluprobe.records import FrozenRecord

__all__ = ["ChairHeldOut", "OverlapCounts", "chair_held_out", "coco_annotated", "in_val2017", "key_overlap"]


class OverlapCounts(FrozenRecord):
    """A caption set's distinct images by COCO 2017 split (``coco_split.ImageOverlap``, as written
    in JSON), with the sha256 of the val2017 id list that placed them."""

    images: int
    coco_images: int
    val2017: int
    train2017: int
    unplaced: int
    val2017_ids_sha256: str = VAL2017_SHA256

    @property
    def counts(self) -> ImageOverlap:
        return ImageOverlap(images=self.images, coco_images=self.coco_images, val2017=self.val2017, train2017=self.train2017,
                            unplaced=self.unplaced)  # fmt: skip


class ChairHeldOut(OverlapCounts):
    """The counts and, per family, CHAIR over the captions of val2017 images (a family is absent
    where no captioned image is in val2017)."""

    held_out: dict[str, ChairSummary]


def coco_annotated(note: GroundTruthNote | None) -> bool:
    """Whether a ground truth came from COCO's annotations (the shipped sets, or COCO's 2014 or
    2017 files): every image it scores is a train/val image, so one outside val2017 is train2017."""
    return note is not None and note.year in ("2014", "2017")


def in_val2017(key: ImageKey) -> bool:
    """Whether an image key (a COCO id, or a name) is a COCO val2017 image: held out."""
    image = coco_image(str(key))
    return image is not None and coco_part(image) == "val2017"


def key_overlap(keys: Iterable[ImageKey], *, names: Iterable[str] | None = None, annotated: bool) -> ImageOverlap:
    """The distinct images by COCO 2017 split: of ``names`` (a run's image file names, which state
    their 2014 split) when given, else of the image keys (a bare COCO id states none: it is
    train2017 outside val2017 only where ``annotated``)."""
    return image_overlap(names if names is not None else (str(k) for k in keys), annotated=annotated)


def chair_held_out(
    results: ChairResults,
    per_caption: Mapping[str, Sequence[CaptionScore]],
    *,
    names: Iterable[str] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> ChairHeldOut | None:
    """``results``' overlap: counts (``names`` as for :func:`key_overlap`) and each family's CHAIR
    over the val2017 images' captions, with the same settings and bootstrap; None where no image
    has a COCO name."""
    scores = next(iter(per_caption.values()), [])
    counts = key_overlap((s.image_id for s in scores), names=names, annotated=coco_annotated(results.first.settings.ground_truth))
    if not counts.is_coco:
        return None
    held: dict[str, ChairSummary] = {}
    for family, family_scores in per_caption.items():
        part = [s for s in family_scores if in_val2017(s.image_id)]
        if part:
            settings = results.families[family].summary.settings
            held[family] = summarize(part, family, settings=settings, n_resamples=n_resamples, seed=seed)
    return ChairHeldOut(images=counts.images, coco_images=counts.coco_images, val2017=counts.val2017, train2017=counts.train2017,
                        unplaced=counts.unplaced, held_out=held)  # fmt: skip
