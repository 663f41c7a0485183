"""MME's and HallusionBench's own scores for a run dir, every readout side by side (the `mme` and
`hallusionbench` verbs), and MME's eval-tool results files written from a run.

Rows come from :func:`halluprobe.scoring.readout_rows`, the one way a readout's decisions are
read from a run, so a readout's MME score and its POPE-style ``score`` table see the same
decisions. Each table line names the readout that produced it: a figure is never quoted
without its rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from halluprobe.benchmarks.mme import COGNITION, HALLUCINATION, PERCEPTION, results_lines
from halluprobe.benchmarks.question_file import read_questions
from halluprobe.errors import InputError
from halluprobe.files import plain_component, refuse_outputs, write_atomic
from halluprobe.imports.hallusionbench import JUDGE_READOUT
from halluprobe.metrics.hallusionbench import HallusionGrouping, HallusionScores, hallusion_scores
from halluprobe.metrics.mme import MmeGrouping, MmeScores, mme_scores
from halluprobe.metrics.score import ScoreRow
from halluprobe.readouts.apply import check_readout
from halluprobe.readouts.text import label_dependence_note
from halluprobe.readouts.value import Readout
from halluprobe.records import RunHeader, Sample
from halluprobe.scoring import read_run_samples, readout_rows

__all__ = [
    "MME_TOTALS",
    "hallusion_run_scores",
    "mme_run_scores",
    "render_hallusion",
    "render_mme",
    "scores_json",
    "write_mme_results",
]

MME_TOTALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hallucination", HALLUCINATION),
    ("perception", PERCEPTION),
    ("cognition", COGNITION),
)
_MME_SUBTASKS = frozenset((*PERCEPTION, *COGNITION))


def _rows_by_readout(path: str | Path, readouts: Sequence[str]) -> tuple[RunHeader, list[Sample], dict[str, list[ScoreRow]]]:
    rundir, header, samples = read_run_samples(path)
    out = {}
    for name in dict.fromkeys(readouts):
        parsed = Readout.parse(name)
        check_readout(parsed, header, samples, force_invalid=False, source=rundir.header_path)
        out[name] = readout_rows(parsed, header, samples)
    return header, samples, out


def mme_run_scores(
    path: str | Path, readouts: Sequence[str], *, grouping: MmeGrouping = "official", n_resamples: int = 1000, seed: int = 0
) -> dict[str, MmeScores]:
    """Each readout's MME scores on a run whose splits are MME subtasks (else one line, exit 2)."""
    header, _, rows = _rows_by_readout(path, readouts)
    other = sorted(set(header.benchmarks) - _MME_SUBTASKS)
    if other:
        raise InputError(f"not an MME run: split(s) {', '.join(other)} are no MME subtask (build the questions with `halluprobe build mme`)", path)
    return {name: mme_scores(r, grouping=grouping, totals=MME_TOTALS, n_resamples=n_resamples, seed=seed) for name, r in rows.items()}


def hallusion_run_scores(
    path: str | Path, readouts: Sequence[str], *, grouping: HallusionGrouping = "official", n_resamples: int = 1000, seed: int = 0
) -> dict[str, HallusionScores]:
    """Each readout's aAcc / fAcc / qAcc on a HallusionBench run (else one line, exit 2)."""
    _, _, rows = _rows_by_readout(path, readouts)
    try:
        return {name: hallusion_scores(r, grouping=grouping, n_resamples=n_resamples, seed=seed) for name, r in rows.items()}
    except ValueError as e:
        raise InputError(f"not a HallusionBench run: {e} (build the questions with `halluprobe build hallusionbench`)", path) from e


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _ci(ci: tuple[float, float] | None, scale: float = 1.0) -> str:
    return "" if ci is None else f" [{scale * ci[0]:.2f}, {scale * ci[1]:.2f}]"


def _notes(readouts: Sequence[str]) -> list[str]:
    return [n for n in (label_dependence_note(r) for r in readouts) if n is not None]


def render_mme(results: dict[str, MmeScores]) -> str:
    """One block per readout: each subtask's accuracy, accuracy+, score with CI, "other" count;
    then the totals (hallucination subtotal first)."""
    lines = _notes(list(results))
    for name, s in results.items():
        lines.append(f"{name} (grouping: {s.grouping}; score = (acc + acc+) x 100, out of 200 per subtask)")
        lines.append(f"  {'subtask':<22} {'acc':>7} {'acc+':>7} {'score':>7}  95% CI            other  errors  images")
        for t in s.subtasks:
            score = "-" if t.score is None else f"{t.score:.2f}"
            odd = f"  ({t.odd_groups} image(s) without two questions, left out of acc+)" if t.odd_groups else ""
            lines.append(
                f"  {t.subtask:<22} {_pct(t.accuracy):>7} {_pct(t.accuracy_plus):>7} {score:>7} {_ci(t.score_ci):<18} {t.other:>5} {t.errors:>7} {t.images:>7}{odd}"
            )
        for total in s.totals:
            score = "-" if total.score is None else f"{total.score:.2f}"
            missing = f" (missing: {', '.join(total.missing)})" if total.missing else ""
            lines.append(f"  {total.name + ' total':<22} {'':>7} {'':>7} {score:>7} {_ci(total.score_ci):<18} out of {200 * len(total.subtasks)}{missing}")
    return "\n".join(lines)


def render_hallusion(results: dict[str, HallusionScores]) -> str:
    """One block per readout: aAcc, fAcc, qAcc per category and overall, in percent with CIs."""
    lines = _notes(list(results))
    for name, s in results.items():
        source = "tianyi-lab/HallusionBench utils.py" if s.grouping == "official" else f"{s.grouping} (no category in its keys)"
        kind = "the judge's verdicts the result file stored" if name == JUDGE_READOUT else "rule-based: not the official GPT-4-judged score"
        lines.append(f"{name} ({kind}; grouping: {source})")
        lines.append(f"  {'slice':<8} {'aAcc':>7} {'95% CI':<18} {'fAcc':>7} {'95% CI':<18} {'qAcc':>7} {'95% CI':<18} questions unknown")
        for t in s.slices:
            lines.append(
                f"  {t.name:<8} {_pct(t.a_acc):>7} {_ci(t.a_ci, 100):<18} {_pct(t.f_acc):>7} {_ci(t.f_ci, 100):<18} "
                f"{_pct(t.q_acc):>7} {_ci(t.q_ci, 100):<18} {t.questions:>9} {t.unknown:>7}"
            )
        overall = s.slices[-1]
        if overall.without_figure == 0:
            lines.append("  note: no question asked without a figure is in this run; the official aAcc and qAcc include them (178 VS questions in the pinned file)")
    return "\n".join(lines)


def scores_json(results: dict[str, MmeScores] | dict[str, HallusionScores]) -> dict[str, Any]:
    """The same numbers as plain JSON-able dicts, per readout."""
    return {name: asdict(value) for name, value in results.items()}


def write_mme_results(path: str | Path, out_dir: str | Path, *, overwrite: bool = False) -> list[Path]:
    """The eval tool's results files (``<subtask>.txt``: image, question, answer, response) from a
    run's stored text, so the official ``calculation.py`` can score it as it is."""
    rundir, header, samples = read_run_samples(path)
    if header.backend.startswith("import:"):  # its benchmark paths are the tool's answers files, not question files
        raise InputError(f"an imported run ({header.backend}): write results files from a run halluprobe made", rundir.header_path)
    if not header.text_rules or header.max_new_tokens <= 0:
        raise InputError("the run stored no text (run it with --text): the eval tool reads the model's answers", rundir.header_path)
    out = Path(out_dir)
    files = {split: out / f"{plain_component(split, 'MME subtask')}.txt" for split in header.benchmark_paths}
    refuse_outputs(files.values(), overwrite=overwrite)
    texts = {s.key: s.text or "" for s in samples}
    written = []
    for split, bench in header.benchmark_paths.items():
        questions = sorted(read_questions(bench, split), key=lambda q: q.question_id)
        rows = [(q.image, q.text, q.label, texts[q.key]) for q in questions if q.key in texts]
        out.mkdir(parents=True, exist_ok=True)
        written.append(write_atomic(files[split], results_lines(rows)))
    return written
