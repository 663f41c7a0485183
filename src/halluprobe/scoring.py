"""Scoring entry points: a run dir, or a third-party answers file, -> ScoreReport.

Both reduce to rows of (split, image, label, decision, p_yes, error) and the one metric code
path in ``halluprobe.metrics.score``: nothing here computes a metric itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.imports.answers import pair_answers, read_answers
from halluprobe.imports.common import LabelIndex
from halluprobe.metrics.compat import tool_numbers
from halluprobe.metrics.score import ScoreRow, score_rows
from halluprobe.readouts.apply import apply_run, available_readouts, check_readout
from halluprobe.readouts.text import ALL_TEXT_RULES, parse_text
from halluprobe.readouts.value import Readout
from halluprobe.records import RunHeader, Sample, UnknownPolicy
from halluprobe.records_scores import ScoreReport
from halluprobe.rundir import RunDir

__all__ = [
    "score_rundir",
    "score_answers_file",
    "score_readouts",
    "compat_rundir",
    "read_run_samples",
    "read_scored_run",
    "readout_rows",
    "readouts_reports",
    "write_per_question",
]

log = logging.getLogger(__name__)


def readout_rows(readout: Readout | str, header: RunHeader, samples: Sequence[Sample]) -> list[ScoreRow]:
    """The rows one readout is scored on: a sample it cannot read is unknown, an errored one an error."""
    return [
        ScoreRow(
            split=s.split,
            question_id=s.question_id,
            image=s.image,
            label=s.label,
            decision=r.decision if r is not None else "unknown",
            p_yes=r.p_yes if r is not None and s.error is None else None,
            error=s.error is not None,
        )
        for s, r in zip(samples, apply_run(readout, header, samples))
    ]


def read_run_samples(path: str | Path) -> tuple[RunDir, RunHeader, list[Sample]]:
    """A yes/no run dir's header and samples, read once for every readout scored on them
    (each still passes :func:`~halluprobe.readouts.apply.check_readout`)."""
    rundir = RunDir(path)
    header = rundir.read_yes_no_header()
    samples = rundir.read_samples()
    if not samples:
        raise InputError("the run has no samples yet", rundir.samples_path)
    if not rundir.complete_path.exists():
        log.warning("%s is not complete: scoring the %d samples present", rundir.path, len(samples))
    return rundir, header, samples


def read_scored_run(path: str | Path, readout: Readout | str, *, force_invalid: bool = False) -> tuple[RunDir, RunHeader, list[Sample]]:
    """A yes/no run dir's header and samples, refused unless it can be scored with ``readout``."""
    rundir, header, samples = read_run_samples(path)
    check_readout(readout, header, samples, force_invalid=force_invalid, source=rundir.header_path)
    return rundir, header, samples


def readouts_reports(
    rundir: str | Path, *, readouts: Sequence[str] | None = None, policy: str = "wrong", n_resamples: int = 1000, seed: int = 0
) -> tuple[dict[str, ScoreReport], tuple[str, ...]]:
    """Every readout of a run (or those named) scored as ``score_rundir`` scores it (samples
    read once for all), and which of them are forced (legacy ids that are other words in this
    vocabulary)."""
    run, header, samples = read_run_samples(rundir)
    names = readouts if readouts is not None else available_readouts(header, samples)
    return score_readouts(run, header, samples, names, policy=policy, n_resamples=n_resamples, seed=seed)


def score_readouts(
    run: RunDir, header: RunHeader, samples: Sequence[Sample], readouts: Sequence[str], *, policy: str, n_resamples: int, seed: int
) -> tuple[dict[str, ScoreReport], tuple[str, ...]]:
    """``readouts`` of one run's samples through ``score_rundir``'s checks and rows (no
    metrics.json), and the forced ones among them."""
    parsed = [Readout.parse(name) for name in dict.fromkeys(readouts)]
    sets = header.token_sets
    forced = tuple(r.name for r in parsed if r.legacy and sets is not None and not sets.legacy_valid)
    reports = {}
    for r in parsed:
        check_readout(r, header, samples, force_invalid=r.name in forced, source=run.header_path)
        reports[r.name] = score_rows(readout_rows(r, header, samples), readout=r.name, policy=policy, n_resamples=n_resamples, seed=seed)  # type: ignore[arg-type]
    return reports, forced


def score_rundir(
    path: str | Path,
    *,
    readout: Readout | str = "dynamic",
    policy: UnknownPolicy = "wrong",
    force_invalid: bool = False,
    n_resamples: int = 1000,
    seed: int = 0,
    write: bool = True,
    per_question: str | Path | None = None,
) -> ScoreReport:
    """Apply ``readout`` to what ``run`` stored and score it; writes ``RUNDIR/metrics.json``
    and, with ``per_question``, one JSON line per question (split, question_id, label,
    decision, p_yes) so that anyone can check the table line by line."""
    parsed = Readout.of(readout)
    rundir, header, samples = read_scored_run(path, parsed, force_invalid=force_invalid)
    rows = readout_rows(parsed, header, samples)
    report = score_rows(rows, readout=str(parsed), policy=policy, n_resamples=n_resamples, seed=seed)
    if write:
        rundir.write_metrics(report)
    if per_question is not None:
        write_per_question(per_question, rows, samples)
    return report


def compat_rundir(
    path: str | Path, *, readout: Readout | str, tool: str, force_invalid: bool = False
) -> dict[str, dict[str, float | int]]:
    """The numbers ``tool`` (lmms-eval, vlmevalkit) would print for ``readout``'s decisions on a
    run dir, its counting quirks included (:mod:`halluprobe.metrics.compat`). ``force_invalid``
    as for :func:`score_rundir`: the same decisions, whichever tool counts them."""

    parsed = Readout.of(readout)
    _, header, samples = read_scored_run(path, parsed, force_invalid=force_invalid)
    return tool_numbers(readout_rows(parsed, header, samples), tool)


def write_per_question(path: str | Path, rows: Sequence[ScoreRow], samples: Sequence[Sample]) -> Path:
    """One JSON line per scored question, in run order; p_yes only where the readout has one."""
    lines = []
    for row, sample in zip(rows, samples):
        entry: dict[str, Any] = {
            "split": row.split,
            "question_id": row.question_id,
            "label": row.label,
            "decision": "error" if row.error else row.decision,
        }
        if row.p_yes is not None:
            entry["p_yes"] = row.p_yes
        if sample.object is not None:
            entry["object"] = sample.object
        lines.append(json.dumps(entry, ensure_ascii=False) + "\n")
    return write_atomic(path, "".join(lines))


def score_answers_file(
    answers_path: str | Path,
    labels_path: str | Path | Sequence[str | Path],
    *,
    rule: str = "pope",
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
) -> ScoreReport:
    """Score a third-party answers file against POPE-format labels (one file per split) with
    one text rule. Pairing (by id and question text, or by order; mixed files refused) is
    :func:`halluprobe.imports.answers.pair_answers`."""

    if rule not in ALL_TEXT_RULES:
        raise InputError(f"unknown text rule {rule!r}; known: {', '.join(ALL_TEXT_RULES)}")
    label_paths = [labels_path] if isinstance(labels_path, (str, Path)) else list(labels_path)
    labels = LabelIndex(label_paths)
    pairs = pair_answers(read_answers(Path(answers_path)), labels)
    for split, names in labels.versions().items():
        log.info("%s labels: POPE version %s", split, ", ".join(names) or "unpublished")
    rows = [
        ScoreRow(
            split=q.split,
            question_id=q.question_id,
            image=q.image,
            label=q.label,
            decision=parse_text(rule, a["answer"], label=q.label),
            p_yes=None,
            error=False,
        )
        for q, a in pairs
    ]
    return score_rows(rows, readout=f"text:{rule}", policy=policy, n_resamples=n_resamples, seed=seed)
