"""The Markdown twin of the report: the same sections and tables, figures replaced by their
numbers (a paper's source, an issue or a pull request can paste it; the HTML has the plots).

It reads the same view model as the HTML template, with the same number formatting, so the
two cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe.formatting import fmt_count, fmt_pct, fmt_score
from halluprobe.provenance import marked_comment
from halluprobe.report.markdown_sections import (
    agreement_lines,
    code_span,
    imported_rows,
    logit_sections,
    md_table,
    paired_cells,
    profile_section,
    run_cell,
    section_head,
    tail_sections,
    token_section,
    with_ci,
)
from halluprobe.report.view import ReportView, piece
from halluprobe.tables import headline_grid

if TYPE_CHECKING:
    from halluprobe.provenance import Provenance

__all__ = ["markdown_report"]

# the openai backend's runs: the server reports token strings, so the sets are derived per sample
_PER_SAMPLE = "derived per sample from the pieces the server returned (no ids)"


def markdown_report(view: ReportView, *, html_name: str = "report.html", provenance: Provenance | None = None) -> str:
    """The twin; ``provenance`` (the run dirs, see ``tables.headline_provenance``) goes above
    the headline table, so ``halluprobe check`` can recompute it."""

    runs = view.runs
    multi = len(runs) > 1
    headline = view.headline
    lines: list[str] = []
    kind = "leaderboard" if multi else "report"
    title = f"{len(runs)} runs on POPE" if multi else runs[0].label
    lines += [f"# halluprobe {kind}: {title}", ""]
    byline = [f"Headline readout `{headline}`", f"unknown answers counted as **{view.policy}**"]
    if view.bootstrap_text:
        byline.append("95% CIs: " + view.bootstrap_text)
    if view.version:
        byline.append(f"halluprobe {view.version}")
    lines.append(" · ".join(byline) + ".")
    for run in runs:
        if run.headline_note:
            lines += ["", (f"Run {run.index + 1}: " if multi else "") + run.headline_note + "."]
    lines += ["", f"Ratios in %, 95% CI in brackets. The figures are in [{html_name}]({html_name})."]
    number = 0

    board = view.leaderboard
    if board:
        number += 1
        lines += section_head(number, "Leaderboard")
        lines.append(
            f"Ranked by macro F1 ({board.readout} readout)"
            + (f", on the {fmt_count(board.common_questions)} questions every run answered" if board.common_questions else "")
            + f"; paired columns compare each run with run 1 ({board.reference})."
        )
        lines.append("")
        rows = []
        for row in board.rows:
            rows.append(
                [
                    row.rank,
                    f"{row.run.index + 1}. {row.label}",
                    code_span(row.run.template),
                    with_ci(row.macro, "accuracy"),
                    with_ci(row.macro, "f1"),
                    with_ci(row.macro, "yes_ratio"),
                    with_ci(row.macro, "htr"),
                    *paired_cells(row.paired, "–"),
                ]
            )
        lines += md_table(["#", "run", "template", "acc", "F1", "yes", "HTR", "ΔF1 (pp)", "b / c", "p"], rows)

    number += 1
    lines += section_head(number, "Run")
    for run in runs:
        if multi:
            lines += [f"### {run_cell(run)}", ""]
        if run.imported is not None:
            lines += md_table(["", ""], imported_rows(run, view.scored_by), align=["l", "l"])
            lines.append("")
            continue
        tokens = run.tokens
        legacy = "valid" if tokens.legacy_valid else "**invalid** on this vocabulary" + (
            ": " + ", ".join(f"{i}={piece(p) if p is not None else '—'}" for i, p in tokens.legacy) if tokens.legacy else ""
        )
        rows = [
            ["Model", f"{code_span(run.model)} (backend {run.backend})"],
            *([["Log-probabilities", run.logprobs]] if run.logprobs else []),
            ["Prompt", f"template {code_span(run.template)}" + (f": {code_span(piece(run.prompt))}" if run.prompt else "")],
            ["Tokenizer", f"{code_span(str(tokens.fingerprint or '–')[:16])}, {fmt_count(tokens.vocab_size)} ids"],
            ["Yes set", _PER_SAMPLE if tokens.by_piece else ", ".join(f"{code_span(piece(p))} ({i})" for i, p in tokens.yes) or "none found"],
            ["No set", _PER_SAMPLE if tokens.by_piece else ", ".join(f"{code_span(piece(p))} ({i})" for i, p in tokens.no) or "none found"],
            ["Legacy ids", legacy],
            ["Questions", f"{fmt_count(run.n)}, {fmt_count(run.errors)} errors"],
        ]
        if run.benchmarks:
            rows.append(["Benchmarks", ", ".join(f"{s} {code_span(sha[:12])}" for s, sha in run.benchmarks.items())])
        rows.append(["Software", ", ".join(f"{k} {v}" for k, v in run.packages.items()) or "–"])
        rows.append(["Created", f"{run.created_at or '–'}, {code_span(run.path)}"])
        lines += md_table(["", ""], rows, align=["l", "l"])
        lines.append("")

    number += 1
    lines += section_head(number, "Headline metrics")
    lines.append(f"Readout `{headline}` per split, pooled, and the macro mean over splits. HTR = FP / (FP + TN).")
    lines.append("")
    grid = headline_grid([[(row.name, row.m) for row in run.headline_rows] for run in runs], [run.label for run in runs] if multi else ())
    if provenance is not None:
        lines.append(marked_comment(provenance, "markdown"))
    labels = 1 + multi  # the run and split columns are left-aligned
    lines += md_table(grid.header, [[c.text for c in row] for row in grid.rows], align=["l"] * labels + ["r"] * (len(grid.header) - labels))

    number += 1
    lines += section_head(number, "Readout comparison")
    lines.append(
        ("Every readout a rule applied to the same stored answer text (no forward pass was run here)." if view.text_only else "Every readout from the same forward pass.")
        + f" ΔF1 against `{headline}` in percentage points with a paired "
        "image-bootstrap CI; b / c = questions only this readout / only the headline got right; p from McNemar's exact test."
    )
    lines.append("")
    rows = []
    for run in runs:
        for r in run.readouts:
            name = code_span(r.name) + (" (headline)" if r.headline else "") + (" †" if r.muted else "")
            cells = [run_cell(run)] if multi else []
            cells += [
                name,
                with_ci(r.m, "accuracy"),
                with_ci(r.m, "f1"),
                with_ci(r.m, "yes_ratio"),
                fmt_pct(r.m.unknown_rate),
                fmt_score(r.m.auroc),
                *paired_cells(r.paired, "ref." if r.headline else "–"),
                fmt_pct(r.agreement),
            ]
            rows.append(cells)
    header = ["readout", "acc", "F1", "yes", "unk", "AUROC", "ΔF1 (pp)", "b / c", "p", "agree"]
    lines += md_table((["run"] if multi else []) + header, rows, align=(["l"] if multi else []) + ["l"] + ["r"] * (len(header) - 1))
    if view.any_forced:
        lines += ["", "† Not valid for this vocabulary (the legacy LLaMA-2 ids are not yes/no pieces here): scored only to show what the legacy evaluator would report."]
    if view.text_only:  # no token section on this page: the agreement between readouts goes here
        for run in runs:
            matrix = agreement_lines(run, multi)
            lines += [""] + matrix[:-1] if matrix else []

    number += 1
    lines += section_head(number, "Confusion matrices")
    lines.append(f"Readout `{headline}`; rows of the HTML figure as columns here.")
    lines.append("")
    rows = []
    for run in runs:
        for split, c in run.confusion.items():
            cells = [run_cell(run)] if multi else []
            cells += [split, *(fmt_count(v) for v in (c.tp, c.fn, c.fp, c.tn, c.unknown))]
            rows.append(cells)
    lines += md_table((["run"] if multi else []) + ["split", "TP", "FN", "FP", "TN", "unknown"], rows)

    number += 1
    lines += section_head(number, "Convergence")
    lines.append("F1 after the first k questions; *stable from* = the k from which it stays within 0.5 points of its final value.")
    lines.append("")
    rows = []
    for run in runs:
        for name, curve in run.curves.items():
            points = [p for p in curve if p.f1 is not None]
            cells = [run_cell(run)] if multi else []
            stable = run.stable_after.get(name)
            cells += [
                code_span(name),
                fmt_pct(points[0].f1) + f" (k = {fmt_count(points[0].k)})" if points else "–",
                fmt_pct(points[-1].f1) + f" (k = {fmt_count(points[-1].k)})" if points else "–",
                fmt_count(stable) if stable is not None else "never",
            ]
            rows.append(cells)
    lines += md_table((["run"] if multi else []) + ["readout", "first point", "final", "stable from k"], rows)

    if not view.text_only:
        number = logit_sections(lines, view, number)
    number = profile_section(lines, view, number)
    if not view.text_only:
        number = token_section(lines, view, number)
    tail_sections(lines, view, number)
    return "\n".join(lines).rstrip() + "\n"
