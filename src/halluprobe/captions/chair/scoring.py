"""CHAIR scores: per caption, then overall with image-bootstrap CIs, and paired differences.

As ``compute_chair`` computes them: CHAIR_s = captions with a hallucinated object / captions;
CHAIR_i = hallucinated object mentions / object mentions (repeats count); recall = ground-truth
objects mentioned / ground-truth objects, summed over captions; length = normalised words per
caption (the evaluators print ``0.01 * words / captions`` times 100: the same number).

``truncate_incomplete`` cuts each caption after its last ``.`` before scoring (OPERA's
short-caption protocol; as in its code, a caption without ``.`` becomes empty).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import Field

from halluprobe.captions.chair.families import ChairFamily
from halluprobe.captions.chair.groundtruth import GroundTruth
from halluprobe.errors import InputError
from halluprobe.metrics.stats import cluster_bootstrap, paired_bootstrap_diff
from halluprobe.records import FrozenRecord

__all__ = [
    "METRICS",
    "Caption",
    "CaptionScore",
    "ChairSummary",
    "paired_differences",
    "score_captions",
    "summarize",
    "truncate_incomplete",
]

METRICS: tuple[str, ...] = ("chair_s", "chair_i", "recall", "length")


class Caption(FrozenRecord):
    """A caption to score: the image it describes and where it came from (``file:line``)."""

    image_id: int
    text: str
    source: str = ""


class CaptionScore(FrozenRecord):
    """One caption as CHAIR reads it (the evaluator's per-sentence record)."""

    image_id: int
    caption: str  # as scored (after --truncate-incomplete)
    words: list[str]  # synonym-table words found
    objects: list[str]  # their COCO categories, one per mention
    positions: list[int]  # the evaluator's word index of each mention
    hallucinated: list[
        str
    ]  # categories mentioned but not in the ground truth, one per mention
    hallucinated_words: list[str]
    hallucinated_positions: list[int]
    ground_truth: list[str]
    recalled: list[str]  # ground-truth categories mentioned
    length: int  # normalised words after double-word merging
    source: str = ""

    @property
    def chair_s(self) -> int:
        return int(bool(self.hallucinated))


class ChairSummary(FrozenRecord):
    """Overall CHAIR of a set of captions, with 95% image-bootstrap CIs and the settings."""

    family: str
    n: int
    chair_s: float | None
    chair_i: float | None
    recall: float | None
    length: float | None
    ci: dict[str, tuple[float, float] | None] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)


def truncate_incomplete(caption: str) -> str:
    """OPERA's ``cap[:cap.rfind('.') + 1]``: drop what follows the last full stop."""
    return caption[: caption.rfind(".") + 1]


def score_captions(
    captions: Sequence[Caption],
    ground_truth: GroundTruth,
    family: ChairFamily,
    *,
    truncate: bool = False,
) -> list[CaptionScore]:
    """Score every caption; an image missing from the ground truth is an InputError naming the caption."""
    scores = []
    for cap in captions:
        if cap.image_id not in ground_truth.objects:
            path, _, line = cap.source.rpartition(":")
            raise InputError(
                f"image {cap.image_id} is not in the ground truth ({ground_truth.source}, {len(ground_truth.objects)} images)",
                path or None, int(line) if line.isascii() and line.isdigit() else None,
            )  # fmt: skip
        text = truncate_incomplete(cap.text) if truncate else cap.text
        read = family.caption_objects(text)
        truth = ground_truth.objects[cap.image_id]
        truth_set = set(truth)
        bad = [k for k, node in enumerate(read.objects) if node not in truth_set]
        scores.append(CaptionScore(
            image_id=cap.image_id, caption=text, words=list(read.words), objects=list(read.objects),
            positions=list(read.positions), hallucinated=[read.objects[k] for k in bad],
            hallucinated_words=[read.words[k] for k in bad], hallucinated_positions=[read.positions[k] for k in bad],
            ground_truth=list(truth), recalled=sorted(set(read.objects) & truth_set), length=len(read.tokens),
            source=cap.source,
        ))  # fmt: skip
    return scores


def _columns(scores: Sequence[CaptionScore]) -> dict[str, np.ndarray]:
    return {
        "hallucinated_caps": np.array([s.chair_s for s in scores], dtype=float),
        "hallucinated": np.array([len(s.hallucinated) for s in scores], dtype=float),
        "mentions": np.array([len(s.objects) for s in scores], dtype=float),
        "recalled": np.array([len(s.recalled) for s in scores], dtype=float),
        "truth": np.array([len(s.ground_truth) for s in scores], dtype=float),
        "length": np.array([s.length for s in scores], dtype=float),
        "one": np.ones(len(scores)),
    }


def _ratio(num: np.ndarray, den: np.ndarray) -> Callable[[np.ndarray], float | None]:
    def stat(rows: np.ndarray) -> float | None:
        d = float(den[rows].sum())
        return float(num[rows].sum()) / d if d else None

    return stat


def _statistics(
    scores: Sequence[CaptionScore],
) -> dict[str, Callable[[np.ndarray], float | None]]:
    c = _columns(scores)
    return {
        "chair_s": _ratio(c["hallucinated_caps"], c["one"]),
        "chair_i": _ratio(c["hallucinated"], c["mentions"]),
        "recall": _ratio(c["recalled"], c["truth"]),
        "length": _ratio(c["length"], c["one"]),
    }


def summarize(
    scores: Sequence[CaptionScore],
    family: str,
    *,
    settings: dict[str, Any],
    n_resamples: int = 1000,
    seed: int = 0,
) -> ChairSummary:
    if not scores:
        raise InputError("no caption to score")
    stats = _statistics(scores)
    everything = np.arange(len(scores))
    clusters = [s.image_id for s in scores]
    ci = {name: (cluster_bootstrap(clusters, stat, n_resamples=n_resamples, seed=seed) if n_resamples else None)
          for name, stat in stats.items()}  # fmt: skip
    values = {name: stat(everything) for name, stat in stats.items()}
    return ChairSummary(
        family=family, n=len(scores), ci=ci, settings=settings, **values
    )


def paired_differences(
    a: Sequence[CaptionScore],
    b: Sequence[CaptionScore],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, dict[str, float | tuple[float, float] | None]]:
    """a - b for every metric, with a paired image-bootstrap CI; both must caption the same images once each."""
    ids_a = [s.image_id for s in a]
    ids_b = [s.image_id for s in b]
    if len(set(ids_a)) != len(ids_a) or len(set(ids_b)) != len(ids_b):
        raise InputError("a paired difference needs one caption per image in each run")
    if set(ids_a) != set(ids_b):
        only = sorted(set(ids_a) ^ set(ids_b))
        raise InputError(
            f"the two runs caption different images ({len(only)} differ, e.g. image {only[0]})"
        )
    order = {image: k for k, image in enumerate(ids_a)}
    b_sorted = sorted(b, key=lambda s: order[s.image_id])
    stats_a, stats_b = _statistics(a), _statistics(b_sorted)
    everything = np.arange(len(a))
    out: dict[str, dict[str, float | tuple[float, float] | None]] = {}
    for name in METRICS:
        va, vb = stats_a[name](everything), stats_b[name](everything)
        ci = (
            paired_bootstrap_diff(
                ids_a, stats_a[name], stats_b[name], n_resamples=n_resamples, seed=seed
            )
            if n_resamples
            else None
        )
        out[name] = {
            "a": va,
            "b": vb,
            "diff": None if va is None or vb is None else va - vb,
            "ci": ci,
        }
    return out
