"""MME's scores from one readout's rows: accuracy, accuracy+, their sum x 100, per subtask.

As MME's ``calculation.py`` computes them: accuracy counts an answer its parser calls "other"
(``unknown`` here; an errored sample too, whose answer the tool would read as empty) as wrong;
accuracy+ is the share of images whose two questions are both right; the score is
``(accuracy + accuracy+) * 100`` out of 200; a total is a sum of subtask scores (perception,
cognition, and the hallucination subtotal existence + count + position + color).

How questions are grouped into images differs by tool (``grouping``):

- ``official``: ``calculation.py`` pairs lines 2k and 2k+1 of the results file, whatever their
  images (here ``question_id // 2``, the line order the question files keep);
- ``lmms-eval``: ``mme_aggregate_results`` groups by the document's ``question_id`` (the image
  path in lmms-lab's copy) and averages per image; it asserts two questions per image (a group
  of another size is counted here in ``odd_groups`` and left out of accuracy+);
- ``vlmevalkit``: ``MME_rating`` groups by ``image_path`` and takes the product of the first two
  scores of each image as accuracy+.

On files in the official layout (two consecutive lines per image) all three agree.

CIs are image-clustered percentile intervals (:mod:`halluprobe.metrics.stats`' draws): an image
is its file name where that is a COCO id (``000000006040.jpg`` is the same picture in
existence and count), else its path; one draw of images per replicate serves every subtask and
every total, as :mod:`halluprobe.metrics.score` does for POPE's splits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from halluprobe.metrics.score import ScoreRow
from halluprobe.metrics.stats import check_level, draw_blocks, draw_weights, percentile_ci

__all__ = ["MME_GROUPINGS", "MmeGrouping", "MmeScores", "MmeSubtask", "MmeTotal", "mme_scores"]

MmeGrouping = Literal["official", "lmms-eval", "vlmevalkit"]
MME_GROUPINGS: tuple[MmeGrouping, ...] = ("official", "lmms-eval", "vlmevalkit")
_COCO_NAME = re.compile(r"^\d{12}\.jpg$")


@dataclass(frozen=True)
class MmeSubtask:
    """One subtask's numbers (ratios in [0, 1], the score out of 200) and their CIs."""

    subtask: str
    questions: int
    images: int  # groups scored for accuracy+
    correct: int
    both_correct: int
    other: int  # answers the rule read as neither yes nor no ("other")
    errors: int
    odd_groups: int  # images whose question count is not what the grouping expects
    accuracy: float
    accuracy_plus: float | None  # None: no image with its expected questions
    score: float | None
    score_ci: tuple[float, float] | None


@dataclass(frozen=True)
class MmeTotal:
    """A sum of subtask scores (out of 200 x subtasks), with its CI; ``missing``: its subtasks absent from the run."""

    name: str
    subtasks: tuple[str, ...]
    missing: tuple[str, ...]
    score: float | None  # None where a subtask's score is
    score_ci: tuple[float, float] | None


@dataclass(frozen=True)
class MmeScores:
    grouping: MmeGrouping
    subtasks: tuple[MmeSubtask, ...]
    totals: tuple[MmeTotal, ...]


def _cluster(image: str) -> str:
    name = image.rsplit("/", 1)[-1]
    return name if _COCO_NAME.match(name) else image


@dataclass(frozen=True)
class _Groups:
    """One subtask's rows reduced to its image groups: per group the questions, right answers,
    whether it counts for accuracy+ and whether it is all right, and its cluster index."""

    n: np.ndarray
    right: np.ndarray
    plus_counted: np.ndarray
    plus_right: np.ndarray
    cluster: np.ndarray
    odd: int


def _groups(rows: Sequence[ScoreRow], grouping: MmeGrouping, cluster_index: dict[str, int]) -> _Groups:
    keyed: dict[object, list[ScoreRow]] = {}
    ordered = sorted(rows, key=lambda r: r.question_id)
    for r in ordered:
        key: object = r.question_id // 2 if grouping == "official" else r.image
        keyed.setdefault(key, []).append(r)
    n, right, counted, plus, cluster = [], [], [], [], []
    odd = 0
    for members in keyed.values():
        ok = [(not r.error) and r.decision == r.label for r in members]
        n.append(len(members))
        right.append(sum(ok))
        if grouping == "vlmevalkit":
            good = len(members) >= 2  # it multiplies the first two scores (fewer: an error)
            is_plus = good and ok[0] and ok[1]
        else:
            good = len(members) == 2
            is_plus = good and all(ok)
        odd += not good
        counted.append(good)
        plus.append(is_plus)
        cluster.append(cluster_index[_cluster(members[0].image)])
    return _Groups(np.array(n, float), np.array(right, float), np.array(counted, float), np.array(plus, float), np.array(cluster, np.int64), odd)


def _score(g: _Groups, w: np.ndarray) -> np.ndarray:
    """Scores for weight rows ``w`` (replicates x groups); NaN where undefined."""
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = (w @ g.right) / (w @ g.n)
        plus = (w @ g.plus_right) / (w @ g.plus_counted)
    return 100 * (acc + plus)


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def mme_scores(
    rows: Sequence[ScoreRow],
    *,
    grouping: MmeGrouping = "official",
    totals: Sequence[tuple[str, Sequence[str]]] = (),
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> MmeScores:
    """Per subtask (a row's split) in the order first seen, then each named total that has at
    least one of its subtasks in the rows."""
    check_level(level)
    splits = list(dict.fromkeys(r.split for r in rows))
    clusters = sorted({_cluster(r.image) for r in rows})
    index = {c: i for i, c in enumerate(clusters)}
    grouped = {s: _groups([r for r in rows if r.split == s], grouping, index) for s in splits}
    point = {s: _finite(float(_score(g, np.ones((1, g.n.size)))[0])) for s, g in grouped.items()}
    reps: dict[str, list[np.ndarray]] = {s: [] for s in splits}
    if n_resamples > 0 and rows:
        rng = np.random.default_rng(seed)
        for block in draw_blocks(rng, len(clusters), n_resamples):
            weights = draw_weights(block, len(clusters)).astype(float)
            for s, g in grouped.items():
                reps[s].append(_score(g, weights[:, g.cluster]))
    joined = {s: np.concatenate(v) if v else np.array([]) for s, v in reps.items()}
    subtasks = []
    for s in splits:
        g = grouped[s]
        these = [r for r in rows if r.split == s]
        acc = float(g.right.sum() / g.n.sum())
        plus = float(g.plus_right.sum() / g.plus_counted.sum()) if g.plus_counted.sum() else None
        subtasks.append(
            MmeSubtask(
                subtask=s,
                questions=len(these),
                images=int(g.plus_counted.sum()),
                correct=int(g.right.sum()),
                both_correct=int(g.plus_right.sum()),
                other=sum(1 for r in these if not r.error and r.decision == "unknown"),
                errors=sum(1 for r in these if r.error),
                odd_groups=g.odd,
                accuracy=acc,
                accuracy_plus=plus,
                score=point[s],
                score_ci=percentile_ci(joined[s], level) if joined[s].size else None,
            )
        )
    out_totals = []
    for name, members in totals:
        present = tuple(m for m in members if m in grouped)
        if not present:
            continue
        summed = sum(joined[m] for m in present) if n_resamples > 0 else np.array([])
        out_totals.append(
            MmeTotal(
                name=name,
                subtasks=present,
                missing=tuple(m for m in members if m not in grouped),
                score=None if any(point[m] is None for m in present) else sum(point[m] or 0.0 for m in present),
                score_ci=percentile_ci(summed, level) if np.size(summed) else None,
            )
        )
    return MmeScores(grouping=grouping, subtasks=tuple(subtasks), totals=tuple(out_totals))
