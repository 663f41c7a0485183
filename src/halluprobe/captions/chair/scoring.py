"""CHAIR scores: per caption, then overall with image-bootstrap CIs, and paired differences.

As ``compute_chair`` computes them: CHAIR_s = captions with a hallucinated object / captions;
CHAIR_i = hallucinated object mentions / object mentions (repeats count); recall = ground-truth
objects mentioned / ground-truth objects, summed over captions; length = normalised words per
caption (the evaluators print ``0.01 * words / captions`` times 100: the same number).

``truncate_incomplete`` cuts each caption after its last ``.`` before scoring (OPERA's
short-caption protocol; as in its code, a caption without ``.`` becomes empty).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from halluprobe.captions.chair.families import ChairFamily
from halluprobe.captions.chair.groundtruth import (
    GroundTruth,
    GroundTruthNote,
    ImageKey,
    caption_objects,
    key_order,
)
from halluprobe.errors import InputError
from halluprobe.metrics.stats import cluster_bootstrap, paired_bootstrap_diff
from halluprobe.records import FrozenRecord

__all__ = [
    "MAX_CAPTION_CHARS",
    "METRICS",
    "Caption",
    "CaptionScore",
    "ChairCIs",
    "ChairPaired",
    "ChairSettings",
    "ChairSummary",
    "Difference",
    "caption_lines",
    "paired_comparison",
    "paired_differences",
    "score_captions",
    "summarize",
    "truncate_incomplete",
]

METRICS: tuple[str, ...] = ("chair_s", "chair_i", "recall", "length")
# far beyond any caption (COCO's longest is some 1,500 characters): refused before NLTK reads it
MAX_CAPTION_CHARS = 100_000

CI = tuple[float, float] | None


class Caption(FrozenRecord):
    """A caption to score: the image it describes (:data:`~.groundtruth.ImageKey`) and where it
    came from (``file:line``)."""

    image_id: ImageKey
    text: str
    source: str = ""


class CaptionScore(FrozenRecord):
    """One caption as CHAIR reads it (the evaluator's per-sentence record)."""

    image_id: ImageKey
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


class ChairCIs(FrozenRecord):
    """The 95% image-bootstrap CI of each metric (None: no resamples, or undefined)."""

    chair_s: CI = None
    chair_i: CI = None
    recall: CI = None
    length: CI = None


class ChairSettings(FrozenRecord):
    """What a CHAIR result was computed from, as recorded with it: the captions (a run's fields,
    or a caption file's), then the family, its ground truth and the counting options. A key is
    written only when it was given (a caption file has no ``run``; punkt's results name no
    ``tokenizer``), in this order: the bytes of every earlier ``chair_summary.json``."""

    run: str | None = None
    model: str | None = None
    backend: str | None = None
    captions: str | None = None
    format: str | None = None
    image_list: dict[str, str] | None = None
    questions_sha256: dict[str, str] | None = None
    prompt: str | list[str] | None = None  # the question asked; several when the run's files differ
    rendered_prompt: str | list[str] | None = None
    template: str | None = None
    max_new_tokens: int | str | None = None  # a string says why it is unknown
    errors: int | None = None
    family: str | None = None
    rules: str | None = None
    tools: str | None = None
    ground_truth: GroundTruthNote | None = None
    truncate_incomplete: bool | None = None
    tokenizer: str | None = None

    @model_serializer(mode="wrap")
    def _given_keys_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if key in self.model_fields_set}

    def with_counting(
        self, identity: ChairFamily, ground_truth: GroundTruthNote, truncate: bool
    ) -> ChairSettings:
        """These settings, then how a family counted: its identity, its ground truth, the
        truncation and, where it is not punkt's, the tokenizer (punkt's results name none)."""
        given = {key: getattr(self, key) for key in type(self).model_fields if key in self.model_fields_set}
        tokenizer = {} if identity.tokenizer == "punkt" else {"tokenizer": identity.tokenizer}
        counted = {**identity.identity, "ground_truth": ground_truth, "truncate_incomplete": truncate, **tokenizer}
        return ChairSettings(**{**given, **counted})


class ChairSummary(FrozenRecord):
    """Overall CHAIR of a set of captions, with 95% image-bootstrap CIs and the settings."""

    family: str
    n: int
    chair_s: float | None
    chair_i: float | None
    recall: float | None
    length: float | None
    ci: ChairCIs = Field(default_factory=ChairCIs)
    settings: ChairSettings = Field(default_factory=ChairSettings)

    def value(self, metric: str) -> float | None:
        """The metric named ``metric`` (one of :data:`METRICS`)."""
        return {"chair_s": self.chair_s, "chair_i": self.chair_i, "recall": self.recall, "length": self.length}[metric]


class Difference(FrozenRecord):
    """One metric of a paired comparison: a's, b's, a - b over the same images and its paired
    image-bootstrap CI (``chair --against``, and every difference of the decoding comparison)."""

    a: float | None
    b: float | None
    diff: float | None
    ci: CI


class ChairPaired(FrozenRecord):
    """``chair --against``: this run minus the other, per metric, on the same images."""

    against: str
    chair_s: Difference
    chair_i: Difference
    recall: Difference
    length: Difference

    def metrics(self) -> dict[str, Difference]:
        return {name: getattr(self, name) for name in METRICS}


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
        path, _, line = cap.source.rpartition(":")
        where = (path or None, int(line) if line.isascii() and line.isdigit() else None)
        if len(text) > MAX_CAPTION_CHARS:
            raise InputError(f"a caption of {len(text):,} characters is over the limit of {MAX_CAPTION_CHARS:,}", *where)
        read = caption_objects(family, text, *where)
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
    settings: ChairSettings | dict[str, Any],
    n_resamples: int = 1000,
    seed: int = 0,
) -> ChairSummary:
    if not scores:
        raise InputError("no caption to score")
    stats = _statistics(scores)
    everything = np.arange(len(scores))
    clusters = [s.image_id for s in scores]
    ci = ChairCIs(**{name: (cluster_bootstrap(clusters, stat, n_resamples=n_resamples, seed=seed) if n_resamples else None)
                     for name, stat in stats.items()})  # fmt: skip
    values = {name: stat(everything) for name, stat in stats.items()}
    recorded = settings if isinstance(settings, ChairSettings) else ChairSettings(**settings)
    return ChairSummary(family=family, n=len(scores), ci=ci, settings=recorded, **values)


def _paired_metrics(a: Sequence[CaptionScore], b: Sequence[CaptionScore], n_resamples: int, seed: int) -> dict[str, Difference]:
    """a - b for every metric, with a paired image-bootstrap CI; both must caption the same images once each."""
    ids_a = [s.image_id for s in a]
    ids_b = [s.image_id for s in b]
    if len(set(ids_a)) != len(ids_a) or len(set(ids_b)) != len(ids_b):
        raise InputError("a paired difference needs one caption per image in each run")
    if set(ids_a) != set(ids_b):
        only = sorted(set(ids_a) ^ set(ids_b), key=key_order)
        raise InputError(
            f"the two runs caption different images ({len(only)} differ, e.g. image {only[0]})"
        )
    order = {image: k for k, image in enumerate(ids_a)}
    b_sorted = sorted(b, key=lambda s: order[s.image_id])
    stats_a, stats_b = _statistics(a), _statistics(b_sorted)
    everything = np.arange(len(a))
    out: dict[str, Difference] = {}
    for name in METRICS:
        va, vb = stats_a[name](everything), stats_b[name](everything)
        ci = paired_bootstrap_diff(ids_a, stats_a[name], stats_b[name], n_resamples=n_resamples, seed=seed) if n_resamples else None
        out[name] = Difference(a=va, b=vb, diff=None if va is None or vb is None else va - vb, ci=ci)
    return out


def paired_comparison(
    a: Sequence[CaptionScore], b: Sequence[CaptionScore], against: str, *, n_resamples: int = 1000, seed: int = 0
) -> ChairPaired:
    """``chair --against``: a - b on the same images, ``against`` naming b."""
    return ChairPaired(against=against, **_paired_metrics(a, b, n_resamples, seed))


def paired_differences(
    a: Sequence[CaptionScore],
    b: Sequence[CaptionScore],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Difference]:
    """:func:`paired_comparison`'s metrics by name, for the decoding comparison, which adds its
    own rates to them."""
    return _paired_metrics(a, b, n_resamples, seed)


def _shown_ids(keys: Sequence[ImageKey]) -> dict[ImageKey, ImageKey]:
    """The ``image_id`` each image shows in ``chair_<family>.jsonl``: a COCO id as it is; a
    named image the number its name ends in, as earlier versions wrote it, where no other image
    of the file shows that number (``scene_00001.png`` -> 1), else its name (``kitchen_1.png``
    beside ``street_1.png``)."""
    numbers: dict[ImageKey, int | None] = {}
    for key in dict.fromkeys(keys):
        digits = re.findall(r"\d+", Path(key).stem) if isinstance(key, str) else None
        numbers[key] = key if isinstance(key, int) else int(digits[-1]) if digits else None
    taken = Counter(n for n in numbers.values() if n is not None)
    return {key: n if n is not None and taken[n] == 1 else key for key, n in numbers.items()}


def caption_lines(scores: Sequence[CaptionScore]) -> str:
    """``chair_<family>.jsonl``: one scored caption a line (see :func:`_shown_ids` for its image_id)."""
    shown = _shown_ids([s.image_id for s in scores])
    return "".join(s.model_copy(update={"image_id": shown[s.image_id]}).model_dump_json() + "\n" for s in scores)
