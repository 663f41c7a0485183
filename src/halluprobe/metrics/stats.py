"""Uncertainty and diagnostics: clustered bootstrap, paired tests, AUROC, calibration, convergence.

Questions about one image are not independent (POPE asks 6 per image per split), so every
bootstrap here resamples clusters (images) with replacement, from a seeded numpy Generator.
CIs are percentile intervals; replicates where the statistic is undefined (None) are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "McNemarResult",
    "auroc",
    "check_level",
    "cluster_bootstrap",
    "convergence",
    "draw_blocks",
    "draw_weights",
    "expected_calibration_error",
    "mcnemar_exact",
    "paired_bootstrap_diff",
    "percentile_ci",
    "stable_after",
]

# Cap on the cells of one (replicates x clusters) draw block, to bound memory on large runs.
_MAX_DRAW_CELLS = 4_000_000


def check_level(level: float) -> None:
    """ValueError unless ``level`` (a CI's coverage) lies in (0, 1)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def percentile_ci(values: np.ndarray | Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of ``values``, ignoring NaN; None when no value is finite."""
    check_level(level)
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return None
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(arr, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def _cluster_codes(cluster_ids: Sequence[object] | np.ndarray) -> tuple[np.ndarray, int]:
    """Cluster index per row (clusters in sorted order, as np.unique gives them) and their count."""
    ids = np.asarray(cluster_ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("cluster_ids must be a non-empty 1-D sequence")
    _, codes = np.unique(ids, return_inverse=True)
    codes = codes.reshape(-1)
    return codes.astype(np.int64), int(codes.max()) + 1


def draw_blocks(rng: np.random.Generator, n_clusters: int, n_resamples: int) -> Iterator[np.ndarray]:
    """Cluster draws, (block, n_clusters) per block, n_resamples rows in all.

    Every bootstrap in halluprobe draws through here, so the same seed gives the same
    replicates whichever function consumes them (score.py's vectorised CIs equal
    cluster_bootstrap's for the same statistic).
    """
    block = max(1, min(n_resamples, _MAX_DRAW_CELLS // max(n_clusters, 1)))
    done = 0
    while done < n_resamples:
        size = min(block, n_resamples - done)
        yield rng.integers(0, n_clusters, size=(size, n_clusters))
        done += size


def draw_weights(draws: np.ndarray, n_clusters: int) -> np.ndarray:
    """How many times each cluster was drawn in each replicate: (block, n_clusters)."""
    size = draws.shape[0]
    flat = (draws + (np.arange(size, dtype=np.int64) * n_clusters)[:, None]).ravel()
    return np.bincount(flat, minlength=size * n_clusters).reshape(size, n_clusters)


class _RowIndexer:
    """Row indices of a multiset of clusters, without a Python loop over clusters."""

    def __init__(self, codes: np.ndarray, n_clusters: int) -> None:
        self.order = np.argsort(codes, kind="stable")
        self.sizes = np.bincount(codes, minlength=n_clusters)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)[:-1]))

    def rows(self, drawn: np.ndarray) -> np.ndarray:
        sizes = self.sizes[drawn]
        total = int(sizes.sum())
        offsets = np.cumsum(sizes) - sizes
        within = np.arange(total) - np.repeat(offsets, sizes)
        return self.order[np.repeat(self.starts[drawn], sizes) + within]


def _replicates(
    cluster_ids: Sequence[object] | np.ndarray,
    statistics: Sequence[Callable[[np.ndarray], float | None]],
    n_resamples: int,
    seed: int,
) -> np.ndarray:
    """(n_resamples, len(statistics)) replicate values, NaN where a statistic was None."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    codes, n_clusters = _cluster_codes(cluster_ids)
    indexer = _RowIndexer(codes, n_clusters)
    rng = np.random.default_rng(seed)
    out = np.full((n_resamples, len(statistics)), np.nan)
    r = 0
    for block in draw_blocks(rng, n_clusters, n_resamples):
        for drawn in block:
            rows = indexer.rows(drawn)
            for j, stat in enumerate(statistics):
                value = stat(rows)
                if value is not None:
                    out[r, j] = float(value)
            r += 1
    return out


def cluster_bootstrap(
    cluster_ids: Sequence[object] | np.ndarray,
    statistic: Callable[[np.ndarray], float | None],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile CI of ``statistic`` under a bootstrap that resamples clusters with replacement.

    ``statistic`` gets an int array of row indices (a row appears once per time its cluster was
    drawn) and returns a float, or None when undefined on that replicate (skipped). Returns None
    when every replicate is None.
    """
    check_level(level)
    values = _replicates(cluster_ids, [statistic], n_resamples, seed)[:, 0]
    return percentile_ci(values, level)


def paired_bootstrap_diff(
    cluster_ids: Sequence[object] | np.ndarray,
    stat_a: Callable[[np.ndarray], float | None],
    stat_b: Callable[[np.ndarray], float | None],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile CI of ``stat_a - stat_b``, both computed on the same resampled clusters.

    Pairing keeps the shared image-level variation out of the difference. Replicates where
    either statistic is None are skipped; None when all are.
    """
    check_level(level)
    values = _replicates(cluster_ids, [stat_a, stat_b], n_resamples, seed)
    return percentile_ci(values[:, 0] - values[:, 1], level)


def auroc(labels: Sequence[bool] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` for ``labels`` (True = positive).

    The Mann-Whitney statistic over positives x negatives, a tie counting 1/2. None when either
    class is empty. Raises ValueError on non-finite scores or mismatched lengths.
    """
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape or y.ndim != 1:
        raise ValueError(f"labels and scores must be 1-D and of equal length, got {y.shape} and {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return None
    from scipy import stats as _sps  # deferred: scipy.stats takes ~0.7 s to import, and the CLI starts without it

    ranks = _sps.rankdata(s)  # average ranks: ties count 1/2
    u = float(ranks[y].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def expected_calibration_error(
    labels: Sequence[bool] | np.ndarray,
    p: Sequence[float] | np.ndarray,
    n_bins: int = 10,
) -> float | None:
    """ECE of probabilities ``p`` for ``labels``: sum over equal-width bins of
    (bin size / N) * |mean label - mean p|. Bin i holds [i/B, (i+1)/B); p = 1 goes in the last.

    None when there are no samples. Raises ValueError for p outside [0, 1] or n_bins < 1.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    y = np.asarray(labels, dtype=np.float64)
    q = np.asarray(p, dtype=np.float64)
    if y.shape != q.shape or y.ndim != 1:
        raise ValueError(f"labels and p must be 1-D and of equal length, got {y.shape} and {q.shape}")
    if y.size == 0:
        return None
    if not np.all((q >= 0.0) & (q <= 1.0)):
        raise ValueError("p must lie in [0, 1]")
    bins = np.minimum((q * n_bins).astype(np.int64), n_bins - 1)
    sum_y = np.bincount(bins, weights=y, minlength=n_bins)
    sum_p = np.bincount(bins, weights=q, minlength=n_bins)
    # sum_b (n_b/N) |mean_y - mean_p| = sum_b |sum_y - sum_p| / N
    return float(np.abs(sum_y - sum_p).sum() / y.size)


@dataclass(frozen=True)
class McNemarResult:
    """Discordant pairs: ``b`` = A right and B wrong, ``c`` = A wrong and B right; ``n`` pairs."""

    b: int
    c: int
    n: int
    p_value: float


def mcnemar_exact(a_correct: Sequence[bool] | np.ndarray, b_correct: Sequence[bool] | np.ndarray) -> McNemarResult:
    """McNemar's exact test: two-sided binomial test of b against Binomial(b + c, 1/2).

    p = 1 when there are no discordant pairs.
    """
    a = np.asarray(a_correct, dtype=bool)
    b = np.asarray(b_correct, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a_correct and b_correct must be 1-D and of equal length, got {a.shape} and {b.shape}")
    n_b = int(np.sum(a & ~b))
    n_c = int(np.sum(~a & b))
    if n_b + n_c == 0:
        return McNemarResult(b=0, c=0, n=int(a.size), p_value=1.0)
    from scipy import stats as _sps  # deferred, as above

    p = float(_sps.binomtest(n_b, n_b + n_c, 0.5, alternative="two-sided").pvalue)
    return McNemarResult(b=n_b, c=n_c, n=int(a.size), p_value=min(p, 1.0))


def convergence(values_fn: Callable[[int], float | None], n: int, step: int = 100) -> list[tuple[int, float | None]]:
    """``[(k, values_fn(k))]`` for k = step, 2*step, ... and finally n (the metric after the
    first k questions), so the curve always ends at the full-sample value."""
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    ks = list(range(step, n, step))
    if n > 0:
        ks.append(n)
    return [(k, values_fn(k)) for k in ks]


def stable_after(curve: Sequence[tuple[int, float | None]], final: float | None, tol: float = 0.005) -> int | None:
    """The smallest k from which every point of ``curve`` stays within ``tol`` of ``final``.

    None when ``final`` is None or even the last point is off (or undefined).
    """
    if final is None:
        return None
    stable: int | None = None
    for k, value in curve:
        if value is not None and abs(value - final) <= tol:
            if stable is None:
                stable = k
        else:
            stable = None
    return stable
