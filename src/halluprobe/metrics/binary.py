"""Confusion counts -> binary metrics, under an explicit policy for unknown answers.

Every sample falls in exactly one raw category: answered (TP, FP, TN, FN), unknown (by label) or
errored (by label). An errored sample's decision is ignored: it was never answered.

The policy says what an unknown answer counts as:

- ``wrong`` (halluprobe's default): never correct, never a positive prediction, never dropped.
  accuracy = (TP+TN)/n, recall = TP/(yes labels, unknowns included), yes_ratio = predicted
  yes/n, HTR = FP/(no labels, unknowns included).
- ``no`` / ``yes``: an unknown is read as that answer (it enters TN/FN or TP/FP; the
  ``unknown_*`` counts still say how many there were).
- ``drop``: unknowns leave n and every denominator (still reported in ``unknown_*``).

An errored sample counts in n as wrong, like an unknown under ``wrong``, under every policy but
``drop``, which removes it too; it is always reported in ``errors_*``.

A ratio whose denominator is zero is ``None`` (never 0, never NaN).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from halluprobe.records import UNKNOWN_POLICIES, UnknownPolicy  # defined once there; re-exported for the kernel's callers

__all__ = [
    "METRIC_NAMES",
    "N_RAW",
    "Counts",
    "categorize",
    "check_policy",
    "count",
    "counts_from_raw",
    "fold_counts",
    "metrics_from_counts",
    "ratio_arrays",
]

METRIC_NAMES: tuple[str, ...] = ("accuracy", "precision", "recall", "f1", "yes_ratio", "unknown_rate", "htr")

# Raw category codes, policy-free; the column order of every (..., N_RAW) raw-count array
# (public so the vectorised bootstraps of score.py and paired.py fold the same counts).
_TP, _FP, _TN, _FN, _UNK_YES, _UNK_NO, _ERR_YES, _ERR_NO = range(8)
N_RAW = 8
# Keys of a folded-count dict, which are also the count fields of Counts.
_FOLDED = ("tp", "fp", "tn", "fn", "unknown_yes", "unknown_no", "errors_yes", "errors_no", "n")


@dataclass(frozen=True)
class Counts:
    """Confusion counts after the unknown policy is applied.

    ``tp, fp, tn, fn`` include unknowns mapped by ``no``/``yes``; ``unknown_yes``/``unknown_no``
    are the unknown answers by label and ``errors_yes``/``errors_no`` the errored samples by
    label, under every policy. ``n`` is the number of samples the ratios are over (all of them
    except, under ``drop``, the unknown and errored ones).
    """

    tp: int
    fp: int
    tn: int
    fn: int
    unknown_yes: int
    unknown_no: int
    errors_yes: int
    errors_no: int
    n: int
    policy: UnknownPolicy = "wrong"

    @property
    def unknown(self) -> int:
        return self.unknown_yes + self.unknown_no

    @property
    def errors(self) -> int:
        return self.errors_yes + self.errors_no

    @property
    def total(self) -> int:
        """Every sample counted, dropped ones included."""
        return self.n + (self.unknown + self.errors if self.policy == "drop" else 0)


def check_policy(policy: str) -> UnknownPolicy:
    """``policy`` as an UnknownPolicy; ValueError when it is not one."""
    if policy not in UNKNOWN_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; valid policies: {', '.join(UNKNOWN_POLICIES)}")
    return policy  # type: ignore[return-value]


def categorize(
    labels: Sequence[str] | np.ndarray,
    decisions: Sequence[str] | np.ndarray,
    errors: Sequence[bool] | np.ndarray | None,
) -> np.ndarray:
    """Raw category code (0..N_RAW-1) per sample; validates labels and decisions."""
    lab = np.asarray(labels, dtype=object)
    dec = np.asarray(decisions, dtype=object)
    if lab.ndim != 1 or dec.shape != lab.shape:
        raise ValueError(f"labels and decisions must be 1-D and of equal length, got {lab.shape} and {dec.shape}")
    err = np.zeros(lab.shape, dtype=bool) if errors is None else np.asarray(errors, dtype=bool)
    if err.shape != lab.shape:
        raise ValueError(f"errors must have the length of labels ({lab.shape[0]}), got {err.shape}")
    is_yes = lab == "yes"
    bad = ~(is_yes | (lab == "no"))
    if bad.any():
        raise ValueError(f"labels must be 'yes' or 'no', got {lab[bad][0]!r}")
    dec_yes = dec == "yes"
    dec_no = dec == "no"
    dec_unknown = dec == "unknown"
    bad = ~(dec_yes | dec_no | dec_unknown) & ~err  # an errored sample's decision is ignored
    if bad.any():
        raise ValueError(f"decisions must be 'yes', 'no' or 'unknown', got {dec[bad][0]!r}")
    code = np.where(
        is_yes,
        np.where(dec_yes, _TP, np.where(dec_no, _FN, _UNK_YES)),
        np.where(dec_yes, _FP, np.where(dec_no, _TN, _UNK_NO)),
    )
    code = np.where(err, np.where(is_yes, _ERR_YES, _ERR_NO), code)
    return code.astype(np.int64)


def _raw_counts(codes: np.ndarray) -> np.ndarray:
    return np.bincount(codes, minlength=N_RAW).astype(np.int64)


def fold_counts(raw: np.ndarray, policy: UnknownPolicy) -> dict[str, np.ndarray]:
    """Apply the policy to raw counts (last axis = 8 categories); works on any batch shape."""
    tp, fp, tn, fn = raw[..., _TP], raw[..., _FP], raw[..., _TN], raw[..., _FN]
    uy, un, ey, en = raw[..., _UNK_YES], raw[..., _UNK_NO], raw[..., _ERR_YES], raw[..., _ERR_NO]
    if policy == "no":
        tn, fn = tn + un, fn + uy
    elif policy == "yes":
        tp, fp = tp + uy, fp + un
    answered = tp + fp + tn + fn
    if policy == "wrong":
        n = answered + uy + un + ey + en
    elif policy == "drop":
        n = answered
    else:  # unknowns are already inside tp..fn
        n = answered + ey + en
    return dict(zip(_FOLDED, (tp, fp, tn, fn, uy, un, ey, en, n)))


def counts_from_raw(raw: np.ndarray, policy: UnknownPolicy) -> Counts:
    """One raw-count vector (N_RAW categories) as Counts under ``policy``."""
    folded = fold_counts(raw, policy)
    return Counts(**{k: int(v) for k, v in folded.items()}, policy=policy)


def _div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=den != 0)


def ratio_arrays(folded: dict[str, np.ndarray], policy: UnknownPolicy) -> dict[str, np.ndarray]:
    """Every metric in METRIC_NAMES from folded counts, vectorised; NaN where undefined."""
    tp, fp, tn, fn, n = folded["tp"], folded["fp"], folded["tn"], folded["fn"], folded["n"]
    uy, un, ey, en = folded["unknown_yes"], folded["unknown_no"], folded["errors_yes"], folded["errors_no"]
    yes_labels = tp + fn
    no_labels = fp + tn
    if policy == "wrong":  # an unknown still has its label: it is a missed yes / a not-hallucinated no
        yes_labels = yes_labels + uy
        no_labels = no_labels + un
    if policy != "drop":  # errored samples keep their labels too
        yes_labels = yes_labels + ey
        no_labels = no_labels + en
    total = n + (uy + un + ey + en if policy == "drop" else 0)
    precision = _div(tp, tp + fp)
    recall = _div(tp, yes_labels)
    # F1 = 2TP / (2TP + FP + missed yes labels): equal to 2PR / (P + R) where both exist, and 0
    # (not undefined) for a model that never says yes on a split that has yes labels.
    f1 = _div(2 * tp, 2 * tp + fp + (yes_labels - tp))
    return {
        "accuracy": _div(tp + tn, n),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "yes_ratio": _div(tp + fp, n),
        "unknown_rate": _div(uy + un, total),
        "htr": _div(fp, no_labels),
    }


def count(
    labels: Sequence[str] | np.ndarray,
    decisions: Sequence[str] | np.ndarray,
    errors: Sequence[bool] | np.ndarray | None = None,
    policy: UnknownPolicy = "wrong",
) -> Counts:
    """Count labels (``"yes"``/``"no"``) against decisions (``"yes"``/``"no"``/``"unknown"``).

    ``errors`` marks errored samples (their decisions are ignored). Raises ``ValueError`` on an
    unknown policy, a label or decision outside its set, or lengths that differ.
    """
    policy = check_policy(policy)
    return counts_from_raw(_raw_counts(categorize(labels, decisions, errors)), policy)


def metrics_from_counts(c: Counts) -> dict[str, float | None]:
    """accuracy, precision, recall, f1, yes_ratio, unknown_rate, htr; None when undefined.

    unknown_rate is over every sample counted (dropped ones included, so it means the same under
    every policy); the others are over ``n`` and the label totals ``n`` holds.
    """
    policy = check_policy(c.policy)
    folded = {k: np.int64(getattr(c, k)) for k in _FOLDED}
    arrays = ratio_arrays(folded, policy)
    out: dict[str, float | None] = {}
    for name in METRIC_NAMES:
        value = float(arrays[name])
        out[name] = None if np.isnan(value) else value
    return out
