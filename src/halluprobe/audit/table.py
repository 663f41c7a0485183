"""A run as the audit reads it: header, samples and their per-sample table, every readout applied.

The table is :class:`halluprobe.metrics.paired.SampleTable` (the one the corrections table
builds too); this module adds what only a run has: the header (which readouts are valid on its
vocabulary, which one it names as its own) and the samples (objects, first tokens).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from halluprobe.benchmarks.question_file import object_from_text
from halluprobe.errors import InputError
from halluprobe.metrics.paired import SampleTable
from halluprobe.metrics.score import ScoreRow, score_rows
from halluprobe.readouts.apply import apply_run
from halluprobe.readouts.logits import LEGACY_READOUTS
from halluprobe.readouts.value import Readout
from halluprobe.records import RunHeader, Sample, UnknownPolicy
from halluprobe.records_audit import ScoreTables
from halluprobe.records_scores import BootstrapSettings, ScoreReport
from halluprobe.scoring import read_run_samples

__all__ = [
    "DEFAULT_HEADLINE",
    "LEVEL",
    "AuditedRun",
    "bootstrap_settings",
    "build_run",
    "choose_headline",
    "imported",
    "load_run",
    "question_object",
    "score_readout",
    "score_rows_of",
    "score_tables",
]

log = logging.getLogger(__name__)

DEFAULT_HEADLINE = "dynamic"
LEVEL = 0.95


@dataclass(frozen=True)
class AuditedRun:
    """One run's header and samples (run order) with their ``SampleTable``."""

    header: RunHeader
    samples: list[Sample]
    table: SampleTable

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def readouts(self) -> list[str]:
        """Readouts present in at least one sample, header order."""
        return self.table.readouts

    @property
    def splits(self) -> list[str]:
        return self.table.splits

    @property
    def answered(self) -> np.ndarray:
        return ~self.table.errors

    def valid(self, readout: str) -> bool:
        sets = self.header.token_sets
        return not (readout in LEGACY_READOUTS and sets is not None and not sets.legacy_valid)


def load_run(path: str | Path) -> AuditedRun:
    """A yes/no run dir read once (an incomplete run is audited on the samples present)."""
    _, header, samples = read_run_samples(path)
    return build_run(header, samples)


def build_run(header: RunHeader, samples: list[Sample]) -> AuditedRun:
    # readouts applied at score time (readouts.apply), cross-checked against stored decisions
    results = {r: apply_run(Readout.parse(r), header, samples) for r in _audited_readouts(header, samples)}
    readouts = [r for r, res in results.items() if any(x is not None for x in res)]
    missing = [r for r in header.readouts if r not in readouts]
    if missing:
        log.info("readouts listed in run.json but in no sample (left out): %s", ", ".join(missing))
    table = SampleTable.build(
        [s.split for s in samples], [s.image for s in samples], [s.label for s in samples], [s.error is not None for s in samples]
    )
    for r in readouts:
        table.add(
            r,
            [res.decision if res is not None else "unknown" for res in results[r]],
            [res.p_yes if res is not None and s.error is None else None for s, res in zip(samples, results[r])],
        )
    return AuditedRun(header=header, samples=samples, table=table)


def _audited_readouts(header: RunHeader, samples: list[Sample]) -> list[str]:
    """The readouts the run was made for (its header's list, in order), then stored-only ones
    (another tool's rule kept with imported answers). Every text rule can be scored with
    ``score``; the audit keeps the run's own list so its tables do not change shape."""
    stored = [r for r in dict.fromkeys(name for s in samples for name in s.readouts) if r not in header.readouts]
    return [*header.readouts, *sorted(stored)]


def imported(header: RunHeader) -> bool:
    """A run made by ``halluprobe import`` (answers as text, no model run here)."""
    return header.backend.startswith("import:")


def choose_headline(run: AuditedRun, headline: str | None) -> tuple[str, str | None]:
    """The headline readout and, where the run chose it (no ``headline`` given and no
    ``dynamic`` readout), the one line that says which and why."""
    if headline is not None:
        return headline, None
    if DEFAULT_HEADLINE in run.readouts:
        return DEFAULT_HEADLINE, None
    tool_rules = run.header.backend_info.get("tool_readouts") or {}
    own = [r for r in tool_rules if r in run.readouts]
    if own:
        return own[0], f"headline {own[0]}: the rule the importing tool recorded (this run has no {DEFAULT_HEADLINE} readout)"
    text = [r for r in run.readouts if Readout.parse(r).kind == "text"]
    if text:
        return text[0], f"headline {text[0]}: the run's first text rule (this run has no {DEFAULT_HEADLINE} readout)"
    raise InputError(f"this run has no {DEFAULT_HEADLINE} readout and no text rule; name one with --headline ({', '.join(run.readouts)})")


def question_object(sample: Sample) -> str | None:
    """The object a question asks about: the sample's field, else read from a POPE-style
    question in its prompt ("Is there a/an X in the image?" on a line of its own)."""
    if sample.object:
        return sample.object
    return next((obj for line in sample.prompt.splitlines() if (obj := object_from_text(line))), None)


def score_readout(
    t: AuditedRun,
    readout: str,
    *,
    policy: UnknownPolicy,
    n_resamples: int,
    seed: int,
    rows: np.ndarray | None = None,
    labels: Sequence[str] | None = None,
) -> ScoreReport:
    """``readout`` of ``t`` scored: every sample, or the samples at ``rows`` (in that order);
    ``labels`` (one per scored sample) in place of the stored ones when relabelling."""
    decisions, p_yes = t.table.decisions[readout], t.table.p_yes[readout]
    samples: Sequence[Sample] = t.samples
    if rows is not None:
        samples, decisions, p_yes = [t.samples[i] for i in rows], decisions[rows], p_yes[rows]
    return score_rows(score_rows_of(samples, decisions, p_yes, labels), readout=readout, policy=policy, n_resamples=n_resamples, seed=seed)


def score_rows_of(samples: Sequence[Sample], decisions: np.ndarray, p_yes: np.ndarray, labels: Sequence[str] | None = None) -> list[ScoreRow]:
    """ScoreRows of one readout (``labels`` replaces the samples' labels when relabelling)."""
    probs = p_yes.tolist()  # plain floats: per-element numpy scalars cost more than the rows
    return [
        ScoreRow(
            split=s.split,
            question_id=s.question_id,
            image=s.image,
            label=(labels[i] if labels is not None else s.label),  # type: ignore[arg-type]
            decision=decisions[i],
            p_yes=None if probs[i] != probs[i] else probs[i],  # NaN != NaN: missing
            error=s.error is not None,
        )
        for i, s in enumerate(samples)
    ]


def score_tables(report: ScoreReport) -> ScoreTables:
    return ScoreTables(splits=report.splits, pooled=report.pooled, macro=report.macro)


def bootstrap_settings(n_resamples: int, seed: int) -> BootstrapSettings:
    return BootstrapSettings(n_resamples=n_resamples, seed=seed, level=LEVEL, unit="image", method="percentile")
