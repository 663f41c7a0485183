"""Fetch a pinned POPE dataset (:mod:`halluprobe.benchmarks.datasets`) as question files, and its images.

POPE-shaped sources (A-OKVQA, GQA, RePOPE) are copied byte for byte (JSON arrays stay arrays:
:func:`~halluprobe.benchmarks.pope.read_questions` reads both). DASH-B's and POPEv2's own files
are converted to one POPE-format JSON-lines file each:

- DASH-B (``src/data/dash_b.py`` of YanNeu/DASH-B): one question per (object, image), negatives
  first, in the order of the authors' loader, the query of its default ``prompt_id=4``; the
  image is ``{neg|pos}/{source dataset}/{object}/{file}`` under the images root (the authors'
  ``images/`` layout), since positive file names repeat across objects.
- POPEv2 (``POPEv2/dataset/annotations.json``): the original COCO train2017 image is
  ``train2017/<file>`` (public, fetched), its edited copy ``edited/<file>`` (the user's folder);
  each record keeps its ``pair`` (the COCO image id) and ``variant``.

Images: COCO folders are fetched (only the images the questions use); any other folder is
checked and every missing image named.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from halluprobe.benchmarks.created import CreatedOutputs, removed_on_failure
from halluprobe.benchmarks.datasets import DatasetVersion, SourceFile
from halluprobe.benchmarks.download import already_pinned, copy_pinned, default_cache_dir, fetch_pinned
from halluprobe.benchmarks.fingerprint import content_fingerprint
from halluprobe.benchmarks.question_file import read_questions, write_questions
from halluprobe.benchmarks.sources import (
    fetch_coco_images,
    fetch_images,
    image_names,
)
from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.records import Question

__all__ = [
    "DASHB_QUERY",
    "ENV_GITHUB_MIRROR",
    "COCO_ROOT_URL",
    "dashb_questions",
    "popev2_questions",
    "fetch_source",
    "fetch_dataset",
    "missing_images",
    "fingerprint_of_file",
    "fetch_dataset_images",
]

# dash_b.py's get_prompt(prompt_id=4), the default its evaluate.py uses (the README writes "." for "?")
DASHB_QUERY = "Can you see a {} in this image? Please answer only with yes or no."
# a mirror of raw.githubusercontent.com laid out <repository>/<commit>/<path> (tests: file://)
ENV_GITHUB_MIRROR = "HALLUPROBE_GITHUB_URL"
COCO_ROOT_URL = "http://images.cocodataset.org/"


def _load_json(path: Path) -> Any:
    try:
        return loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"cannot read as JSON: {e}", path) from e


def dashb_questions(neg_path: Path, pos_path: Path) -> list[Question]:
    """DASH-B's ``{dataset: {object: [file, ...]}}`` files as questions, in the authors' order."""
    questions: list[Question] = []
    for path, polarity, label in ((neg_path, "neg", "no"), (pos_path, "pos", "yes")):
        data = _load_json(path)
        if not isinstance(data, dict):
            raise InputError("expected {source dataset: {object: [image file, ...]}}", path)
        for source, objects in data.items():
            if not isinstance(objects, dict):
                raise InputError(f"{source!r}: expected {{object: [image file, ...]}}", path)
            for obj, files in objects.items():
                if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
                    raise InputError(f"{source!r}/{obj!r}: expected a list of image file names", path)
                for name in files:
                    questions.append(
                        Question(
                            split="dashb",
                            question_id=len(questions) + 1,
                            image=f"{polarity}/{source}/{obj}/{name}",
                            text=DASHB_QUERY.format(obj),
                            label=label,  # type: ignore[arg-type]
                            object=obj,
                            metadata={"source_dataset": source, "img_id": name},
                        )
                    )
    return questions


def popev2_questions(path: Path) -> list[Question]:
    """POPEv2's annotations (``image_id``, ``image_name``, ``target_object``, ``query``, ``label``) as questions."""
    data = _load_json(path)
    if not isinstance(data, list):
        raise InputError("expected a JSON array of POPEv2 records", path)
    questions: list[Question] = []
    for i, rec in enumerate(data):
        keys = ("image_id", "image_name", "target_object", "query", "label")
        if not isinstance(rec, dict) or any(k not in rec for k in keys):
            raise InputError(f"record {i}: expected the keys {', '.join(keys)}", path)
        folder, _, name = str(rec["image_name"]).strip("/").rpartition("/")
        variant = "original" if folder.endswith("train2017") else "edited"
        label = str(rec["label"]).strip().lower()
        if label not in ("yes", "no"):
            raise InputError(f"record {i}: label {rec['label']!r} is neither Yes nor No", path)
        questions.append(
            Question(
                split="popev2",
                question_id=i + 1,
                image=f"{'train2017' if variant == 'original' else 'edited'}/{name}",
                text=str(rec["query"]),
                label=label,  # type: ignore[arg-type]
                object=str(rec["target_object"]),
                metadata={"pair": rec["image_id"], "variant": variant},
            )
        )
    return questions


def fetch_source(source: SourceFile, *, cache_dir: Path | None = None, mirror: str | None = None) -> Path:
    """The verified cached copy of one pinned file (downloaded at its commit when absent)."""
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    url = source.url(mirror or os.environ.get(ENV_GITHUB_MIRROR))
    return fetch_pinned(url, source.name, source.sha256, cache_dir=cache, kind="github", size=source.size)


def fetch_dataset(
    version: DatasetVersion,
    out_dir: Path,
    *,
    cache_dir: Path | None = None,
    mirror: str | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
    created: CreatedOutputs | None = None,
) -> list[Path]:
    """Write ``version``'s question files into ``out_dir`` (sources downloaded, verified, cached).

    Every source is fetched and converted, and every destination checked, before ``out_dir`` is
    touched; a failure leaves nothing it created (``created``: the caller's record, undone by the
    caller, :mod:`halluprobe.benchmarks.created`)."""

    ready: list[tuple[Path, Path | list[Question]]] = []  # (destination, cached source or questions)
    for i, (name, sources) in enumerate(version.sources.items(), start=1):
        cached = [fetch_source(s, cache_dir=cache_dir, mirror=mirror) for s in sources]
        dest = out_dir / name
        if version.shape == "pope":
            if not already_pinned(dest, sources[0].sha256, overwrite=overwrite):
                ready.append((dest, cached[0]))
        else:
            questions = dashb_questions(*cached) if version.shape == "dashb" else popev2_questions(cached[0])
            # the conversion is checked like a download: its questions must be the pinned ones
            got = content_fingerprint(questions)
            if got != version.fingerprints[name]:
                raise InputError(f"converted questions have fingerprint {got}, the registry pins {version.fingerprints[name]}", cached[0])
            if dest.exists() and not overwrite:
                if fingerprint_of_file(dest) != got:  # the same questions already there: kept
                    raise InputError("exists and holds other questions; pass overwrite to replace it", dest)
            else:
                ready.append((dest, questions))
        if progress is not None:
            progress(i, len(version.sources))
    with removed_on_failure(created) as made:
        try:  # only once there is something to write: an offline attempt leaves no empty --out behind
            made.folder(out_dir)
        except OSError as e:
            raise InputError(f"cannot create output directory: {e.strerror or e}", out_dir) from e
        made.new_files(dest for dest, _ in ready)
        for dest, content in ready:
            if isinstance(content, Path):
                copy_pinned(content, dest, version.sources[dest.name][0].sha256, overwrite=True)
            else:
                write_questions(dest, content)
    return [out_dir / name for name in version.sources]


def fingerprint_of_file(path: Path) -> str | None:
    """The content fingerprint of a POPE-format file, None for any other file."""

    try:
        return content_fingerprint(read_questions(path))
    except InputError:
        return None


def missing_images(question_files: list[Path], images_dir: Path) -> list[str]:
    """The images the questions use that are not files under ``images_dir``."""

    return [name for name in image_names(question_files) if not (images_dir / name).is_file()]


def fetch_dataset_images(
    version: DatasetVersion,
    question_files: list[Path],
    images_dir: Path,
    *,
    base_url: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    created: CreatedOutputs | None = None,
) -> tuple[str, list[str]]:
    """Fetch what is public (COCO val2014; POPEv2's train2017 originals) into ``images_dir`` and
    check the rest: (a line saying what was done, the images still missing)."""

    if version.images == "coco-val2014":
        report = fetch_coco_images(question_files, images_dir, base_url=base_url, progress=progress, created=created)
        return str(report), sorted(report.failed)
    if version.images == "popev2":
        public = [n for n in image_names(question_files) if n.startswith("train2017/")]
        report = fetch_images(public, images_dir, (base_url or COCO_ROOT_URL).rstrip("/") + "/", progress=progress, created=created)
        missing = sorted(report.failed) + missing_images(question_files, images_dir)
        return f"COCO train2017 originals: {report}", sorted(set(missing))
    missing = missing_images(question_files, images_dir)
    total = len(image_names(question_files))
    return f"{total - len(missing)} of {total} images present (not fetched: no pinned public URL)", missing
