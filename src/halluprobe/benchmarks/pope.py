"""POPE: build the random / popular / adversarial splits (POPE-format files are read and
written by :mod:`halluprobe.benchmarks.question_file`; this module re-exports its readers).

The builder follows the original POPE builder (RUCAIBox/POPE, ``utils.py`` and ``main.py``):

- keep the images with at least ``per_image`` objects and sample ``n_images`` of them;
- per image, ``per_image`` positives (the first ones, or a seeded random choice), each followed
  by one negative: an object of the sampled images that is not in the image and was not asked
  about this image yet, chosen
  - ``random``: uniformly;
  - ``popular``: the most frequent in the sampled images;
  - ``adversarial``: the one that co-occurs most often with that positive;
  with a uniform random fallback when the ranked list has nothing left (as the original);
- question ids 1..N per split, each positive followed by its negative.

Differences from the original, on purpose: every random draw comes from a local generator
derived from ``seed`` and its purpose (images, positives of one image, one split), so the same
inputs and seed give byte-identical files; ties in the popular and adversarial rankings are
broken by name (the original kept dict order); the article ``a`` becomes ``an`` only where it
is the word right before the ``{}`` placeholder (the original's ``template.replace("a", "an")``
turned "image" into "imange"). Bump :data:`SAMPLER_VERSION` whenever the output for given
inputs changes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from halluprobe import __version__  # late: keeps this module importable on its own
from halluprobe.benchmarks.objects import ObjectIndex
from halluprobe.benchmarks.question_file import (  # re-exported: their home before the split
    questions_bytes,
)
from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.records import SCHEMA_VERSION, Question

__all__ = [
    "SAMPLER_VERSION",
    "SPLITS",
    "DEFAULT_TEMPLATE",
    "Split",
    "PopeBuild",
    "build_pope",
    "write_pope",
    "pope_file_names",
    "question_text",
]

logger = logging.getLogger(__name__)

SAMPLER_VERSION = "1"
Split = Literal["random", "popular", "adversarial"]
SPLITS: tuple[Split, ...] = ("random", "popular", "adversarial")
DEFAULT_TEMPLATE = "Is there a {} in the image?"

_VOWELS = frozenset("aeiouAEIOU")
# the article word "a"/"A" right before the placeholder, and only that one
_ARTICLE_RE = re.compile(r"\b([Aa])(\s+)(?=\{\})")


# ---------------------------------------------------------------------------------------------
# build


@dataclass(frozen=True)
class PopeBuild:
    """The three POPE splits built from one object index, with what ``write_pope`` persists."""

    name: str
    splits: dict[str, list[Question]]
    # the sampled images in sampled order, with their objects
    image_objects: dict[str, tuple[str, ...]]
    # object -> number of sampled images containing it (the official *_ground_truth_objects.json)
    ground_truth_objects: dict[str, int]
    # object -> {other: number of sampled images containing both}, most co-occurring first
    co_occurrence: dict[str, dict[str, int]]
    parameters: dict[str, Any]
    seed: int
    eligible_images: int
    # per split: how many negatives fell back to a random pick (popular / adversarial)
    random_fallbacks: dict[str, int]
    source_path: Path | None = None
    source_sha256: str = ""
    source_format: str = "memory"
    source_images: int = 0
    sampler_version: str = SAMPLER_VERSION

    @property
    def images(self) -> list[str]:
        return list(self.image_objects)

    @property
    def random(self) -> list[Question]:
        return self.splits["random"]

    @property
    def popular(self) -> list[Question]:
        return self.splits["popular"]

    @property
    def adversarial(self) -> list[Question]:
        return self.splits["adversarial"]


def question_text(template: str, object_name: str) -> str:
    """Fill the ``{}`` placeholder; ``a`` right before it becomes ``an`` for a vowel-initial name."""
    if object_name[:1] in _VOWELS:
        template = _ARTICLE_RE.sub(lambda m: ("An" if m.group(1) == "A" else "an") + m.group(2), template, count=1)
    # replace, not str.format: a template may contain other braces
    return template.replace("{}", object_name, 1)


def _rng(seed: int, purpose: str) -> random.Random:
    # One independent generator per purpose, derived by hashing: adding a split or changing how
    # many images are sampled never shifts the draws of another purpose.
    digest = hashlib.sha256(f"halluprobe/pope:{seed}:{purpose}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _ranked(counts: dict[str, int]) -> list[str]:
    return [k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def build_pope(
    index: ObjectIndex,
    *,
    name: str = "coco",
    n_images: int = 500,
    per_image: int = 3,
    seed: int = 0,
    positives: Literal["first", "random"] = "first",
    template: str = DEFAULT_TEMPLATE,
    progress: Callable[[int, int], None] | None = None,
) -> PopeBuild:
    """Build the three POPE splits from an object index (see the module docstring)."""
    src = index.source_path
    if n_images < 1:
        raise InputError(f"n_images must be at least 1, got {n_images}")
    if per_image < 1:
        raise InputError(f"per_image must be at least 1, got {per_image}")
    if positives not in ("first", "random"):
        raise InputError(f"positives must be 'first' or 'random', got {positives!r}")
    if template.count("{}") != 1:
        raise InputError(f"template must contain exactly one {{}} placeholder: {template!r}")
    if not name or "/" in name or "\\" in name:
        raise InputError(f"name must be a plain file-name prefix, got {name!r}")

    # Sort before sampling so the sample depends on the set of images, not the file order.
    eligible = sorted(img for img, objs in index.images.items() if len(objs) >= per_image)
    if not eligible:
        raise InputError(f"no image has at least {per_image} objects", src)
    if len(eligible) < n_images:
        logger.warning(
            "only %d images have at least %d objects (asked for %d): using all of them",
            len(eligible), per_image, n_images,
        )
    sampled = _rng(seed, "images").sample(eligible, min(n_images, len(eligible)))
    sub = index.restrict(sampled)

    positives_of: dict[str, list[str]] = {}
    for img in sampled:
        objs = list(sub.images[img])
        if positives == "first":
            positives_of[img] = objs[:per_image]
        else:
            positives_of[img] = _rng(seed, f"positives:{img}").sample(objs, per_image)

    universe = sub.objects  # sorted: rng.choice over it is deterministic
    freq = sub.frequencies()
    co = sub.co_occurrence()
    popular_rank = _ranked(freq)

    splits: dict[str, list[Question]] = {}
    fallbacks: dict[str, int] = {}
    total = len(SPLITS) * len(sampled)
    done = 0
    for split in SPLITS:
        rng = _rng(seed, f"negatives:{split}")
        questions: list[Question] = []
        n_fallback = 0
        for img in sampled:
            present = set(sub.images[img])
            asked: set[str] = set()
            for pos in positives_of[img]:
                if split == "random":
                    ranked: Sequence[str] = ()
                elif split == "popular":
                    ranked = popular_rank
                else:
                    ranked = list(co.get(pos, {}))  # already most co-occurring first, ties by name
                neg = next((o for o in ranked if o not in present and o not in asked), None)
                if neg is None:
                    if split != "random":
                        n_fallback += 1
                    candidates = [o for o in universe if o not in present and o not in asked]
                    if not candidates:
                        raise InputError(
                            f"image {img!r}: no object left to ask as a negative (the sampled images "
                            f"have only {len(universe)} distinct objects)",
                            src,
                        )
                    neg = rng.choice(candidates)
                asked.add(neg)
                for obj, label in ((pos, "yes"), (neg, "no")):
                    questions.append(
                        Question(
                            split=split,
                            question_id=len(questions) + 1,
                            image=img,
                            text=question_text(template, obj),
                            label=label,  # type: ignore[arg-type]
                            object=obj,
                        )
                    )
            done += 1
            if progress is not None:
                progress(done, total)
        splits[split] = questions
        fallbacks[split] = n_fallback
        if n_fallback:
            logger.info("%s: %d negatives fell back to a random pick", split, n_fallback)

    return PopeBuild(
        name=name,
        splits=splits,
        image_objects=dict(sub.images),
        ground_truth_objects=freq,
        co_occurrence=co,
        parameters={"n_images": n_images, "per_image": per_image, "positives": positives, "template": template},
        seed=seed,
        eligible_images=len(eligible),
        random_fallbacks=fallbacks,
        source_path=src,
        source_sha256=index.source_sha256,
        source_format=index.source_format,
        source_images=len(index.images),
    )


# ---------------------------------------------------------------------------------------------
# write


def pope_file_names(name: str) -> dict[str, str]:
    """Output file names of ``write_pope``: split -> file, plus ground truth, co-occurrence, manifest."""
    names = {split: f"{name}_pope_{split}.json" for split in SPLITS}
    names["ground_truth_objects"] = f"{name}_ground_truth_objects.json"
    names["co_occur"] = f"{name}_co_occur.json"
    names["manifest"] = "manifest.json"
    return names


def _split_counts(questions: list[Question]) -> dict[str, int]:
    return {
        "questions": len(questions),
        "images": len({q.image for q in questions}),
        "yes": sum(q.label == "yes" for q in questions),
        "no": sum(q.label == "no" for q in questions),
    }


def write_pope(build: PopeBuild, out_dir: str | Path, *, overwrite: bool = False) -> list[Path]:
    """Write the three split files, ground-truth objects, co-occurrence and ``manifest.json``.

    Refuses (InputError naming the file) when any output exists, before writing anything,
    unless ``overwrite``. Returns the written paths, manifest last.
    """

    out = Path(out_dir)
    names = pope_file_names(build.name)
    targets = {key: out / fname for key, fname in names.items()}
    if not overwrite:
        for p in targets.values():
            if p.exists():
                raise InputError("output exists; pass overwrite to replace it", p)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create output directory: {e.strerror or e}", out) from e

    payloads: dict[str, bytes] = {}
    for split in SPLITS:
        payloads[split] = questions_bytes(build.splits[split], targets[split])
    payloads["ground_truth_objects"] = (json.dumps(build.ground_truth_objects, ensure_ascii=False) + "\n").encode()
    payloads["co_occur"] = (json.dumps(build.co_occurrence, ensure_ascii=False) + "\n").encode()

    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "pope",
        "sampler_version": build.sampler_version,
        "halluprobe_version": __version__,
        "name": build.name,
        "seed": build.seed,
        "parameters": build.parameters,
        "input": {
            "path": str(build.source_path) if build.source_path is not None else None,
            "sha256": build.source_sha256,
            "format": build.source_format,
            "images": build.source_images,
            "eligible_images": build.eligible_images,
        },
        "images": len(build.image_objects),
        "splits": {
            split: {
                "file": names[split],
                **_split_counts(build.splits[split]),
                "random_fallbacks": build.random_fallbacks.get(split, 0),
            }
            for split in SPLITS
        },
        "files": {names[key]: hashlib.sha256(data).hexdigest() for key, data in payloads.items()},
    }
    payloads["manifest"] = (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode()

    written: list[Path] = []
    for key, data in payloads.items():  # manifest last: its presence means the set is complete
        write_atomic(targets[key], data)
        written.append(targets[key])
    logger.info("wrote %d files to %s", len(written), out)
    return written
