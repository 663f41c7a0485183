"""CHAIR ground truth: per COCO image, the set of categories it holds, three ways.

1. From COCO's instance and caption annotations (train+val of 2014 or 2017), exactly as
   ``CHAIR.get_annotations`` builds them: every instance's category, then every ground-truth
   caption's objects read by the family in use (so the ground truth depends on the family).
2. From object lines ``{"image_id" or "image", "objects"}`` (the format ``build pope`` reads).
3. Shipped, for the two standard 500-image lists in both families (:mod:`.lists`).

A :class:`GroundTruth` is saved as small JSON (``save``/``load``) with where it came from.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from halluprobe.captions.chair.families import ChairFamily
from halluprobe.captions.chair.vocabulary import vocabulary
from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.jsonl import loads, read_records
from halluprobe.records import FrozenRecord
from halluprobe.rundir import sha256_file

__all__ = [
    "COCO_ATTRIBUTION",
    "CocoFile",
    "GroundTruth",
    "coco_annotation_files",
    "ground_truth_from_coco",
    "ground_truth_from_objects",
    "ImageKey",
    "GroundTruthNote",
    "caption_objects",
    "image_id_of",
    "image_key",
    "key_order",
    "load_ground_truth",
    "shipped_ground_truth",
]

COCO_ATTRIBUTION = (
    "Derived from the COCO 2014 annotations (Lin et al. 2014, cocodataset.org), "
    "licensed CC BY 4.0 by the COCO Consortium."
)
GroundTruthSource = Literal["coco", "objects", "shipped"]
# what identifies an image: a COCO id (an integer, or a COCO file name), else its name as written
ImageKey = int | str
# a COCO file name: COCO_val2014_000000002239.jpg (2014) or 000000002239.jpg (2017)
_COCO_NAME = re.compile(r"(?:COCO_[A-Za-z]+\d{4}_)?(\d{12})(?:\.[A-Za-z]+)?")


def key_order(key: ImageKey) -> tuple[int, int, str]:
    """Sort key for image keys: COCO ids by number, then names (the two never compare)."""
    return (0, key, "") if isinstance(key, int) else (1, 0, key)


class GroundTruthNote(FrozenRecord):
    """What a ground truth is, as every CHAIR result and the decoding comparison record it
    (``images``: how many)."""

    source: GroundTruthSource
    year: str | None
    family: str
    files: dict[str, str]
    note: str
    images: int


class GroundTruth(FrozenRecord):
    """Image key (:data:`ImageKey`) -> sorted COCO categories, and where they came from."""

    family: str  # the family that read the ground-truth captions ("" for object lines)
    source: GroundTruthSource
    year: str | None = None  # COCO annotation year ("2014"/"2017") where known
    files: dict[str, str] = Field(default_factory=dict)  # input file -> sha256
    note: str = ""
    objects: dict[ImageKey, list[str]]

    @field_validator("objects", mode="before")
    @classmethod
    def _integer_keys(cls, value: Any) -> Any:
        # JSON keys are strings: a saved COCO id ("2239") reads back as the integer it was
        if isinstance(value, dict):
            return {int(k) if isinstance(k, str) and k.isascii() and k.isdigit() else k: v for k, v in value.items()}
        return value

    def describe(self) -> GroundTruthNote:
        """What this ground truth is (where it came from, how many images), without its objects."""
        return GroundTruthNote(source=self.source, year=self.year, family=self.family, files=self.files, note=self.note,
                               images=len(self.objects))  # fmt: skip

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        write_atomic(p, self.model_dump_json() + "\n")
        return p


def image_id_of(
    value: object, path: str | Path | None = None, line: int | None = None
) -> int:
    """A COCO image id from an int, a digit string or a file name (``COCO_val2014_000000002239.jpg``)."""
    if isinstance(value, bool):
        raise InputError(f"expected a COCO image id, got {value!r}", path, line)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        digits = re.findall(r"\d+", Path(value).stem)
        if digits:
            return int(digits[-1])
    raise InputError(
        f"expected a COCO image id (a number or a COCO file name), got {value!r}",
        path,
        line,
    )


def image_key(value: object, path: str | Path | None = None, line: int | None = None) -> ImageKey:
    """What identifies an image: a COCO id for an integer, a digit string or a COCO file name
    (``COCO_val2014_000000002239.jpg``, ``000000002239.jpg``, in any folder); any other image by
    its name as written (``kitchen_1.png`` and ``street_1.png`` are two images, not image 1)."""
    if isinstance(value, bool):
        raise InputError(f"expected an image id or file name, got {value!r}", path, line)
    if isinstance(value, int):
        if not 0 <= value < 10**18:  # a COCO id is a non-negative integer; -5 would name COCO_val2014_-00000000005.jpg
            raise InputError(f"image id {value} is not a COCO id (an integer from 0, at most 18 digits)", path, line)
        return value
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.isascii() and text.isdigit():
            return int(text)
        coco = _COCO_NAME.fullmatch(text.replace("\\", "/").rsplit("/", 1)[-1])
        return int(coco.group(1)) if coco else text
    raise InputError(f"expected an image id or file name, got {value!r}", path, line)


@dataclass(frozen=True)
class CocoFile:
    """One COCO annotation file: a file, or a member of COCO's zip (``annotations/...``)."""

    path: Path
    member: str | None = None

    @property
    def label(self) -> str:
        return str(self.path) if self.member is None else f"{self.path}!{self.member}"

    def read(self) -> bytes:
        try:
            if self.member is None:
                return self.path.read_bytes()
            with zipfile.ZipFile(self.path) as archive:
                return archive.read(self.member)
        except (OSError, KeyError, zipfile.BadZipFile) as err:
            raise InputError(f"cannot read {self.member or 'the file'}: {err}", self.path) from None


def _load_json(source: CocoFile) -> tuple[Any, str]:
    """(parsed JSON, sha256 of its bytes)."""
    raw = source.read()
    try:
        return loads(raw.decode("utf-8")), hashlib.sha256(raw).hexdigest()
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a JSON file ({source.member or source.path.name}): {err}", source.path) from None


def coco_annotation_files(annotations: Path, year: str, *, expected_sha256: str | None = None) -> tuple[list[CocoFile], list[CocoFile]]:
    """(instances, captions) files of ``year`` (``instances_{val,train}{year}.json``,
    ``captions_{val,train}{year}.json``) in a folder, or in COCO's ``annotations_trainval{year}.zip``
    read as it is; ``expected_sha256`` pins the zip (a differing one is refused)."""
    if year not in ("2014", "2017"):
        raise InputError(f"COCO annotation year must be 2014 or 2017, not {year!r}")
    names = [f"{kind}_{split}{year}.json" for kind in ("instances", "captions") for split in ("val", "train")]
    if annotations.is_file():
        if expected_sha256 is not None and (digest := sha256_file(annotations)) != expected_sha256.lower():
            raise InputError(f"sha256 {digest} differs from the pinned {expected_sha256}", annotations)
        if not zipfile.is_zipfile(annotations):
            raise InputError(f"expected COCO's annotations_trainval{year}.zip or the folder it unzips to", annotations)
        with zipfile.ZipFile(annotations) as archive:
            present = set(archive.namelist())
        files = [CocoFile(annotations, f"annotations/{name}") for name in names]
        missing = [f.member for f in files if f.member not in present]
        if missing:
            raise InputError(f"the zip holds no {missing[0]} (COCO {year} annotations expected)", annotations)
    else:
        if expected_sha256 is not None:
            raise InputError("--coco-sha256 pins COCO's zip; this is a folder", annotations)
        files = [CocoFile(annotations / name) for name in names]
        for f in files:
            if not f.path.is_file():
                raise InputError(f"COCO {year} annotation file not found (annotations_trainval{year}.zip, unzipped)", f.path)
    return files[:2], files[2:]


def _coco(source: Path | CocoFile) -> CocoFile:
    return source if isinstance(source, CocoFile) else CocoFile(source)


def _coco_id(ann: Any, source: CocoFile) -> int:
    """An annotation's ``image_id``: COCO's are integers (a digit string is read as one)."""
    value = ann["image_id"]
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"not a COCO annotation file ({source.member or source.path.name}): image_id {value!r} is not an integer",
                         source.path)  # fmt: skip
    return value


def caption_objects(family: ChairFamily, text: str, path: str | Path | None, line: int | None = None) -> Any:
    """The family's reading of one caption; NLTK's regex time guard (a caption too long or too
    odd to tokenize) is bad input naming where the caption is."""
    try:
        return family.caption_objects(text)
    except TimeoutError:
        raise InputError(f"a caption of {len(text):,} characters could not be split into words in time (NLTK's regex time guard)",
                         path, line) from None  # fmt: skip


def ground_truth_from_coco(
    instances: Iterable[Path | CocoFile], captions: Iterable[Path | CocoFile], family: ChairFamily, *, year: str | None = None,
    only: Collection[ImageKey] | None = None,
) -> GroundTruth:
    """CHAIR's ground truth from COCO instance and caption files, as ``get_annotations`` builds it;
    ``only``: these images alone (Object HalBench's 300: the other captions are never read)."""
    vocab = vocabulary()
    found: dict[ImageKey, set[str]] = {}
    files: dict[str, str] = {}
    for source in map(_coco, instances):
        data, files[source.label] = _load_json(source)
        try:
            names = {cat["id"]: cat["name"] for cat in data["categories"]}
            for ann in data["annotations"]:
                if only is not None and _coco_id(ann, source) not in only:
                    continue
                found.setdefault(_coco_id(ann, source), set()).add(vocab.node_of[names[ann["category_id"]]])
        except (KeyError, TypeError) as err:
            raise InputError(f"not a COCO instances file ({source.member or source.path.name}: missing or unknown {err})", source.path) from None
    for source in map(_coco, captions):
        data, files[source.label] = _load_json(source)
        try:
            for ann in data["annotations"]:
                if only is not None and _coco_id(ann, source) not in only:
                    continue
                found.setdefault(_coco_id(ann, source), set()).update(caption_objects(family, ann["caption"], source.label).objects)
        except (KeyError, TypeError) as err:
            raise InputError(f"not a COCO captions file ({source.member or source.path.name}: missing {err})", source.path) from None
    return GroundTruth(family=family.name, source="coco", year=year, files=files,
                       objects={k: sorted(v) for k, v in sorted(found.items(), key=lambda kv: key_order(kv[0]))})  # fmt: skip


def ground_truth_from_objects(path: Path) -> GroundTruth:
    """Object lines ``{"image_id" or "image", "objects": [...]}``; each object a COCO category or a
    synonym of one (read as its category). Images are keyed as :func:`image_key` says; a second
    line for one image is refused unless it names the same objects."""

    vocab = vocabulary()
    found: dict[ImageKey, set[str]] = {}
    first_line: dict[ImageKey, int] = {}
    for rec in read_records(path, "object"):
        obj, line = rec.value, rec.line
        key = "image_id" if "image_id" in obj else "image"
        if key not in obj or not isinstance(obj.get("objects"), list):
            raise InputError(
                'expected {"image_id" or "image", "objects": [names]}', path, line
            )
        image = image_key(obj[key], path, line)
        nodes: set[str] = set()
        for name in obj["objects"]:
            if (
                not isinstance(name, str)
                or name.strip().lower() not in vocab.node_of
                or not name.strip()
            ):
                raise InputError(
                    f"image {image}: object {name!r} is not a COCO category or a CHAIR synonym of one",
                    path,
                    line,
                )
            nodes.add(vocab.node_of[name.strip().lower()])
        if image in found and found[image] != nodes:
            raise InputError(f"image {image} has a line already (line {first_line[image]}) with other objects: give one line per image",
                             path, line)  # fmt: skip
        found[image] = nodes
        first_line.setdefault(image, line)
    return GroundTruth(family="", source="objects", files={str(path): sha256_file(path)},
                       objects={k: sorted(v) for k, v in sorted(found.items(), key=lambda kv: key_order(kv[0]))})  # fmt: skip


def load_ground_truth(path: Path) -> GroundTruth:
    """A ground truth saved by :meth:`GroundTruth.save`, else object lines."""
    if not path.is_file():
        raise InputError("ground truth file not found", path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the ground truth: {err}", path) from None
    try:
        whole = loads(text)
    except json.JSONDecodeError:
        whole = None  # JSON Lines
    if (
        isinstance(whole, dict)
        and "source" in whole
        and isinstance(whole.get("objects"), dict)
    ):
        try:
            return GroundTruth.model_validate(whole)
        except ValueError as err:
            raise InputError(
                f"not a CHAIR ground truth file: {str(err).splitlines()[0]}", path
            ) from None
    return ground_truth_from_objects(path)


def shipped_ground_truth(family: str) -> GroundTruth:
    """The ground truth shipped for the standard lists' images, in ``family``."""
    name = family.removeprefix("chair@")
    resource = resources.files("halluprobe.captions.chair").joinpath(
        f"data/ground_truth_{name}.json"
    )
    if not resource.is_file():
        raise InputError(f"no shipped CHAIR ground truth for {family}")
    data = loads(resource.read_text(encoding="utf-8"))
    return GroundTruth(family=f"chair@{name}", source="shipped", year="2014", files={}, note=data["source"],
                       objects={int(k): v for k, v in data["objects"].items()})  # fmt: skip
