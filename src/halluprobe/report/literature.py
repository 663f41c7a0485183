"""The report's "Published figures" section: a run imported from an answers file the literature
registry pins is scored as the authors scored it, beside the figures they published.

A run matches an entry when the sha256s of the answers files it was imported from (run.json
``backend_info.sources``) are exactly the entry's pinned answers files: the same bytes the
published figures were computed from. The section then says which parse rule each figure
needs (the authors', with their count of an unreadable answer), the value this run gives under
it and under ``text:strict``, equal at the published precision or by how much it differs, and
the image-clustered CI. A run that matches no entry adds nothing: the report is unchanged.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from halluprobe.errors import InputError
from halluprobe.literature.audit import HEADLINE, STRICT_RULE, EntryAudit, missing_capability, new_entry_audit, recompute_entry
from halluprobe.literature.registry import Entry, Registry, load_registry
from halluprobe.report.view import add_section
from halluprobe.rundir import RunDir

__all__ = ["SECTION_ID", "LiteratureMatch", "add_literature_section", "literature_html", "literature_markdown", "literature_matches"]

SECTION_ID = "literature"
_TITLE = "Published figures"


@dataclass(frozen=True)
class LiteratureMatch:
    """One run dir that is a registered answers file, and its recomputation."""

    run: Path
    entry: Entry
    audit: EntryAudit


def _entry_of(rundir: Path, registry: Registry) -> tuple[Entry, bool] | None:
    """The entry whose answers files the run was imported from (its question file, where it has
    one, may be among the sources too), and whether the run's labels are the entry's."""

    try:
        header = RunDir(rundir).read_header()
    except InputError:
        return None  # an audit.json rendered without its run dir: nothing to match
    sources = header.backend_info.get("sources") or {}
    digests = set(sources.values()) if isinstance(sources, dict) else set()
    if not digests:
        return None  # not an import
    for e in registry.entries:
        answers = {f.sha256 for f in e.answers}
        if answers <= digests <= answers | ({e.questions.sha256} if e.questions else set()):
            labels = {f.sha256 for f in e.labels}
            return e, not labels or set((header.benchmarks or {}).values()) == labels
    return None


def literature_matches(rundirs: Sequence[Path | None], *, registry: Registry | None = None, n_resamples: int = 1000, seed: int = 0) -> list[LiteratureMatch]:
    """Every run dir that is a registered answers file, recomputed with the authors' rule (an
    entry whose rule this build lacks is listed with that reason)."""

    loaded = registry if registry is not None else load_registry()
    matches = []
    for path in rundirs:
        found = None if path is None else _entry_of(path, loaded)
        if path is None or found is None:
            continue
        entry, same_labels = found
        audit = new_entry_audit(entry)
        if not same_labels:
            audit.notes.insert(0, "this run was imported with other labels files than the entry's: the figures are recomputed on this run's labels")
        missing = missing_capability(entry)
        if missing is None:
            recompute_entry(entry, path, audit, n_resamples=n_resamples, seed=seed)
        else:
            audit.status = f"not recomputed: {missing}"
        matches.append(LiteratureMatch(path, entry, audit))
    return matches


def _num(value: float | None, decimals: int) -> str:
    return "–" if value is None else f"{value:.{decimals}f}"


def _rows(match: LiteratureMatch) -> list[list[str]]:
    """figure, where, published, this run (authors' rule), reproduced, strict, CI."""
    a = match.audit
    rows = []
    for f in a.figures:
        verdict = "–" if f.equal is None else "equal" if f.equal else f"differs by {f.difference:+.{f.decimals + 1}f}"
        ci = "–" if f.ci is None else f"[{_num(f.ci[0], f.decimals + 1)}, {_num(f.ci[1], f.decimals + 1)}]"
        rows.append([f.metric, f.where, _num(f.published, f.decimals), _num(f.authors, f.decimals + 1), verdict, _num(f.strict, f.decimals + 1), ci])
    if not a.figures and a.recomputed:
        for metric in HEADLINE:
            ci = a.recomputed_ci if metric == HEADLINE[0] else None
            shown = "–" if ci is None else f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"
            value, strict = a.recomputed.get(metric), a.recomputed_strict.get(metric)
            rows.append([metric, "none published", "–", _num(None if value is None else 100 * value, 2), "–",
                         _num(None if strict is None else 100 * strict, 2), shown])  # fmt: skip
    return rows


_HEADER = ["figure", "stated in", "published", "this run, authors' rule", "reproduced", f"text:{STRICT_RULE}", "95% CI (images)"]


def _lede(match: LiteratureMatch) -> str:
    e, a = match.entry, match.audit
    return (
        f"{match.run} is the released answers file of `{e.name}` ({e.model}; {e.decoding}; {e.repository} @ {e.commit[:12]}). "
        f"Its published figures need the authors' parser `text:{e.parser.rule}` with unreadable answers counted "
        f"`{e.parser.unknown}` ({e.parser.source})."
        + (f" {a.status}." if not a.status.startswith("audited") else "")
        + (f" The two rules classify {a.rule_changes} of {a.answers} answers differently." if a.rule_changes is not None else "")
    )


def literature_markdown(matches: Sequence[LiteratureMatch]) -> str:
    """The section as Markdown (empty without a match)."""
    if not matches:
        return ""
    lines = [f"## {_TITLE}", "", "Runs imported from answers files the literature registry pins (`halluprobe literature list`).", ""]
    for m in matches:
        lines += [_lede(m), ""]
        rows = _rows(m)
        if rows:
            lines.append("| " + " | ".join(_HEADER) + " |")
            lines.append("|" + "---|" * len(_HEADER))
            lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
            lines.append("")
        lines += [f"- {note}" for note in m.audit.notes] + ([""] if m.audit.notes else [])
    return "\n".join(lines).rstrip() + "\n"


def literature_html(matches: Sequence[LiteratureMatch]) -> str:
    """The section as HTML, in the page's own table style (empty without a match)."""
    if not matches:
        return ""
    esc = html.escape
    out = [f'<section id="{SECTION_ID}">', f"<h2>{_TITLE}</h2>",
           '<p class="lede">Runs imported from answers files the literature registry pins (<code>halluprobe literature list</code>).</p>']  # fmt: skip
    for m in matches:
        out.append(f"<p>{esc(_lede(m))}</p>")
        rows = _rows(m)
        if rows:
            out.append('<table class="data">')
            out.append("<thead><tr>" + "".join(f'<th class="{"l" if i < 2 else "num"}">{esc(h)}</th>' for i, h in enumerate(_HEADER)) + "</tr></thead>")
            out.append("<tbody>")
            for row in rows:
                out.append("<tr>" + "".join(f'<td class="{"l" if i < 2 else "num"}">{esc(c)}</td>' for i, c in enumerate(row)) + "</tr>")
            out.append("</tbody></table>")
        if m.audit.notes:
            out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in m.audit.notes) + "</ul>")
    out.append("</section>")
    return "\n".join(out) + "\n"


def add_literature_section(page: str, markdown: str, matches: Sequence[LiteratureMatch]) -> tuple[str, str]:
    """The rendered page and its Markdown twin with the section added: in the page before its
    footer (and in its table of contents), at the end of the Markdown. No match: both unchanged."""
    if not matches:
        return page, markdown
    return add_section(page, markdown, (literature_markdown(matches), literature_html(matches)), (SECTION_ID, _TITLE))
