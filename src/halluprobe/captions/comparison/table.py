"""The decoding table: free-form runs of decoding methods judged by CHAIR (and PROVE), each
against a greedy and a sampled baseline on the same images, with the length confound beside.

Per run: CHAIR_s, CHAIR_i, recall, length (words per caption) and hallucinated objects per 100
words, with 95% image-bootstrap CIs (:mod:`halluprobe.captions.chair.scoring`). Per method:
paired per-image differences against the greedy baseline and against the sampled baseline
(method - baseline, the same resampled images on both sides).

The length confound: shorter captions name fewer objects and hallucinate less, so a method that
only shortens captions lowers CHAIR. Two views show it:

- CHAIR per length bin: bins cut at the greedy baseline's length quartiles
  (:func:`halluprobe.captions.chair.length.chair_by_baseline_quartiles`: bin upper bounds are the
  baseline's sorted lengths at ranks ceil(k n / 4), k = 1..3; a caption of length L falls in the
  bin numbered by how many bounds are below L); every run is binned on those same bounds, so a
  method's captions moving to the short bins shows in the counts.
- CHAIR_s at the baseline's length: the method's CHAIR_s per bin, weighted by the share of
  the baseline's captions in that bin (direct standardisation; per run against the greedy
  baseline, in a paired difference against the baseline of that difference); undefined when
  the method has no caption in a bin the baseline uses. Its difference to the baseline's
  CHAIR_s is the difference at matched length. Hallucinations per 100 words is the other length-free rate.

Only images captioned by every run are compared (a failed sample in one run drops its image
everywhere; the count is reported). PROVE: where ``prove score`` outputs of the runs are given,
hscore and tscore per run and paired per-question differences (clustered by image).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from halluprobe.captions.chair.families import ChairFamily
from halluprobe.captions.chair.groundtruth import GroundTruth
from halluprobe.captions.chair.length import (
    chair_by_baseline_quartiles,
    quartile_bin,
    quartile_bounds,
)
from halluprobe.captions.chair.scoring import (
    METRICS,
    CaptionScore,
    Difference,
    paired_differences,
    score_captions,
    summarize,
)
from halluprobe.captions.comparison.prove import (
    prove_paired,
    prove_per_run,
    read_prove_scores,
)
from halluprobe.captions.comparison.records import (
    LEVEL,
    ChairComparison,
    ChairIntervals,
    ComparisonResult,
    DecodingRun,
    MetricDifferences,
    PairedRun,
    ProveComparison,
    RunChair,
    RunLengthBins,
)
from halluprobe.captions.comparison.runs import ComparisonRuns, run_captions_of
from halluprobe.errors import InputError
from halluprobe.metrics.stats import cluster_bootstrap, paired_bootstrap_diff
from halluprobe.records_scores import BootstrapSettings

__all__ = ["EXTRA_METRICS", "decoding_table", "standardized_chair_s"]

EXTRA_METRICS = ("halluc_per_100_words", "chair_s_at_baseline_length")
Stat = Callable[[np.ndarray], "float | None"]


def _per_word(scores: Sequence[CaptionScore]) -> Stat:
    bad = np.array([len(s.hallucinated) for s in scores], dtype=float)
    words = np.array([s.length for s in scores], dtype=float)

    def stat(rows: np.ndarray) -> float | None:
        total = float(words[rows].sum())
        return 100.0 * float(bad[rows].sum()) / total if total else None

    return stat


def standardized_chair_s(scores: Sequence[CaptionScore], baseline: Sequence[CaptionScore], bounds: Sequence[int]) -> Stat:
    """CHAIR_s of ``scores`` with its length bins weighted as ``baseline``'s (rows index both, aligned by image)."""
    flags = np.array([bool(s.hallucinated) for s in scores], dtype=float)
    bins = np.array([quartile_bin(s.length, bounds) for s in scores])
    base_bins = np.array([quartile_bin(s.length, bounds) for s in baseline])

    def stat(rows: np.ndarray) -> float | None:
        total = 0.0
        for k in np.unique(base_bins[rows]):
            weight = float(np.mean(base_bins[rows] == k))
            mine = rows[bins[rows] == k]
            if not len(mine):
                return None  # no caption of this length: no match
            total += weight * float(flags[mine].mean())
        return total

    return stat


def _align(scores: Sequence[CaptionScore], order: Sequence[int]) -> list[CaptionScore]:
    by_image = {s.image_id: s for s in scores}
    return [by_image[i] for i in order]


def _extras(scores: Sequence[CaptionScore], baseline: Sequence[CaptionScore], bounds: Sequence[int]) -> dict[str, Stat]:
    return {"halluc_per_100_words": _per_word(scores), "chair_s_at_baseline_length": standardized_chair_s(scores, baseline, bounds)}


def _paired(a: Sequence[CaptionScore], b: Sequence[CaptionScore], bounds: Sequence[int], n_resamples: int, seed: int) -> MetricDifferences:
    """a - b for CHAIR's metrics and the length-free rates; a's CHAIR_s at matched length is
    weighted as b's captions fall in the bins (b's own is its plain CHAIR_s)."""
    out = paired_differences(a, b, n_resamples=n_resamples, seed=seed)
    everything = np.arange(len(a))
    ids = [s.image_id for s in a]
    stats_a, stats_b = _extras(a, b, bounds), _extras(b, b, bounds)
    for name in EXTRA_METRICS:
        va, vb = stats_a[name](everything), stats_b[name](everything)
        ci = paired_bootstrap_diff(ids, stats_a[name], stats_b[name], n_resamples=n_resamples, seed=seed) if n_resamples else None
        out[name] = Difference(a=va, b=vb, diff=None if va is None or vb is None else va - vb, ci=ci)
    return MetricDifferences(**out)


def _same_sampling(a: DecodingRun, b: DecodingRun) -> bool:
    """The same sampling settings, the seed aside (a seed is one draw, not a setting)."""
    return {k: v for k, v in a.sampling.items() if k != "seed"} == {k: v for k, v in b.sampling.items() if k != "seed"}


def decoding_table(
    runs: ComparisonRuns,
    *,
    family: ChairFamily | None,
    ground_truth: GroundTruth | None,
    truncate: bool = False,
    prove_scores: Sequence[Path] = (),
    chair: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
) -> ComparisonResult:
    """The whole comparison of ``runs`` (:func:`.runs.load_comparison`): per-run CHAIR, paired
    differences, length bins, PROVE."""
    bootstrap = BootstrapSettings(n_resamples=n_resamples, seed=seed, level=LEVEL, unit="image", method="percentile")
    chair_part = None
    if chair:
        assert family is not None and ground_truth is not None  # every caller asks CHAIR with both
        chair_part = _chair_part(runs, family, ground_truth, truncate, n_resamples, seed)
    prove = None
    if prove_scores:
        per_run = read_prove_scores(prove_scores, [run.path for run in runs.loaded])
        prove = ProveComparison(per_run=prove_per_run(per_run, runs.runs, n_resamples, seed), paired=prove_paired(per_run, runs.runs, n_resamples, seed))
    return ComparisonResult(runs=list(runs.runs), bootstrap=bootstrap, chair=chair_part, prove=prove)


def _run_chair(run: DecodingRun, scores: Sequence[CaptionScore], base: Sequence[CaptionScore], bounds: Sequence[int], family: str,
               order: Sequence[int], n_resamples: int, seed: int) -> RunChair:  # fmt: skip
    summary = summarize(scores, family, settings={}, n_resamples=n_resamples, seed=seed)
    extras = {name: stat(np.arange(len(scores))) for name, stat in _extras(scores, base, bounds).items()}
    extra_ci = {name: cluster_bootstrap(order, stat, n_resamples=n_resamples, seed=seed) if n_resamples else None
                for name, stat in _extras(scores, base, bounds).items()}  # fmt: skip
    return RunChair(name=run.name, role=run.role, family=summary.family, n=summary.n, chair_s=summary.chair_s, chair_i=summary.chair_i,
                    recall=summary.recall, length=summary.length, ci=ChairIntervals(**summary.ci.model_dump(), **extra_ci), **extras)  # fmt: skip


def _chair_part(runs: ComparisonRuns, family: ChairFamily, truth: GroundTruth, truncate: bool, n_resamples: int, seed: int) -> ChairComparison:
    captions = [run_captions_of(run) for run in runs.loaded]
    for caps, run in zip(captions, runs.loaded):
        images = [c.image_id for c in caps]
        if len(set(images)) != len(images):
            raise InputError("several captions of one image: a decoding table pairs one caption per image", run.path / "samples.jsonl")
    common = set.intersection(*({c.image_id for c in caps} for caps in captions))
    if not common:
        raise InputError("no image is captioned by every run (every sample of some run failed)", runs.loaded[0].path / "samples.jsonl")
    every = {c.image_id for caps in captions for c in caps}
    order = [c.image_id for c in captions[0] if c.image_id in common]
    scored = [_align(score_captions([c for c in caps if c.image_id in common], truth, family, truncate=truncate), order) for caps in captions]
    base = scored[0]
    bounds = quartile_bounds([s.length for s in base])
    per_run = [_run_chair(run, scores, base, bounds, family.name, order, n_resamples, seed) for run, scores in zip(runs.runs, scored)]
    bins = [RunLengthBins(name=run.name, bins=chair_by_baseline_quartiles(scores, bounds)) for run, scores in zip(runs.runs, scored)]
    sampled = scored[-1] if runs.sampled else None
    paired = []
    for run, scores in zip(runs.runs, scored):
        if run.role != "method":
            continue
        if sampled is None:
            paired.append(PairedRun(name=run.name, vs_greedy=_paired(scores, base, bounds, n_resamples, seed)))
        else:
            paired.append(PairedRun(name=run.name, vs_greedy=_paired(scores, base, bounds, n_resamples, seed),
                                    vs_sampled=_paired(scores, sampled, bounds, n_resamples, seed),
                                    sampling_matches=_same_sampling(run, runs.runs[-1]) if run.sampled else None))  # fmt: skip
    if sampled is not None:  # the sampled baseline against the greedy one: what sampling alone does
        paired.append(PairedRun(name=runs.runs[-1].name, vs_greedy=_paired(sampled, base, bounds, n_resamples, seed)))
    return ChairComparison(
        family=family.name, tokenizer=family.tokenizer, identity=family.identity, ground_truth=truth.describe(),
        truncate_incomplete=truncate, images=len(order), images_dropped=len(every) - len(order), metrics=[*METRICS, *EXTRA_METRICS],
        length_bounds=bounds, per_run=per_run, paired=paired, length_bins=bins,
    )  # fmt: skip
