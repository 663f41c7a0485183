"""PROVE in the decoding table: hscore and tscore per run, and paired per-question differences.

The scores are ``prove score``'s output folders (``scores.jsonl``, ``summary.json``), one per
run, matched to their run by the ``responses`` path ``summary.json`` records (the embedder and
the entailment model ran there, once; this table only reads their scores). Means and CIs are
:func:`halluprobe.benchmarks.prove.scoring.summarize`'s; a difference is over the questions
where both runs' score is defined, resampled by image.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from halluprobe.benchmarks.prove.scoring import QuestionScore, summarize
from halluprobe.captions.comparison.records import (
    DecodingRun,
    ProveDifference,
    ProveDifferences,
    ProveIntervals,
    ProvePaired,
    ProveRun,
)
from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.metrics.stats import paired_bootstrap_diff

__all__ = ["PROVE_METRICS", "prove_paired", "prove_per_run", "read_prove_scores"]

PROVE_METRICS = ("hscore", "tscore")


def _read_scores(path: Path) -> list[QuestionScore]:
    lines = path.read_text(encoding="utf-8").splitlines()
    scores = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            scores.append(QuestionScore.model_validate(loads(line)))
        except (ValueError, ValidationError) as err:
            raise InputError(f"not a PROVE score line ({str(err).splitlines()[0]})", path, number) from None
    return scores


def read_prove_scores(folders: Sequence[Path], runs: Sequence[Path]) -> dict[int, list[QuestionScore]]:
    """Run index -> its PROVE scores. Each folder must name one of the runs as its responses,
    the greedy baseline (index 0) must have one, and no run may have two."""
    where = {p.resolve(): k for k, p in enumerate(runs)}
    out: dict[int, list[QuestionScore]] = {}
    for folder in folders:
        summary_path, scores_path = folder / "summary.json", folder / "scores.jsonl"
        if not summary_path.is_file() or not scores_path.is_file():
            raise InputError("not a `prove score` output folder (scores.jsonl and summary.json expected)", folder)
        try:
            summary = loads(summary_path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise InputError(f"not JSON ({err})", summary_path) from None
        settings = summary.get("settings") if isinstance(summary, dict) else None
        responses = settings.get("responses") if isinstance(settings, dict) else None
        if not isinstance(responses, str) or Path(responses).resolve() not in where:
            raise InputError(f"scores the responses {responses!r}, which is none of the runs of this table", summary_path)
        index = where[Path(responses).resolve()]
        if index in out:
            raise InputError(f"a second PROVE score folder for the run {responses}", summary_path)
        out[index] = _read_scores(scores_path)
    if out and 0 not in out:
        raise InputError("PROVE scores are given, but none for the greedy baseline (prove score --responses BASELINE_RUN)")
    return out


def prove_per_run(scores: dict[int, list[QuestionScore]], runs: Sequence[DecodingRun], n_resamples: int, seed: int) -> list[ProveRun]:
    out = []
    for k, run in enumerate(runs):
        if k not in scores:
            continue
        s = summarize(scores[k], n_resamples=n_resamples, seed=seed)
        out.append(ProveRun(name=run.name, role=run.role, n=s.n, errors=s.errors, hscore=s.hscore, tscore=s.tscore, n_hscore=s.n_hscore,
                            n_tscore=s.n_tscore, ci=ProveIntervals(hscore=s.ci["hscore"], tscore=s.ci["tscore"])))  # fmt: skip
    return out


def _difference(a: list[QuestionScore], b: list[QuestionScore], metric: str, n_resamples: int, seed: int) -> ProveDifference:
    theirs = {s.question_id: s for s in b if s.error is None and getattr(s, metric) is not None}
    both = [(s, theirs[s.question_id]) for s in a if s.error is None and getattr(s, metric) is not None and s.question_id in theirs]
    if not both:
        return ProveDifference(n=0, a=None, b=None, diff=None, ci=None)
    va = np.array([getattr(x, metric) for x, _ in both], dtype=np.float64)
    vb = np.array([getattr(y, metric) for _, y in both], dtype=np.float64)
    images = [x.image for x, _ in both]
    ci = (paired_bootstrap_diff(images, lambda r: float(va[r].mean()), lambda r: float(vb[r].mean()), n_resamples=n_resamples, seed=seed)
          if n_resamples else None)  # fmt: skip
    return ProveDifference(n=len(both), a=float(va.mean()), b=float(vb.mean()), diff=float(va.mean() - vb.mean()), ci=ci)


def _differences(a: list[QuestionScore], b: list[QuestionScore], n_resamples: int, seed: int) -> ProveDifferences:
    return ProveDifferences(hscore=_difference(a, b, "hscore", n_resamples, seed), tscore=_difference(a, b, "tscore", n_resamples, seed))


def prove_paired(scores: dict[int, list[QuestionScore]], runs: Sequence[DecodingRun], n_resamples: int, seed: int) -> list[ProvePaired]:
    """Each method (and the sampled baseline) with scores: minus the greedy baseline, and minus the sampled one where scored."""
    sampled = len(runs) - 1 if runs[-1].role == "sampled baseline" and len(runs) - 1 in scores else None
    out = []
    for k, run in enumerate(runs):
        if k == 0 or k not in scores:
            continue
        against_sampled = _differences(scores[k], scores[sampled], n_resamples, seed) if sampled is not None and k != sampled else None
        out.append(ProvePaired(name=run.name, vs_greedy=_differences(scores[k], scores[0], n_resamples, seed), vs_sampled=against_sampled))
    return out
