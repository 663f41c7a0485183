"""Object HalBench's extraction pass and its scores: a judge lists each answer's objects (one
ledger line per answer, id = the COCO image id), and the listed names go through the script's
normalisation and the judge-free rules' last step (:mod:`halluprobe.captions.objhal.extract`).

An answer the script sends to no judge (three words or fewer) gets a ledger line of its own:
status ``parsed``, no reply, an empty list, reason ``short answer``. An unparseable or errored
extraction is scored by a policy: ``drop`` (the default: out of every rate, as the script has no
rule but to retry) or ``empty`` (no words: the answer names no object).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from halluprobe.backends.base import Backend
from halluprobe.captions.chair.families import CaptionObjects
from halluprobe.captions.objhal.extract import (
    Tagger,
    fill_extraction_prompt,
    is_short,
    judged_objects,
    parse_object_list,
)
from halluprobe.captions.objhal.rules import ObjhalVocabulary
from halluprobe.captions.objhal.scoring import (
    ObjhalResponse,
    ObjhalScore,
    score_responses,
)
from halluprobe.captions.objhal.sources import image_name
from halluprobe.errors import InputError
from halluprobe.judging.judge import JudgeItem, JudgePass, judge_items
from halluprobe.judging.ledger import JudgeHeader, Judgment, Verdict
from halluprobe.judging.store import JudgmentDir, header_mismatch
from halluprobe.records import FrozenRecord
from halluprobe.rundir import RunDir, sha256_file

__all__ = [
    "OBJHAL_TEMPLATE_NAME",
    "SHORT_REASON",
    "ObjhalExtractionPass",
    "ObjhalLedger",
    "UnparseablePolicy",
    "answers_sha256",
    "judge_objhal",
    "objhal_judge_items",
    "parse_extraction",
    "score_judged",
]

OBJHAL_TEMPLATE_NAME = "objhal-extract-official"  # RLAIF-V eval_gpt_obj_halbench.py's prompt (or --prompt-script's), by sha256
SHORT_REASON = "short answer: not sent to the judge (the script's rule), no objects"
UnparseablePolicy = Literal["drop", "empty"]


class ObjhalExtractionPass(FrozenRecord):
    asked: int
    skipped: int  # extracted by an earlier pass
    errors: int
    short: int  # recorded without asking


class ObjhalLedger(FrozenRecord):
    """What the table prints beside the judged numbers."""

    judge_backend: str
    judge_model: str
    judge_models_reported: tuple[str, ...]
    template_sha256: str
    n: int
    short: int
    unparseable: int
    errors: int
    policy: UnparseablePolicy
    dropped: int
    normaliser: str

    def identity(self) -> dict[str, str]:
        """The ``extractor`` entry of the summary (strings, as the judge-free one's)."""
        return {"extractor": "judge", "judge": f"{self.judge_backend}:{self.judge_model}",
                "judge_reported": ",".join(self.judge_models_reported) or "none", "template_sha256": self.template_sha256,
                "normaliser": self.normaliser, "unparseable_policy": self.policy, "extractions": str(self.n), "short": str(self.short),
                "unparseable": str(self.unparseable), "errors": str(self.errors), "dropped": str(self.dropped)}  # fmt: skip


def parse_extraction(reply: str) -> tuple[Verdict | None, str | None]:
    """The verdict is the name list as JSON text (a ledger verdict is an int or a string)."""
    names, why = parse_object_list(reply)
    return (None, why) if names is None else (json.dumps(names), None)


def answers_sha256(answers: Path) -> str:
    """What the ledger names the answers by: a run dir's samples.jsonl, or the answer file."""
    return sha256_file(RunDir(answers).samples_path if answers.is_dir() else answers)


def _item_id(response: ObjhalResponse) -> str:
    return str(response.image_id)


def objhal_judge_items(responses: Sequence[ObjhalResponse], images: Path, template: str) -> list[JudgeItem]:
    """One item per answer (id: its image id; the image file `data objhal` wrote)."""
    ids = [_item_id(r) for r in responses]
    if len(set(ids)) != len(ids):
        raise InputError("two answers for one image: the extraction ledger is keyed by image id")
    return [JudgeItem(item_id=_item_id(r), image_path=str(images / image_name(r.image_id)),
                      prompt=fill_extraction_prompt(template, r.question, r.caption)) for r in responses]  # fmt: skip


def judge_objhal(backend: Backend, responses: Sequence[ObjhalResponse], items: Sequence[JudgeItem], *, store: JudgmentDir,
                 header: JudgeHeader, overwrite: bool = False) -> ObjhalExtractionPass:  # fmt: skip
    """Record the short answers, then ask the judge about the rest (both resumable by id).
    ``overwrite`` replaces only a dir of another judge or other answers: the same judge's is resumed."""
    if overwrite and store.header_path.exists() and not header_mismatch(store.read_header(), header):
        overwrite = False  # `objhal --overwrite` also replaces the score files: never the ledger they came from
    store.start(header, overwrite=overwrite)
    done = store.done_ids()
    short = {_item_id(r) for r in responses if is_short(r.caption)}
    lines = [
        Judgment(item_id=item.item_id, judge_model=header.model, template_sha256=header.template_sha256, generation=header.generation,
                 prompt_sha256=hashlib.sha256(item.prompt.encode("utf-8")).hexdigest(), status="parsed", verdict="[]", reason=SHORT_REASON)  # fmt: skip
        for item in items if item.item_id in short and item.item_id not in done
    ]
    if lines:
        store.append(lines)
    asked: JudgePass = judge_items(backend, [i for i in items if i.item_id not in short], store=store, header=header, parse=parse_extraction)
    return ObjhalExtractionPass(asked=asked.asked, skipped=asked.skipped + len(short) - len(lines), errors=asked.errors, short=len(lines))


def _names(judgment: Judgment, where: str) -> list[str]:
    """A stored verdict read back (a hand-edited line is one line of error, not a traceback)."""
    try:
        names = json.loads(str(judgment.verdict))
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError(f"item {judgment.item_id!r}: its verdict is not a JSON list of names", where)
    return names


class _Listed:
    """A WordExtractor that returns one answer's judged objects."""

    def __init__(self, objects: CaptionObjects) -> None:
        self.identity: dict[str, str] = {}
        self._objects = objects

    def objects(self, question: str, caption: str) -> CaptionObjects:
        return self._objects


def score_judged(
    responses: Sequence[ObjhalResponse], truth: dict[int, frozenset[str]], vocab: ObjhalVocabulary, tagger: Tagger,
    header: JudgeHeader, judgments: Sequence[Judgment], *, policy: UnparseablePolicy, where: str,
) -> tuple[list[ObjhalScore], ObjhalLedger]:  # fmt: skip
    """Every answer scored on its judged words (all must have a ledger line), and the ledger counts."""
    by_id = {j.item_id: j for j in judgments}
    missing = [r.image_id for r in responses if _item_id(r) not in by_id]
    if missing:
        raise InputError(f"{len(missing)} of {len(responses)} answers have no extraction (e.g. image {missing[0]}): run the judge pass", where)
    scores: list[ObjhalScore] = []
    dropped = 0
    for r in responses:
        j = by_id[_item_id(r)]
        if j.status != "parsed" and policy == "drop":
            dropped += 1
            continue
        names = _names(j, where) if j.status == "parsed" else []
        scores += score_responses([r], truth, _Listed(judged_objects(vocab, tagger, names)))
    used = [by_id[_item_id(r)] for r in responses]
    ledger = ObjhalLedger(
        judge_backend=header.backend, judge_model=header.model, template_sha256=header.template_sha256,
        judge_models_reported=tuple(sorted({j.judge_model_reported for j in used if j.judge_model_reported})),
        n=len(used), short=sum(j.reason == SHORT_REASON for j in used), unparseable=sum(j.status == "unparseable" for j in used),
        errors=sum(j.status == "error" for j in used), policy=policy, dropped=dropped, normaliser=tagger.identity,
    )  # fmt: skip
    return scores, ledger
