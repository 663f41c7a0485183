"""The two standard CHAIR image lists (500 COCO images each; they share 10) and the open
questions ``halluprobe build chair`` writes for a list.

- ``chair500-lim``: yuezih/less-is-more ``CHAIR-eval/data/chair-500.jsonl`` (seed 0; ICD ships
  the same entries), COCO train2017 file names.
- ``chair500-opera``: OPERA's LLaVA set, republished as ids in xing0047/cca-llava
  ``playground/data/coco_chair.jsonl``; file names are COCO val2014's.

Both are shipped (``data/lists.json``, pinned by commit and sha256 of the source file): building
a question file on a standard list needs no download.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from halluprobe.captions.chair.groundtruth import ImageKey, image_key
from halluprobe.errors import InputError
from halluprobe.jsonl import loads, read_records
from halluprobe.records import Question
from halluprobe.rundir import sha256_file

__all__ = [
    "CHAIR_SPLIT",
    "STANDARD_LISTS",
    "ImageList",
    "chair_questions",
    "missing_images",
    "read_image_list",
]

CHAIR_SPLIT = "chair"


@dataclass(frozen=True)
class ImageList:
    name: str
    source: str  # repository@commit:path, or the user's file
    sha256: str
    ids: tuple[ImageKey, ...]  # what identifies each image (groundtruth.image_key)
    images: tuple[str, ...]  # file names, in list order


@functools.cache
def _shipped() -> dict[str, Any]:
    text = (
        resources.files("halluprobe.captions.chair")
        .joinpath("data/lists.json")
        .read_text(encoding="utf-8")
    )
    return dict(loads(text))


def _standard(name: str) -> ImageList:
    spec = _shipped()[name]
    entries = spec["entries"]
    return ImageList(name=name, source=f"{spec['repo']}@{spec['commit']}:{spec['path']}", sha256=spec["sha256"],
                     ids=tuple(e["image_id"] for e in entries), images=tuple(e["image"] for e in entries))  # fmt: skip


STANDARD_LISTS: tuple[str, ...] = ("chair500-lim", "chair500-opera")


def read_image_list(name_or_path: str) -> ImageList:
    """A standard list by name, else a file of ``{"image_id"}`` or ``{"image"}`` lines (or a JSON array)."""
    if name_or_path in STANDARD_LISTS:
        return _standard(name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise InputError(
            f"unknown image list {name_or_path!r}: a standard list ({', '.join(STANDARD_LISTS)}) or a file of image lines"
        )

    ids: list[ImageKey] = []
    images: list[str] = []
    for rec in read_records(path, "image"):
        obj = rec.value
        if "image" in obj and isinstance(obj["image"], str):
            images.append(obj["image"])
            ids.append(image_key(obj["image"], path, rec.line))
        elif "image_id" in obj:
            ids.append(image_key(obj["image_id"], path, rec.line))
            if not isinstance(ids[-1], int):
                raise InputError(f"image_id {obj['image_id']!r} is not a COCO id: give the file name as \"image\"", path, rec.line)
            images.append(f"COCO_val2014_{ids[-1]:012d}.jpg")
        else:
            raise InputError('expected {"image_id"} or {"image"}', path, rec.line)
        if ids[-1] in ids[:-1]:
            raise InputError(f"image {ids[-1]} is listed twice", path, rec.line)
    return ImageList(
        name=path.name,
        source=str(path),
        sha256=sha256_file(path),
        ids=tuple(ids),
        images=tuple(images),
    )


def missing_images(image_list: ImageList, folder: Path) -> list[str]:
    """The list's file names that are not files in ``folder``."""
    return [name for name in image_list.images if not (folder / name).is_file()]


def chair_questions(image_list: ImageList, prompt: str) -> list[Question]:
    """One open question per image (question_id = position in the list)."""
    if not prompt.strip():
        raise InputError("--prompt is empty")
    return [
        Question(
            split=CHAIR_SPLIT,
            question_id=i,
            image=image,
            text=prompt,
            label="yes",
            kind="open",
            metadata={"image_id": image_id, "chair_list": image_list.name},
        )  # fmt: skip
        for i, (image_id, image) in enumerate(zip(image_list.ids, image_list.images))
    ]
