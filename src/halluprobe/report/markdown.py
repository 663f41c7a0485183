"""The Markdown twin of the report: the same sections and tables, figures replaced by their
numbers (a paper's source, an issue or a pull request can paste it; the HTML has the plots).

It reads the same view model as the HTML template, with the same number formatting, so the
two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from halluprobe.formatting import markdown_table
from halluprobe.records import Metrics
from halluprobe.records_audit import PairedTest
from halluprobe.report.view import (
    ReportView,
    RunView,
    fmt_ci,
    fmt_count,
    fmt_delta,
    fmt_p,
    fmt_pct,
    fmt_score,
    piece,
)

if TYPE_CHECKING:
    from halluprobe.tables import Provenance

__all__ = ["markdown_report"]

# the openai backend's runs: the server reports token strings, so the sets are derived per sample
_PER_SAMPLE = "derived per sample from the pieces the server returned (no ids)"


def _code(text: Any) -> str:
    """A code span (a table escapes its pipes, :func:`~halluprobe.formatting.markdown_cell`)."""
    body = str(text)
    fence = "``" if "`" in body else "`"
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None) -> list[str]:
    return markdown_table(header, rows, align or ["l"] + ["r"] * (len(header) - 1))


def _with_ci(m: Metrics | None, name: str) -> str:
    from halluprobe.tables import percent_cell

    return fmt_pct(None) if m is None else percent_cell(m, name).text


def _paired_cells(paired: PairedTest | None, absent: str) -> list[str]:
    """ΔF1 with its CI, b / c, McNemar p; ``absent`` in the first cell when there is no test."""
    if paired is None:
        return [absent, "–", "–"]
    return [
        (fmt_delta(paired.delta_f1) + " " + fmt_ci(paired.delta_f1_ci, signed=True)).strip(),
        f"{fmt_count(paired.b)} / {fmt_count(paired.c)}",
        fmt_p(paired.mcnemar_p),
    ]


def _run_cell(run: RunView) -> str:
    return f"{run.index + 1}. {run.label}"


def _imported_rows(run: RunView, scored_by: str | None) -> list[list[str]]:
    """The Run table of an imported run: what it was made from, not what it lacks."""
    imp = run.imported
    assert imp is not None
    tool = f"; written by {imp.tool} " + (imp.tool_version or "(version not recorded)") if imp.tool else ""
    versions = ", ".join(f"{split} {', '.join(v) or 'no published version'}" for split, v in imp.pope_versions.items())
    kept = f"; the tool's own decisions kept as {', '.join(_code(n) for n in imp.tool_readouts)}" if imp.tool_readouts else ""
    labels = ", ".join(f"{split} {_code(path.rsplit('/', 1)[-1])}" for split, path in imp.labels.items())
    fits = "; the question file fits: " + ", ".join(
        f"{split} {', '.join(v) or 'no published version in full'}" for split, v in imp.question_versions.items()
    ) if imp.question_versions else ""
    return [
        ["Model", f"{_code(run.model)} (as the answers file names it; no model was run here)"],
        ["Imported from", ", ".join(f"{_code(f.name)} (sha256 {_code(f.sha256[:12])})" for f in imp.files) + f"; format {imp.format}{tool}"],
        ["POPE version", (versions or "labels match no published version") + fits],
        ["Answers", "text only: each text rule is applied to the stored answers when scored" + kept],
        ["Prompt", (_code(piece(run.prompt)) if run.prompt else "–") + " (as the answers file records it)"],
        ["Questions", f"{fmt_count(run.n)}, {fmt_count(run.errors)} errors" + (f"; labels {labels}" if labels else "")],
        ["Scored by", " · ".join([f"halluprobe {scored_by or '–'}", *(f"{k} {v}" for k, v in run.packages.items())])],
        ["Imported", f"{run.created_at or '–'}, {_code(run.path)}"],
    ]


def _section(number: int, title: str) -> list[str]:
    return ["", f"## {number}. {title}", ""]


def markdown_report(view: ReportView, *, html_name: str = "report.html", provenance: Provenance | None = None) -> str:
    """The twin; ``provenance`` (the run dirs, see ``tables.headline_provenance``) goes above
    the headline table, so ``halluprobe check`` can recompute it."""
    from halluprobe.tables import headline_grid, provenance_comment

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
        lines += _section(number, "Leaderboard")
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
                    _code(row.run.template),
                    _with_ci(row.macro, "accuracy"),
                    _with_ci(row.macro, "f1"),
                    _with_ci(row.macro, "yes_ratio"),
                    _with_ci(row.macro, "htr"),
                    *_paired_cells(row.paired, "–"),
                ]
            )
        lines += _table(["#", "run", "template", "acc", "F1", "yes", "HTR", "ΔF1 (pp)", "b / c", "p"], rows)

    number += 1
    lines += _section(number, "Run")
    for run in runs:
        if multi:
            lines += [f"### {_run_cell(run)}", ""]
        if run.imported is not None:
            lines += _table(["", ""], _imported_rows(run, view.scored_by), align=["l", "l"])
            lines.append("")
            continue
        tokens = run.tokens
        legacy = "valid" if tokens.legacy_valid else "**invalid** on this vocabulary" + (
            ": " + ", ".join(f"{i}={piece(p) if p is not None else '—'}" for i, p in tokens.legacy) if tokens.legacy else ""
        )
        rows = [
            ["Model", f"{_code(run.model)} (backend {run.backend})"],
            ["Prompt", f"template {_code(run.template)}" + (f": {_code(piece(run.prompt))}" if run.prompt else "")],
            ["Tokenizer", f"{_code(str(tokens.fingerprint or '–')[:16])}, {fmt_count(tokens.vocab_size)} ids"],
            ["Yes set", _PER_SAMPLE if tokens.by_piece else ", ".join(f"{_code(piece(p))} ({i})" for i, p in tokens.yes) or "none found"],
            ["No set", _PER_SAMPLE if tokens.by_piece else ", ".join(f"{_code(piece(p))} ({i})" for i, p in tokens.no) or "none found"],
            ["Legacy ids", legacy],
            ["Questions", f"{fmt_count(run.n)}, {fmt_count(run.errors)} errors"],
        ]
        if run.benchmarks:
            rows.append(["Benchmarks", ", ".join(f"{s} {_code(sha[:12])}" for s, sha in run.benchmarks.items())])
        rows.append(["Software", ", ".join(f"{k} {v}" for k, v in run.packages.items()) or "–"])
        rows.append(["Created", f"{run.created_at or '–'}, {_code(run.path)}"])
        lines += _table(["", ""], rows, align=["l", "l"])
        lines.append("")

    number += 1
    lines += _section(number, "Headline metrics")
    lines.append(f"Readout `{headline}` per split, pooled, and the macro mean over splits. HTR = FP / (FP + TN).")
    lines.append("")
    grid = headline_grid([[(row.name, row.m) for row in run.headline_rows] for run in runs], [run.label for run in runs] if multi else ())
    if provenance is not None:
        lines.append(provenance_comment(provenance, "markdown"))
    labels = 1 + multi  # the run and split columns are left-aligned
    lines += _table(grid.header, [[c.text for c in row] for row in grid.rows], align=["l"] * labels + ["r"] * (len(grid.header) - labels))

    number += 1
    lines += _section(number, "Readout comparison")
    lines.append(
        ("Every readout a rule applied to the same stored answer text (no forward pass was run here)." if view.text_only else "Every readout from the same forward pass.")
        + f" ΔF1 against `{headline}` in percentage points with a paired "
        "image-bootstrap CI; b / c = questions only this readout / only the headline got right; p from McNemar's exact test."
    )
    lines.append("")
    rows = []
    for run in runs:
        for r in run.readouts:
            name = _code(r.name) + (" (headline)" if r.headline else "") + (" †" if r.muted else "")
            cells = [_run_cell(run)] if multi else []
            cells += [
                name,
                _with_ci(r.m, "accuracy"),
                _with_ci(r.m, "f1"),
                _with_ci(r.m, "yes_ratio"),
                fmt_pct(r.m.unknown_rate),
                fmt_score(r.m.auroc),
                *_paired_cells(r.paired, "ref." if r.headline else "–"),
                fmt_pct(r.agreement),
            ]
            rows.append(cells)
    header = ["readout", "acc", "F1", "yes", "unk", "AUROC", "ΔF1 (pp)", "b / c", "p", "agree"]
    lines += _table((["run"] if multi else []) + header, rows, align=(["l"] if multi else []) + ["l"] + ["r"] * (len(header) - 1))
    if view.any_forced:
        lines += ["", "† Not valid for this vocabulary (the legacy LLaMA-2 ids are not yes/no pieces here): scored only to show what the legacy evaluator would report."]
    if view.text_only:  # no token section on this page: the agreement between readouts goes here
        for run in runs:
            matrix = _agreement(run, multi)
            lines += [""] + matrix[:-1] if matrix else []

    number += 1
    lines += _section(number, "Confusion matrices")
    lines.append(f"Readout `{headline}`; rows of the HTML figure as columns here.")
    lines.append("")
    rows = []
    for run in runs:
        for split, c in run.confusion.items():
            cells = [_run_cell(run)] if multi else []
            cells += [split, *(fmt_count(v) for v in (c.tp, c.fn, c.fp, c.tn, c.unknown))]
            rows.append(cells)
    lines += _table((["run"] if multi else []) + ["split", "TP", "FN", "FP", "TN", "unknown"], rows)

    number += 1
    lines += _section(number, "Convergence")
    lines.append("F1 after the first k questions; *stable from* = the k from which it stays within 0.5 points of its final value.")
    lines.append("")
    rows = []
    for run in runs:
        for name, curve in run.curves.items():
            points = [p for p in curve if p.f1 is not None]
            cells = [_run_cell(run)] if multi else []
            stable = run.stable_after.get(name)
            cells += [
                _code(name),
                fmt_pct(points[0].f1) + f" (k = {fmt_count(points[0].k)})" if points else "–",
                fmt_pct(points[-1].f1) + f" (k = {fmt_count(points[-1].k)})" if points else "–",
                fmt_count(stable) if stable is not None else "never",
            ]
            rows.append(cells)
    lines += _table((["run"] if multi else []) + ["readout", "first point", "final", "stable from k"], rows)

    if not view.text_only:
        number = _logit_sections(lines, view, number)
    number = _profile_section(lines, view, number)
    if not view.text_only:
        number = _token_section(lines, view, number)
    _tail_sections(lines, view, number)
    return "\n".join(lines).rstrip() + "\n"


def _logit_sections(lines: list[str], view: ReportView, number: int) -> int:
    """p(yes) and calibration: a page of text-only runs leaves them out."""
    runs = view.runs
    multi = len(runs) > 1
    number += 1
    lines += _section(number, "Distribution of p(yes)")
    rows = []
    for run in runs:
        for name, by_label in run.p_yes.items():
            for label, stored in (("yes", by_label.yes), ("no", by_label.no)):
                if not stored:
                    continue
                values = sorted(stored)
                above = sum(v > 0.5 for v in values) / len(values)
                cells = [_run_cell(run)] if multi else []
                cells += [_code(name), label, fmt_count(len(values)), fmt_score(values[len(values) // 2]), fmt_pct(above)]
                rows.append(cells)
    if rows:
        lines += _table((["run"] if multi else []) + ["readout", "label", "n", "median p(yes)", "p(yes) > 0.5 (%)"], rows)
    else:
        lines.append("No logit readout stored p(yes).")

    number += 1
    lines += _section(number, "Calibration")
    rows = []
    for run in runs:
        for name, cal in run.calibration.items():
            for b in cal.bins:
                if not b.count:
                    continue
                cells = [_run_cell(run)] if multi else []
                cells += [_code(name), f"{b.lo:.1f}–{b.hi:.1f}", fmt_count(b.count), fmt_score(b.mean_p), fmt_score(b.frac_yes)]
                rows.append(cells)
    if rows:
        eces = [
            f"{_code(name)} {fmt_score(cal.ece)}" + (f" ({run.label})" if multi else "")
            for run in runs
            for name, cal in run.calibration.items()
        ]
        lines.append("ECE: " + ", ".join(eces) + ".")
        lines.append("")
        lines += _table((["run"] if multi else []) + ["readout", "p(yes) bin", "n", "mean p(yes)", "fraction labelled yes"], rows)
    else:
        lines.append("No logit readout stored p(yes).")
    return number


def _profile_section(lines: list[str], view: ReportView, number: int) -> int:
    runs = view.runs
    multi = len(runs) > 1
    number += 1
    lines += _section(number, "Hallucination profile")
    for run in runs:
        if multi:
            lines += [f"### {_run_cell(run)}", ""]
        objects = run.profile_objects[:15]
        if objects:
            lines.append("Objects most often answered yes when absent:")
            lines.append("")
            lines += _table(["object", "yes / n", "rate"], [[o.object, f"{fmt_count(o.yes)} / {fmt_count(o.n)}", fmt_pct(o.rate)] for o in objects])
            lines.append("")
        pairs = run.profile_pairs[:12]
        if pairs:
            lines.append("Adversarial pairs (present object, absent object asked about):")
            lines.append("")
            lines += _table(
                ["present", "asked (absent)", "yes / n", "rate"],
                [[p.positive, p.negative, f"{fmt_count(p.yes)} / {fmt_count(p.n)}", fmt_pct(p.rate)] for p in pairs],
                align=["l", "l", "r", "r"],
            )
            lines.append("")
        if not objects and not pairs:
            lines += ["No label-no question was answered yes.", ""]
    return number


def _token_section(lines: list[str], view: ReportView, number: int) -> int:
    """The first token: a page of text-only runs leaves it out."""
    runs = view.runs
    multi = len(runs) > 1
    number += 1
    lines += _section(number, "Token diagnostic")
    for run in runs:
        if multi:
            lines += [f"### {_run_cell(run)}", ""]
        t = run.tokens
        offset = ", ".join(f"{_code(piece(p.piece))} {fmt_count(p.count)}" for p in t.offset_pieces[:6])
        lines.append(f"- First-token argmax outside both sets: **{fmt_pct(t.offset_rate)}%** of questions" + (f" ({offset})." if offset else "."))
        lines.append("")
        if t.greedy:
            lines.append("Logit readouts against the greedy first token, where its argmax is a yes or no piece:")
            lines.append("")
            lines += _table(
                ["readout", "in a set", "agree", "disagree", "outside"],
                [[_code(name), *(fmt_count(v) for v in (g.in_set, g.agree, g.disagree, g.offset))] for name, g in t.greedy.items()],
            )
            lines.append("")
        if t.text_dynamic:
            lines.append("Text rules against `dynamic` (both decided and differ, or one side unknown):")
            lines.append("")
            lines += _table(
                ["rule", "differ", "text unknown", "dynamic unknown", "both unknown"],
                [
                    [_code(f"text:{rule}"), *(fmt_count(v) for v in (d.differ, d.text_unknown, d.dynamic_unknown, d.both_unknown))]
                    for rule, d in t.text_dynamic.items()
                ],
            )
            lines.append("")
        if t.first_pieces:
            lines += _table(
                ["first-token argmax", "questions", "share (%)"],
                [[_code(piece(p.piece)), fmt_count(p.count), fmt_pct(p.share)] for p in t.first_pieces[:10]],
            )
            lines.append("")
        lines += _agreement(run, False)
    return number


def _agreement(run: RunView, label: bool) -> list[str]:
    """The agreement matrix between a run's readouts (``label``: headed by the run)."""
    names = [r.name for r in run.readouts]
    if len(names) < 2 or not run.agreement:
        return []
    head = f"Agreement between readouts{f' ({_run_cell(run)})' if label else ''} (% of questions with the same decision):"
    rows = [[_code(a)] + [fmt_pct(run.agreement.get(a, {}).get(b)) for b in names] for a in names]
    return [head, "", *_table([""] + [_code(n) for n in names], rows), ""]


def _tail_sections(lines: list[str], view: ReportView, number: int) -> None:
    """Labels and Corrections, where any run has them."""
    runs = view.runs
    multi = len(runs) > 1
    headline = view.headline
    if any(run.relabel for run in runs):
        number += 1
        lines += _section(number, "Labels")
        lines.append(f"The stored answers scored against other label files; headline `{headline}`, macro, shifts in percentage points.")
        lines.append("")
        rows = []
        for run in runs:
            for r in run.relabel:
                cells = [_run_cell(run)] if multi else []
                cells += [
                    _code(r.name),
                    *(fmt_count(v) for v in (r.matched, r.removed, r.flipped)),
                    f"{fmt_count(r.to_yes)} / {fmt_count(r.to_no)}",
                    fmt_count(r.added),
                    _with_ci(r.before, "f1"),
                    _with_ci(r.after, "f1"),
                    *(fmt_delta(r.shift.get(k)) for k in ("f1", "accuracy", "yes_ratio")),
                ]
                rows.append(cells)
        header = ["label file", "matched", "removed", "flipped", "to yes / to no", "added", "F1 before", "F1 after", "ΔF1", "Δacc", "Δyes"]
        lines += _table((["run"] if multi else []) + header, rows, align=(["l"] if multi else []) + ["l"] + ["r"] * (len(header) - 1))
    if any(run.corrections is not None for run in runs):
        number += 1
        lines += _section(number, "Corrections")
        lines.append(
            f"Corrections read from the stored signals against the greedy `{headline}` baseline, the readout confound, "
            "and each row's F1 under temperature-1 sampling (expected counts); macro, shifts in percentage points."
        )
        lines.append("")
        rows = []
        for run in runs:
            for c in run.corrections.rows if run.corrections is not None else []:
                name = _code(c.name) + ("" if c.kind == "correction" else f" ({c.kind})") + (" (inert)" if c.inert else "")
                ci = f"[{fmt_delta(c.delta_f1_ci[0])}, {fmt_delta(c.delta_f1_ci[1])}]" if c.delta_f1_ci else "–"
                p = "–" if c.mcnemar_p is None else f"{c.mcnemar_p:.3g}"
                rows.append(([_run_cell(run)] if multi else []) + [name, fmt_pct(c.f1), fmt_pct(c.yes_ratio), fmt_delta(c.delta_f1), ci, p,
                                                                    fmt_pct(c.f1_sampled), fmt_delta(c.delta_sampled)])  # fmt: skip
        header = ["method", "F1 (%)", "yes (%)", "ΔF1 (pp)", "95% CI (pp)", "McNemar p", "F1 sampled (%)", "Δ vs sampled (pp)"]
        lines += _table((["run"] if multi else []) + header, rows, align=(["l"] if multi else []) + ["l"] + ["r"] * (len(header) - 1))
