"""The report's HallusionBench section (``report --judgments DIR`` of ``hallusion judge``): the
judged aAcc / fAcc / qAcc per slice with their CIs beside each rule-based reading (the numbers of
``hallusion score``), every judge's ledger, each reading's disagreement with the judge, and two
judges' agreement. A judgment dir must have judged one of the report's run dirs (its answers'
sha256 names which)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

import numpy as np

from halluprobe.errors import InputError
from halluprobe.formatting import format_ratio
from halluprobe.judging.agreement import agreement, paired_difference
from halluprobe.judging.hallusion_judge import hallusion_answers
from halluprobe.judging.hallusion_score import (
    JudgedHallusion,
    correct_and_sets,
    default_readouts,
    judged_rows,
    score_judged,
)
from halluprobe.judging.store import JudgmentDir
from halluprobe.records import Sample
from halluprobe.report.judged_common import JudgedDir, SectionWriter, ledger_lines
from halluprobe.rundir import RunDir, sha256_file

__all__ = ["HALLUSION_SECTION", "hallusion_cell", "hallusion_section"]

HALLUSION_SECTION = ("judged-hallusionbench", "HallusionBench (judged)")  # id, table-of-contents entry
_LEDE = ("The official score: the judge's correct / incorrect / unclear per question (tianyi-lab/HallusionBench's prompt and grouping), "
         "aAcc, fAcc and qAcc in %, beside the rule-based readings of the same answers; 95% CIs: bootstrap over question sets.")  # fmt: skip
_HEADER = ("slice", "reading", "aAcc [95% CI]", "fAcc [95% CI]", "qAcc [95% CI]", "questions")


def hallusion_cell(value: float | None, ci: tuple[float, float] | None) -> str:
    """A ratio in %, two decimals, as ``hallusion score`` prints it; a dash when undefined."""
    if value is None:
        return "-"
    return f"{100 * value:.2f}" + ("" if ci is None else f" [{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]")


def _judged_run(d: JudgedDir, runs: Sequence[Path]) -> Path:
    for run in runs:
        samples = RunDir(run).samples_path
        if samples.is_file() and sha256_file(samples) == d.header.answers_sha256:
            return run
    raise InputError("judged answers that are none of this report's runs (answers_sha256 matches no run's samples.jsonl): "
                     "give the judged run dir too", JudgmentDir(d.path).header_path)  # fmt: skip


def _rows(result: JudgedHallusion) -> list[list[str]]:
    judge = f"judge {result.judge_backend}:{result.judge_model}"
    named = [(judge, result.judged), *((f"{n} (rule-based)", s) for n, s in result.rules)]
    rows = []
    for sl in result.judged.slices:
        for label, scores in named:
            t = next((x for x in scores.slices if x.name == sl.name), None)
            if t is not None:
                rows.append([sl.name, label, hallusion_cell(t.a_acc, t.a_ci), hallusion_cell(t.f_acc, t.f_ci), hallusion_cell(t.q_acc, t.q_ci), str(t.questions)])
    return rows


def _agreement_lines(a: JudgedDir, b: JudgedDir, samples: Sequence[Sample], *, n_resamples: int, seed: int) -> list[str]:
    if a.header.answers_sha256 != b.header.answers_sha256:
        return [f"{a.path} and {b.path} judged different answers (answers_sha256 differ): no agreement"]
    agree = agreement(a.judgments, b.judgments)
    kappa = "n/a" if agree.kappa is None else f"{agree.kappa:.3f}"
    (ca, sets), (cb, _) = (correct_and_sets(judged_rows(samples, d.judgments, d.judgments_path)) for d in (a, b))

    def mean(values: np.ndarray, rows: np.ndarray | None) -> float:
        return float(values.mean() if rows is None else values[rows].mean())

    diff = paired_difference(sets, lambda r: mean(ca, r), lambda r: mean(cb, r), n_resamples=n_resamples, seed=seed)
    return [f"{a.path} vs {b.path}: agreement {agree.agreed}/{agree.n} questions (correct / incorrect / unclear / unparseable), Cohen's kappa {kappa}",
            f"aAcc: a-b {format_ratio(diff.difference, diff.ci, digits=4, ci_digits=4, missing='n/a')}"]  # fmt: skip


def hallusion_section(dirs: Sequence[JudgedDir], runs: Sequence[Path], *, n_resamples: int, seed: int) -> tuple[str, str]:
    """(Markdown, HTML) of HallusionBench's section over its judgment dirs."""
    out = SectionWriter(HALLUSION_SECTION, _LEDE)
    judged_samples: dict[str, list[Sample]] = {}
    for d in dirs:
        run = _judged_run(d, runs)
        header, samples, _ = hallusion_answers(run)
        judged_samples[d.path] = samples
        result = score_judged(header, samples, d.header, d.judgments, default_readouts(header, samples), where=d.judgments_path,
                              source=run, n_resamples=n_resamples, seed=seed)  # fmt: skip
        out.heading(f"{d.path} (answers: {run})")
        policy = "scored as the official script does: unclear"
        out.lines(ledger_lines(d, n=result.n, unparseable=result.unparseable, errors=result.errors, policy=policy))
        out.table(_HEADER, _rows(result))
        notes = [f"disagreement with {x.readout}: verdict on {x.verdicts} of {x.n} questions, correctness on {x.correctness}" for x in result.disagreements]
        if result.judged.slices[-1].without_figure == 0:
            notes.append("no question asked without a figure is in this run; the official aAcc and qAcc include them")
        if notes:
            out.lines(notes)
    for a, b in combinations(dirs, 2):
        out.heading("Agreement")
        out.lines(_agreement_lines(a, b, judged_samples[a.path], n_resamples=n_resamples, seed=seed))
    return out.done()
