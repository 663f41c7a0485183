"""Ground-truth objects per image: the input of every object-probing benchmark builder.

Two input formats are read, detected from the content (not the file name):

- a COCO instances JSON (one object with ``images``, ``annotations``, ``categories``): the
  image key is ``file_name``; an image's objects are its category names in the order their
  annotations first appear, de-duplicated; images without annotations have no objects;
- POPE-style JSON Lines, one ``{"image": ..., "objects": [...]}`` per line (other keys are
  ignored, as in the original POPE builder).

Every bad input raises :class:`~halluprobe.errors.InputError` naming the file and, for JSON
Lines, the 1-based line.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from halluprobe.errors import InputError
from halluprobe.jsonl import iter_objects, loads, read_text, type_name

__all__ = ["ObjectIndex", "ObjectFormat", "read_objects"]

logger = logging.getLogger(__name__)

ObjectFormat = Literal["coco", "jsonl", "memory"]

_COCO_KEYS = ("images", "annotations", "categories")


@dataclass(frozen=True)
class ObjectIndex:
    """Objects per image, in a deterministic order.

    ``images`` maps an image (file name or path relative to an images root) to its object
    names in first-appearance order, de-duplicated; the dict keeps the input's image order.
    Equality compares ``images`` only, so a COCO file and an equivalent JSON Lines file give
    equal indexes.
    """

    images: dict[str, tuple[str, ...]]
    source_sha256: str = field(default="", compare=False)
    source_path: Path | None = field(default=None, compare=False)
    source_format: ObjectFormat = field(default="memory", compare=False)

    def __len__(self) -> int:
        return len(self.images)

    @property
    def objects(self) -> list[str]:
        """Every object name that appears in at least one image, sorted by name."""
        return sorted({o for objs in self.images.values() for o in objs})

    def frequencies(self) -> dict[str, int]:
        """Object -> number of images containing it; most frequent first, ties by name."""
        counts: Counter[str] = Counter(o for objs in self.images.values() for o in objs)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def co_occurrence(self) -> dict[str, dict[str, int]]:
        """Object -> {other object: number of images containing both}.

        Outer keys sorted by name; inner dicts most co-occurring first, ties by name. Every
        object is a key, also one that never shares an image (its dict is empty).
        """
        table: dict[str, Counter[str]] = {}
        for objs in self.images.values():
            for o in objs:
                row = table.setdefault(o, Counter())
                for other in objs:
                    if other != o:
                        row[other] += 1
        return {
            o: dict(sorted(table[o].items(), key=lambda kv: (-kv[1], kv[0])))
            for o in sorted(table)
        }

    def restrict(self, images: Iterable[str]) -> ObjectIndex:
        """The index of a subset of images, in the given order (unknown names are a KeyError)."""
        return ObjectIndex(
            images={name: self.images[name] for name in images},
            source_sha256=self.source_sha256,
            source_path=self.source_path,
            source_format=self.source_format,
        )


def read_objects(path: str | Path) -> ObjectIndex:
    """Read a COCO instances JSON or a POPE-style ``{"image", "objects"}`` JSON Lines file."""
    p = Path(path)
    raw, text = read_text(p, "objects file")
    sha = hashlib.sha256(raw).hexdigest()
    if not text.strip():
        raise InputError("empty file", p)

    # Detection: a whole-document parse that gives an object with COCO keys is COCO; anything
    # else is read as JSON Lines, where errors are reported per line.
    try:
        doc: Any = loads(text)
    except json.JSONDecodeError as whole_err:
        first = next((ln for ln in text.split("\n") if ln.strip()), "")
        try:
            loads(first)
        except json.JSONDecodeError:
            # Not even one JSON line: a malformed single document (e.g. a truncated COCO
            # file); its parser knows the line.
            raise InputError(f"malformed JSON: {whole_err.msg}", p, whole_err.lineno) from whole_err
        images = _read_jsonl(text, p)
        fmt: ObjectFormat = "jsonl"
    else:
        if isinstance(doc, dict) and any(k in doc for k in _COCO_KEYS):
            images = _read_coco(doc, p)
            fmt = "coco"
        elif sum(1 for ln in text.split("\n") if ln.strip()) > 1:
            # one multi-line JSON document that is not COCO: saying so beats "malformed JSON
            # on line 1" from the line reader
            raise InputError(
                f"a JSON {type_name(doc)} that is neither a COCO instances file (images, annotations, "
                "categories) nor JSON Lines of {\"image\", \"objects\"}",
                p,
            )
        else:
            images = _read_jsonl(text, p)
            fmt = "jsonl"
    if not images:
        raise InputError("no images", p)
    logger.info("read %d images (%s) from %s", len(images), fmt, p)
    return ObjectIndex(images=images, source_sha256=sha, source_path=p, source_format=fmt)


def _dedup(names: Iterable[str]) -> tuple[str, ...]:
    # dict keeps insertion order: first appearance wins
    return tuple(dict.fromkeys(names))


def _read_jsonl(text: str, path: Path) -> dict[str, tuple[str, ...]]:
    images: dict[str, tuple[str, ...]] = {}
    first_line: dict[str, int] = {}
    for lineno, rec in iter_objects(text, path):
        for key in ("image", "objects"):
            if key not in rec:
                raise InputError(f"missing key {key!r}", path, lineno)
        image, objects = rec["image"], rec["objects"]
        if not isinstance(image, str) or not image:
            raise InputError(f"'image' must be a non-empty string, got {type_name(image)}", path, lineno)
        if not isinstance(objects, list):
            raise InputError(f"'objects' must be a list, got {type_name(objects)}", path, lineno)
        for o in objects:
            if not isinstance(o, str) or not o.strip():
                raise InputError(f"object names must be non-empty strings, got {o!r}", path, lineno)
        if image in images:
            raise InputError(f"duplicate image {image!r} (first on line {first_line[image]})", path, lineno)
        images[image] = _dedup(objects)
        first_line[image] = lineno
    return images


def _int_field(item: Any, key: str, where: str, path: Path) -> int:
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected an object, got {type_name(item)}", path)
    if key not in item:
        raise InputError(f"{where}: missing key {key!r}", path)
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: {key!r} must be an integer, got {type_name(value)}", path)
    return value


def _str_field(item: dict[str, Any], key: str, where: str, path: Path) -> str:
    if key not in item:
        raise InputError(f"{where}: missing key {key!r}", path)
    value = item[key]
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: {key!r} must be a non-empty string, got {value!r}", path)
    return value


def _read_coco(doc: dict[str, Any], path: Path) -> dict[str, tuple[str, ...]]:
    # A COCO document is usually one line (or pretty-printed), so errors name the element
    # (``annotations[12]``) rather than a line.
    for key in _COCO_KEYS:
        if key not in doc:
            raise InputError(f"COCO instances file: missing key {key!r}", path)
        if not isinstance(doc[key], list):
            raise InputError(f"COCO instances file: {key!r} must be a list, got {type_name(doc[key])}", path)

    categories: dict[int, str] = {}
    for i, cat in enumerate(doc["categories"]):
        where = f"categories[{i}]"
        cid = _int_field(cat, "id", where, path)
        name = _str_field(cat, "name", where, path)
        if cid in categories:
            raise InputError(f"{where}: duplicate category id {cid}", path)
        categories[cid] = name

    file_names: dict[int, str] = {}
    seen_files: dict[str, int] = {}
    for i, img in enumerate(doc["images"]):
        where = f"images[{i}]"
        iid = _int_field(img, "id", where, path)
        name = _str_field(img, "file_name", where, path)
        if iid in file_names:
            raise InputError(f"{where}: duplicate image id {iid}", path)
        if name in seen_files:
            raise InputError(f"{where}: duplicate image {name!r} (first at images[{seen_files[name]}])", path)
        file_names[iid] = name
        seen_files[name] = i

    per_image: dict[int, list[str]] = {iid: [] for iid in file_names}
    for i, ann in enumerate(doc["annotations"]):
        where = f"annotations[{i}]"
        iid = _int_field(ann, "image_id", where, path)
        cid = _int_field(ann, "category_id", where, path)
        if cid not in categories:
            raise InputError(f"{where}: unknown category id {cid}", path)
        if iid not in per_image:
            raise InputError(f"{where}: unknown image id {iid}", path)
        per_image[iid].append(categories[cid])

    return {file_names[iid]: _dedup(names) for iid, names in per_image.items()}
