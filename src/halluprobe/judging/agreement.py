"""Two judges on the same answers: per-item agreement, Cohen's kappa, and the paired difference
of a benchmark's number (bootstrap over images, both judges on the same draws)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from halluprobe.judging.ledger import Judgment
from halluprobe.metrics.stats import paired_bootstrap_diff
from halluprobe.records import FrozenRecord

__all__ = ["Agreement", "PairedDifference", "agreement", "paired_difference", "verdict_category"]


class Agreement(FrozenRecord):
    n: int
    agreed: int
    share: float | None
    kappa: float | None  # None when chance agreement is 1 (both judges gave one category throughout)
    disagreements: tuple[str, ...]  # the item ids


class PairedDifference(FrozenRecord):
    a: float | None
    b: float | None
    difference: float | None
    ci: tuple[float, float] | None
    n_resamples: int
    seed: int


def verdict_category(judgment: Judgment) -> str:
    """A judgment's category for agreement: its verdict, or ``unparseable`` / ``error``."""
    return str(judgment.verdict) if judgment.status == "parsed" else judgment.status


def agreement(a: Sequence[Judgment], b: Sequence[Judgment]) -> Agreement:
    """Agreement over the item ids both judged (unparseable is a category of its own)."""
    by_b = {j.item_id: verdict_category(j) for j in b}
    pairs = [(j.item_id, verdict_category(j), by_b[j.item_id]) for j in a if j.item_id in by_b]
    n = len(pairs)
    if not n:
        return Agreement(n=0, agreed=0, share=None, kappa=None, disagreements=())
    agreed = sum(x == y for _, x, y in pairs)
    count_a, count_b = Counter(x for _, x, _ in pairs), Counter(y for _, _, y in pairs)
    chance = sum(count_a[c] * count_b[c] for c in count_a) / (n * n)
    observed = agreed / n
    kappa = None if chance == 1 else (observed - chance) / (1 - chance)
    return Agreement(n=n, agreed=agreed, share=observed, kappa=kappa, disagreements=tuple(i for i, x, y in pairs if x != y))


def paired_difference(
    clusters: Sequence[str], stat_a: Callable[[np.ndarray | None], float | None], stat_b: Callable[[np.ndarray | None], float | None],
    *, n_resamples: int = 1000, seed: int = 0,
) -> PairedDifference:  # fmt: skip
    """a - b with a percentile CI; both statistics read the same resampled rows (clusters: images)."""
    a, b = stat_a(None), stat_b(None)
    ci = paired_bootstrap_diff(clusters, stat_a, stat_b, n_resamples=n_resamples, seed=seed) if n_resamples else None
    return PairedDifference(a=a, b=b, difference=None if a is None or b is None else a - b, ci=ci, n_resamples=n_resamples, seed=seed)
