"""Induction: the model under test describes each image with hallucination-inducing prompts.

A prompt set is a TOML file (data, never code)::

    name = "detailed"                    # optional; default: the file's stem
    system = "You are a meticulous..."   # optional; put in front of each user prompt
    prompts = ["Describe everything in this image, including objects that are partly hidden.",
               "List all objects you can see, even small ones in the background."]
    epochs = 1                           # times each prompt is asked per image
    max_new_tokens = 256
    json_mode = false                    # ask for {"description": "..."}; validated, retried
    max_retries = 2                      # JSON mode only
    template = "chat"                    # optional prompt template for render_prompt

Epochs repeat a prompt; every backend decodes greedily today, so repeats give the same text
unless the backend samples: the epoch is part of each record's key for when one does.

Descriptions go to an append-only JSON Lines file, one :class:`Description` per (image, prompt,
epoch), flushed and fsynced per image, with the sha256 of the image's bytes. Running again
resumes: keys already there are skipped (a truncated last line from a killed run is ignored);
lines written with another prompt set or model, or about another image of the same file name
(another ``--images`` folder), are refused (exit 2), never mixed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, ValidationError, field_validator

from halluprobe.backends.base import Backend
from halluprobe.benchmarks.autoprobe.generation import (
    GenerationItem,
    compose_prompt,
    generate,
    generate_json,
    parse_json_object,
)
from halluprobe.errors import InputError
from halluprobe.records import SCHEMA_VERSION, FrozenRecord
from halluprobe.rundir import fingerprint_of, sha256_file
from halluprobe.tomlfile import read_toml

__all__ = [
    "IMAGE_SUFFIXES",
    "JSON_SUFFIX",
    "PromptSet",
    "Description",
    "InduceResult",
    "load_prompt_set",
    "list_images",
    "read_descriptions",
    "induce",
]

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff"})
JSON_SUFFIX = '\n\nAnswer with a JSON object only, of the form {"description": "..."}.'


class PromptSet(FrozenRecord):
    name: str
    system: str | None = None
    prompts: list[str] = Field(min_length=1)
    epochs: int = Field(default=1, ge=1, le=100)
    max_new_tokens: int = Field(default=256, ge=1, le=8192)
    json_mode: bool = False
    max_retries: int = Field(default=2, ge=0, le=10)
    template: str | None = None

    @field_validator("prompts")
    @classmethod
    def _non_empty(cls, prompts: list[str]) -> list[str]:
        for index, prompt in enumerate(prompts):
            if not prompt.strip():
                raise ValueError(f"prompt {index + 1} is empty")
        return prompts


class Description(FrozenRecord):
    """One line of the descriptions file."""

    schema_version: int = SCHEMA_VERSION
    key: str
    image: str
    prompt_set: str
    prompt_index: int
    epoch: int
    prompt: str  # the user prompt as written in the prompt set
    rendered: str  # the exact prompt the backend rendered (last attempt)
    text: str | None
    error: str | None = None
    attempts: int = 1
    fingerprint: str  # prompt set + backend + model
    image_sha256: str | None = None  # sha256 of the described image (None: unreadable, or a line written before it was recorded)


@dataclass(frozen=True)
class InduceResult:
    path: Path
    written: int
    skipped: int
    errors: int
    fingerprint: str


def load_prompt_set(path: str | Path) -> PromptSet:
    """Read and validate a prompt-set TOML file; any problem is one InputError naming the file."""
    p = Path(path)
    data = read_toml(p, "prompt set")
    data.setdefault("name", p.stem)
    try:
        return PromptSet.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "file"
        problem = first["msg"].removeprefix("Value error, ")
        raise InputError(f"prompt set key {where!r}: {problem}", p) from None


def list_images(images: Path) -> list[str]:
    """Image file names directly in ``images`` (sorted); InputError when there are none."""
    if not images.is_dir():
        raise InputError("images folder is not a directory", images)
    names = sorted(p.name for p in images.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not names:
        raise InputError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in the folder", images)
    return names


def _image_sha256(path: Path) -> str | None:
    """The image's sha256; None when it cannot be read (the backend then records the error per description)."""
    try:
        return sha256_file(path)
    except OSError:
        return None


def _key(image: str, prompt_index: int, epoch: int) -> str:
    return f"{image}#p{prompt_index}#e{epoch}"


def read_descriptions(path: Path) -> list[Description]:
    """Every complete line of a descriptions file; a truncated last line (a killed run) is ignored."""
    if not path.exists():
        return []
    if path.is_dir():
        raise InputError("is a directory: the descriptions file must be a file (JSON Lines)", path)
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    out: list[Description] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last_unterminated = lineno == len(lines) and not text.endswith("\n")
        try:
            out.append(Description.model_validate_json(line))
        except ValidationError as err:
            if last_unterminated:
                logger.warning("%s:%d: ignoring a truncated last line", path, lineno)
                continue
            raise InputError(f"not a description line: {err.errors()[0]['msg']}", path, lineno) from None
    return out


def _append(path: Path, records: Sequence[Description]) -> None:
    with open(path, "ab") as handle:
        if handle.tell() > 0:  # after a truncated last line: start on a fresh line
            with open(path, "rb") as check:
                check.seek(-1, os.SEEK_END)
                if check.read(1) != b"\n":
                    handle.write(b"\n")
        for record in records:
            handle.write(record.model_dump_json().encode() + b"\n")
        handle.flush()
        os.fsync(handle.fileno())


def _parse_description(text: str) -> str:
    value = parse_json_object(text).get("description")
    if not isinstance(value, str) or not value.strip():
        raise ValueError("the JSON object has no non-empty 'description' string")
    return value.strip()


def induce(
    backend: Backend,
    images: Path,
    prompt_set: PromptSet,
    out: Path,
    *,
    backend_name: str,
    model: str,
    progress: Callable[[int, int], None] | None = None,
) -> InduceResult:
    """Describe every image with every prompt and epoch; append to ``out``; resume by key."""
    names = list_images(images)
    fingerprint = fingerprint_of({"prompt_set": prompt_set.model_dump(), "backend": backend_name, "model": model})
    existing = read_descriptions(out)
    foreign = next((d for d in existing if d.fingerprint != fingerprint), None)
    if foreign is not None:
        raise InputError(
            f"holds descriptions made with another prompt set, backend or model, or by an earlier halluprobe (key {foreign.key}); use another --out",
            out,
        )
    hashes = {name: _image_sha256(images / name) for name in names}
    for d in existing:  # the key holds the file name only: the bytes must be the same image too
        if d.image in hashes and d.image_sha256 != hashes[d.image]:
            was = "an image whose sha256 was not recorded" if d.image_sha256 is None else "another image"
            raise InputError(f"holds descriptions of {was} named {d.image} (key {d.key}), not the one in {images}; use another --out", out)
    done = {d.key for d in existing}
    out.parent.mkdir(parents=True, exist_ok=True)
    written = errors = 0
    total = len(names) * len(prompt_set.prompts) * prompt_set.epochs
    for image_index, name in enumerate(names):
        items: list[GenerationItem] = []
        meta: dict[str, tuple[int, int, str]] = {}
        for prompt_index, prompt in enumerate(prompt_set.prompts):
            for epoch in range(prompt_set.epochs):
                key = _key(name, prompt_index, epoch)
                if key in done:
                    continue
                text = compose_prompt(prompt + (JSON_SUFFIX if prompt_set.json_mode else ""), prompt_set.system)
                items.append(GenerationItem(key, str(images / name), text))
                meta[key] = (prompt_index, epoch, prompt)
        if not items:
            continue
        records: list[Description] = []
        if prompt_set.json_mode:
            for result in generate_json(
                backend,
                items,
                _parse_description,
                max_new_tokens=prompt_set.max_new_tokens,
                max_retries=prompt_set.max_retries,
                template=prompt_set.template,
            ):
                p_index, epoch, prompt = meta[result.key]
                records.append(
                    Description(key=result.key, image=name, prompt_set=prompt_set.name, prompt_index=p_index, epoch=epoch,
                                prompt=prompt, rendered=result.prompt, text=result.value, error=result.error,
                                attempts=result.attempts, fingerprint=fingerprint, image_sha256=hashes[name])
                )  # fmt: skip
        else:
            answers = generate(backend, items, max_new_tokens=prompt_set.max_new_tokens, template=prompt_set.template)
            for item in items:
                rendered, text, error = answers.get(item.key, ("", None, "the backend returned no response"))
                p_index, epoch, prompt = meta[item.key]
                records.append(
                    Description(key=item.key, image=name, prompt_set=prompt_set.name, prompt_index=p_index, epoch=epoch,
                                prompt=prompt, rendered=rendered, text=text, error=error, fingerprint=fingerprint,
                                image_sha256=hashes[name])
                )  # fmt: skip
        _append(out, records)
        written += len(records)
        errors += sum(r.error is not None for r in records)
        if progress is not None:
            progress(len(done) + written, total)
        logger.info("%s: %d description(s) (%d/%d images)", name, len(records), image_index + 1, len(names))
    return InduceResult(path=out, written=written, skipped=len(done), errors=errors, fingerprint=fingerprint)
