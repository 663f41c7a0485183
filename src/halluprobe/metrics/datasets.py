"""The metrics DASH-B and POPEv2 define for themselves, reported beside F1.

- DASH-B (YanNeu/DASH-B, ``src/eval_utils.py`` and ``benchmark.md``): TNR over the images
  without the object, TPR over those with it; the leaderboard's "ACC" is the mean of TNR and
  TPR, while ``compute_results`` also writes the plain accuracy (``ACC``, correct over all) and
  the harmonic mean of TPR and TNR. An answer its parser cannot read counts as wrong (its
  ``answer`` is None, never equal to the label).
- POPEv2 (RUCAIBox/POPE ``POPEv2/``): each original COCO image is paired with a copy edited to
  remove the asked object. The paired statistic is the drop in p(yes) from the original to its
  edited copy, per pair (1 where the model says yes to the original and no to the edit), with a
  percentile CI from a bootstrap over pairs. p(yes) is the readout's probability where it has
  one, else its decision (yes 1, anything else 0).

Rows carry what these need: DASH-B's images are ``{neg|pos}/...`` and POPEv2's
``train2017/<file>`` or ``edited/<file>`` (:mod:`halluprobe.benchmarks.dataset_files`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from halluprobe.metrics.score import ScoreRow
from halluprobe.metrics.stats import cluster_bootstrap, percentile_ci

__all__ = ["DashbScores", "PairedDrop", "dashb_scores", "popev2_paired_drop", "is_popev2_image"]


@dataclass(frozen=True)
class DashbScores:
    """DASH-B's numbers for one readout (ratios in [0, 1]); ``mean_ci``: image-bootstrap CI of the mean."""

    n_pos: int
    n_neg: int
    tpr: float | None
    tnr: float | None
    mean_tpr_tnr: float | None  # the leaderboard's "ACC"
    accuracy: float | None  # eval_utils' "ACC": correct over all
    harmonic_mean: float | None
    mean_ci: tuple[float, float] | None


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def dashb_scores(rows: Sequence[ScoreRow], *, n_resamples: int = 1000, seed: int = 0) -> DashbScores:
    """TPR, TNR, their mean and harmonic mean, and plain accuracy; an unknown answer is wrong."""
    labels_yes = np.array([r.label == "yes" for r in rows], dtype=bool)
    correct = np.array([r.decision == r.label for r in rows], dtype=bool)

    def rates(idx: np.ndarray) -> tuple[float | None, float | None]:
        pos, neg = labels_yes[idx], ~labels_yes[idx]
        return _ratio(float(correct[idx][pos].sum()), float(pos.sum())), _ratio(float(correct[idx][neg].sum()), float(neg.sum()))

    def mean_of(idx: np.ndarray) -> float | None:
        tpr, tnr = rates(idx)
        return None if tpr is None or tnr is None else (tpr + tnr) / 2

    every = np.arange(len(rows))
    tpr, tnr = rates(every)
    harmonic = None if tpr is None or tnr is None or tpr + tnr == 0 else 2 * tpr * tnr / (tpr + tnr)
    # resamples 0: no CI, as score_rows (the bootstrap itself needs one draw at least)
    ci = cluster_bootstrap([r.image for r in rows], mean_of, n_resamples=n_resamples, seed=seed) if rows and n_resamples > 0 else None
    return DashbScores(
        n_pos=int(labels_yes.sum()),
        n_neg=int((~labels_yes).sum()),
        tpr=tpr,
        tnr=tnr,
        mean_tpr_tnr=mean_of(every),
        accuracy=_ratio(float(correct.sum()), float(len(rows))),
        harmonic_mean=harmonic,
        mean_ci=ci,
    )


@dataclass(frozen=True)
class PairedDrop:
    """POPEv2's paired drop in p(yes), original minus edited, over the complete pairs."""

    pairs: int
    unpaired: int  # rows in no pair (not scored): partner absent, image asked twice on one side, other folder
    mean_drop: float | None
    ci: tuple[float, float] | None
    both_correct: int  # pairs answered yes on the original and no on the edit
    yes_to_both: int  # pairs answered yes on both: the edit did not register


def is_popev2_image(image: str) -> bool:
    return image.startswith(("train2017/", "edited/"))


def _p_yes(row: ScoreRow) -> float:
    if row.p_yes is not None:
        return float(row.p_yes)
    return 1.0 if row.decision == "yes" else 0.0


def popev2_paired_drop(rows: Sequence[ScoreRow], *, n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> PairedDrop:
    """Pairs are the original ``train2017/<file>`` and the edited ``edited/<file>`` of one split.

    POPEv2 pairs its records by ``image_id``: each id has exactly two records, the COCO original
    (``/coco/train2017/<id:012d>.jpg``, Yes) and its edit (``/images/<id:012d>.jpg``, No), one
    object each (measured over all 1,000 records of the pinned annotations.json). Both files
    are named by the id, so (split, file name) is that id within one question file; the split
    keeps two runs of the file under other names apart (the dataset is one file: no pair spans
    splits). A key met twice on one side (an image asked twice) is ambiguous: none of its rows
    is paired, never one silently replacing the other; a row in neither folder is unpaired too."""
    sides: dict[str, dict[tuple[str, str], list[ScoreRow]]] = {"train2017": {}, "edited": {}}
    for r in rows:
        folder, _, name = r.image.partition("/")
        if folder in sides:
            sides[folder].setdefault((r.split, name), []).append(r)
    originals = {k: found[0] for k, found in sides["train2017"].items() if len(found) == 1}
    edited = {k: found[0] for k, found in sides["edited"].items() if len(found) == 1}
    keys = sorted(originals.keys() & edited.keys())
    unpaired = len(rows) - 2 * len(keys)
    drops = np.array([_p_yes(originals[k]) - _p_yes(edited[k]) for k in keys], dtype=np.float64)
    ci = None
    if keys and n_resamples > 0:  # resamples 0: no CI
        rng = np.random.default_rng(seed)
        reps = drops[rng.integers(0, len(keys), size=(n_resamples, len(keys)))].mean(axis=1)
        ci = percentile_ci(reps, level)
    return PairedDrop(
        pairs=len(keys),
        unpaired=unpaired,
        mean_drop=float(drops.mean()) if keys else None,
        ci=ci,
        both_correct=sum(originals[k].decision == "yes" and edited[k].decision == "no" for k in keys),
        yes_to_both=sum(originals[k].decision == "yes" and edited[k].decision == "yes" for k in keys),
    )
