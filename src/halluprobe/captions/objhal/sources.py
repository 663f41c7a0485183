"""Object HalBench's files, pinned at an RLAIF-V commit, and its question file for ``run``.

Two files of RLHF-V/RLAIF-V at :data:`RLAIFV_COMMIT`: ``synonyms_refine.txt`` (pinned by
sha256 and size) and ``obj_halbench_300_with_image.jsonl`` (300 lines: ``image_id``,
``question``, ``image`` as base64). The question file's bytes were not readable offline when
the pin was written, so it is pinned by its git blob id at that commit (sha1 of ``blob <size>\\0``
and the bytes: the id the commit's tree names), checked on every fetch, and its sha256 is
recorded in ``objhal_sources.json`` beside it. A download that matches neither is removed and
is one line (exit 2).

``objhal.jsonl`` is the halluprobe question file (``kind: open``, one line per image, the
question as the file asks it), and the images are the bytes the file carries, written as
``COCO_val2014_<id>.jpg`` so that every image is keyed by its COCO id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from halluprobe.benchmarks.created import CreatedOutputs
from halluprobe.benchmarks.download import (
    FileFailure,
    download,
    mirror_url,
    remove_quietly,
    sha256_of_file,
)
from halluprobe.benchmarks.question_file import questions_bytes
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.files import write_atomic
from halluprobe.records import Question

__all__ = [
    "ENV_GITHUB_MIRROR",
    "N_IMAGES",
    "OBJHAL_SPLIT",
    "QUESTIONS",
    "RLAIFV_COMMIT",
    "RLAIFV_REPOSITORY",
    "SYNONYMS",
    "ObjhalItem",
    "PinnedFile",
    "fetch_objhal",
    "git_blob_id",
    "image_name",
    "objhal_questions",
    "read_objhal_items",
]

RLAIFV_REPOSITORY = "RLHF-V/RLAIF-V"
RLAIFV_COMMIT = "83d917b2e8118ca8e7877a796d72af9bb3e6b356"  # 2025; both files last changed 2024-06-01
ENV_GITHUB_MIRROR = "HALLUPROBE_GITHUB_URL"
N_IMAGES = 300
OBJHAL_SPLIT = "objhal"


@dataclass(frozen=True)
class PinnedFile:
    """One file at :data:`RLAIFV_COMMIT`: its git blob id always, its sha256 and size where known."""

    path: str
    git_blob: str
    sha256: str | None = None
    size: int | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def url(self, mirror: str | None = None) -> str:
        base = (mirror_url(mirror, ENV_GITHUB_MIRROR).rstrip("/") + "/") if mirror else "https://raw.githubusercontent.com/"
        return f"{base}{RLAIFV_REPOSITORY}/{RLAIFV_COMMIT}/{self.path}"


SYNONYMS = PinnedFile(
    "eval/data/synonyms_refine.txt", "87b25aa23b342364e017e84714ff76cec1b069f4",
    "681041d2958d7871ed6fa69c3108f34aa6a0a354eb53ed4c5a425e65f86bc72a", 3594,
)  # fmt: skip
QUESTIONS = PinnedFile("eval/data/obj_halbench_300_with_image.jsonl", "cb8e15a81a1ddf720f306fda0decefb1ed80c31f")


def git_blob_id(path: Path) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def _pinned_there(pin: PinnedFile, dest: Path, overwrite: bool) -> bool:
    """Whether ``dest`` already holds the pinned bytes (kept); another file there is one line
    unless ``overwrite``."""
    if not (dest.exists() or dest.is_symlink()):
        return False
    if dest.is_file() and git_blob_id(dest) == pin.git_blob and pin.sha256 in (None, sha256_of_file(dest)):
        return True
    if not overwrite or not dest.is_file():
        raise InputError("exists and is not the pinned file (--overwrite replaces it)", dest)
    return False


def _fetch(pin: PinnedFile, out: Path, mirror: str | None, created: CreatedOutputs) -> str:
    """Download ``pin`` to ``out/<name>`` (checked before it takes the name); its sha256."""
    url = pin.url(mirror)
    dest = out / pin.name
    part = dest.with_name(dest.name + ".part")
    try:
        got = download(url, part, max_bytes=pin.size)
    except FileFailure as e:
        remove_quietly(part)
        raise RuntimeFailure(f"{pin.name}: download failed: {e}") from e
    except BaseException:
        remove_quietly(part)
        raise
    blob = git_blob_id(part)
    if (pin.sha256 is not None and got != pin.sha256) or blob != pin.git_blob:
        remove_quietly(part)
        want = f"sha256 {pin.sha256}" if pin.sha256 else f"git blob {pin.git_blob}"
        have = f"sha256 {got}" if pin.sha256 else f"git blob {blob}"
        raise InputError(f"pin mismatch: expected {want}, got {have}; the download was removed", url)
    created.new_files([dest])
    try:
        os.replace(part, dest)
    except OSError as e:
        remove_quietly(part)
        raise InputError(f"cannot write: {e.strerror or e}", dest) from None
    return got


@dataclass(frozen=True)
class ObjhalItem:
    """One line of the question file: the COCO image, the question, the image's bytes."""

    image_id: int
    question: str
    image: bytes
    line: int


def read_objhal_items(path: Path, *, expected: int | None = N_IMAGES) -> list[ObjhalItem]:
    """The question file, every line checked (one line naming file:line for a bad one)."""
    items: list[ObjhalItem] = []
    seen: dict[int, int] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the question file: {e}", path) from None
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            raise InputError("not a JSON line (a truncated file?)", path, n) from None
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str) or not isinstance(rec.get("image"), str):
            raise InputError("expected an object with 'image_id', 'question' and 'image' (base64)", path, n)
        try:
            image_id = int(rec.get("image_id"))  # type: ignore[arg-type]  # the script reads int(image_id)
            image = base64.b64decode(rec["image"], validate=True)
        except (TypeError, ValueError, binascii.Error):
            raise InputError("'image_id' must be an integer and 'image' base64", path, n) from None
        if image_id in seen:
            raise InputError(f"image {image_id} again (first on line {seen[image_id]})", path, n)
        seen[image_id] = n
        items.append(ObjhalItem(image_id, rec["question"], image, n))
    if expected is not None and len(items) != expected:
        raise InputError(f"{len(items)} questions, Object HalBench has {expected} (a truncated file?)", path)
    return items


def image_name(image_id: int) -> str:
    return f"COCO_val2014_{image_id:012d}.jpg"


def objhal_questions(items: list[ObjhalItem]) -> list[Question]:
    """One open question per image, the question as the file asks it (question_id = line order)."""
    return [
        Question(
            split=OBJHAL_SPLIT, question_id=i, image=image_name(it.image_id), text=it.question, label="yes", kind="open",
            metadata={"image_id": it.image_id, "chair_list": "objhal300", "rlaifv_commit": RLAIFV_COMMIT},
        )
        for i, it in enumerate(items)
    ]  # fmt: skip


def _refuse_other(dest: Path, data: bytes, overwrite: bool) -> None:
    # a rerun writes the same bytes; anything else there is the user's unless --overwrite
    if dest.is_symlink() or dest.is_dir() or (dest.is_file() and not overwrite and dest.read_bytes() != data):
        raise InputError("exists and differs from what data objhal writes (--overwrite replaces a file)", dest)


def fetch_objhal(out: Path, images: Path, *, mirror: str | None, overwrite: bool, created: CreatedOutputs) -> list[Path]:
    """Fetch both pinned files into ``out`` (kept where already there), check the question file,
    write ``objhal.jsonl``, ``objhal_sources.json`` and the images (into ``images``): every
    output is checked before any but the pinned files is written. The paths written."""
    try:
        created.folder(out)
    except OSError as e:
        raise InputError(f"cannot create the output folder: {e.strerror or e}", out) from None
    pins = (SYNONYMS, QUESTIONS)
    kept = {pin.name: _pinned_there(pin, out / pin.name, overwrite) for pin in pins}
    digests = {pin.name: sha256_of_file(out / pin.name) if kept[pin.name] else _fetch(pin, out, mirror, created) for pin in pins}
    items = read_objhal_items(out / QUESTIONS.name)
    sources = {p.name: {"repository": RLAIFV_REPOSITORY, "commit": RLAIFV_COMMIT, "path": p.path, "git_blob": p.git_blob,
                        "sha256": digests[p.name]} for p in pins}  # fmt: skip
    outputs = {out / "objhal.jsonl": questions_bytes(objhal_questions(items)), out / "objhal_sources.json": (json.dumps(sources, indent=2) + "\n").encode()}
    outputs.update({images / image_name(it.image_id): it.image for it in items})
    for dest, data in outputs.items():
        _refuse_other(dest, data, overwrite)
    try:
        created.folder(images)
    except OSError as e:
        raise InputError(f"cannot create the images folder: {e.strerror or e}", images) from None
    created.new_files(outputs)
    for dest, data in outputs.items():
        write_atomic(dest, data)
    return [out / SYNONYMS.name, out / QUESTIONS.name, out / "objhal.jsonl", out / "objhal_sources.json"]
