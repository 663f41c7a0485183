"""MMHal-Bench's scores from a judgment dir: the official summarizer's (compat) and halluprobe's.

compat: an item without exactly one rating (or without a reply) scores 0, with the warning the
official summarizer prints; types are read by position (index % 8), as it does.
halluprobe's: unparseable and errored items are counted and scored by an explicit policy
(``zero``: the official 0; ``wrong``: a hallucination in the rate, out of the average score;
``drop``: out of both); types come from each item's ``question_type``. CIs resample images.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from halluprobe.benchmarks.mmhal import MMHalFile, parse_rating
from halluprobe.errors import InputError
from halluprobe.judging.ledger import JudgeHeader, Judgment
from halluprobe.metrics.stats import cluster_bootstrap
from halluprobe.records import FrozenRecord

__all__ = ["CompatScore", "MMHalScore", "TypeScore", "UnparseablePolicy", "compat_lines", "item_values", "mean_of", "ordered_judgments", "score_mmhal"]

UnparseablePolicy = Literal["zero", "wrong", "drop"]
_TYPES_BY_POSITION = 8


class TypeScore(FrozenRecord):
    question_type: str
    n: int
    average: float | None
    hallucination_rate: float | None
    average_ci: tuple[float, float] | None = None
    hallucination_rate_ci: tuple[float, float] | None = None


class CompatScore(FrozenRecord):
    """The official summarizer's figures, unrounded (``compat_lines`` prints them as it does)."""

    scores: tuple[int, ...]
    average: float
    hallucination_rate: float
    per_position_type: tuple[float, ...]  # index % 8, in that order
    warnings: tuple[str, ...]  # one per item scored 0 for want of exactly one rating


class MMHalScore(FrozenRecord):
    judge_backend: str
    judge_model: str
    template_sha256: str
    template_file_sha256: str
    template_pinned: bool
    n: int
    unparseable: int
    errors: int
    policy: UnparseablePolicy
    average: float | None
    average_ci: tuple[float, float] | None
    hallucination_rate: float | None
    hallucination_rate_ci: tuple[float, float] | None
    per_type: tuple[TypeScore, ...]
    compat: CompatScore
    n_resamples: int
    seed: int


def ordered_judgments(mmhal: MMHalFile, judgments: Sequence[Judgment], where: str) -> list[Judgment]:
    """One judgment per template item, in template order (item id = the template index)."""
    by_id = {j.item_id: j for j in judgments}
    missing = [str(item.index) for item in mmhal.items if str(item.index) not in by_id]
    if missing:
        raise InputError(f"{len(missing)} of {len(mmhal.items)} items not judged (e.g. item {missing[0]}): run the judge again to finish", where)
    return [by_id[str(item.index)] for item in mmhal.items]


def item_values(judged: Sequence[Judgment], policy: UnparseablePolicy) -> tuple[np.ndarray, np.ndarray]:
    """Per item: the score and the hallucination flag (NaN where the policy leaves the item out)."""
    scores, halluc = np.full(len(judged), np.nan), np.full(len(judged), np.nan)
    for i, j in enumerate(judged):
        if j.status == "parsed" and isinstance(j.verdict, int):
            scores[i], halluc[i] = j.verdict, float(j.verdict < 3)
        elif policy == "zero":
            scores[i], halluc[i] = 0.0, 1.0
        elif policy == "wrong":
            halluc[i] = 1.0
    return scores, halluc


def mean_of(values: np.ndarray, rows: np.ndarray | None = None) -> float | None:
    """Mean over the rows that are not NaN; None when none is."""
    picked = values if rows is None else values[rows]
    kept = picked[~np.isnan(picked)]
    return float(kept.mean()) if kept.size else None


def _compat(judged: Sequence[Judgment]) -> CompatScore:
    scores: list[int] = []
    warnings = []
    for i, j in enumerate(judged):
        rating, _ = parse_rating(j.reply) if j.reply is not None else (None, None)
        if rating is None:
            # the official summarizer's message, then the item and its reply (no reply: the backend's error)
            warnings.append(f"Warning: multiple or zero scores found\n{i} {j.reply if j.reply is not None else '(no reply: ' + str(j.reason) + ')'}")
            rating = 0
        scores.append(rating)
    halluc = [0 if s >= 3 else 1 for s in scores]
    per = [[s for i, s in enumerate(scores) if i % _TYPES_BY_POSITION == t] for t in range(_TYPES_BY_POSITION)]
    return CompatScore(scores=tuple(scores), average=sum(scores) / len(scores), hallucination_rate=sum(halluc) / len(halluc),
                       per_position_type=tuple(sum(p) / len(p) for p in per), warnings=tuple(warnings))  # fmt: skip


def compat_lines(compat: CompatScore) -> list[str]:
    """The official summarizer's printout (its warnings first, then its three lines, its rounding)."""
    return [
        *compat.warnings,
        f"Average score: {compat.average:.2f}",
        f"Hallucination rate: {compat.hallucination_rate:.2f}",
        "Average score for each question type: " + ",".join(str(round(v, 2)) for v in compat.per_position_type),
    ]


def score_mmhal(mmhal: MMHalFile, header: JudgeHeader, judgments: Sequence[Judgment], *, policy: UnparseablePolicy,
                where: str, n_resamples: int = 1000, seed: int = 0) -> MMHalScore:  # fmt: skip
    """Both scores of one judgment dir over the template's items."""
    judged = ordered_judgments(mmhal, judgments, where)
    scores, halluc = item_values(judged, policy)
    images = [item.image_id for item in mmhal.items]

    def ci(values: np.ndarray, rows: np.ndarray) -> tuple[float, float] | None:
        # images resampled within the rows (one type's, or all); a draw with no kept item is skipped
        if not n_resamples:
            return None
        return cluster_bootstrap([images[i] for i in rows], lambda r: mean_of(values[rows], r), n_resamples=n_resamples, seed=seed)

    everything = np.arange(len(judged))
    per_type = []
    for qtype in dict.fromkeys(item.question_type for item in mmhal.items):
        rows = np.array([i for i, item in enumerate(mmhal.items) if item.question_type == qtype])
        per_type.append(TypeScore(question_type=qtype, n=len(rows), average=mean_of(scores, rows), hallucination_rate=mean_of(halluc, rows),
                                  average_ci=ci(scores, rows), hallucination_rate_ci=ci(halluc, rows)))  # fmt: skip
    return MMHalScore(
        judge_backend=header.backend, judge_model=header.model, template_sha256=header.template_sha256,
        template_file_sha256=mmhal.sha256, template_pinned=mmhal.pinned, n=len(judged),
        unparseable=sum(j.status == "unparseable" for j in judged), errors=sum(j.status == "error" for j in judged),
        policy=policy, average=mean_of(scores), hallucination_rate=mean_of(halluc),
        average_ci=ci(scores, everything), hallucination_rate_ci=ci(halluc, everything),
        per_type=tuple(per_type), compat=_compat(judged), n_resamples=n_resamples, seed=seed,
    )  # fmt: skip
