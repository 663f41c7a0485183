"""The report's judged-benchmark sections (``report --judgments DIR``): per judged benchmark its
headline numbers with CIs (the numbers of ``mmhal score``, same policy, bootstrap and seed), the
judge ledger of every judgment dir (the judge as configured and as served, the prompt's sha256,
unparseable and errored verdicts, the --unparseable policy) and, for two dirs of one benchmark on
the same answers, their agreement. Without judgment dirs there is no section: the page is unchanged.

Only MMHal-Bench is rendered so far; a judgment dir of another benchmark is refused (one line)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

from halluprobe.benchmarks.mmhal import MMHalFile, read_mmhal
from halluprobe.errors import InputError
from halluprobe.formatting import format_ratio, markdown_table
from halluprobe.judging.agreement import agreement, paired_difference
from halluprobe.judging.ledger import JudgeHeader, Judgment
from halluprobe.judging.mmhal_score import (
    MMHalScore,
    UnparseablePolicy,
    item_values,
    mean_of,
    ordered_judgments,
    score_mmhal,
)
from halluprobe.judging.store import JudgmentDir
from halluprobe.mmhal_table import mmhal_grid
from halluprobe.records import FrozenRecord

__all__ = ["MMHAL_SECTION", "JudgedDir", "judged_sections", "ledger_lines", "mmhal_section"]

MMHAL_SECTION = ("judged-mmhal", "MMHal-Bench (judged)")  # id, table-of-contents entry
_RENDERED = {"mmhal": "mmhal"}  # the benchmarks a judge.json may name that get a section
_MMHAL_LEDE = ("Open answers rated 0-6 by a judge (hallucination: a rating under 3). halluprobe's score: "
               "unparseable and errored verdicts counted and scored by the --unparseable policy; 95% CIs: bootstrap over images.")  # fmt: skip


class JudgedDir(FrozenRecord):
    """One judgment dir as read for the report: its path (as given), judge header and verdicts."""

    path: str
    header: JudgeHeader
    judgments: tuple[Judgment, ...]


def _read(path: Path) -> JudgedDir:
    store = JudgmentDir(path)
    header = store.read_header()
    if header.benchmark not in _RENDERED:
        raise InputError(f"a judgment dir of {header.benchmark!r}: the report renders MMHal-Bench's judgments only so far "
                         f"(score it with its own verb)", store.header_path)  # fmt: skip
    return JudgedDir(path=str(path), header=header, judgments=tuple(store.read_judgments()))


def ledger_lines(judged: JudgedDir, score: MMHalScore) -> list[str]:
    """The ledger of one judgment dir, one line per fact."""
    h = judged.header
    served = sorted({j.judge_model_reported for j in judged.judgments if j.judge_model_reported})
    return [
        f"judge as configured: {h.backend}:{h.model}",
        f"judge as served: {', '.join(served) if served else 'not reported by the backend'}",
        f"prompt ({h.template_name}) sha256: {h.template_sha256}",
        f"unparseable {score.unparseable}, errors {score.errors} of {score.n} (--unparseable {score.policy})",
    ]


def _headline(score: MMHalScore) -> str:
    return (f"average score {format_ratio(score.average, score.average_ci, digits=2, ci_digits=2, missing='n/a')}, "
            f"hallucination rate {format_ratio(score.hallucination_rate, score.hallucination_rate_ci, digits=3, ci_digits=3, missing='n/a')}")  # fmt: skip


def _agreement_lines(mmhal: MMHalFile, a: JudgedDir, b: JudgedDir, policy: UnparseablePolicy, *, n_resamples: int, seed: int) -> list[str]:
    if a.header.answers_sha256 != b.header.answers_sha256:
        return [f"{a.path} and {b.path} judged different answers (answers_sha256 differ): no agreement"]
    judged = [ordered_judgments(mmhal, d.judgments, str(JudgmentDir(d.path).judgments_path)) for d in (a, b)]
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
    sid, title = MMHAL_SECTION
    md = [f"## {title}", "", _MMHAL_LEDE, ""]
    page = [f'<section id="{sid}">', f"<h2>{title}</h2>", f'<p class="lede">{html.escape(_MMHAL_LEDE)}</p>']
    for d in dirs:
        where = str(JudgmentDir(d.path).judgments_path)
        score = score_mmhal(mmhal, d.header, d.judgments, policy=policy, where=where, n_resamples=n_resamples, seed=seed)
        grid = mmhal_grid(score, mmhal, ordered_judgments(mmhal, d.judgments, where), d.header, compat=False, syntax="markdown")
        lines = [_headline(score), *ledger_lines(d, score)]
        md += [f"**{d.path}**", "", *[f"- {line}" for line in lines], ""]
        md += [*markdown_table(grid.header, [[c.text for c in row] for row in grid.rows]), ""]
        page.append(f"<h3>{html.escape(d.path)}</h3>")
        page.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
        head = "".join(f"<th>{html.escape(h)}</th>" for h in grid.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c.text)}</td>" for c in row) + "</tr>" for row in grid.rows)
        page.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    for a, b in combinations(dirs, 2):
        lines = _agreement_lines(mmhal, a, b, policy, n_resamples=n_resamples, seed=seed)
        md += ["**Agreement**", "", *[f"- {line}" for line in lines], ""]
        page.append("<h3>Agreement</h3><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
    page.append("</section>")
    return "\n".join(md).rstrip("\n") + "\n", "\n".join(page) + "\n"


def judged_sections(paths: Sequence[Path], *, mmhal_template: Path | None, policy: UnparseablePolicy, n_resamples: int,
                    seed: int) -> list[tuple[tuple[str, str], tuple[str, str]]]:  # fmt: skip
    """(table-of-contents entry, (Markdown, HTML)) per judged benchmark, in the order first given."""
    dirs = [_read(Path(p)) for p in paths]
    mmhal = [d for d in dirs if d.header.benchmark == "mmhal"]
    sections = []
    if mmhal:
        if mmhal_template is None:
            raise InputError("--mmhal-template is required to report MMHal-Bench's judgments (its items and types)", mmhal[0].path)
        sections.append((MMHAL_SECTION, mmhal_section(mmhal, mmhal_template, policy, n_resamples=n_resamples, seed=seed)))
    return sections
