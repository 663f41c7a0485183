"""``halluprobe report``: one self-contained HTML page (plus a Markdown twin) from audits.

The page needs nothing but itself: CSS inline, figures inline SVG, no script, no web font, no
external URL. One run gives a report; several runs give a leaderboard with the same sections
side by side. jinja2 and matplotlib (the ``report`` extra) are imported only when rendering.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluprobe.audit import audit_run, compare_runs
from halluprobe.corrections_table import corrections_table, default_corrections
from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.formatting import fmt_ci, fmt_count, fmt_delta, fmt_p, fmt_pct, fmt_score
from halluprobe.provenance import headline_provenance
from halluprobe.records_audit import AuditReport, PYesByLabel, RunComparison
from halluprobe.records_scores import Metrics
from halluprobe.report import plots
from halluprobe.report.build import as_audit, build_view
from halluprobe.report.decoding_section import ChairCounting, decoding_section
from halluprobe.report.figure_style import TEXT_WIDTH_IN
from halluprobe.report.literature import add_literature_section, literature_matches
from halluprobe.report.markdown import markdown_report
from halluprobe.report.overlap_section import OVERLAP_SECTION, overlap_section
from halluprobe.report.parsers import parsers_view
from halluprobe.report.view import ReportView, RunView, add_section, piece, short_readout
from halluprobe.rundir import RunDir

if TYPE_CHECKING:
    from halluprobe.provenance import Provenance
    from halluprobe.report.decoding_section import ChairCounting

__all__ = ["build_figures", "render_html", "render_report", "render_report_markdown"]

log = logging.getLogger(__name__)

TEMPLATE = "report.html.j2"
DECODING_SECTION = ("decoding", "Decoding")  # the caption runs' section: id, table-of-contents entry


def render_report(
    rundirs: Sequence[str | Path],
    out_html: str | Path,
    *,
    audits: Sequence[AuditReport | Mapping[str, Any]] | None = None,
    comparison: RunComparison | Mapping[str, Any] | None = None,
    headline: str | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    corrections: Sequence[Any] | None = None,
    captions: Sequence[str | Path] = (),
    chair: ChairCounting | None = None,
    judged: Sequence[tuple[tuple[str, str], tuple[str, str]]] = (),
) -> tuple[Path, Path]:
    """Write ``out_html`` and its Markdown twin (same name, ``.md``); return both paths.

    ``audits`` (one per run dir, in order) and ``comparison`` are computed with
    ``halluprobe.audit`` when not given; pass them to reuse an ``audit.json``
    (``RunDir.read_audit``; a plain JSON object is validated into an ``AuditReport``).
    ``corrections`` (one ``CorrectionsReport`` or None per run dir) likewise; when not given, a
    run that recorded correction signals gets its table at the methods' default settings.
    ``captions``: run dirs of open answers that are a decoding comparison (a greedy run, method
    runs, at most one sampled run; anything else is bad input), shown as the Decoding section
    after the yes/no runs' sections, CHAIR counted as ``chair`` says (default: lemmatizer, punkt,
    the shipped ground truth) with this report's bootstrap; they are never scored as yes/no runs.
    ``judged``: the judged benchmarks' sections (:func:`~halluprobe.report.judged_section.judged_sections`), last.
    """
    paths = [Path(p) for p in rundirs]
    out_html = Path(out_html)
    if out_html.suffix.lower() == ".md":
        raise InputError("the HTML page needs another name than its Markdown twin (.md)", out_html)
    if not paths and not audits:
        raise ValueError("render_report needs at least one run directory or audit")
    decoding = _decoding_of_captions(captions, chair, n_resamples=n_resamples, seed=seed)  # refused before any audit
    if audits is None:

        audits = [audit_run(p, headline=headline, n_resamples=n_resamples, seed=seed) for p in paths]
    if paths and len(audits) != len(paths):
        raise ValueError(f"{len(audits)} audits for {len(paths)} run directories")
    if comparison is None and len(audits) > 1 and paths:

        comparison = compare_runs(paths, readout=headline, n_resamples=n_resamples, seed=seed)
    view = build_view(audits, paths or [None] * len(audits), comparison)
    _add_corrections(view, paths, corrections, n_resamples=n_resamples, seed=seed)
    _add_parsers(view, paths)
    build_figures(view)
    out_md = out_html.with_suffix(".md")
    page = render_html(view, recompute=_captions_options(captions, chair))
    provenance = _headline_provenance(paths, [as_audit(a) for a in audits], [run.label for run in view.runs])
    markdown = render_report_markdown(view, html_name=out_html.name, provenance=provenance)
    overlap = overlap_section([as_audit(a) for a in audits], [run.label for run in view.runs])
    if overlap is not None:  # COCO runs only: a page of other images is unchanged
        page, markdown = add_section(page, markdown, overlap, OVERLAP_SECTION)
    if decoding is not None:
        page, markdown = add_section(page, markdown, decoding, DECODING_SECTION)
    if paths:  # a run that is a registered published answers file: its figures, recomputed (report/literature.py)

        page, markdown = add_literature_section(page, markdown, literature_matches(paths, n_resamples=n_resamples, seed=seed))
    for entry, section in judged:  # report --judgments (report/judged_section.py): none, the page is unchanged
        page, markdown = add_section(page, markdown, section, entry)
    write_atomic(out_html, page)
    write_atomic(out_md, markdown)
    log.info("wrote %s and %s", out_html, out_md)
    return out_html, out_md


def _headline_provenance(paths: Sequence[Path], audits: Sequence[AuditReport], names: Sequence[str]) -> Provenance | None:
    """The headline table's provenance, where ``check`` can recompute it: run dirs given, one
    per audit, and every audit with the same headline, policy and bootstrap (one comment)."""

    settings = {(a.headline, a.policy, a.bootstrap.n_resamples, a.bootstrap.seed) for a in audits}
    if not paths or len(paths) != len(audits) or len(settings) != 1:
        return None
    headline, policy, resamples, seed = settings.pop()
    try:
        return headline_provenance(paths, names, readout=headline, policy=policy, seed=seed, resamples=resamples)
    except (InputError, OSError) as err:  # an audit.json rendered without its run dir: the table stands alone
        log.info("no provenance comment on the headline table: %s", err)
        return None


def _decoding_of_captions(captions: Sequence[str | Path], chair: ChairCounting | None, *, n_resamples: int, seed: int) -> tuple[str, str] | None:
    """The Decoding section of the caption runs (Markdown, HTML); None without caption runs."""

    if not captions:
        return None
    paths = [Path(p) for p in captions]
    section = decoding_section(paths, n_resamples=n_resamples, seed=seed, counting=chair, section_id=DECODING_SECTION[0])
    if section is None:
        raise InputError("the caption runs of a yes/no report must be a decoding comparison: one plain greedy run, one or more runs "
                         "of a decoding method, at most one plain sampled run, all on the same questions", paths[0])  # fmt: skip
    return section


def _captions_options(captions: Sequence[str | Path], chair: ChairCounting | None) -> str:
    """The caption runs and CHAIR options of ``halluprobe report`` in the page's recompute line ("" without captions)."""
    if not captions:
        return ""

    return "".join(f"{p} " for p in captions) + (chair or ChairCounting()).options


def _add_corrections(view: ReportView, paths: Sequence[Path], given: Sequence[Any] | None, *, n_resamples: int, seed: int) -> None:
    """The Corrections section: each run's corrections table (runs without signals have none)."""
    import dataclasses


    tables: list[Any] = list(given) if given is not None else []
    if given is None:
        for path in paths:
            specs = default_corrections(RunDir(path).read_header()) if path else []  # what the run was asked to record
            tables.append(corrections_table(path, specs, n_resamples=n_resamples, seed=seed) if specs else None)
    for index, table in enumerate(tables[: len(view.runs)]):
        view.runs[index] = dataclasses.replace(view.runs[index], corrections=table)
    if any(run.corrections is not None for run in view.runs):
        view.sections.append(("corrections", "Corrections"))


def _add_parsers(view: ReportView, paths: Sequence[Path]) -> None:
    """The Parsers section: each imported run's rule changes and the rule a published number needs."""
    import dataclasses


    for index, path in enumerate(paths[: len(view.runs)]):
        run = view.runs[index]
        if path is not None and run.imported is not None:
            view.runs[index] = dataclasses.replace(run, parsers=parsers_view(path, run.imported))
    if any(run.parsers is not None for run in view.runs):
        view.sections.append(("parsers", "Parsers"))


def build_figures(view: ReportView) -> None:
    """Fill each run's ``figures`` (section id -> SVG) and the leaderboard figure.

    Side-by-side panels of a leaderboard share their scales (F1 axis, histogram height, bar
    lengths), so the eye compares runs and not axis ticks.
    """

    runs = view.runs
    # several runs sit side by side (at most 3 a row): draw their figures at column width, so
    # the text in them keeps the size it has in a one-run report instead of being shrunk
    n_cols = max(1, min(len(runs), 3))
    column = (TEXT_WIDTH_IN - 0.3 * (n_cols - 1)) / n_cols
    shared = len(runs) > 1

    def width(fraction: float) -> float:
        return min(fraction * TEXT_WIDTH_IN, column)

    forests = {id(run): _forest_rows(run) for run in runs}
    curves = {id(run): _valid_curves(run) for run in runs}
    f1_lim = _span([v for rows in forests.values() for r in rows for v in (r[1], *(r[2] or ()))], pad=2.0) if shared else None
    conv_lim = _span([100 * p.f1 for c in curves.values() for curve in c.values() for p in curve if p.f1 is not None], pad=2.0) if shared else None
    hist_max = max((_hist_peak(run.p_yes) for run in runs), default=None) if shared else None
    profile_max = max((100 * o.rate for run in runs for o in run.profile_objects[:15]), default=None) if shared else None
    pieces_max = max((100 * p.share for run in runs for p in run.tokens.first_pieces[:10]), default=None) if shared else None

    for run in runs:
        figures = run.figures
        headline = run.headline
        rows = forests[id(run)]
        head_f1 = next((r[1] for r in rows if r[0] == headline), None)
        if rows:
            figures["readouts"] = plots.forest_plot(rows, reference=head_f1, width=width(0.58), xlim=f1_lim)
        if run.confusion:
            figures["confusion"] = plots.confusion_plot(run.confusion, title=f"confusion, {headline}", width=width(1.0))
        if curves[id(run)]:
            figures["convergence"] = plots.convergence_plot(
                curves[id(run)],
                headline=headline,
                final_ci=_ci(run.metrics_row("pooled"), "f1"),
                stable_after=run.stable_after.get(headline),
                width=width(0.72),
                ylim=conv_lim,
            )
        if _has_values(run.p_yes):
            figures["p-yes"] = plots.p_yes_histograms(run.p_yes, width=width(1.0), ymax=hist_max)
        if run.calibration:
            figures["calibration"] = plots.reliability_diagram(run.calibration, width=width(0.46))
        if run.profile_objects:
            figures["profile"] = plots.profile_plot(run.profile_objects, width=width(0.5), xmax=profile_max)
        tokens = run.tokens
        if tokens.first_pieces:
            figures["tokens"] = plots.first_pieces_plot(
                tokens.first_pieces,
                yes_pieces=[p for _, p in tokens.yes],
                no_pieces=[p for _, p in tokens.no],
                width=width(0.46),
                xmax=pieces_max,
            )
    board = view.leaderboard
    if board:
        rows = [(r.label, _pct(r.macro.f1), _pct_ci(r.macro, "f1"), False) for r in board.rows]
        view.figures["leaderboard"] = plots.forest_plot(rows, width=0.58 * TEXT_WIDTH_IN)


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * float(value)


def _pct_ci(metrics: Metrics, name: str) -> tuple[float, float] | None:
    ci = _ci(metrics, name)
    return None if ci is None else (100 * ci[0], 100 * ci[1])


def _forest_rows(run: RunView) -> list[tuple[str, float | None, tuple[float, float] | None, bool]]:
    rows = [(r.name, _pct(r.m.f1), _pct_ci(r.m, "f1"), r.muted) for r in run.readouts]
    return [r for r in rows if r[1] is not None]


def _valid_curves(run: RunView) -> dict[str, Any]:
    # a forced readout (ids not in this vocabulary) would only flatten the axis at F1 = 0
    invalid = {r.name for r in run.readouts if r.muted}
    return {name: curve for name, curve in run.curves.items() if name not in invalid}


def _span(values: list[float | None], pad: float) -> tuple[float, float] | None:
    finite = [v for v in values if isinstance(v, (int, float))]
    if not finite:
        return None
    return (max(0.0, min(finite) - pad), min(100.0, max(finite) + pad))


def _hist_peak(p_yes: Mapping[str, PYesByLabel], bins: int = 20) -> float:
    import numpy as np

    peak = 0.0
    for by_label in p_yes.values():
        for values in (by_label.yes, by_label.no):
            if values:
                counts, _ = np.histogram(np.clip(np.asarray(values, dtype=float), 0, 1), bins=bins, range=(0.0, 1.0))
                peak = max(peak, float(counts.max()))
    return peak


def _has_values(p_yes: Mapping[str, PYesByLabel]) -> bool:
    return any(by_label.yes or by_label.no for by_label in p_yes.values())


def _ci(metrics: Metrics, name: str) -> tuple[float, float] | None:
    return metrics.ci.get(name)


def render_html(view: ReportView, *, recompute: str = "") -> str:
    """The page, from the packaged Jinja2 template (found through importlib.resources);
    ``recompute``: what the footer's ``halluprobe report`` line needs beyond the run dirs
    (the caption runs and CHAIR options), each followed by a space."""
    from importlib.resources import files

    import jinja2


    source = files("halluprobe.report").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")
    env = jinja2.Environment(
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,  # a renamed field fails loudly, not as an empty cell
        extensions=["jinja2.ext.do"],
    )
    env.filters.update(
        pct=fmt_pct,
        score=fmt_score,
        count=fmt_count,
        ci=fmt_ci,
        delta=fmt_delta,
        pvalue=fmt_p,
        piece=piece,
        short=short_readout,
    )
    return env.from_string(source).render(**view.template_context(), stylesheet=stylesheet(), recompute=recompute)


def stylesheet() -> str:
    """The pages' one stylesheet (inlined: a report opens offline), shared by every page halluprobe writes."""
    from importlib.resources import files

    return files("halluprobe.report").joinpath("templates", "report.css").read_text(encoding="utf-8")


def render_report_markdown(view: ReportView, *, html_name: str = "report.html", provenance: Provenance | None = None) -> str:

    return markdown_report(view, html_name=html_name, provenance=provenance)
