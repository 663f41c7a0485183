"""Caption files other tools wrote, imported unchanged into run dirs of open answers, so that
``halluprobe chair`` scores them like a ``run --open-ended`` of halluprobe's own.

Formats (name: what a line is):

- ``opera``: OPERA's / cca-llava's ``{"image_id", "caption"}`` (the CHAIR evaluators' input);
- ``llava-captions``: LLaVA-style answer lines ``{"question_id" or "image_id" or "image", "text"}``
  (less-is-more, MARINE's captions; ``caption`` for ``text`` too);
  a ``question_id`` alone is looked up in ``--questions`` (LLaVA's question file: its ``image``);
  a line's ``prompt`` is kept: one prompt per run, a line asking another is refused;
- ``lmms-eval-chair``: lmms-eval's ``--log_samples`` lines of ``coco_cap_chair``: the caption is
  ``filtered_resps[0]``, the image ``doc.question_id`` or the ``image_id`` of the metric entries;
- ``lmms-eval-amber``: the same of ``amber_g``: the sample's question_id is AMBER's id
  (``doc.question_id``), scored by ``halluprobe amber generative``.

Every line becomes one sample (split ``chair``, question_id = its order); the image is kept as
the file gives it (a COCO id or file name). The token cap is not in these files, nor the prompt
outside LLaVA-style lines: the run records that they are unknown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from halluprobe import __version__
from halluprobe.errors import InputError
from halluprobe.files import fresh_out_dir, write_atomic
from halluprobe.imports.common import check_import_out, owned_by_import
from halluprobe.jsonl import loads, read_records
from halluprobe.records import GenerateConfig, RunHeader, Sample
from halluprobe.rundir import RunDir, fingerprint_of, sha256_file

__all__ = [
    "CAPTION_FORMATS",
    "CAPTION_SPLIT",
    "UNKNOWN_PROMPT",
    "CaptionLine",
    "asks_for_a_caption",
    "detect_caption_format",
    "import_captions",
    "one_prompt",
    "read_caption_file",
]

CAPTION_FORMATS: tuple[str, ...] = ("opera", "llava-captions", "lmms-eval-chair", "lmms-eval-amber")
CAPTION_SPLIT = "chair"
UNKNOWN_PROMPT = "(imported caption: the file does not record the prompt)"


@dataclass(frozen=True)
class CaptionLine:
    image: str  # a COCO image id or file name, as the file gives it
    text: str
    source: str  # file:line
    question_id: int | None = None  # AMBER's id (lmms-eval-amber), kept as the sample's question_id
    prompt: str | None = None  # the line's prompt (llava-captions), None where the file has none


def _image(value: Any, path: Path, line: int | None, where: str) -> str:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, str))
        or (isinstance(value, str) and not value.strip())
    ):
        raise InputError(
            f"{where}expected an image id or file name, got {value!r}", path, line
        )
    return str(value)


def _questions_images(path: Path) -> dict[str, str]:
    return {
        str(rec.value.get("question_id")): str(rec.value.get("image"))
        for rec in read_records(path, "question")
    }


def _lmms_caption(obj: dict[str, Any]) -> tuple[Any, Any]:
    doc = obj.get("doc") if isinstance(obj.get("doc"), dict) else {}
    image = doc.get("question_id", doc.get("image_id"))
    if image is None:  # v0.4+: no doc; the metric entries carry the image id
        image = next(
            (
                v["image_id"]
                for k, v in obj.items()
                if k.startswith("coco_cap_") and isinstance(v, dict) and "image_id" in v
            ),
            None,
        )
    resp = obj.get("filtered_resps")
    while isinstance(resp, list) and resp:
        resp = resp[0]
    return image, resp


# keys of an answers line (POPE answers, LLaVA, VLMEvalKit, lmms-eval): a line with any of
# them is not told to be an OPERA caption line, whatever else it has
_ANSWER_KEYS = frozenset({"question", "answer", "text", "prediction", "doc_id", "label"})
_FIRST_LINE_LIMIT = 1 << 20  # a caption line is far shorter; a longer first line is not told


def asks_for_a_caption(prompt: object) -> bool:
    """Whether a LLaVA-style line's ``prompt`` asks for a description, not POPE's yes/no
    question: it asks nothing (no ``?``; every POPE prompt, any template, is a question)."""
    return isinstance(prompt, str) and bool(prompt.replace("<image>", "").strip()) and "?" not in prompt


def detect_caption_format(path: Path) -> str | None:
    """The caption format of ``path`` where its first line tells it unambiguously, else None
    (the answers formats' detection then decides, or names ``--format``): OPERA's
    ``{"image_id", "caption"}`` line, an lmms-eval samples line of ``coco_cap_chair`` (its
    metric entries are named ``coco_cap_chair_*``), and a LLaVA-style line (less-is-more,
    MARINE's captions: LLaVA's POPE answers' fields) whose ``prompt`` asks for a description
    (:func:`asks_for_a_caption`). Lines without a prompt, or asking a question, and amber_g logs
    (other tasks' shape) need the format word; the answers formats' messages name it."""
    try:  # the first line only (bounded): the whole file is read once, by the format's reader
        with path.open("rb") as fh:
            head = fh.readline(_FIRST_LINE_LIMIT)
        first = loads(head.decode("utf-8-sig").strip())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError):
        return None  # unreadable or not one JSON line: the answers formats' detection says why
    if not isinstance(first, dict):
        return None
    keys = set(first)
    if (
        keys & {"text", "caption"}
        and keys & {"question_id", "image_id", "image"}
        and asks_for_a_caption(first.get("prompt"))
        and not keys & {"question", "answer", "prediction", "doc_id", "label"}
    ):
        return "llava-captions"  # before OPERA's rule: a line's prompt is kept
    if {"image_id", "caption"} <= keys and not keys & _ANSWER_KEYS:
        return "opera"
    if {"doc_id", "filtered_resps"} <= keys and any(k.startswith("coco_cap_chair") for k in keys):
        return "lmms-eval-chair"
    return None


def read_caption_file(
    fmt: str, path: Path, questions: Path | None = None
) -> list[CaptionLine]:
    """The captions of ``path`` in ``fmt`` (one of :data:`CAPTION_FORMATS`)."""
    if fmt not in CAPTION_FORMATS:
        raise InputError(
            f"unknown caption format {fmt!r}; known: {', '.join(CAPTION_FORMATS)}"
        )
    by_question = _questions_images(questions) if questions is not None else None
    out = []
    for rec in read_records(path, "caption"):
        amber_id: int | None = None
        prompt: str | None = None
        obj, line, where = rec.value, rec.line, rec.where
        if fmt == "opera":
            if "image_id" not in obj or "caption" not in obj:
                raise InputError(
                    f'{where}an OPERA caption line is {{"image_id", "caption"}}',
                    path,
                    line,
                )
            image, text = obj["image_id"], obj["caption"]
        elif fmt == "llava-captions":
            if "text" not in obj and "caption" not in obj:
                raise InputError(f'{where}a LLaVA answer line has "text" (or "caption")', path, line)
            image, text = obj.get("image_id", obj.get("image")), obj.get("text", obj.get("caption"))
            prompt = obj.get("prompt")
            if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
                raise InputError(f"{where}the prompt must be a non-empty string, got {prompt!r}", path, line)
            if image is None:
                if (
                    by_question is None
                    or str(obj.get("question_id")) not in by_question
                ):
                    raise InputError(
                        f"{where}no image_id/image: pass --questions (LLaVA's question file) holding question_id {obj.get('question_id')!r}",
                        path,
                        line,
                    )
                image = by_question[str(obj["question_id"])]
        else:
            if "doc_id" not in obj:
                raise InputError(
                    f"{where}not an lmms-eval samples line (no doc_id)", path, line
                )
            image, text = _lmms_caption(obj)
            if fmt == "lmms-eval-amber":
                doc = obj.get("doc") if isinstance(obj.get("doc"), dict) else {}
                amber_id = doc.get("question_id")
                if not isinstance(amber_id, int) or isinstance(amber_id, bool):
                    raise InputError(f"{where}an amber_g log line needs doc.question_id (AMBER's id; lmms-eval v0.4+ logs drop doc)", path, line)
                image = f"AMBER_{amber_id}.jpg"  # AMBER's generative query k asks about AMBER_k.jpg
        if not isinstance(text, str):
            raise InputError(
                f"{where}the caption must be a string, got {type(text).__name__}",
                path,
                line,
            )
        out.append(
            CaptionLine(
                image=_image(image, path, line, where),
                text=text,
                source=f"{path}:{line if line is not None else rec.index}",
                question_id=amber_id if fmt == "lmms-eval-amber" else None,
                prompt=prompt,
            )
        )
    return out


def _short(prompt: str | None) -> str:
    if prompt is None:
        return "(none)"
    return repr(prompt if len(prompt) <= 60 else prompt[:57] + "...")


def one_prompt(lines: list[CaptionLine]) -> str:
    """The one prompt ``lines`` record (:data:`UNKNOWN_PROMPT` where they record none); a line
    whose prompt differs from the first line's is refused, naming its file and line: a run asks
    one prompt, and CHAIR numbers of two prompts pooled compare with neither."""
    if not lines:
        return UNKNOWN_PROMPT
    first = lines[0]
    for c in lines[1:]:
        if c.prompt != first.prompt:
            raise InputError(  # c.source is file:line (file:index in a JSON array)
                f"prompt {_short(c.prompt)} differs from {_short(first.prompt)} ({first.source}): one prompt per run, "
                "import each prompt's lines into its own run",
                c.source,
            )
    return first.prompt if first.prompt is not None else UNKNOWN_PROMPT


def import_captions(fmt: str, files: list[Path], out: Path, *, questions: Path | None = None, model: str | None = None,
                    overwrite: bool = False) -> tuple[RunDir, int]:  # fmt: skip
    """Write the captions of ``files`` as a complete run dir of open answers."""

    check_import_out(out, overwrite=overwrite)  # absent or empty, as the answers imports: before anything is read
    lines = [c for path in files for c in read_caption_file(fmt, path, questions)]
    prompt = one_prompt(lines)
    sources = {str(p): sha256_file(p) for p in files}
    header = RunHeader(
        halluprobe_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        fingerprint=fingerprint_of({"import": fmt, "sources": sources}),
        backend=f"import:{fmt}",
        backend_info={
            "format": fmt,
            "sources": sources,
            "max_new_tokens": "unknown (not recorded in the caption file)",
        },
        model=model or "unknown",
        template=prompt,
        readouts=[],
        text_rules=[],
        max_new_tokens=0,
        token_sets=None,
        benchmarks={CAPTION_SPLIT: sources[str(files[0])]},
        benchmark_paths={CAPTION_SPLIT: str(files[0])},
        images_root="",
        open_ended=True,
        generate=GenerateConfig(max_new_tokens=0, stop_strings=()),
    )
    fresh_out_dir(out, overwrite=overwrite, owned=owned_by_import)  # --overwrite: only an import's own files go
    rundir = RunDir(out)
    rundir.start(header, resume=False, force=False, overwrite=overwrite)
    rundir.append(Sample(split=CAPTION_SPLIT, question_id=i if c.question_id is None else c.question_id, image=c.image, object=None, label="yes", prompt=prompt,
                         text=c.text) for i, c in enumerate(lines))  # fmt: skip
    manifest = {"schema_version": 1, "format": fmt, "sources": sources, "imported": {"total": len(lines)},
                "lines": [c.source for c in lines]}  # fmt: skip
    write_atomic(
        rundir.path / "manifest.json",
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
    )
    rundir.mark_complete({"imported": len(lines)})
    return rundir, len(lines)
