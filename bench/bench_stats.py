"""Time of the vectorised bootstraps on POPE-sized work (median of several runs).

Prints figures; asserts nothing about time (the tests check the vectorised CIs equal the
row-index reference bootstrap, draw for draw). Two measurements, each against its baseline
timed in the same invocation:

- ``score_rows``: 9,000 rows (3 splits x 500 images x 6 questions), every metric's CI per split,
  pooled and macro, 1,000 image resamples; baseline: ``stats.cluster_bootstrap`` of the macro F1
  alone (one statistic), the same draws.
- ``paired_test``: ΔF1 macro and pooled with their CIs and McNemar, 1,000 resamples; baseline:
  ``stats.paired_bootstrap_diff`` of the macro F1, the same draws.

    python bench/bench_stats.py --runs 5
    python bench/bench_stats.py --images 500 --resamples 1000 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from halluprobe.metrics.binary import count, metrics_from_counts
from halluprobe.metrics.paired import ImageBootstrap, SampleTable, paired_test
from halluprobe.metrics.score import ScoreRow, score_rows
from halluprobe.metrics.stats import cluster_bootstrap, paired_bootstrap_diff

SPLITS = ("random", "popular", "adversarial")


def pope_like(n_images: int, per_image: int, seed: int, flip: float = 0.0) -> list[ScoreRow]:
    """Three splits over the same images; each image has its own difficulty. ``flip``: the share
    of answers turned over (a second readout of the same questions)."""
    rng = np.random.default_rng(seed)
    ease = rng.uniform(0.4, 0.98, size=n_images)
    turn = np.random.default_rng(seed + 1)
    rows: list[ScoreRow] = []
    for split in SPLITS:
        qid = 0
        for img in range(n_images):
            for q in range(per_image):
                label = "yes" if q % 2 == 0 else "no"
                u = rng.uniform()
                right = u < ease[img]
                decision = "unknown" if u > 0.97 else (label if right else ("no" if label == "yes" else "yes"))
                if decision != "unknown" and turn.uniform() < flip:
                    decision = "no" if decision == "yes" else "yes"
                rows.append(ScoreRow(split, qid, f"img{img:05d}.jpg", label, decision, float(rng.uniform()), False))  # type: ignore[arg-type]
                qid += 1
    return rows


def macro_f1_of(rows: list[ScoreRow]) -> Callable[[np.ndarray], float | None]:
    labels = np.array([r.label for r in rows], dtype=object)
    decisions = np.array([r.decision for r in rows], dtype=object)
    splits = np.array([r.split for r in rows], dtype=object)

    def stat(idx: np.ndarray) -> float | None:
        values = []
        for split in SPLITS:
            at = idx[splits[idx] == split]
            f1 = metrics_from_counts(count(labels[at], decisions[at])).get("f1") if len(at) else None
            if f1 is None:
                return None
            values.append(f1)
        return sum(values) / len(values)

    return stat


def median_seconds(fn: Callable[[], object], runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--per-image", type=int, default=6)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    a = pope_like(args.images, args.per_image, seed=1)
    b = pope_like(args.images, args.per_image, seed=1, flip=0.05)
    images = [r.image for r in a]
    n = args.resamples
    print(f"{len(a)} rows, {args.images} images, {n} resamples, median of {args.runs} runs")

    def vectorised_score() -> object:
        return score_rows(a, readout="a", n_resamples=n, seed=0)

    def reference_score() -> object:
        return cluster_bootstrap(images, macro_f1_of(a), n_resamples=n, seed=0)

    def vectorised_paired() -> object:
        table = SampleTable.build([r.split for r in a], images, [r.label for r in a], [r.error for r in a])
        boot = ImageBootstrap(table, n_resamples=n, seed=0)
        dec = [np.array([r.decision for r in rows], dtype=object) for rows in (a, b)]
        return paired_test(boot, dec[1], dec[0], "wrong")

    def reference_paired() -> object:
        return paired_bootstrap_diff(images, macro_f1_of(b), macro_f1_of(a), n_resamples=n, seed=0)

    for name, fast, slow, what in (
        ("score_rows", vectorised_score, reference_score, "every metric, splits + pooled + macro"),
        ("paired_test", vectorised_paired, reference_paired, "macro + pooled ΔF1 and McNemar"),
    ):
        fast_s, fast_all = median_seconds(fast, args.runs)
        slow_s, slow_all = median_seconds(slow, args.runs)
        print(f"{name:12s} {fast_s:8.3f} s  ({what}; runs {', '.join(f'{t:.3f}' for t in fast_all)})")
        print(f"{'  reference':12s} {slow_s:8.3f} s  (row-index bootstrap, macro F1 only; runs {', '.join(f'{t:.3f}' for t in slow_all)})")
        print(f"{'  ratio':12s} {slow_s / fast_s:8.1f} x faster than the reference")
    same = vectorised_paired().delta_f1_ci == reference_paired()  # type: ignore[attr-defined]
    print(f"paired macro ΔF1 CI equal to the reference's: {same}")


if __name__ == "__main__":
    main()
