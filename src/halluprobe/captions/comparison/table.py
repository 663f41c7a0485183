"""The decoding table: free-form runs of decoding methods judged by CHAIR (and PROVE), each
against a greedy and a sampled baseline on the same images, with the length confound beside.

Per run: CHAIR_s, CHAIR_i, recall, length (words per caption) and hallucinated objects per 100
words, with 95% image-bootstrap CIs (:mod:`halluprobe.captions.chair.scoring`). Per method:
paired per-image differences against the greedy baseline and against the sampled baseline
(method - baseline, the same resampled images on both sides).

The length confound: shorter captions name fewer objects and hallucinate less, so a method that
only shortens captions lowers CHAIR. Two views show it:

- CHAIR per length bin: bins cut at the greedy baseline's length quartiles (bin upper bounds
  are the baseline's sorted lengths at ranks ceil(k n / 4), k = 1..3; a caption of length L
  falls in the bin numbered by how many bounds are below L); every run is binned on those
  same bounds, so a method's captions moving to the short bins shows in the counts.
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

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluprobe.captions.chair.runs import run_captions
from halluprobe.captions.chair.scoring import (
    METRICS,
    CaptionScore,
    paired_differences,
    score_captions,
    summarize,
)
from halluprobe.captions.comparison.prove import prove_paired, prove_per_run, read_prove_scores
from halluprobe.captions.comparison.runs import (
    DecodingRun,
    read_decoding_run,
    refuse_other_questions,
)
from halluprobe.errors import InputError
from halluprobe.metrics.stats import cluster_bootstrap, paired_bootstrap_diff
from halluprobe.rundir import RunDir

__all__ = ["EXTRA_METRICS", "binned_chair", "decoding_table", "length_bin", "length_bounds", "standardized_chair_s"]

EXTRA_METRICS = ("halluc_per_100_words", "chair_s_at_baseline_length")
Stat = Callable[[np.ndarray], "float | None"]


def length_bounds(lengths: Sequence[int]) -> list[int]:
    """The baseline's quartile bounds: sorted lengths at ranks ceil(k n / 4), k = 1..3, without repeats."""
    ordered = sorted(lengths)
    n = len(ordered)
    return sorted({ordered[math.ceil(k * n / 4) - 1] for k in (1, 2, 3)}) if n else []


def length_bin(length: int, bounds: Sequence[int]) -> int:
    return sum(1 for b in bounds if b < length)


def binned_chair(scores: Sequence[CaptionScore], bounds: Sequence[int]) -> list[dict[str, Any]]:
    """Per bin (all len(bounds) + 1 of them): captions, mean length, CHAIR_s, CHAIR_i."""
    out = []
    for k in range(len(bounds) + 1):
        part = [s for s in scores if length_bin(s.length, bounds) == k]
        mentions = sum(len(s.objects) for s in part)
        low = None if k == 0 else bounds[k - 1] + 1
        high = None if k == len(bounds) else bounds[k]
        out.append({
            "bin": k, "lengths": [low, high], "n": len(part),
            "mean_length": sum(s.length for s in part) / len(part) if part else None,
            "chair_s": sum(bool(s.hallucinated) for s in part) / len(part) if part else None,
            "chair_i": sum(len(s.hallucinated) for s in part) / mentions if mentions else None,
        })  # fmt: skip
    return out


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
    bins = np.array([length_bin(s.length, bounds) for s in scores])
    base_bins = np.array([length_bin(s.length, bounds) for s in baseline])

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


def _paired(a: Sequence[CaptionScore], b: Sequence[CaptionScore], bounds: Sequence[int], n_resamples: int, seed: int) -> dict[str, Any]:
    """a - b for CHAIR's metrics and the length-free rates; a's CHAIR_s at matched length is
    weighted as b's captions fall in the bins (b's own is its plain CHAIR_s)."""
    out: dict[str, Any] = dict(paired_differences(a, b, n_resamples=n_resamples, seed=seed))
    everything = np.arange(len(a))
    ids = [s.image_id for s in a]
    stats_a, stats_b = _extras(a, b, bounds), _extras(b, b, bounds)
    for name in EXTRA_METRICS:
        va, vb = stats_a[name](everything), stats_b[name](everything)
        ci = paired_bootstrap_diff(ids, stats_a[name], stats_b[name], n_resamples=n_resamples, seed=seed) if n_resamples else None
        out[name] = {"a": va, "b": vb, "diff": None if va is None or vb is None else va - vb, "ci": ci}
    return out


def _same_sampling(a: DecodingRun, b: DecodingRun) -> bool:
    """The same sampling settings, the seed aside (a seed is one draw, not a setting)."""
    return {k: v for k, v in a.sampling.items() if k != "seed"} == {k: v for k, v in b.sampling.items() if k != "seed"}


def _refuse_wrong_baselines(runs: Sequence[DecodingRun], paths: Sequence[Path]) -> None:
    """One line when a baseline's run.json says it is not one: a greedy baseline decoded with a
    method or by sampling, a sampled baseline decoded with a method, or a run halluprobe decoded
    greedily given as the sampled baseline (an imported run, which records no sampling, is
    taken as given)."""
    for run, path in zip(runs, paths):
        header = RunDir(path).header_path
        if run.role == "greedy baseline" and (run.method is not None or run.sampled):
            how = f"with {run.method}" if run.method is not None else "by sampling"
            raise InputError(f"the greedy baseline was decoded {how}: give a run without --decode and --sample first", header)
        if run.role == "sampled baseline" and run.method is not None:
            raise InputError(f"the sampled baseline was decoded with {run.method}: give a plain --sample run", header)
        if run.role == "sampled baseline" and not run.sampled and not RunDir(path).read_header().backend.startswith("import:"):
            raise InputError("the sampled baseline was decoded greedily: give a run made with --sample --seed", header)


def decoding_table(
    baseline: Path,
    methods: Sequence[Path],
    *,
    sampled_baseline: Path | None,
    family: Any,
    ground_truth: Any,
    truncate: bool = False,
    prove_scores: Sequence[Path] = (),
    chair: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The whole table as JSON-ready data: runs, per-run CHAIR, paired differences, length bins, PROVE."""
    if not methods:
        raise InputError("give at least one method run after the greedy baseline")
    paths = [baseline, *methods, *([sampled_baseline] if sampled_baseline is not None else [])]
    if len({p.resolve() for p in paths}) != len(paths):
        raise InputError("a run is given twice: the baseline, the methods and the sampled baseline are different runs")
    runs = [read_decoding_run(baseline, "greedy baseline"), *(read_decoding_run(p, "method") for p in methods)]
    if sampled_baseline is not None:
        runs.append(read_decoding_run(sampled_baseline, "sampled baseline"))
    _refuse_wrong_baselines(runs, paths)
    refuse_other_questions(baseline, paths[1:])
    result: dict[str, Any] = {"runs": [r.model_dump(mode="json") for r in runs], "bootstrap": {"n_resamples": n_resamples, "seed": seed}}
    if chair:
        result["chair"] = _chair_part(runs, paths, family, ground_truth, truncate, n_resamples, seed)
    if prove_scores:
        per_run = read_prove_scores(prove_scores, paths)
        result["prove"] = {"per_run": prove_per_run(per_run, runs, n_resamples, seed), "paired": prove_paired(per_run, runs, n_resamples, seed)}
    return result


def _chair_part(runs: Sequence[DecodingRun], paths: Sequence[Path], family: Any, truth: Any, truncate: bool, n_resamples: int, seed: int) -> dict[str, Any]:
    captions = [run_captions(p)[0] for p in paths]
    for caps, path in zip(captions, paths):
        images = [c.image_id for c in caps]
        if len(set(images)) != len(images):
            raise InputError("several captions of one image: a decoding table pairs one caption per image", path / "samples.jsonl")
    common = set.intersection(*({c.image_id for c in caps} for caps in captions))
    if not common:
        raise InputError("no image is captioned by every run (every sample of some run failed)", paths[0] / "samples.jsonl")
    every = {c.image_id for caps in captions for c in caps}
    order = [c.image_id for c in captions[0] if c.image_id in common]
    scored = [_align(score_captions([c for c in caps if c.image_id in common], truth, family, truncate=truncate), order) for caps in captions]
    base = scored[0]
    bounds = length_bounds([s.length for s in base])
    per_run, bins = [], []
    for run, scores in zip(runs, scored):
        summary = summarize(scores, family.name, settings={}, n_resamples=n_resamples, seed=seed).model_dump(mode="json", exclude={"settings"})
        for name, stat in _extras(scores, base, bounds).items():
            summary[name] = stat(np.arange(len(scores)))
            summary["ci"][name] = cluster_bootstrap(order, stat, n_resamples=n_resamples, seed=seed) if n_resamples else None
        per_run.append({"name": run.name, "role": run.role, **summary})
        bins.append({"name": run.name, "bins": binned_chair(scores, bounds)})
    sampled = scored[-1] if runs[-1].role == "sampled baseline" else None
    paired = []
    for run, scores in zip(runs, scored):
        if run.role != "method":
            continue
        entry: dict[str, Any] = {"name": run.name, "vs_greedy": _paired(scores, base, bounds, n_resamples, seed)}
        if sampled is not None:
            entry["vs_sampled"] = _paired(scores, sampled, bounds, n_resamples, seed)
            entry["sampling_matches"] = _same_sampling(run, runs[-1]) if run.sampled else None
        paired.append(entry)
    if sampled is not None:  # the sampled baseline against the greedy one: what sampling alone does
        paired.append({"name": runs[-1].name, "vs_greedy": _paired(sampled, base, bounds, n_resamples, seed)})
    return {
        "family": family.name, "tokenizer": family.tokenizer, "identity": family.identity, "ground_truth": truth.describe(), "truncate_incomplete": truncate,
        "images": len(order), "images_dropped": len(every) - len(order), "metrics": [*METRICS, *EXTRA_METRICS],
        "length_bounds": bounds, "per_run": per_run, "paired": paired, "length_bins": bins,
    }  # fmt: skip
