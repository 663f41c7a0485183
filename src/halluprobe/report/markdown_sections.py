"""The Markdown twin's parts: cell and table helpers, an imported run's Run table, and the
sections after the headline tables (p(yes), calibration, profile, token diagnostic, labels,
corrections). ``report.markdown`` puts them together in page order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from halluprobe.formatting import fmt_ci, fmt_count, fmt_delta, fmt_p, fmt_pct, fmt_score, markdown_table
from halluprobe.records_audit import PairedTest
from halluprobe.records_scores import Metrics
from halluprobe.report.parsers import parsers_lines
from halluprobe.report.view import ReportView, RunView, piece
from halluprobe.tables import percent_cell

__all__ = [
    "agreement_lines",
    "code_span",
    "imported_rows",
    "logit_sections",
    "md_table",
    "paired_cells",
    "profile_section",
    "run_cell",
    "section_head",
    "tail_sections",
    "token_section",
    "with_ci",
]


def code_span(text: Any) -> str:
    """A code span (a table escapes its pipes, :func:`~halluprobe.formatting.markdown_cell`)."""
    body = str(text)
    fence = "``" if "`" in body else "`"
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None) -> list[str]:
    return markdown_table(header, rows, align or ["l"] + ["r"] * (len(header) - 1))


def with_ci(m: Metrics | None, name: str) -> str:

    return fmt_pct(None) if m is None else percent_cell(m, name).text


def paired_cells(paired: PairedTest | None, absent: str) -> list[str]:
    """ΔF1 with its CI, b / c, McNemar p; ``absent`` in the first cell when there is no test."""
    if paired is None:
        return [absent, "–", "–"]
    return [
        (fmt_delta(paired.delta_f1) + " " + fmt_ci(paired.delta_f1_ci, signed=True)).strip(),
        f"{fmt_count(paired.b)} / {fmt_count(paired.c)}",
        fmt_p(paired.mcnemar_p),
    ]


def run_cell(run: RunView) -> str:
    return f"{run.index + 1}. {run.label}"


def imported_rows(run: RunView, scored_by: str | None) -> list[list[str]]:
    """The Run table of an imported run: what it was made from, not what it lacks."""
    imp = run.imported
    assert imp is not None
    tool = f"; written by {imp.tool} " + (imp.tool_version or "(version not recorded)") if imp.tool else ""
    versions = ", ".join(f"{split} {', '.join(v) or 'no published version'}" for split, v in imp.pope_versions.items())
    kept = f"; the tool's own decisions kept as {', '.join(code_span(n) for n in imp.tool_readouts)}" if imp.tool_readouts else ""
    labels = ", ".join(f"{split} {code_span(path.rsplit('/', 1)[-1])}" for split, path in imp.labels.items())
    fits = "; the question file fits: " + ", ".join(
        f"{split} {', '.join(v) or 'no published version in full'}" for split, v in imp.question_versions.items()
    ) if imp.question_versions else ""
    return [
        ["Model", f"{code_span(run.model)} (as the answers file names it; no model was run here)"],
        ["Imported from", ", ".join(f"{code_span(f.name)} (sha256 {code_span(f.sha256[:12])})" for f in imp.files) + f"; format {imp.format}{tool}"],
        ["POPE version", (versions or "labels match no published version") + fits],
        ["Answers", "text only: each text rule is applied to the stored answers when scored" + kept],
        ["Prompt", (code_span(piece(run.prompt)) if run.prompt else "–") + " (as the answers file records it)"],
        ["Questions", f"{fmt_count(run.n)}, {fmt_count(run.errors)} errors" + (f"; labels {labels}" if labels else "")],
        ["Scored by", " · ".join([f"halluprobe {scored_by or '–'}", *(f"{k} {v}" for k, v in run.packages.items())])],
        ["Imported", f"{run.created_at or '–'}, {code_span(run.path)}"],
    ]


def section_head(number: int, title: str) -> list[str]:
    return ["", f"## {number}. {title}", ""]


def logit_sections(lines: list[str], view: ReportView, number: int) -> int:
    """p(yes) and calibration: a page of text-only runs leaves them out."""
    runs = view.runs
    multi = len(runs) > 1
    number += 1
    lines += section_head(number, "Distribution of p(yes)")
    rows = []
    for run in runs:
        for name, by_label in run.p_yes.items():
            for label, stored in (("yes", by_label.yes), ("no", by_label.no)):
                if not stored:
                    continue
                values = sorted(stored)
                above = sum(v > 0.5 for v in values) / len(values)
                cells = [run_cell(run)] if multi else []
                cells += [code_span(name), label, fmt_count(len(values)), fmt_score(values[len(values) // 2]), fmt_pct(above)]
                rows.append(cells)
    if rows:
        lines += md_table((["run"] if multi else []) + ["readout", "label", "n", "median p(yes)", "p(yes) > 0.5 (%)"], rows)
    else:
        lines.append("No logit readout stored p(yes).")

    number += 1
    lines += section_head(number, "Calibration")
    rows = []
    for run in runs:
        for name, cal in run.calibration.items():
            for b in cal.bins:
                if not b.count:
                    continue
                cells = [run_cell(run)] if multi else []
                cells += [code_span(name), f"{b.lo:.1f}–{b.hi:.1f}", fmt_count(b.count), fmt_score(b.mean_p), fmt_score(b.frac_yes)]
                rows.append(cells)
    if rows:
        eces = [
            f"{code_span(name)} {fmt_score(cal.ece)}" + (f" ({run.label})" if multi else "")
            for run in runs
            for name, cal in run.calibration.items()
        ]
        lines.append("ECE: " + ", ".join(eces) + ".")
        lines.append("")
        lines += md_table((["run"] if multi else []) + ["readout", "p(yes) bin", "n", "mean p(yes)", "fraction labelled yes"], rows)
    else:
        lines.append("No logit readout stored p(yes).")
    return number


def profile_section(lines: list[str], view: ReportView, number: int) -> int:
    runs = view.runs
    multi = len(runs) > 1
    number += 1
    lines += section_head(number, "Hallucination profile")
    for run in runs:
        if multi:
            lines += [f"### {run_cell(run)}", ""]
        objects = run.profile_objects[:15]
        if objects:
            lines.append("Objects most often answered yes when absent:")
            lines.append("")
            lines += md_table(["object", "yes / n", "rate"], [[o.object, f"{fmt_count(o.yes)} / {fmt_count(o.n)}", fmt_pct(o.rate)] for o in objects])
            lines.append("")
        pairs = run.profile_pairs[:12]
        if pairs:
            lines.append("Adversarial pairs (present object, absent object asked about):")
            lines.append("")
            lines += md_table(
                ["present", "asked (absent)", "yes / n", "rate"],
                [[p.positive, p.negative, f"{fmt_count(p.yes)} / {fmt_count(p.n)}", fmt_pct(p.rate)] for p in pairs],
                align=["l", "l", "r", "r"],
            )
            lines.append("")
        if not objects and not pairs:
            lines += ["No label-no question was answered yes.", ""]
    return number


def token_section(lines: list[str], view: ReportView, number: int) -> int:
    """The first token: a page of text-only runs leaves it out."""
    runs = view.runs
    multi = len(runs) > 1
    number += 1
    lines += section_head(number, "Token diagnostic")
    for run in runs:
        if multi:
            lines += [f"### {run_cell(run)}", ""]
        t = run.tokens
        offset = ", ".join(f"{code_span(piece(p.piece))} {fmt_count(p.count)}" for p in t.offset_pieces[:6])
        lines.append(f"- First-token argmax outside both sets: **{fmt_pct(t.offset_rate)}%** of questions" + (f" ({offset})." if offset else "."))
        lines.append("")
        if t.greedy:
            lines.append("Logit readouts against the greedy first token, where its argmax is a yes or no piece:")
            lines.append("")
            lines += md_table(
                ["readout", "in a set", "agree", "disagree", "outside"],
                [[code_span(name), *(fmt_count(v) for v in (g.in_set, g.agree, g.disagree, g.offset))] for name, g in t.greedy.items()],
            )
            lines.append("")
        if t.text_dynamic:
            lines.append("Text rules against `dynamic` (both decided and differ, or one side unknown):")
            lines.append("")
            lines += md_table(
                ["rule", "differ", "text unknown", "dynamic unknown", "both unknown"],
                [
                    [code_span(f"text:{rule}"), *(fmt_count(v) for v in (d.differ, d.text_unknown, d.dynamic_unknown, d.both_unknown))]
                    for rule, d in t.text_dynamic.items()
                ],
            )
            lines.append("")
        if t.first_pieces:
            lines += md_table(
                ["first-token argmax", "questions", "share (%)"],
                [[code_span(piece(p.piece)), fmt_count(p.count), fmt_pct(p.share)] for p in t.first_pieces[:10]],
            )
            lines.append("")
        lines += agreement_lines(run, False)
    return number


def agreement_lines(run: RunView, label: bool) -> list[str]:
    """The agreement matrix between a run's readouts (``label``: headed by the run)."""
    names = [r.name for r in run.readouts]
    if len(names) < 2 or not run.agreement:
        return []
    head = f"Agreement between readouts{f' ({run_cell(run)})' if label else ''} (% of questions with the same decision):"
    rows = [[code_span(a)] + [fmt_pct(run.agreement.get(a, {}).get(b)) for b in names] for a in names]
    return [head, "", *md_table([""] + [code_span(n) for n in names], rows), ""]


def tail_sections(lines: list[str], view: ReportView, number: int) -> None:
    """Labels and Corrections, where any run has them."""
    runs = view.runs
    multi = len(runs) > 1
    headline = view.headline
    if any(run.relabel for run in runs):
        number += 1
        lines += section_head(number, "Labels")
        lines.append(f"The stored answers scored against other label files; headline `{headline}`, macro, shifts in percentage points.")
        lines.append("")
        rows = []
        for run in runs:
            for r in run.relabel:
                cells = [run_cell(run)] if multi else []
                cells += [
                    code_span(r.name),
                    *(fmt_count(v) for v in (r.matched, r.removed, r.flipped)),
                    f"{fmt_count(r.to_yes)} / {fmt_count(r.to_no)}",
                    fmt_count(r.added),
                    with_ci(r.before, "f1"),
                    with_ci(r.after, "f1"),
                    *(fmt_delta(r.shift.get(k)) for k in ("f1", "accuracy", "yes_ratio")),
                ]
                rows.append(cells)
        header = ["label file", "matched", "removed", "flipped", "to yes / to no", "added", "F1 before", "F1 after", "ΔF1", "Δacc", "Δyes"]
        lines += md_table((["run"] if multi else []) + header, rows, align=(["l"] if multi else []) + ["l"] + ["r"] * (len(header) - 1))
    if any(run.corrections is not None for run in runs):
        number += 1
        lines += section_head(number, "Corrections")
        lines.append(
            f"Corrections read from the stored signals against the greedy `{headline}` baseline, the readout confound, "
            "and each row's F1 under temperature-1 sampling (expected counts); macro, shifts in percentage points."
        )
        lines.append("")
        rows = []
        for run in runs:
            for c in run.corrections.rows if run.corrections is not None else []:
                name = code_span(c.name) + ("" if c.kind == "correction" else f" ({c.kind})") + (" (inert)" if c.inert else "")
                name += f" ({fmt_count(c.unknown)} answers unknown)" if c.unknown else ""
                ci = f"[{fmt_delta(c.delta_f1_ci[0])}, {fmt_delta(c.delta_f1_ci[1])}]" if c.delta_f1_ci else "–"
                p = "–" if c.mcnemar_p is None else f"{c.mcnemar_p:.3g}"
                rows.append(([run_cell(run)] if multi else []) + [name, fmt_pct(c.f1), fmt_pct(c.yes_ratio), fmt_delta(c.delta_f1), ci, p,
                                                                    fmt_pct(c.f1_sampled), fmt_delta(c.delta_sampled)])  # fmt: skip
        header = ["method", "F1 (%)", "yes (%)", "ΔF1 (pp)", "95% CI (pp)", "McNemar p", "F1 sampled (%)", "Δ vs sampled (pp)"]
        lines += md_table((["run"] if multi else []) + header, rows, align=(["l"] if multi else []) + ["l"] + ["r"] * (len(header) - 1))
    if any(run.parsers is not None for run in runs):

        number += 1
        lines += section_head(number, "Parsers")
        lines += ["Every text rule applied to the same stored answers: the class counts per rule, and which rule a published number needs.", ""]
        lines += parsers_lines([(run_cell(run) if multi else "", run.parsers) for run in runs if run.parsers is not None], headline)
