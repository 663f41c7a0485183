"""Per-sample rows -> ScoreReport: per split, pooled and macro metrics with clustered CIs.

- per split: the rows of that split;
- pooled: every row as one table;
- macro: the mean over splits of each ratio (the number LLaVA-style papers report); its counts
  are the sums over splits.

CIs are 95% (``level``) percentile intervals from a seeded bootstrap that resamples images. The
clusters are the union of the images of all rows, drawn once per replicate and used for every
split, the pooled table and the macro mean together (POPE's splits share their images, so a
replicate must keep an image's questions in all splits together). A split that covers only some
of the images gets a random number of them per replicate: the usual domain-estimation bootstrap.

Speed: rows are reduced once to per-image raw counts per split (images x 8 categories); a
replicate is then a weight vector over images, and its counts a matrix product.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from halluprobe.metrics.binary import METRIC_NAMES, N_RAW, categorize, check_policy, counts_from_raw, fold_counts, metrics_from_counts, ratio_arrays
from halluprobe.metrics.stats import (
    auroc,
    check_level,
    draw_blocks,
    draw_weights,
    expected_calibration_error,
    percentile_ci,
)
from halluprobe.records import Decision, Label, UnknownPolicy
from halluprobe.records_scores import BootstrapSettings, Metrics, ScoreReport

__all__ = ["CI_METRICS", "ScoreRow", "score_rows"]

# Metrics that get a bootstrap CI.
CI_METRICS: tuple[str, ...] = ("accuracy", "precision", "recall", "f1", "yes_ratio", "htr")


@dataclass(frozen=True)
class ScoreRow:
    """One scored sample: its key, image (the bootstrap cluster), label, and one readout's output."""

    split: str
    question_id: int
    image: str
    label: Label
    decision: Decision
    p_yes: float | None = None
    error: bool = False


def _auroc_ece(labels_yes: np.ndarray, p_yes: np.ndarray) -> tuple[float | None, float | None]:
    """AUROC and ECE of p_yes; both None when any p_yes is missing (NaN)."""
    if labels_yes.size == 0 or np.isnan(p_yes).any():
        return None, None
    return auroc(labels_yes, p_yes), expected_calibration_error(labels_yes, p_yes)


def _mean_or_none(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return float(np.mean(values))  # type: ignore[arg-type]


def score_rows(
    rows: Iterable[ScoreRow],
    *,
    readout: str,
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> ScoreReport:
    """Score ``rows`` (one readout's decisions) into a ScoreReport.

    AUROC and ECE come from ``p_yes`` over the answered rows (an errored row has no score to
    rank, under every policy; the ``errors`` count says how many are missing): None where an
    answered row lacks ``p_yes`` (a text readout) or one class only is left. ``n_resamples=0`` skips the bootstrap (``ci`` stays empty). Raises
    ValueError on no rows, a duplicate ``(split, question_id)``, a bad label, decision, policy
    or level.
    """
    policy = check_policy(policy)
    check_level(level)
    if n_resamples < 0:
        raise ValueError(f"n_resamples must be >= 0, got {n_resamples}")
    table = list(rows)
    if not table:
        raise ValueError("no rows to score")
    keys = {(r.split, r.question_id) for r in table}
    if len(keys) != len(table):
        raise ValueError("duplicate (split, question_id) among the rows")

    splits = list(dict.fromkeys(r.split for r in table))  # order of first appearance
    split_code = _codes([r.split for r in table], splits)
    _, image_code = np.unique(np.asarray([r.image for r in table], dtype=str), return_inverse=True)
    image_code = image_code.reshape(-1).astype(np.int64)
    n_images = int(image_code.max()) + 1
    errors = np.array([r.error for r in table], dtype=bool)
    labels_yes = np.array([r.label == "yes" for r in table], dtype=bool)
    p_yes = np.array([np.nan if (r.p_yes is None or r.error) else float(r.p_yes) for r in table], dtype=np.float64)
    cats = categorize([r.label for r in table], [r.decision for r in table], errors)

    # Per split: raw counts per image (n_images x 8).
    cells = image_code * N_RAW + cats
    per_image = [
        np.bincount(cells[split_code == s], minlength=n_images * N_RAW).reshape(n_images, N_RAW)
        for s in range(len(splits))
    ]
    pooled_per_image = np.sum(per_image, axis=0)

    # Bootstrap: one weight matrix per block of replicates, shared by every table (splits,
    # pooled, macro), so a replicate keeps each image's questions in all splits together.
    split_reps: list[dict[str, list[np.ndarray]]] = [{m: [] for m in CI_METRICS} for _ in splits]
    pooled_reps: dict[str, list[np.ndarray]] = {m: [] for m in CI_METRICS}
    if n_resamples > 0:
        rng = np.random.default_rng(seed)
        for draws in draw_blocks(rng, n_images, n_resamples):
            weights = draw_weights(draws, n_images)
            for s in range(len(splits)):
                _extend(split_reps[s], ratio_arrays(fold_counts(weights @ per_image[s], policy), policy))
            _extend(pooled_reps, ratio_arrays(fold_counts(weights @ pooled_per_image, policy), policy))
    split_arrays = [_joined(reps) for reps in split_reps]
    # Macro per replicate: the mean over splits (NaN, so skipped, where a split is undefined).
    macro_arrays = {m: np.mean([a[m] for a in split_arrays], axis=0) for m in CI_METRICS}

    def cis(arrays: dict[str, np.ndarray]) -> dict[str, tuple[float, float] | None]:
        if n_resamples == 0:
            return {}
        return {m: percentile_ci(arrays[m], level) for m in CI_METRICS}

    def table_metrics(raw_by_image: np.ndarray, mask: np.ndarray, arrays: dict[str, np.ndarray]) -> Metrics:
        counts = counts_from_raw(raw_by_image.sum(axis=0), policy)
        keep = mask & ~errors
        au, ece = _auroc_ece(labels_yes[keep], p_yes[keep])
        return Metrics(
            n=counts.n,
            tp=counts.tp,
            fp=counts.fp,
            tn=counts.tn,
            fn=counts.fn,
            unknown=counts.unknown,
            errors=counts.errors,
            auroc=au,
            ece=ece,
            ci=cis(arrays),
            **metrics_from_counts(counts),
        )

    split_metrics = {
        name: table_metrics(per_image[s], split_code == s, split_arrays[s]) for s, name in enumerate(splits)
    }
    pooled = table_metrics(pooled_per_image, np.ones(len(table), dtype=bool), _joined(pooled_reps))
    parts = list(split_metrics.values())
    macro = Metrics(
        **{c: sum(getattr(x, c) for x in parts) for c in ("n", "tp", "fp", "tn", "fn", "unknown", "errors")},
        **{m: _mean_or_none([getattr(x, m) for x in parts]) for m in (*METRIC_NAMES, "auroc", "ece")},
        ci=cis(macro_arrays),
    )

    return ScoreReport(
        readout=readout,
        unknown_policy=policy,
        splits=split_metrics,
        pooled=pooled,
        macro=macro,
        bootstrap=BootstrapSettings(
            method="percentile",
            cluster="image",
            n_clusters=n_images,
            n_resamples=n_resamples,
            seed=seed,
            level=level,
            macro="images resampled jointly across splits; macro mean recomputed per replicate",
        ),
    )


def _extend(reps: dict[str, list[np.ndarray]], ratios: dict[str, np.ndarray]) -> None:
    for m in CI_METRICS:
        reps[m].append(ratios[m])


def _joined(reps: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    return {m: np.concatenate(v) if v else np.empty(0) for m, v in reps.items()}


def _codes(values: list[str], order: list[str]) -> np.ndarray:
    index = {v: i for i, v in enumerate(order)}
    return np.array([index[v] for v in values], dtype=np.int64)
