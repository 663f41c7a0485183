"""Object HalBench end to end: answers (a run dir or RLAIF-V's answer file) -> its scores, the
caption-length confound, and the records ``halluprobe objhal`` writes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from halluprobe.captions.chair.evaluate import ChairResults
from halluprobe.captions.chair.groundtruth import image_key
from halluprobe.captions.chair.held_out import OverlapCounts, in_val2017, key_overlap
from halluprobe.captions.chair.length import LengthGroup, chair_by_equal_count_groups
from halluprobe.captions.objhal.scoring import (
    ObjhalResponse,
    ObjhalScore,
    ObjhalSummary,
    summarize,
)
from halluprobe.errors import InputError
from halluprobe.records import FrozenRecord
from halluprobe.rundir import RunDir

__all__ = ["ObjhalOverlap", "ObjhalResult", "answer_file_responses", "objhal_overlap", "objhal_result", "read_responses", "run_responses"]


def _clean(text: str) -> str:
    return text.replace("Assistant:", "").strip()  # the script's loader, applied to every answer


def run_responses(path: Path) -> tuple[list[ObjhalResponse], int]:
    """A ``run --open-ended`` dir's answers, images keyed by COCO id, and how many errored
    samples were left out."""
    rundir = RunDir(path)
    if not rundir.read_header().open_ended:
        raise InputError("a run of yes/no answers: Object HalBench scores open-ended answers (run objhal.jsonl with --open-ended)", rundir.header_path)
    out = []
    samples = rundir.read_samples()
    for line, s in enumerate(samples, start=1):
        if s.error or s.text is None:
            continue
        key = image_key(s.image, rundir.samples_path, line)
        if not isinstance(key, int):
            raise InputError(f"image {s.image!r} is no COCO image", rundir.samples_path, line)
        out.append(ObjhalResponse(image_id=key, question=s.prompt, caption=_clean(s.text)))
    return out, len(samples) - len(out)


def answer_file_responses(path: Path) -> list[ObjhalResponse]:
    """RLAIF-V's answer file (JSON lines with ``image_id``, ``question`` or ``prompt``, ``text``
    or ``answer``: the keys its loader reads, in its order of preference)."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the answer file: {e}", path) from None
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            image_id = int(rec["image_id"])
            question = rec["prompt"] if "prompt" in rec else rec["question"]
            answer = rec["text"] if "text" in rec else rec["answer"]
        except (ValueError, TypeError, KeyError):
            raise InputError("expected a JSON object with 'image_id', 'question' or 'prompt', 'text' or 'answer'", path, n) from None
        if not isinstance(question, str) or not isinstance(answer, str):
            raise InputError("'question'/'prompt' and 'text'/'answer' must be strings", path, n)
        out.append(ObjhalResponse(image_id=image_id, question=question, caption=_clean(answer)))
    return out


def read_responses(path: Path) -> tuple[list[ObjhalResponse], int]:
    """(answers, errored samples left out) of a run dir or an answer file."""
    responses, errors = run_responses(path) if path.is_dir() else (answer_file_responses(path), 0)
    if not responses:
        raise InputError("no answers to score", path)
    return responses, errors


class ObjhalOverlap(OverlapCounts):
    """The answered images by COCO 2017 split, and the same rates over the answers about val2017
    images alone (None: no answered image is in val2017)."""

    held_out: ObjhalSummary | None


def _is_none(value: object) -> bool:
    return value is None


class ObjhalResult(FrozenRecord):
    """What ``objhal`` writes: the script's rates (judge-free unless ``summary.extractor`` says
    otherwise), the length groups, CHAIR's families on the same answers, and the inputs."""

    summary: ObjhalSummary
    n_images: int  # distinct images answered: the script asserts 300
    errors: int  # errored samples of the run, left out
    length_groups: list[LengthGroup]
    chair: ChairResults | None
    answers: str
    synonyms_sha256: str
    ground_truth: dict[str, str]  # COCO 2014 file read -> its sha256
    rlaifv_commit: str
    training_overlap: ObjhalOverlap | None = Field(default=None, exclude_if=_is_none)  # absent where no image is COCO's


def objhal_overlap(scores: Sequence[ObjhalScore], extractor: dict[str, str], *, n_resamples: int = 1000, seed: int = 0) -> ObjhalOverlap | None:
    """The answered images by COCO 2017 split (scored against COCO's 2014 train/val annotations, so
    an image outside val2017 is train2017), and ``summarize`` over the val2017 images' answers."""
    counts = key_overlap((s.image_id for s in scores), annotated=True)
    if not counts.is_coco:
        return None
    part = [s for s in scores if in_val2017(s.image_id)]
    held = summarize(part, extractor, n_resamples=n_resamples, seed=seed) if part else None
    return ObjhalOverlap(images=counts.images, coco_images=counts.coco_images, val2017=counts.val2017, train2017=counts.train2017,
                         unplaced=counts.unplaced, held_out=held)  # fmt: skip


def objhal_result(
    scores: Sequence[ObjhalScore], extractor: dict[str, str], chair: ChairResults | None, *, errors: int,
    answers: str, synonyms_sha256: str, ground_truth: dict[str, str], rlaifv_commit: str, n_resamples: int = 1000, seed: int = 0,
) -> ObjhalResult:  # fmt: skip
    return ObjhalResult(
        summary=summarize(scores, extractor, n_resamples=n_resamples, seed=seed), length_groups=chair_by_equal_count_groups(scores),
        n_images=len({s.image_id for s in scores}), errors=errors,
        chair=chair, answers=answers, synonyms_sha256=synonyms_sha256, ground_truth=ground_truth, rlaifv_commit=rlaifv_commit,
        training_overlap=objhal_overlap(scores, extractor, n_resamples=n_resamples, seed=seed),
    )  # fmt: skip
