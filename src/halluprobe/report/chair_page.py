"""The report of runs of open answers to CHAIR questions (``build chair`` + ``run --open-ended``,
or an imported caption file): one self-contained HTML page and its Markdown twin, with the CHAIR
section of :mod:`halluprobe.report.chair` for every run (both normaliser families side by side,
the objects most often hallucinated, CHAIR against caption length).

By default the captions are scored against the ground truth shipped for the two standard
500-image lists, in both families, words split by punkt; a run on other images is bad input that
names ``halluprobe report --ground-truth`` and ``halluprobe chair --ground-truth`` (or, for PROVE's
open questions, ``halluprobe prove score``). :class:`~halluprobe.report.decoding_section.ChairCounting`
(``report --family --tokenizer --ground-truth``) chooses otherwise, for the CHAIR sections and the
decoding table alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluprobe import __version__
from halluprobe.audit.table import bootstrap_settings
from halluprobe.captions.chair.evaluate import ChairResults, chair_results, refuse_unknown_images
from halluprobe.captions.chair.held_out import chair_held_out
from halluprobe.captions.chair.inputs import caption_source
from halluprobe.captions.chair.length import LengthGroup, chair_by_equal_count_groups
from halluprobe.captions.chair.runs import run_captions
from halluprobe.captions.chair.scoring import CaptionScore, ChairSettings
from halluprobe.files import write_atomic
from halluprobe.records_scores import BootstrapSettings
from halluprobe.report.chair import chair_grid, chair_section, hallucinated_objects
from halluprobe.report.decoding_section import ChairCounting, decoding_section
from halluprobe.report.figure_style import PALETTE, figure, svg
from halluprobe.report.overlap_section import OVERLAP_SECTION, caption_overlap_section
from halluprobe.report.page import stylesheet
from halluprobe.report.view import add_section
from halluprobe.rundir import RunDir
from halluprobe.tables import Grid

__all__ = ["ChairRunView", "chair_length_plot", "chair_run_view", "render_chair_report", "OPEN_ENDED_HINT"]

TEMPLATE = "chair.html.j2"
OPEN_ENDED_HINT = (
    "score captions on other images with `halluprobe report RUNDIR... --ground-truth FILE` or `halluprobe chair RUNDIR --ground-truth FILE` "
    "(or `halluprobe amber generative` for AMBER), PROVE's open questions with `halluprobe prove score --responses RUNDIR`"
)
_GIVEN_TRUTH_HINT = "--ground-truth needs a line for every image the runs captioned"


@dataclass(frozen=True)
class ChairRunView:
    """What the page shows of one run: its CHAIR results per family and the per-caption scores."""

    index: int
    label: str
    path: str
    results: ChairResults
    scores: dict[str, list[CaptionScore]]
    source: dict[str, Any]
    grid: Grid
    top: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    bins: dict[str, list[LengthGroup]] = field(default_factory=dict)
    figure: str | None = None

    @property
    def settings(self) -> ChairSettings:
        return self.results.first.settings


def chair_run_view(index: int, path: Path, *, n_resamples: int, seed: int, counting: ChairCounting | None = None) -> ChairRunView:
    """Score one run dir as ``counting`` says (default: both families, punkt, the shipped ground truth)."""

    counting = counting or ChairCounting()
    captions, settings = run_captions(path)
    truths = {name: counting.truth_for(name) for name in counting.section_families}
    for truth in truths.values():
        refuse_unknown_images(captions, truth, OPEN_ENDED_HINT if counting.ground_truth is None else _GIVEN_TRUTH_HINT)
    results, scores = chair_results(captions, settings, list(truths), truths.__getitem__, n_resamples=n_resamples, seed=seed,
                                    tokenizer=counting.tokenizer)  # fmt: skip
    model = settings.model
    model = str(model) if model and model != "unknown" else Path(path).resolve().name  # an imported caption file names no model
    return ChairRunView(
        index=index, label=Path(model).name or model, path=str(path), results=results, scores=scores,
        source=caption_source(path), grid=chair_grid(results),
        top={f: hallucinated_objects(s) for f, s in scores.items()}, bins={f: chair_by_equal_count_groups(s) for f, s in scores.items()},
    )  # fmt: skip


def chair_length_plot(bins: Mapping[str, Sequence[LengthGroup]], *, width: float = 4.6) -> str:
    """CHAIR_s (solid) and CHAIR_i (dashed) per caption-length group, one colour per family:
    shorter captions hallucinate less, so a method that shortens captions "reduces" CHAIR."""

    colours = (PALETTE["blue"], PALETTE["vermillion"])
    with figure(width, 2.6) as (fig, axes):
        ax = axes[0][0]
        for k, (family, groups) in enumerate(bins.items()):
            xs = [(g.lengths[0] + g.lengths[1]) / 2 for g in groups]
            colour = colours[k % len(colours)]
            name = family.removeprefix("chair@")
            ax.plot(xs, [100 * g.chair_s for g in groups], marker="os"[k % 2], color=colour, lw=1.2, label=f"CHAIR_s, {name}")
            pairs = [(x, 100 * g.chair_i) for x, g in zip(xs, groups) if g.chair_i is not None]
            if pairs:
                ax.plot(*zip(*pairs), marker="os"[k % 2], color=colour, lw=1.0, ls="--", mfc="none", label=f"CHAIR_i, {name}")
        ax.set_xlabel("caption length (words, middle of each group)")
        ax.set_ylabel("%")
        ax.set_ylim(bottom=0)
        ax.legend(frameon=False, fontsize=7.5)
        return svg(fig, "CHAIR against caption length")


def _markdown(runs: Sequence[ChairRunView], html_name: str, bootstrap: BootstrapSettings) -> str:
    multi = len(runs) > 1
    title = f"{len(runs)} runs on CHAIR" if multi else f"CHAIR of {runs[0].label}"
    lines = [f"# halluprobe report: {title}", "", f"The figures are in [{html_name}]({html_name}).", ""]
    for run in runs:
        lines.append(f"Run {run.index + 1}: `{run.path}`." if multi else f"Run: `{run.path}`.")
        section = chair_section(run.results, run.scores, run.source, bootstrap=bootstrap,
                                title=f"CHAIR: {run.index + 1}. {run.label}" if multi else "CHAIR")  # fmt: skip
        lines += ["", section]
    return "\n".join(lines)


def render_chair_report(
    rundirs: Sequence[str | Path], out_html: str | Path, *, n_resamples: int = 1000, seed: int = 0, counting: ChairCounting | None = None,
    judged: Sequence[tuple[tuple[str, str], tuple[str, str]]] = (),
) -> tuple[Path, Path]:
    """Write the CHAIR page ``out_html`` and its Markdown twin (``.md``); return both paths.
    ``counting``: the families, tokenizer and ground truth of every CHAIR number (default: both
    families in the CHAIR sections, the lemmatizer in the decoding table, punkt, shipped ground truth).
    ``judged``: the judged benchmarks' sections (:func:`~halluprobe.report.judged_section.judged_sections`), last."""
    from importlib.resources import files

    import jinja2


    out_html = Path(out_html)
    bootstrap = bootstrap_settings(n_resamples, seed)
    counting = counting or ChairCounting()
    runs = [chair_run_view(k, Path(p), n_resamples=n_resamples, seed=seed, counting=counting) for k, p in enumerate(rundirs)]
    runs = [ChairRunView(**{**run.__dict__, "figure": chair_length_plot(run.bins)}) for run in runs]
    source = files("halluprobe.report").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    decoding = decoding_section([Path(p) for p in rundirs], n_resamples=n_resamples, seed=seed, counting=counting)  # None: no comparison
    html = env.from_string(source).render(runs=runs, version=__version__, stylesheet=stylesheet(), bootstrap=bootstrap,
                                          decoding=decoding[1] if decoding else None, families=counting.section_families,
                                          tokenizer=counting.tokenizer, recompute=counting.options)  # fmt: skip
    out_md = out_html.with_suffix(".md")
    md = _markdown(runs, out_html.name, bootstrap) + ("\n" + decoding[0] if decoding else "")
    held = [chair_held_out(run.results, run.scores, names=[s.image for s in RunDir(run.path).read_samples()], n_resamples=n_resamples,
                           seed=seed) for run in runs]  # fmt: skip
    overlap = caption_overlap_section([(run.path, h) for run, h in zip(runs, held)])
    if overlap is not None:  # captions of COCO images only: other pages are unchanged
        html, md = add_section(html, md, overlap, OVERLAP_SECTION)
    for entry, section in judged:  # report --judgments (report/judged_section.py): none, the page is unchanged
        html, md = add_section(html, md, section, entry)
    write_atomic(out_html, html)
    write_atomic(out_md, md)
    return out_html, out_md
