"""Synthetic scenes: small seeded images of themed objects, written as a COCO instances file.

The offline demo and the demo model's training need images whose ground truth is exact and
whose objects co-occur the way real photos' objects do (a fork goes with a cup, a bus with a
car), so that POPE's popular and adversarial negatives are harder than random ones. Each scene:

- has a theme (:data:`THEMES`: kitchen, street, park, office, beach) that tints the background
  (a scene's gist is visible, as in a photo) and supplies most of its objects; a few classes
  (:data:`SHARED`: person, bird, bag) turn up in any theme, person most often (COCO's most
  frequent class), and now and then one stray object from another theme;
- holds at least 3 objects (usually 3 to 6; a class may appear twice) of the 29 classes in :data:`CLASSES`, each
  drawn as a flat-coloured glyph (shape + colour, distinct per class; some classes share a
  colour or a shape, so a tiny or half-hidden glyph is ambiguous and context decides);
- places them at varied sizes (some tiny) and positions, later ones over earlier ones: an
  object may be partly hidden, but at least :data:`MIN_VISIBLE_FRACTION` of it and
  :data:`MIN_VISIBLE_PIXELS` pixels stay visible, otherwise it is placed again or left out.
  Every annotated object is visible and every drawn object is annotated.

Annotations follow COCO: ``bbox`` ``[x, y, w, h]`` and ``area`` are those of the visible pixels
(what a COCO annotator outlines), in drawing order (back to front); ``visible_fraction`` is
extra. Scene ``i`` of seed ``s`` depends on ``(s, i, size)`` only (its own generator, derived by
hashing), so sets of different lengths agree on their common scenes and the bytes written are
identical for identical arguments. Bump :data:`GENERATOR_VERSION` whenever that output changes.

The class table (classes, glyphs, themes, backgrounds) lives in
:mod:`halluprobe.benchmarks.synthetic_classes` and is re-exported here. numpy and pillow only: no torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from halluprobe.benchmarks.synthetic_classes import (
    BACKGROUNDS,
    CLASSES,
    SHARED,
    THEMES,
    category_ids,
    glyph_mask,
)
from halluprobe.errors import InputError
from halluprobe.files import write_atomic

__all__ = [
    "GENERATOR_VERSION",
    "MIN_VISIBLE_FRACTION",
    "MIN_VISIBLE_PIXELS",
    "Scene",
    "SceneObject",
    "SyntheticSet",
    "generate_scene",
    "iter_scenes",
    "write_synthetic",
]

GENERATOR_VERSION = "1"

_STRAY_P = 0.15  # chance of one object from another theme
_SECOND_P = 0.1  # chance of a second instance of one object
_TINY_P = 0.2  # chance that an object is tiny (about one vision patch or less)
_NOISE = 6  # background noise amplitude (+-), keeps backgrounds far from glyph colours

MIN_VISIBLE_FRACTION = 0.3
MIN_VISIBLE_PIXELS = 10
_PLACEMENT_TRIES = 20

_BY_NAME = {c.name: c for c in CLASSES}


@dataclass(frozen=True)
class SceneObject:
    """One drawn object: its class, where it was drawn, and what of it stays visible."""

    name: str
    box: tuple[int, int, int, int]  # the glyph's full box: x, y, w, h
    bbox: tuple[int, int, int, int]  # tight box of the visible pixels: x, y, w, h (COCO)
    area: int  # visible pixels
    visible_fraction: float


@dataclass(frozen=True)
class Scene:
    """One generated image (``uint8 [size, size, 3]``) with its objects, back to front.

    ``owner`` (``int16 [size, size]``) gives, per pixel, the index in ``objects`` of the object
    seen there, or -1 for background: the exact ground truth of every pixel.
    """

    index: int
    theme: str
    image: np.ndarray
    objects: tuple[SceneObject, ...]
    owner: np.ndarray

    @property
    def names(self) -> tuple[str, ...]:
        """Distinct object names in annotation order."""
        return tuple(dict.fromkeys(o.name for o in self.objects))


def _scene_rng(seed: int, index: int, size: int) -> np.random.Generator:
    digest = hashlib.sha256(f"halluprobe/synthetic:{GENERATOR_VERSION}:{seed}:{index}:{size}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "big")))


def _choose_objects(rng: np.random.Generator, theme: str) -> list[str]:
    own = list(THEMES[theme])
    k = int(rng.integers(2, min(4, len(own)) + 1))
    names = [own[i] for i in rng.permutation(len(own))[:k]]
    for shared, p in SHARED.items():
        if rng.random() < p:
            names.append(shared)
    if rng.random() < _STRAY_P:
        others = [c.name for c in CLASSES if c.theme not in (None, theme)]
        names.append(others[int(rng.integers(len(others)))])
    while len(names) < 3:  # POPE asks 3 positives per image
        rest = [n for n in own + list(SHARED) if n not in names]
        names.append(rest[int(rng.integers(len(rest)))])
    if rng.random() < _SECOND_P:
        names.append(names[int(rng.integers(len(names)))])
    return [names[i] for i in rng.permutation(len(names))]  # drawing order


def _background(rng: np.random.Generator, theme: str, size: int) -> np.ndarray:
    base = np.array(BACKGROUNDS[theme], dtype=np.float64) + rng.uniform(-10, 10, 3)
    # a soft vertical gradient (lighter at the top) plus per-pixel noise
    ramp = np.linspace(8, -8, size)[:, None, None]
    noise = rng.integers(-_NOISE, _NOISE + 1, (size, size, 3))
    return np.clip(base + ramp + noise, 0, 255).astype(np.uint8)


def _visible_ok(labels: np.ndarray, totals: list[int], upto: int) -> bool:
    counts = np.bincount(labels.ravel() + 1, minlength=upto + 2)[1:]  # label -1 = background
    return all(
        counts[i] >= MIN_VISIBLE_PIXELS and counts[i] >= MIN_VISIBLE_FRACTION * totals[i] for i in range(upto + 1)
    )


def generate_scene(seed: int, index: int, *, size: int = 96) -> Scene:
    """Scene ``index`` of the set ``seed`` (deterministic; see the module docstring)."""
    if size < 32:
        raise InputError(f"image size must be at least 32 pixels, got {size}")
    rng = _scene_rng(seed, index, size)
    themes = list(THEMES)
    theme = themes[int(rng.integers(len(themes)))]
    names = _choose_objects(rng, theme)
    image = _background(rng, theme, size)
    labels = np.full((size, size), -1, dtype=np.int32)  # index of the object that owns a pixel
    placed: list[tuple[str, tuple[int, int, int, int], np.ndarray]] = []
    totals: list[int] = []
    for name in names:
        cls = _BY_NAME[name]
        for _ in range(_PLACEMENT_TRIES):
            scale = rng.uniform(0.05, 0.09) if rng.random() < _TINY_P else rng.uniform(0.1, 0.3)
            side = scale * size
            w = max(4, int(round(side * rng.uniform(0.8, 1.25))))
            h = max(4, int(round(side * rng.uniform(0.8, 1.25))))
            x = int(rng.integers(0, size - w + 1))
            y = int(rng.integers(0, size - h + 1))
            mask = glyph_mask(cls.shape, h, w)
            if int(mask.sum()) < MIN_VISIBLE_PIXELS:
                continue
            trial = labels.copy()
            trial[y : y + h, x : x + w][mask] = len(placed)
            if _visible_ok(trial, totals + [int(mask.sum())], len(placed)):
                labels = trial
                placed.append((name, (x, y, w, h), mask))
                totals.append(int(mask.sum()))
                break
        # an object that finds no place is left out: never annotated, never drawn
    for i, (name, (x, y, w, h), _) in enumerate(placed):
        image[labels == i] = _BY_NAME[name].rgb
    objects = []
    for i, (name, box, _) in enumerate(placed):
        ys, xs = np.nonzero(labels == i)
        bbox = (int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1))
        objects.append(
            SceneObject(
                name=name, box=box, bbox=bbox, area=int(len(xs)), visible_fraction=round(len(xs) / totals[i], 4)
            )
        )
    return Scene(index=index, theme=theme, image=image, objects=tuple(objects), owner=labels.astype(np.int16))


def iter_scenes(seed: int, n: int, *, size: int = 96, start: int = 0) -> Iterator[Scene]:
    """Scenes ``start .. start + n - 1`` of the set ``seed``."""
    for index in range(start, start + n):
        yield generate_scene(seed, index, size=size)


@dataclass(frozen=True)
class SyntheticSet:
    """What :func:`write_synthetic` wrote."""

    root: Path
    images_dir: Path  # PNG files, the images root for ``halluprobe run``
    annotations: Path  # COCO instances JSON
    n_images: int
    seed: int
    size: int


def _file_name(index: int) -> str:
    return f"scene_{index:05d}.png"


def _png_bytes(image: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image, mode="RGB").save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def write_synthetic(
    out_dir: str | Path,
    *,
    n_images: int = 100,
    seed: int = 0,
    size: int = 96,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> SyntheticSet:
    """Write ``n_images`` scenes as ``OUT/images/scene_NNNNN.png`` and ``OUT/instances.json`` (COCO).

    ``halluprobe build pope OUT/instances.json`` then builds POPE from it, and ``halluprobe run``
    takes ``OUT/images`` as the images root. Refuses to replace existing files unless
    ``overwrite``. Identical arguments give identical bytes.
    """
    if n_images < 1:
        raise InputError(f"n_images must be at least 1, got {n_images}")
    root = Path(out_dir)
    images_dir = root / "images"
    annotations = root / "instances.json"
    if not overwrite and (annotations.exists() or (images_dir.exists() and any(images_dir.iterdir()))):
        raise InputError("output exists; pass overwrite to replace it", root)
    images_dir.mkdir(parents=True, exist_ok=True)
    cat_ids = category_ids()
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    for n, scene in enumerate(iter_scenes(seed, n_images, size=size), start=1):
        name = _file_name(scene.index)
        write_atomic(images_dir / name, _png_bytes(scene.image))
        images.append({"id": n, "file_name": name, "width": size, "height": size, "theme": scene.theme})
        for obj in scene.objects:
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": n,
                    "category_id": cat_ids[obj.name],
                    "bbox": list(obj.bbox),
                    "area": obj.area,
                    "iscrowd": 0,
                    "visible_fraction": obj.visible_fraction,
                }
            )
        if progress is not None:
            progress(n, n_images)
    doc = {
        "info": {
            "description": "halluprobe synthetic scenes",
            "generator": "halluprobe.benchmarks.synthetic",
            "generator_version": GENERATOR_VERSION,
            "seed": seed,
            "size": size,
            "n_images": n_images,
        },
        "images": images,
        "annotations": anns,
        "categories": [
            {"id": cat_ids[c.name], "name": c.name, "supercategory": c.theme or "any", "shape": c.shape, "colour": c.colour}
            for c in CLASSES
        ],
    }
    write_atomic(annotations, (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8"))
    return SyntheticSet(root=root, images_dir=images_dir, annotations=annotations, n_images=n_images, seed=seed, size=size)
