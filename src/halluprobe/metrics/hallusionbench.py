"""HallusionBench's aAcc, fAcc and qAcc from one readout's rows, grouped as the official script groups.

The official ``utils.py`` (tianyi-lab/HallusionBench) marks each question correct or not
(``assign_correctness``), then:

- aAcc (``get_eval_all``): correct questions over all questions;
- fAcc (``get_eval_fig``): figures, keyed by category, subcategory, set and figure, whose every
  question is correct, over all figures; a VS question without a figure (``figure_id`` 0) is in
  no figure;
- qAcc (``get_eval_pair_all``): questions keyed by category, subcategory, set and question id
  (one question asked of every figure variant of its set, the no-figure one included) whose
  every variant is correct, over all such questions.

Per category (VD, VS) the script runs the same functions on that category's records; the
overall figures pool both. Its correctness is a judge's correct (1) / incorrect (0) / uncertain
(2); a rule-based readout gives right (decision = label), wrong, or unknown (uncertain). One quirk
is kept: a VS question asked without its figure counts as correct when the answer is right *or
uncertain* (declining to answer without the chart is the right behaviour there). An errored
sample is uncertain, as an empty answer would be.

CIs: percentile intervals from a bootstrap over sets (category, subcategory, set_id), the unit
that contains every figure and every question variant, so each replicate keeps the groups whole.

``grouping="vlmevalkit"`` / ``"evalscope"`` group as those tools do (VLMEvalKit's
``Hallusion_rating``, EvalScope's ``HallusionBenchAdapter.aggregate_scores``; the two agree):
figures keyed by subcategory, set and figure, questions by subcategory, set and question id,
without the category, so in the overall figures VD's and VS's ``ocr`` sets of one ``set_id``
merge into one group; a VS question without a figure is a figure of its own (figure 0); and an
uncertain answer is wrong everywhere (VLMEvalKit's judge, when used, has resolved most before).
Their sets are then (subcategory, set_id), the clusters of the bootstrap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from halluprobe.benchmarks.hallusionbench import HallusionKey, hallusion_key
from halluprobe.metrics.score import ScoreRow
from halluprobe.metrics.stats import check_level, draw_blocks, draw_weights, percentile_ci

__all__ = ["HALLUSION_GROUPINGS", "HallusionGrouping", "HallusionScores", "HallusionSlice", "hallusion_correct", "hallusion_scores"]

_METRICS = ("aAcc", "fAcc", "qAcc")
HallusionGrouping = Literal["official", "vlmevalkit", "evalscope"]
HALLUSION_GROUPINGS: tuple[HallusionGrouping, ...] = ("official", "vlmevalkit", "evalscope")


@dataclass(frozen=True)
class HallusionSlice:
    """aAcc, fAcc, qAcc (ratios in [0, 1]) of one slice ("VD", "VS", "Overall"), their counts and CIs."""

    name: str
    questions: int
    figures: int
    question_groups: int
    unknown: int
    without_figure: int  # VS questions asked without a figure that are in the rows
    a_acc: float | None
    f_acc: float | None
    q_acc: float | None
    a_ci: tuple[float, float] | None
    f_ci: tuple[float, float] | None
    q_ci: tuple[float, float] | None


@dataclass(frozen=True)
class HallusionScores:
    grouping: HallusionGrouping
    slices: tuple[HallusionSlice, ...]


def hallusion_correct(key: HallusionKey, row: ScoreRow) -> bool:
    """``assign_correctness`` for a rule's decision: right, or (VS without a figure) unknown too."""
    right = not row.error and row.decision == row.label
    uncertain = row.error or row.decision == "unknown"
    if key.category == "VS" and key.figure_id == 0:
        return right or uncertain
    return right


@dataclass(frozen=True)
class _Table:
    """Per question: correct, its figure group (-1: none), its question group, its set (the cluster)."""

    correct: np.ndarray
    figure: np.ndarray
    group: np.ndarray
    cluster: np.ndarray


def _codes(keys: list[object]) -> np.ndarray:
    index: dict[object, int] = {}
    return np.array([index.setdefault(k, len(index)) if k is not None else -1 for k in keys], dtype=np.int64)


def _ratios(t: _Table, w: np.ndarray) -> dict[str, np.ndarray]:
    """aAcc, fAcc, qAcc for weight rows ``w`` over the table's clusters (a group counts with its set's weight)."""
    qw = w[:, t.cluster]  # weight of each question
    out: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        out["aAcc"] = (qw @ t.correct) / qw.sum(axis=1)
        for name, codes in (("fAcc", t.figure), ("qAcc", t.group)):
            keep = codes >= 0
            n_groups = int(codes[keep].max()) + 1 if keep.any() else 0
            if n_groups == 0:
                out[name] = np.full(w.shape[0], np.nan)
                continue
            wrong = np.bincount(codes[keep], weights=1.0 - t.correct[keep], minlength=n_groups) > 0
            group_set = np.zeros(n_groups, dtype=np.int64)
            group_set[codes[keep]] = t.cluster[keep]
            gw = w[:, group_set]
            out[name] = (gw @ (~wrong).astype(float)) / gw.sum(axis=1)
    return out


def _set_of(k: HallusionKey, grouping: HallusionGrouping) -> tuple[object, ...]:
    return (k.category, k.subcategory, k.set_id) if grouping == "official" else (k.subcategory, k.set_id)


def _table(pairs: list[tuple[HallusionKey, ScoreRow]], sets: dict[tuple[object, ...], int], grouping: HallusionGrouping) -> _Table:
    if grouping == "official":
        correct = np.array([hallusion_correct(k, r) for k, r in pairs], dtype=float)
        figures = _codes([None if (k.category == "VS" and k.figure_id == 0) else (*_set_of(k, grouping), k.figure_id) for k, _ in pairs])
    else:
        correct = np.array([not r.error and r.decision == r.label for _, r in pairs], dtype=float)
        figures = _codes([(*_set_of(k, grouping), k.figure_id) for k, _ in pairs])
    groups = _codes([(*_set_of(k, grouping), k.question_id) for k, _ in pairs])
    cluster = np.array([sets[_set_of(k, grouping)] for k, _ in pairs], dtype=np.int64)
    return _Table(correct, figures, groups, cluster)


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def hallusion_scores(
    rows: Sequence[ScoreRow], *, grouping: HallusionGrouping = "official", n_resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> HallusionScores:
    """VD, VS (where present) and Overall; ValueError for a row whose split is no HallusionBench split."""
    check_level(level)
    pairs = [(hallusion_key(r.split, r.question_id), r) for r in rows]
    sets: dict[tuple[object, ...], int] = {}
    for k, _ in pairs:
        sets.setdefault(_set_of(k, grouping), len(sets))
    chosen = [(c, [(k, r) for k, r in pairs if k.category == c]) for c in ("VD", "VS")]
    slices = [(name, members) for name, members in chosen if members] + [("Overall", pairs)]
    tables = [(name, members, _table(members, sets, grouping)) for name, members in slices]
    reps: dict[str, dict[str, list[np.ndarray]]] = {name: {m: [] for m in _METRICS} for name, _, _ in tables}
    if n_resamples > 0 and pairs:
        rng = np.random.default_rng(seed)
        for block in draw_blocks(rng, len(sets), n_resamples):
            weights = draw_weights(block, len(sets)).astype(float)
            for name, _, t in tables:
                for m, values in _ratios(t, weights).items():
                    reps[name][m].append(values)
    out = []
    for name, members, t in tables:
        point = _ratios(t, np.ones((1, len(sets))))
        cis = {m: percentile_ci(np.concatenate(v), level) if v else None for m, v in reps[name].items()}
        out.append(
            HallusionSlice(
                name=name,
                questions=len(members),
                figures=len({int(c) for c in t.figure if c >= 0}),
                question_groups=len({int(c) for c in t.group}),
                unknown=sum(1 for _, r in members if r.error or r.decision == "unknown"),
                without_figure=sum(1 for k, _ in members if k.category == "VS" and k.figure_id == 0),
                a_acc=_finite(point["aAcc"][0]),
                f_acc=_finite(point["fAcc"][0]),
                q_acc=_finite(point["qAcc"][0]),
                a_ci=cis["aAcc"],
                f_ci=cis["fAcc"],
                q_ci=cis["qAcc"],
            )
        )
    return HallusionScores(grouping=grouping, slices=tuple(out))
