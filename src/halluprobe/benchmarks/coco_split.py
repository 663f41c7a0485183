"""Which COCO 2017 split a benchmark image is in: the training-image overlap of COCO benchmarks.

COCO's 2017 release re-split the 2014 train and validation images: the 5,000 images of val2017
are a subset of val2014, and every other train2014 or val2014 image went to train2017. So a
benchmark image named ``COCO_val2014_<id>.jpg`` (POPE's COCO files, CHAIR's lists) is either in
val2017 (held out from anything trained on train2017) or in train2017. The package ships
val2017's ids (``data/coco_val2017_ids.txt``: sorted, one a line, pinned by sha256 and count);
train2017 needs no list of its own, because it is the rest of trainval2014.

An image whose name is no COCO name (``scene_00000.png``, AMBER's ``AMBER_1.jpg``) is not
counted as anything: ``image_overlap`` says how many images had a COCO name at all, so "not
COCO" is never printed as "0 in train2017".
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from halluprobe.errors import RuntimeFailure

__all__ = [
    "TRAIN2017_TRAINED",
    "VAL2017_COUNT",
    "VAL2017_IDS_FILE",
    "VAL2017_SHA256",
    "CocoImage",
    "CocoPart",
    "ImageOverlap",
    "TrainingDataFact",
    "coco_image",
    "coco_part",
    "image_overlap",
    "val2017_ids",
]

VAL2017_IDS_FILE = "coco_val2017_ids.txt"
VAL2017_SHA256 = "ea37cee007069bde6d45a67186cc6c2591d0c6d7effd3c481996b6b367e060b6"
VAL2017_COUNT = 5000

# val2017: held out; train2017: a 2014 train/val image outside val2017; unplaced: a COCO name whose
# 2017 split the val2017 list cannot tell (a test image, a bare 2017 name outside val2017)
CocoPart = Literal["val2017", "train2017", "unplaced"]

# COCO_val2014_000000310196.jpg (2014/2015 names) or 000000000139.jpg (2017 names), in any folder
_COCO_2014 = re.compile(r"COCO_(train|val|test)(2014|2015)_(\d{12})\.jpe?g", re.IGNORECASE)
_COCO_2017 = re.compile(r"(\d{12})\.jpe?g", re.IGNORECASE)


@dataclass(frozen=True)
class CocoImage:
    """A COCO image read from a file name: its id and the 2014/2015 split its name states (None
    for a 2017-style name, which states none)."""

    image_id: int
    named_split: str | None  # "train2014", "val2014", "test2014", "test2015"


@dataclass(frozen=True)
class ImageOverlap:
    """A benchmark's distinct images by COCO 2017 split."""

    images: int
    coco_images: int  # with a COCO file name
    val2017: int
    train2017: int
    unplaced: int

    @property
    def is_coco(self) -> bool:
        return self.coco_images > 0


@dataclass(frozen=True)
class TrainingDataFact:
    """A model whose published training data takes its COCO images from train2017, with where
    its authors say so (a fact read from their docs, never inferred from a model's name)."""

    model: str
    data: str  # the published training file that uses the images
    source: str  # the document that states it
    quote: str  # what the document lists, in short


TRAIN2017_TRAINED: tuple[TrainingDataFact, ...] = (
    TrainingDataFact(
        model="LLaVA-1.5",
        data="llava_v1_5_mix665k.json (visual instruction tuning)",
        source="https://github.com/haotian-liu/LLaVA/blob/022a1057462e7be4fa127d125d675f0f153afed4/README.md#visual-instruction-tuning",
        quote="its images from the constituting datasets, COCO: train2017",
    ),
)


@functools.cache
def val2017_ids() -> frozenset[int]:
    """The 5,000 ids of COCO's val2017, from the package's pinned file (sha256 and count checked:
    a changed file would silently move images between the held-out and the trained-on part)."""
    from importlib import resources

    data = resources.files("halluprobe.benchmarks").joinpath("data", VAL2017_IDS_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != VAL2017_SHA256:
        raise RuntimeFailure(f"the packaged {VAL2017_IDS_FILE} has sha256 {digest}, expected {VAL2017_SHA256}: reinstall halluprobe")
    ids = frozenset(int(line) for line in data.decode("ascii").split())
    if len(ids) != VAL2017_COUNT:
        raise RuntimeFailure(f"the packaged {VAL2017_IDS_FILE} holds {len(ids)} distinct ids, expected {VAL2017_COUNT}")
    return ids


def coco_image(name: str) -> CocoImage | None:
    """The COCO image a file name (or path) names, or a bare id (``3501``: how imported caption
    runs store COCO images), else None."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if base.isascii() and base.isdigit() and len(base) <= 12:
        return CocoImage(int(base), None)
    old = _COCO_2014.fullmatch(base)
    if old:
        return CocoImage(int(old.group(3)), f"{old.group(1).lower()}{old.group(2)}")
    new = _COCO_2017.fullmatch(base)
    return CocoImage(int(new.group(1)), None) if new else None


def coco_part(image: CocoImage, *, annotated: bool = False) -> CocoPart:
    """The 2017 split of a COCO image: val2017 by the pinned list; train2017 for a train2014 or
    val2014 name outside it (the 2017 re-split), or for any image outside it when ``annotated``
    (the caller knows it is a train/val image: COCO annotations hold it); unplaced otherwise."""
    if image.image_id in val2017_ids():
        return "val2017"
    if annotated or image.named_split in ("train2014", "val2014"):
        return "train2017"
    return "unplaced"


def image_overlap(images: Iterable[str], *, annotated: bool = False) -> ImageOverlap:
    """Count the distinct image names by COCO 2017 split (names that are no COCO name count only
    in ``images``); ``annotated`` as for :func:`coco_part`."""
    names = set(images)
    parts = [coco_part(c, annotated=annotated) for c in (coco_image(n) for n in names) if c is not None]
    return ImageOverlap(
        images=len(names),
        coco_images=len(parts),
        val2017=parts.count("val2017"),
        train2017=parts.count("train2017"),
        unplaced=parts.count("unplaced"),
    )
