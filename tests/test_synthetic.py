"""Synthetic scenes: deterministic, and the COCO annotations say exactly what was drawn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from halluprobe.benchmarks.objects import read_objects
from halluprobe.benchmarks.pope import build_pope
from halluprobe.benchmarks.synthetic_classes import BACKGROUNDS, CLASSES, SHARED, THEMES, glyph_mask
from halluprobe.benchmarks.synthetic import MIN_VISIBLE_FRACTION, MIN_VISIBLE_PIXELS, generate_scene, write_synthetic
from halluprobe.errors import InputError

COLOUR_OF = {c.name: c.rgb for c in CLASSES}


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_other_images(tmp_path: Path) -> None:
    a = write_synthetic(tmp_path / "a", n_images=12, seed=5)
    b = write_synthetic(tmp_path / "b", n_images=12, seed=5)
    c = write_synthetic(tmp_path / "c", n_images=12, seed=6)
    assert _tree_bytes(a.root) == _tree_bytes(b.root)
    assert len(_tree_bytes(a.root)) == 13  # 12 PNG files + instances.json
    a_images = _tree_bytes(a.images_dir)
    assert not set(a_images.values()) & set(_tree_bytes(c.images_dir).values())
    # scene i depends on (seed, i) only: a longer set starts with the same scenes
    longer = write_synthetic(tmp_path / "d", n_images=15, seed=5)
    assert all(_tree_bytes(longer.images_dir)[k] == v for k, v in a_images.items())


def test_refuses_to_overwrite_and_rejects_bad_arguments(tmp_path: Path) -> None:
    write_synthetic(tmp_path / "a", n_images=2, seed=0)
    with pytest.raises(InputError, match="output exists"):
        write_synthetic(tmp_path / "a", n_images=2, seed=0)
    write_synthetic(tmp_path / "a", n_images=2, seed=0, overwrite=True)
    with pytest.raises(InputError, match="at least 1"):
        write_synthetic(tmp_path / "b", n_images=0)
    with pytest.raises(InputError, match="at least 32"):
        generate_scene(0, 0, size=16)


def _glyph_colours() -> dict[tuple[int, int, int], list[str]]:
    by_colour: dict[tuple[int, int, int], list[str]] = {}
    for c in CLASSES:
        by_colour.setdefault(c.rgb, []).append(c.name)
    return by_colour


def test_annotations_match_the_pixels_of_the_written_files(tmp_path: Path) -> None:
    """Read back the PNG files and the COCO JSON: every annotated object's colour fills exactly
    its area inside its tight bbox, and every glyph-coloured pixel belongs to an annotation of a
    class of that colour (nothing is drawn that is not annotated)."""
    out = write_synthetic(tmp_path / "s", n_images=40, seed=3)
    doc = json.loads(out.annotations.read_text())
    names = {c["id"]: c["name"] for c in doc["categories"]}
    by_image: dict[int, list[dict]] = {}
    for ann in doc["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    colours = _glyph_colours()
    checked = 0
    for img in doc["images"]:
        pixels = np.asarray(Image.open(out.images_dir / img["file_name"]).convert("RGB"))
        assert pixels.shape == (img["height"], img["width"], 3) == (96, 96, 3)
        anns = by_image.get(img["id"], [])
        assert len({a["category_id"] for a in anns}) >= 3  # POPE asks 3 positives per image
        covered = np.zeros(pixels.shape[:2], dtype=bool)
        for rgb, classes in colours.items():
            is_colour = np.all(pixels == np.array(rgb, dtype=np.uint8), axis=-1)
            mine = [a for a in anns if names[a["category_id"]] in classes]
            union = np.zeros_like(is_colour)
            for a in mine:
                x, y, w, h = a["bbox"]
                inside = is_colour[y : y + h, x : x + w]
                # tight: the colour touches all four edges of the box
                assert inside[0].any() and inside[-1].any() and inside[:, 0].any() and inside[:, -1].any()
                # overlapping same-colour instances may share pixels: at least its area is there
                assert inside.sum() >= a["area"] >= MIN_VISIBLE_PIXELS
                assert MIN_VISIBLE_FRACTION <= a["visible_fraction"] <= 1
                union[y : y + h, x : x + w] = True
                checked += 1
            assert not (is_colour & ~union).any(), f"{img['file_name']}: {classes} colour drawn outside annotations"
            covered |= is_colour
        # the rest is background: near the theme's colour, far from every glyph colour
        base = np.array(BACKGROUNDS[img["theme"]], dtype=int)
        assert np.abs(pixels[~covered].astype(int) - base).max() <= 10 + 8 + 6 + 1
    assert checked >= 120


def test_scene_objects_match_the_drawing_exactly() -> None:
    """In memory: each visible pixel set equals the glyph mask minus what later objects cover."""
    for index in range(30):
        scene = generate_scene(11, index)
        owner = np.full(scene.image.shape[:2], -1)
        for i, obj in enumerate(scene.objects):
            x, y, w, h = obj.box
            cls = next(c for c in CLASSES if c.name == obj.name)
            owner[y : y + h, x : x + w][glyph_mask(cls.shape, h, w)] = i
        for i, obj in enumerate(scene.objects):
            ys, xs = np.nonzero(owner == i)
            assert len(xs) == obj.area
            assert (int(xs.min()), int(ys.min()), int(np.ptp(xs)) + 1, int(np.ptp(ys)) + 1) == obj.bbox
            assert np.all(scene.image[owner == i] == COLOUR_OF[obj.name])


def test_themes_make_objects_co_occur_and_pope_builds_on_it_unchanged(tmp_path: Path) -> None:
    out = write_synthetic(tmp_path / "s", n_images=150, seed=0)
    index = read_objects(out.annotations)
    assert index.source_format == "coco" and len(index) == 150
    assert set(index.objects) <= {c.name for c in CLASSES} and len(index.objects) >= 20
    co = index.co_occurrence()
    theme_of = {c.name: c.theme for c in CLASSES}
    # an object's most frequent companion (other than the shared classes) is from its own theme
    for name, companions in co.items():
        if theme_of[name] is None:
            continue
        top = next(o for o in companions if o not in SHARED)
        assert theme_of[top] == theme_of[name], (name, list(companions)[:4])
    freq = index.frequencies()
    assert next(iter(freq)) == "person"  # the shared, COCO-like most frequent class
    build = build_pope(index, name="synthetic", n_images=100, per_image=3, seed=0)
    same_theme = {
        split: np.mean([theme_of[q.object] == theme_of[index.images[q.image][0]] or theme_of[q.object] is None
                        for q in qs if q.label == "no"])
        for split, qs in build.splits.items()
    }  # fmt: skip
    # adversarial negatives come from the scene's own theme (or the shared classes) far more often
    assert same_theme["adversarial"] > same_theme["random"] + 0.4
    assert all(len(v) == 600 for v in build.splits.values())
    assert {t for t in THEMES} == {img_theme for img_theme in BACKGROUNDS}
