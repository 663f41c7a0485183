"""Clustered bootstrap, AUROC, ECE, McNemar, paired differences, convergence."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from scipy import stats as sps

from halluprobe.metrics.stats import (
    McNemarResult,
    auroc,
    cluster_bootstrap,
    convergence,
    expected_calibration_error,
    mcnemar_exact,
    paired_bootstrap_diff,
    percentile_ci,
    stable_after,
)


def _correlated(n_images: int = 100, per_image: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every question about an image is right or wrong together (within-image correlation 1)."""
    rng = np.random.default_rng(seed)
    image_correct = rng.uniform(size=n_images) < 0.7
    clusters = np.repeat(np.arange(n_images), per_image)
    return clusters, image_correct[clusters].astype(float)


# --------------------------------------------------------------------------------------------
# cluster_bootstrap


def test_bootstrap_is_deterministic_per_seed() -> None:
    clusters, y = _correlated()
    stat = lambda idx: float(y[idx].mean())  # noqa: E731
    a = cluster_bootstrap(clusters, stat, n_resamples=400, seed=5)
    b = cluster_bootstrap(clusters, stat, n_resamples=400, seed=5)
    c = cluster_bootstrap(clusters, stat, n_resamples=400, seed=6)
    assert a == b
    assert a != c


def test_ci_contains_point_estimate_and_is_plausible() -> None:
    clusters, y = _correlated(n_images=200)
    ci = cluster_bootstrap(clusters, lambda idx: float(y[idx].mean()), n_resamples=1000, seed=0)
    assert ci is not None
    lo, hi = ci
    assert lo < y.mean() < hi
    # image-level binomial: sd = sqrt(p(1-p)/200) ~ 0.032, so the 95% width is ~0.13
    assert 0.08 < hi - lo < 0.2


def test_clustered_interval_is_wider_under_within_image_correlation() -> None:
    clusters, y = _correlated(n_images=100, per_image=6)
    stat = lambda idx: float(y[idx].mean())  # noqa: E731
    clustered = cluster_bootstrap(clusters, stat, n_resamples=1000, seed=1)
    unclustered = cluster_bootstrap(np.arange(y.size), stat, n_resamples=1000, seed=1)
    assert clustered is not None and unclustered is not None
    w_c = clustered[1] - clustered[0]
    w_u = unclustered[1] - unclustered[0]
    # perfect correlation in clusters of 6: the design effect is 6, widths differ by ~sqrt(6)
    assert w_c > 1.8 * w_u


def test_resampling_keeps_clusters_whole() -> None:
    clusters = np.array(["b", "a", "b", "c", "a", "b"])
    seen: list[np.ndarray] = []

    def stat(idx: np.ndarray) -> float:
        seen.append(idx)
        return 0.0

    cluster_bootstrap(clusters, stat, n_resamples=20, seed=0)
    sizes = {"a": 2, "b": 3, "c": 1}
    assert len(seen) == 20  # the loop below checks something: one call per replicate
    for idx in seen:
        drawn = clusters[idx]
        for name, size in sizes.items():
            assert (drawn == name).sum() % size == 0  # a cluster comes with all its rows


def test_none_replicates_are_skipped_and_all_none_gives_none() -> None:
    clusters = np.arange(10)
    y = np.arange(10, dtype=float)
    assert cluster_bootstrap(clusters, lambda idx: None, n_resamples=50) is None
    ci = cluster_bootstrap(clusters, lambda idx: None if 0 in idx else float(y[idx].mean()), n_resamples=300, seed=2)
    assert ci is not None and ci[0] > 0.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        cluster_bootstrap([], lambda idx: 0.0)
    with pytest.raises(ValueError):
        cluster_bootstrap([1, 2], lambda idx: 0.0, level=1.5)
    with pytest.raises(ValueError):
        cluster_bootstrap([1, 2], lambda idx: 0.0, n_resamples=0)


def test_percentile_ci() -> None:
    assert percentile_ci(np.arange(101, dtype=float), level=0.9) == pytest.approx((5.0, 95.0))
    assert percentile_ci([np.nan, 1.0, np.nan, 3.0], level=0.5) == (1.5, 2.5)
    assert percentile_ci([np.nan]) is None


# --------------------------------------------------------------------------------------------
# paired_bootstrap_diff


def test_paired_diff_of_identical_statistics_is_zero() -> None:
    clusters, y = _correlated()
    stat = lambda idx: float(y[idx].mean())  # noqa: E731
    assert paired_bootstrap_diff(clusters, stat, stat, n_resamples=200) == (0.0, 0.0)


def test_paired_diff_resamples_the_same_clusters_for_both() -> None:
    clusters, y = _correlated()
    stat = lambda idx: float(y[idx].mean())  # noqa: E731
    zero = lambda idx: 0.0  # noqa: E731
    # a - 0 over the same draws is the unpaired CI of a with the same seed
    assert paired_bootstrap_diff(clusters, stat, zero, n_resamples=300, seed=4) == cluster_bootstrap(clusters, stat, n_resamples=300, seed=4)
    # B = A on most images plus a few extra right answers: pairing gives a narrow CI above 0,
    # while the unpaired CIs of A and B overlap
    rng = np.random.default_rng(9)
    better = y.copy()
    flip = (y == 0) & (rng.uniform(size=y.size) < 0.15)
    better[flip] = 1.0
    stat_b = lambda idx: float(better[idx].mean())  # noqa: E731
    diff = paired_bootstrap_diff(clusters, stat_b, stat, n_resamples=1000, seed=0)
    assert diff is not None and diff[0] > 0.0
    ci_a = cluster_bootstrap(clusters, stat, n_resamples=1000, seed=0)
    ci_b = cluster_bootstrap(clusters, stat_b, n_resamples=1000, seed=0)
    assert ci_a is not None and ci_b is not None and ci_b[0] < ci_a[1]


# --------------------------------------------------------------------------------------------
# AUROC


def test_auroc_hand_case_with_ties() -> None:
    # positives 0.9, 0.5; negatives 0.5, 0.1. Pairs: (0.9>0.5) 1, (0.9>0.1) 1, (0.5=0.5) 1/2,
    # (0.5>0.1) 1 -> 3.5 / 4.
    assert auroc([True, True, False, False], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(0.875)
    assert auroc([True, False], [0.2, 0.8]) == 0.0
    assert auroc([True, False], [0.5, 0.5]) == 0.5


def test_auroc_matches_scipy_mannwhitneyu() -> None:
    rng = np.random.default_rng(0)
    labels = rng.uniform(size=500) < 0.4
    scores = np.round(rng.normal(labels * 0.8, 1.0), 1)  # rounding makes many ties
    u = sps.mannwhitneyu(scores[labels], scores[~labels]).statistic
    assert auroc(labels, scores) == pytest.approx(u / (labels.sum() * (~labels).sum()))


def test_auroc_one_class_is_none_and_nan_is_refused() -> None:
    assert auroc([True, True], [0.1, 0.2]) is None
    assert auroc([], []) is None
    with pytest.raises(ValueError):
        auroc([True, False], [0.1, float("nan")])


# --------------------------------------------------------------------------------------------
# ECE


def test_ece_hand_case() -> None:
    # bins of width 0.1: p .12 .18 -> bin 1 (mean p .15, mean label 1/2): |0.5-0.15| = 0.35, weight 2/5
    # p .85 .85 -> bin 8 (mean p .85, labels 1, 1): 0.15, weight 2/5; p .55 -> bin 5 (label 0):
    # 0.55, weight 1/5. ECE = 0.4*0.35 + 0.4*0.15 + 0.2*0.55 = 0.14 + 0.06 + 0.11 = 0.31
    # (rounding p*10 instead of flooring would split .12/.18 into two bins: 0.358)
    labels = [False, True, True, True, False]
    p = [0.12, 0.18, 0.85, 0.85, 0.55]
    assert expected_calibration_error(labels, p) == pytest.approx(0.31)
    # 2 bins: [0, .5) holds .12 .18 (|0.5 - 0.15| = 0.35, w 2/5); [.5, 1] holds .85 .85 .55
    # (mean p 0.75, mean label 2/3: 0.0833, w 3/5) -> 0.14 + 0.05 = 0.19
    assert expected_calibration_error(labels, p, n_bins=2) == pytest.approx(0.14 + 0.6 * (0.75 - 2 / 3))


def test_ece_edges() -> None:
    assert expected_calibration_error([True, False], [1.0, 0.0]) == 0.0  # p = 1 goes in the last bin
    assert expected_calibration_error([False], [1.0]) == 1.0
    assert expected_calibration_error([], []) is None
    with pytest.raises(ValueError):
        expected_calibration_error([True], [1.2])


# --------------------------------------------------------------------------------------------
# McNemar


def test_mcnemar_against_hand_binomial() -> None:
    # b = 8 (A right, B wrong), c = 2: two-sided exact p = 2 * P(X <= 2), X ~ Bin(10, 1/2)
    #   = 2 * (C(10,0) + C(10,1) + C(10,2)) / 2^10 = 2 * 56 / 1024 = 0.109375
    a = [True] * 8 + [False] * 2 + [True] * 5 + [False] * 3
    b = [False] * 8 + [True] * 2 + [True] * 5 + [False] * 3
    result = mcnemar_exact(a, b)
    assert isinstance(result, McNemarResult)
    assert (result.b, result.c, result.n) == (8, 2, 18)
    assert result.p_value == pytest.approx(2 * sum(comb(10, k) for k in range(3)) / 2**10)
    assert result.p_value == pytest.approx(0.109375)
    # symmetric in which system is A
    assert mcnemar_exact(b, a).p_value == pytest.approx(result.p_value)


def test_mcnemar_no_discordant_pairs() -> None:
    r = mcnemar_exact([True, False, True], [True, False, True])
    assert (r.b, r.c, r.p_value) == (0, 0, 1.0)


def test_mcnemar_balanced_is_one() -> None:
    assert mcnemar_exact([True, False], [False, True]).p_value == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# convergence


def test_convergence_and_stable_after() -> None:
    values = np.array([1.0] * 100 + [0.0] * 100 + [1.0, 0.0] * 200)  # 600 values
    curve = convergence(lambda k: float(values[:k].mean()), len(values), step=100)
    ks = [k for k, _ in curve]
    assert ks == [100, 200, 300, 400, 500, 600]
    vals = dict(curve)
    assert vals[100] == 1.0 and vals[200] == 0.5 and vals[600] == 0.5
    assert stable_after(curve, 0.5, tol=0.005) == 200
    # a tail that ends at n, not a multiple of step
    assert [k for k, _ in convergence(lambda k: 0.0, 250, step=100)] == [100, 200, 250]
    assert convergence(lambda k: 0.0, 0) == []


def test_stable_after_edge_cases() -> None:
    curve = [(100, 0.70), (200, 0.80), (300, 0.802), (400, 0.79), (500, 0.801)]
    assert stable_after(curve, 0.80, tol=0.005) == 500  # 400 leaves the band, so it restarts
    assert stable_after(curve, 0.80, tol=0.011) == 200
    assert stable_after([(100, None), (200, 0.8)], 0.8) == 200
    assert stable_after([(100, 0.8), (200, None)], 0.8) is None
    assert stable_after(curve, None) is None
    assert stable_after([(100, 0.9)], 0.8) is None
