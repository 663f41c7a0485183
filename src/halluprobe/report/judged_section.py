"""The report's judged-benchmark sections (``report --judgments DIR``): per judged benchmark its
headline numbers with CIs (the numbers of ``mmhal score`` / ``hallusion score``, same policy,
bootstrap and seed), the judge ledger of every judgment dir (the judge as configured and as served,
the prompt's sha256, unparseable and errored verdicts, the unparseable policy) and, for two dirs
of one benchmark on the same answers, their agreement. Without judgment dirs there is no section:
the page is unchanged. MMHal-Bench and HallusionBench are rendered; another benchmark's judgment
dir (Object HalBench's) is refused, one line."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

from halluprobe.benchmarks.mmhal import MMHalFile, read_mmhal
from halluprobe.errors import InputError
from halluprobe.formatting import format_ratio
from halluprobe.judging.agreement import agreement, paired_difference
from halluprobe.judging.mmhal_score import (
    MMHalScore,
    UnparseablePolicy,
    item_values,
    mean_of,
    ordered_judgments,
    score_mmhal,
)
from halluprobe.mmhal_table import mmhal_grid
from halluprobe.report.hallusion_section import HALLUSION_SECTION, hallusion_section
from halluprobe.report.judged_common import (
    JudgedDir,
    SectionWriter,
    ledger_lines,
    read_judged,
)

__all__ = ["MMHAL_SECTION", "judged_sections", "mmhal_section"]

MMHAL_SECTION = ("judged-mmhal", "MMHal-Bench (judged)")  # id, table-of-contents entry
_BENCHMARKS = ("mmhal", "hallusionbench")  # the benchmarks a judge.json may name that get a section
_MMHAL_LEDE = ("Open answers rated 0-6 by a judge (hallucination: a rating under 3). halluprobe's score: "
               "unparseable and errored verdicts counted and scored by the --unparseable policy; 95% CIs: bootstrap over images.")  # fmt: skip


def _headline(score: MMHalScore) -> str:
    return (f"average score {format_ratio(score.average, score.average_ci, digits=2, ci_digits=2, missing='n/a')}, "
            f"hallucination rate {format_ratio(score.hallucination_rate, score.hallucination_rate_ci, digits=3, ci_digits=3, missing='n/a')}")  # fmt: skip


def _agreement_lines(mmhal: MMHalFile, a: JudgedDir, b: JudgedDir, policy: UnparseablePolicy, *, n_resamples: int, seed: int) -> list[str]:
    if a.header.answers_sha256 != b.header.answers_sha256:
        return [f"{a.path} and {b.path} judged different answers (answers_sha256 differ): no agreement"]
    judged = [ordered_judgments(mmhal, d.judgments, d.judgments_path) for d in (a, b)]
    agree = agreement(judged[0], judged[1])
    kappa = "n/a" if agree.kappa is None else f"{agree.kappa:.3f}"
    lines = [f"{a.path} vs {b.path}: agreement {agree.agreed}/{agree.n} items, Cohen's kappa {kappa}"]
    images = [item.image_id for item in mmhal.items]
    for k, name in ((0, "average score"), (1, "hallucination rate")):
        va, vb = item_values(judged[0], policy)[k], item_values(judged[1], policy)[k]
        diff = paired_difference(images, lambda r, v=va: mean_of(v, r), lambda r, v=vb: mean_of(v, r), n_resamples=n_resamples, seed=seed)  # type: ignore[misc]
        lines.append(f"{name}: a-b {format_ratio(diff.difference, diff.ci, digits=3, ci_digits=3, missing='n/a')}")
    return lines


def mmhal_section(dirs: Sequence[JudgedDir], template: Path, policy: UnparseablePolicy, *, n_resamples: int, seed: int) -> tuple[str, str]:
    """(Markdown, HTML) of MMHal-Bench's section over its judgment dirs."""
    mmhal = read_mmhal(template)
    out = SectionWriter(MMHAL_SECTION, _MMHAL_LEDE)
    for d in dirs:
        score = score_mmhal(mmhal, d.header, d.judgments, policy=policy, where=d.judgments_path, n_resamples=n_resamples, seed=seed)
        grid = mmhal_grid(score, mmhal, ordered_judgments(mmhal, d.judgments, d.judgments_path), d.header, compat=False, syntax="markdown")
        out.heading(d.path)
        out.lines([_headline(score), *ledger_lines(d, n=score.n, unparseable=score.unparseable, errors=score.errors, policy=f"--unparseable {policy}")])
        out.table(grid.header, [[c.text for c in row] for row in grid.rows])
    for a, b in combinations(dirs, 2):
        out.heading("Agreement")
        out.lines(_agreement_lines(mmhal, a, b, policy, n_resamples=n_resamples, seed=seed))
    return out.done()


def judged_sections(paths: Sequence[Path], *, runs: Sequence[Path], mmhal_template: Path | None, policy: UnparseablePolicy,
                    n_resamples: int, seed: int) -> list[tuple[tuple[str, str], tuple[str, str]]]:  # fmt: skip
    """(table-of-contents entry, (Markdown, HTML)) per judged benchmark: MMHal-Bench, then
    HallusionBench (whose judgment dirs must have judged one of ``runs``, the report's run dirs)."""
    dirs = [read_judged(Path(p), _BENCHMARKS) for p in paths]
    mmhal = [d for d in dirs if d.header.benchmark == "mmhal"]
    hallusion = [d for d in dirs if d.header.benchmark == "hallusionbench"]
    sections = []
    if mmhal:
        if mmhal_template is None:
            raise InputError("--mmhal-template is required to report MMHal-Bench's judgments (its items and types)", mmhal[0].path)
        sections.append((MMHAL_SECTION, mmhal_section(mmhal, mmhal_template, policy, n_resamples=n_resamples, seed=seed)))
    if hallusion:
        sections.append((HALLUSION_SECTION, hallusion_section(hallusion, runs, n_resamples=n_resamples, seed=seed)))
    return sections
