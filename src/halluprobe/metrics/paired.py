"""The paired test of two readouts (or two runs) over the same questions, and the per-sample
table it reads.

``SampleTable`` holds a set of answered-or-errored samples as columns (split, image, label,
error) plus each readout's decisions and ``p_yes``; the audit, the run comparison and the
corrections table all build one. ``paired_test`` compares two decision columns of it:

- McNemar's exact test on "correct" under the unknown policy (``no`` / ``yes`` read an unknown
  as that answer; ``wrong``: never correct; an errored question is never correct);
- ΔF1 = A minus B, macro (mean over splits) and pooled, with percentile CIs from a paired image
  bootstrap: one set of image weights per replicate serves both sides, drawn through
  ``stats.draw_blocks`` like every bootstrap in halluprobe, so a replicate equals
  ``stats.paired_bootstrap_diff`` with a macro-F1 statistic (the tests check it).

Under ``drop`` a question that either side leaves unknown (or that errored) leaves the pair:
both sides are compared over the same questions. Speed: rows are reduced to per-image raw
counts per split once per side; a replicate is a weight vector times those counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from halluprobe.metrics.binary import N_RAW, categorize, count, fold_counts, metrics_from_counts, ratio_arrays
from halluprobe.metrics.stats import draw_blocks, draw_weights, mcnemar_exact, percentile_ci
from halluprobe.records import UnknownPolicy

__all__ = ["ImageBootstrap", "PairedResult", "SampleTable", "paired_test"]


def _num(value: float) -> float | None:
    """A plain float, or None for NaN (JSON has no NaN)."""
    value = float(value)
    return None if np.isnan(value) else value


@dataclass(frozen=True)
class SampleTable:
    """Samples as columns, in the caller's order; each readout a column of decisions
    (``"yes"`` / ``"no"`` / ``"unknown"``, object array) and of ``p_yes`` (NaN where missing)."""

    splits: list[str]  # order of first appearance
    split_code: np.ndarray  # int64 index into ``splits``
    images: np.ndarray  # str: the bootstrap's clusters
    labels_yes: np.ndarray
    errors: np.ndarray
    decisions: dict[str, np.ndarray] = field(default_factory=dict)
    p_yes: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(cls, splits: Sequence[str], images: Sequence[str], labels: Sequence[str], errors: Sequence[bool]) -> SampleTable:
        """A table without readouts yet (add them with ``add``)."""
        order = list(dict.fromkeys(splits))
        index = {name: i for i, name in enumerate(order)}
        return cls(
            splits=order,
            split_code=np.array([index[s] for s in splits], dtype=np.int64),
            images=np.asarray(images, dtype=str),
            labels_yes=np.array([label == "yes" for label in labels], dtype=bool),
            errors=np.array(errors, dtype=bool),
        )

    def add(self, readout: str, decisions: Sequence[str] | np.ndarray, p_yes: Sequence[float | None] | np.ndarray | None = None) -> None:
        """Add (or replace) one readout's columns; ``p_yes`` None means no probabilities."""
        dec = np.empty(self.n, dtype=object)
        dec[:] = list(decisions)
        self.decisions[readout] = dec
        prob = np.full(self.n, np.nan)
        if p_yes is not None:
            prob[:] = [np.nan if p is None else p for p in p_yes]
        self.p_yes[readout] = prob

    @property
    def n(self) -> int:
        return int(self.labels_yes.size)

    @property
    def readouts(self) -> list[str]:
        return list(self.decisions)

    @property
    def labels(self) -> np.ndarray:
        return np.where(self.labels_yes, "yes", "no")

    def subset(self, rows: np.ndarray) -> SampleTable:
        """The rows at ``rows`` (indices or a mask), every readout kept; split names as before."""
        return SampleTable(
            splits=self.splits,
            split_code=self.split_code[rows],
            images=self.images[rows],
            labels_yes=self.labels_yes[rows],
            errors=self.errors[rows],
            decisions={r: d[rows] for r, d in self.decisions.items()},
            p_yes={r: p[rows] for r, p in self.p_yes.items()},
        )

    def correct(self, decisions: np.ndarray, policy: UnknownPolicy) -> np.ndarray:
        """Right answers under the policy (``no`` / ``yes`` read an unknown as that answer;
        an errored row is never right)."""
        if policy in ("yes", "no"):
            decisions = np.where(decisions == "unknown", policy, decisions)
        right = ((decisions == "yes") & self.labels_yes) | ((decisions == "no") & ~self.labels_yes)
        return right & ~self.errors

    def macro_f1(self, decisions: np.ndarray, policy: UnknownPolicy, rows: np.ndarray | None = None) -> float | None:
        """Macro F1 (the mean over the table's splits) of ``decisions`` over ``rows`` (indices;
        all when None); None when a split has no row there or an undefined F1."""
        idx = np.arange(self.n) if rows is None else rows
        labels = self.labels
        values = []
        for code in dict.fromkeys(self.split_code.tolist()):
            at = idx[self.split_code[idx] == code]
            if not len(at):
                return None
            f1 = metrics_from_counts(count(labels[at], decisions[at], self.errors[at], policy))["f1"]
            if f1 is None:
                return None
            values.append(f1)
        return sum(values) / len(values) if values else None


class ImageBootstrap:
    """The replicate image weights of one table, drawn once (seeded) and reused for every pair
    compared on it."""

    def __init__(self, table: SampleTable, *, n_resamples: int, seed: int, level: float = 0.95) -> None:
        _, codes = np.unique(table.images, return_inverse=True)
        self.table = table
        self.image_code = codes.reshape(-1).astype(np.int64)
        self.n_images = int(self.image_code.max()) + 1 if self.image_code.size else 0
        self.level = level
        self.weights: list[np.ndarray] = []
        if n_resamples > 0 and self.n_images > 0:
            rng = np.random.default_rng(seed)
            self.weights = [draw_weights(d, self.n_images) for d in draw_blocks(rng, self.n_images, n_resamples)]

    def _per_image(self, decisions: np.ndarray, keep: np.ndarray) -> dict[int, np.ndarray]:
        t = self.table
        cats = categorize(t.labels[keep], decisions[keep], t.errors[keep])
        cells = self.image_code[keep] * N_RAW + cats
        codes = t.split_code[keep]
        return {
            int(s): np.bincount(cells[codes == s], minlength=self.n_images * N_RAW).reshape(self.n_images, N_RAW)
            for s in np.unique(codes)
        }

    @staticmethod
    def _macro_pooled(per_image: dict[int, np.ndarray], weights: np.ndarray, policy: UnknownPolicy) -> tuple[np.ndarray, np.ndarray]:
        def f1(raw: np.ndarray) -> np.ndarray:
            return ratio_arrays(fold_counts(raw, policy), policy)["f1"]

        # macro: the mean over splits, NaN (so skipped by percentile_ci) where a split's F1 is undefined
        by_split = [f1(weights @ counts) for counts in per_image.values()]
        return np.mean(by_split, axis=0), f1(weights @ np.sum(list(per_image.values()), axis=0))

    def delta_f1(self, a: np.ndarray, b: np.ndarray, keep: np.ndarray, policy: UnknownPolicy) -> tuple[
        float | None, tuple[float, float] | None, float | None, tuple[float, float] | None
    ]:  # fmt: skip
        """A minus B over the rows in ``keep``: macro ΔF1 and its CI, pooled ΔF1 and its CI."""
        if not keep.any():
            return None, None, None, None
        per_a, per_b = self._per_image(a, keep), self._per_image(b, keep)
        ones = np.ones((1, self.n_images))
        (ma, pa), (mb, pb) = self._macro_pooled(per_a, ones, policy), self._macro_pooled(per_b, ones, policy)
        macro_reps, pooled_reps = [], []
        for w in self.weights:
            (ra, qa), (rb, qb) = self._macro_pooled(per_a, w, policy), self._macro_pooled(per_b, w, policy)
            macro_reps.append(ra - rb)
            pooled_reps.append(qa - qb)

        def ci(reps: list[np.ndarray]) -> tuple[float, float] | None:
            return percentile_ci(np.concatenate(reps), self.level) if reps else None

        return _num(ma[0] - mb[0]), ci(macro_reps), _num(pa[0] - pb[0]), ci(pooled_reps)


@dataclass(frozen=True)
class PairedResult:
    """``b``: A right and B wrong, ``c`` the reverse, over ``n`` questions; ΔF1 = A minus B."""

    n: int
    b: int
    c: int
    mcnemar_p: float
    delta_f1: float | None
    delta_f1_ci: tuple[float, float] | None
    delta_f1_pooled: float | None
    delta_f1_pooled_ci: tuple[float, float] | None


def paired_test(boot: ImageBootstrap, a: np.ndarray, b: np.ndarray, policy: UnknownPolicy) -> PairedResult:
    """Decisions ``a`` against ``b`` (columns of ``boot.table``): McNemar and ΔF1 with its
    paired image-bootstrap CIs, under ``policy`` (see the module docstring for ``drop``)."""
    t = boot.table
    keep = np.ones(t.n, dtype=bool)
    if policy == "drop":  # over the same questions: one side's unknown drops the question for both
        keep = (a != "unknown") & (b != "unknown") & ~t.errors
    test = mcnemar_exact(t.correct(a, policy)[keep], t.correct(b, policy)[keep])
    delta, delta_ci, pooled, pooled_ci = boot.delta_f1(a, b, keep, policy)
    return PairedResult(
        n=test.n, b=test.b, c=test.c, mcnemar_p=test.p_value,
        delta_f1=delta, delta_f1_ci=delta_ci, delta_f1_pooled=pooled, delta_f1_pooled_ci=pooled_ci,
    )  # fmt: skip
