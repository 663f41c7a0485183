"""Object HalBench scores as RLAIF-V's ``compute_chair`` counts them (judge-free by default).

Per response: the extractor's COCO words, the hallucinated ones (their category not in the
image's ground truth), the distinct correct categories, and the length the script averages
(``len(caption.strip().split(" "))``: runs of spaces count empty words). Overall:

- ``response_hallucination``: the script's ``CHAIRs_refine``, hallucinated responses over the
  responses that name at least one COCO object: the "Response Hall" its summarizer prints;
- ``chair_s``: hallucinated responses over all responses (the script's ``CHAIRs``);
- ``mention_hallucination``: ``CHAIRi``, hallucinated mentions over all mentions, repeats counted
  ("Object Hall");
- ``object_recall``: distinct correct categories per response, summed, over the ground-truth
  categories summed over responses (``obj_rec``).

The script divides by zero where no response names an object; here that rate is ``None``.
Every rate has a 95% CI from a bootstrap over images (``metrics.stats.cluster_bootstrap``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from halluprobe.captions.chair.groundtruth import CocoFile
from halluprobe.captions.objhal.rules import (
    ObjhalVocabulary,
    RuleExtractor,
    WordExtractor,
)
from halluprobe.errors import InputError
from halluprobe.metrics.stats import cluster_bootstrap
from halluprobe.records import FrozenRecord

__all__ = [
    "RATES",
    "ObjhalCIs",
    "ObjhalResponse",
    "ObjhalScore",
    "ObjhalSummary",
    "objhal_ground_truth",
    "score_responses",
    "summarize",
]

RATES: tuple[str, ...] = ("response_hallucination", "mention_hallucination", "chair_s", "object_recall")


class ObjhalResponse(FrozenRecord):
    """One answer to score: the question it answered and the text (``Assistant:`` removed and
    stripped, as the script's loader does)."""

    image_id: int
    question: str
    caption: str


class ObjhalScore(FrozenRecord):
    image_id: int
    caption: str
    words: list[str]
    objects: list[str]
    hallucinated: list[str]
    hallucination_positions: list[int]
    ground_truth: list[str]
    recalled: int  # distinct correct categories
    length: int  # the script's words: caption.strip().split(" ")

    @property
    def hallucinating(self) -> bool:
        return bool(self.hallucinated)


class ObjhalCIs(FrozenRecord):
    response_hallucination: tuple[float, float] | None
    mention_hallucination: tuple[float, float] | None
    chair_s: tuple[float, float] | None
    object_recall: tuple[float, float] | None


class ObjhalSummary(FrozenRecord):
    response_hallucination: float | None  # CHAIRs_refine
    mention_hallucination: float | None  # CHAIRi
    chair_s: float
    object_recall: float | None
    avg_length: float
    n_responses: int
    n_responses_with_objects: int  # coco_sentence_num
    n_mentions: int
    n_hallucinated_mentions: int
    n_recalled: int  # the script's overall "coco_word_count"
    n_ground_truth: int  # gt_word_count
    ci: ObjhalCIs
    extractor: dict[str, str]


def _categories(data: Any, source: CocoFile) -> dict[int, str]:
    try:
        return {int(c["id"]): str(c["name"]) for c in data["categories"]}
    except (KeyError, TypeError, ValueError):
        raise InputError("no COCO categories list", source.label) from None


def objhal_ground_truth(
    rules: RuleExtractor,
    vocab: ObjhalVocabulary,
    instances: Sequence[CocoFile],
    captions: Sequence[CocoFile],
    image_ids: set[int],
) -> tuple[dict[int, frozenset[str]], dict[str, str]]:
    """The script's ``get_annotations``: instance categories (as their synonym line's first
    entry) and every object the rules read in the COCO captions of each image (the rules even
    where a judge extracts the answers' words: the script's ``--use_gpt`` leaves the ground truth
    alone); and each file read -> its sha256 (recorded with the result)."""
    truth: dict[int, set[str]] = {i: set() for i in image_ids}
    files: dict[str, str] = {}

    def load(source: CocoFile) -> Any:
        raw = source.read()
        files[source.label] = hashlib.sha256(raw).hexdigest()
        try:
            return json.loads(raw)
        except ValueError:
            raise InputError("not JSON (a COCO annotation file expected)", source.label) from None

    for source in instances:
        data = load(source)
        names = _categories(data, source)
        for ann in data.get("annotations", []):
            if ann.get("image_id") in truth:
                name = names.get(ann.get("category_id"), "")
                if name not in vocab.node_of:
                    raise InputError(f"COCO category {name!r} is not in synonyms_refine.txt", source.label)
                truth[ann["image_id"]].add(vocab.node_of[name])
    for source in captions:
        data = load(source)
        for ann in data.get("annotations", []):
            if ann.get("image_id") in truth:
                truth[ann["image_id"]].update(rules.objects("", str(ann.get("caption", ""))).objects)
    return {i: frozenset(objs) for i, objs in truth.items()}, files


def score_responses(
    responses: Sequence[ObjhalResponse], truth: Mapping[int, frozenset[str]], extractor: WordExtractor
) -> list[ObjhalScore]:
    scores = []
    for r in responses:
        found = extractor.objects(r.question, r.caption)
        gt = truth[r.image_id]
        bad = [(w, p) for w, o, p in zip(found.words, found.objects, found.positions) if o not in gt]
        correct = {o for o in found.objects if o in gt}
        scores.append(
            ObjhalScore(
                image_id=r.image_id, caption=r.caption, words=list(found.words), objects=list(found.objects),
                hallucinated=[w for w, _ in bad], hallucination_positions=[p for _, p in bad],
                ground_truth=sorted(gt), recalled=len(correct), length=len(r.caption.strip().split(" ")),
            )
        )  # fmt: skip
    return scores


def _ratio(num: np.ndarray, den: np.ndarray) -> Callable[[np.ndarray], float | None]:
    def stat(rows: np.ndarray) -> float | None:
        d = float(den[rows].sum())
        return float(num[rows].sum()) / d if d else None

    return stat


def summarize(scores: Sequence[ObjhalScore], extractor: dict[str, str], *, n_resamples: int = 1000, seed: int = 0) -> ObjhalSummary:
    if not scores:
        raise InputError("no responses to score")
    hall = np.array([s.hallucinating for s in scores], dtype=float)
    named = np.array([bool(s.objects) for s in scores], dtype=float)
    ones = np.ones(len(scores))
    bad = np.array([len(s.hallucinated) for s in scores], dtype=float)
    mentions = np.array([len(s.objects) for s in scores], dtype=float)
    recalled = np.array([s.recalled for s in scores], dtype=float)
    gt = np.array([len(s.ground_truth) for s in scores], dtype=float)
    stats = {
        "response_hallucination": _ratio(hall, named),
        "mention_hallucination": _ratio(bad, mentions),
        "chair_s": _ratio(hall, ones),
        "object_recall": _ratio(recalled, gt),
    }
    everything = np.arange(len(scores))
    clusters = [s.image_id for s in scores]
    ci = {k: cluster_bootstrap(clusters, f, n_resamples=n_resamples, seed=seed) for k, f in stats.items()}
    return ObjhalSummary(
        response_hallucination=stats["response_hallucination"](everything),
        mention_hallucination=stats["mention_hallucination"](everything),
        chair_s=float(hall.mean()),
        object_recall=stats["object_recall"](everything),
        avg_length=float(np.mean([s.length for s in scores])),
        n_responses=len(scores),
        n_responses_with_objects=int(named.sum()),
        n_mentions=int(mentions.sum()),
        n_hallucinated_mentions=int(bad.sum()),
        n_recalled=int(recalled.sum()),
        n_ground_truth=int(gt.sum()),
        ci=ObjhalCIs(**ci),
        extractor=dict(extractor),
    )
