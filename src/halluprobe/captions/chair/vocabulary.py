"""The CHAIR vocabulary: the synonym table, the double words and the 80 COCO categories.

Facts from LisaAnne/Hallucination ``data/synonyms.txt`` (as inlined by Maxlinn's and OPERA's
``chair.py``; byte-identical in both) and the double-word rules of ``chair.py``. The table is
parsed exactly as the evaluators parse it, quirks included: each line is stripped and split
on ``", "``, so an entry written after a double space (``"scooter,  motor bike"``,
``"cake,  cheesecake"``) keeps its leading space and can never match a caption word.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

__all__ = [
    "ANIMAL_WORDS",
    "COCO_CATEGORIES",
    "COCO_DOUBLE_WORDS",
    "VEHICLE_WORDS",
    "ChairVocabulary",
    "merge_double_words",
    "vocabulary",
    "with_modifier_words",
]

# the 80 COCO detection categories (instances_*.json names; id order)
COCO_CATEGORIES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
    "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase",
    "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip

# common two-word names in MSCOCO read as one word (duplicates as in the original list)
COCO_DOUBLE_WORDS: tuple[str, ...] = (
    "motor bike", "motor cycle", "air plane", "traffic light", "street light", "traffic signal", "stop light",
    "fire hydrant", "stop sign", "parking meter", "suit case", "sports ball", "baseball bat", "baseball glove",
    "tennis racket", "wine glass", "hot dog", "cell phone", "mobile phone", "teddy bear", "hair drier",
    "potted plant", "bow tie", "laptop computer", "stove top oven", "hot dog", "teddy bear", "home plate",
    "train track",
)  # fmt: skip
# "baby bird" / "adult bird" -> "bird" (else "baby"/"adult" would fire "person")
ANIMAL_WORDS: tuple[str, ...] = (
    "bird",
    "cat",
    "dog",
    "horse",
    "sheep",
    "cow",
    "elephant",
    "bear",
    "zebra",
    "giraffe",
    "animal",
    "cub",
)
# "passenger jet" -> "jet" (else "passenger" would fire "person")
VEHICLE_WORDS: tuple[str, ...] = ("jet", "train")


@dataclass(frozen=True)
class ChairVocabulary:
    """``objects``: every synonym as the evaluators hold it; ``node_of``: synonym -> its COCO
    category (the line's first entry; a later line wins, as in a dict built line by line);
    ``double_words``: a two-word string -> the word it is read as."""

    objects: frozenset[str]
    node_of: dict[str, str]
    double_words: dict[str, str]


def _parse_synonyms(text: str) -> list[list[str]]:
    # the evaluators' parse: every line of the inlined text (the first is empty), stripped, split on ", "
    return [line.strip().split(", ") for line in text.splitlines()]


@functools.cache
def vocabulary() -> ChairVocabulary:
    text = (
        resources.files("halluprobe.captions.chair")
        .joinpath("data/synonyms.txt")
        .read_text(encoding="utf-8")
    )
    objects: set[str] = set()
    node_of: dict[str, str] = {}
    for synonyms in _parse_synonyms(text):
        objects.update(synonyms)
        for word in synonyms:
            node_of[word] = synonyms[0]
    double_words = with_modifier_words({word: word for word in COCO_DOUBLE_WORDS})
    return ChairVocabulary(frozenset(objects), node_of, double_words)


def with_modifier_words(double_words: dict[str, str]) -> dict[str, str]:
    """``double_words`` plus the pairs CHAIR (and Object HalBench's script after it) reads as one
    object: "baby/adult ANIMAL", "passenger VEHICLE", "bow tie", "toilet seat", "wine glas"."""
    for animal in ANIMAL_WORDS:
        double_words[f"baby {animal}"] = animal
        double_words[f"adult {animal}"] = animal
    for vehicle in VEHICLE_WORDS:
        double_words[f"passenger {vehicle}"] = vehicle
    double_words["bow tie"] = "tie"
    double_words["toilet seat"] = "toilet"
    double_words["wine glas"] = "wine glass"  # singularize("glass") is "glas"
    return double_words


def merge_double_words(words: Sequence[str], double_words: Mapping[str, str]) -> tuple[list[str], list[int]]:
    """Words with each known pair of adjacent words read as one (``double_words``' value), and the
    index in ``words`` where each merged word starts."""
    merged: list[str] = []
    starts: list[int] = []
    i = 0
    while i < len(words):
        starts.append(i)
        pair = " ".join(words[i : i + 2])
        if pair in double_words:
            merged.append(double_words[pair])
            i += 2
        else:
            merged.append(words[i])
            i += 1
    return merged, starts
