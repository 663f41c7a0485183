"""HallusionBench's official score from a judgment dir, beside the rule-based readings of the same run.

Each judged verdict becomes a row :func:`halluprobe.metrics.hallusionbench.hallusion_scores` reads
exactly as utils.py's ``assign_correctness`` reads the judge's code: correct -> the decision is the
label (1), incorrect -> the other answer (0), unclear -> unknown (2; right for a VS question without
a figure). A reply the official rule would read as unclear because it names no verdict is counted
as unparseable and scored as the official script scores it (2); a backend error likewise, counted.
Disagreement per rule-based readout: questions whose verdict (correct / incorrect / unclear against
right / wrong / unknown) differs, and those whose assign_correctness differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from halluprobe.benchmarks.hallusionbench import hallusion_key
from halluprobe.errors import InputError
from halluprobe.judging.hallusion_judge import hallusion_item_id
from halluprobe.judging.ledger import JudgeHeader, Judgment
from halluprobe.metrics.hallusionbench import (
    HallusionScores,
    hallusion_correct,
    hallusion_scores,
)
from halluprobe.metrics.score import ScoreRow
from halluprobe.readouts.apply import available_readouts, check_readout
from halluprobe.records import RunHeader, Sample
from halluprobe.scoring import readout_rows

__all__ = [
    "DEFAULT_RULE_READOUTS", "JudgedHallusion", "ReadingDisagreement", "correct_and_sets", "default_readouts", "judged_rows", "render_judged", "score_judged",
]  # fmt: skip

DEFAULT_RULE_READOUTS = ("dynamic", "text:strict", "text:hallusionbench@vlmevalkit", "text:hallusionbench@evalscope")


@dataclass(frozen=True)
class ReadingDisagreement:
    readout: str
    n: int
    verdicts: int  # correct / incorrect / unclear differs from right / wrong / unknown
    correctness: int  # assign_correctness (what aAcc counts) differs


@dataclass(frozen=True)
class JudgedHallusion:
    judge_backend: str
    judge_model: str
    template_name: str
    template_sha256: str
    n: int
    unparseable: int
    errors: int
    judged: HallusionScores
    rules: tuple[tuple[str, HallusionScores], ...]
    disagreements: tuple[ReadingDisagreement, ...]


def _category(row: ScoreRow) -> str:
    if row.error or row.decision == "unknown":
        return "unclear"
    return "correct" if row.decision == row.label else "incorrect"


def judged_rows(samples: Sequence[Sample], judgments: Sequence[Judgment], where: str) -> list[ScoreRow]:
    """One row per sample, its decision from the judge's verdict (every sample must be judged)."""
    by_id = {j.item_id: j for j in judgments}
    missing = [hallusion_item_id(s.split, s.question_id) for s in samples if hallusion_item_id(s.split, s.question_id) not in by_id]
    if missing:
        raise InputError(f"{len(missing)} of {len(samples)} answers not judged (e.g. {missing[0]}): run the judge again to finish", where)
    rows = []
    for s in samples:
        j = by_id[hallusion_item_id(s.split, s.question_id)]
        verdict = j.verdict if j.status == "parsed" else None
        other = "no" if s.label == "yes" else "yes"
        decision = {"correct": s.label, "incorrect": other}.get(str(verdict), "unknown")
        rows.append(ScoreRow(s.split, s.question_id, s.image, s.label, decision))  # type: ignore[arg-type]
    return rows


def correct_and_sets(rows: Sequence[ScoreRow]) -> tuple[np.ndarray, list[str]]:
    """Per row: assign_correctness (1.0 / 0.0) and its set (category, subcategory, set_id), the
    cluster a paired bootstrap of aAcc resamples."""
    keys = [hallusion_key(r.split, r.question_id) for r in rows]
    correct = np.array([float(hallusion_correct(k, r)) for k, r in zip(keys, rows)])
    return correct, [f"{k.category}_{k.subcategory}_{k.set_id}" for k in keys]


def default_readouts(header: RunHeader, samples: Sequence[Sample]) -> list[str]:
    """The rule-based readouts of `halluprobe hallusionbench` this run can give."""
    have = set(available_readouts(header, samples))
    text = any(name.startswith("text:") for name in have)
    return [w for w in DEFAULT_RULE_READOUTS if w in have or (text and w.startswith("text:"))]


def score_judged(
    header: RunHeader, samples: Sequence[Sample], judge: JudgeHeader, judgments: Sequence[Judgment], readouts: Sequence[str],
    *, where: str, source: object, n_resamples: int = 1000, seed: int = 0,
) -> JudgedHallusion:  # fmt: skip
    """The judged aAcc / fAcc / qAcc (official grouping) and each readout's, with their disagreement."""
    rows = judged_rows(samples, judgments, where)
    keys = [hallusion_key(r.split, r.question_id) for r in rows]
    judged = {j.item_id: j for j in judgments}
    used = [judged[hallusion_item_id(s.split, s.question_id)] for s in samples]
    rules, disagreements = [], []
    for name in dict.fromkeys(readouts):
        parsed = check_readout(name, header, samples, force_invalid=False, source=source)
        reading = readout_rows(parsed, header, samples)
        rules.append((name, hallusion_scores(reading, n_resamples=n_resamples, seed=seed)))
        disagreements.append(ReadingDisagreement(
            readout=name, n=len(rows),
            verdicts=sum(_category(a) != _category(b) for a, b in zip(rows, reading)),
            correctness=sum(hallusion_correct(k, a) != hallusion_correct(k, b) for k, a, b in zip(keys, rows, reading)),
        ))  # fmt: skip
    return JudgedHallusion(
        judge_backend=judge.backend, judge_model=judge.model, template_name=judge.template_name, template_sha256=judge.template_sha256,
        n=len(rows), unparseable=sum(j.status == "unparseable" for j in used), errors=sum(j.status == "error" for j in used),
        judged=hallusion_scores(rows, n_resamples=n_resamples, seed=seed), rules=tuple(rules), disagreements=tuple(disagreements),
    )  # fmt: skip


def _pct(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return f"{'-':>7} {'':<16}"
    span = "" if ci is None else f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"
    return f"{100 * value:>7.2f} {span:<16}"


def render_judged(result: JudgedHallusion) -> str:
    """Per slice: the judged row (named by its judge and prompt sha256) above each rule-based row,
    then each readout's disagreement with the judge."""
    judge = f"judge {result.judge_backend}:{result.judge_model} sha256 {result.template_sha256[:12]}"
    named = [(judge, result.judged), *((f"{n} (rule-based)", s) for n, s in result.rules)]
    width = max(len(label) for label, _ in named)
    lines = [
        f"{judge} ({result.template_name}: tianyi-lab/HallusionBench utils.py's prompt and grouping); "
        f"unparseable {result.unparseable}, errors {result.errors} of {result.n} (scored as the official script does: unclear)",
        f"  {'slice':<8} {'reading':<{width}} {'aAcc':>7} {'95% CI':<16} {'fAcc':>7} {'95% CI':<16} {'qAcc':>7} {'95% CI':<16} questions",
    ]
    for sl in result.judged.slices:
        for label, scores in named:
            t = next((x for x in scores.slices if x.name == sl.name), None)
            if t is None:
                continue
            lines.append(f"  {sl.name if label == judge else '':<8} {label:<{width}} {_pct(t.a_acc, t.a_ci)} {_pct(t.f_acc, t.f_ci)} {_pct(t.q_acc, t.q_ci)} {t.questions:>9}")
    for d in result.disagreements:
        lines.append(f"  disagreement with {d.readout}: verdict on {d.verdicts} of {d.n} questions, correctness on {d.correctness}")
    if result.judged.slices[-1].without_figure == 0:
        lines.append("  note: no question asked without a figure is in this run; the official aAcc and qAcc include them")
    return "\n".join(lines)
