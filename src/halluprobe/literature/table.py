"""Run a literature audit over registry entries and write its table.

``OUT/literature.md``: one row per published figure (an entry with none: its recomputed
headline), rendered from :func:`literature_grid` under its provenance comment
(:class:`~halluprobe.provenance.LiteratureProvenance`: halluprobe version, registry digest,
resamples, seed), then each entry's notes: the POPE content its labels are, the parser
confound, and what the registry records of it. ``OUT/literature.json``: the same, as data;
``halluprobe check literature.md`` renders its entries again and compares every cell
(:mod:`halluprobe.check.literature`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from halluprobe import __version__
from halluprobe.benchmarks.created import CreatedOutputs
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.files import write_atomic
from halluprobe.formatting import markdown_table
from halluprobe.literature.audit import HEADLINE, STRICT_RULE, EntryAudit, audit_entry, check_audit_outputs, missing_capability
from halluprobe.literature.registry import Entry, Registry
from halluprobe.provenance import LiteratureProvenance, marked_comment
from halluprobe.tables import Cell, Grid

__all__ = [
    "LITERATURE_MD", "LITERATURE_JSON", "audit_literature", "literature_grid", "literature_markdown", "literature_provenance",
    "list_markdown", "registry_digest",
]  # fmt: skip

LITERATURE_MD = "literature.md"
LITERATURE_JSON = "literature.json"


def registry_digest(registry: Registry) -> str:
    return hashlib.sha256(registry.model_dump_json().encode()).hexdigest()


def audit_literature(
    registry: Registry,
    entries: Sequence[Entry],
    out: Path,
    *,
    cache_dir: Path | None = None,
    mirror: str | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    overwrite: bool = False,
    keep_going: bool = False,
) -> list[EntryAudit]:
    """Audit ``entries`` into ``out`` and write the table. With ``keep_going`` (``--all``) an
    entry that fails with bad input is listed with its one-line reason and the others go on.

    An entry that fails leaves nothing of its own under ``out``; a verb that fails (an entry
    without ``keep_going``, the table's write, Ctrl-C) leaves nothing it created at all. Every
    file it writes is checked first (nothing replaced without ``overwrite``), and a run in which
    no entry could be audited is a failure: no table is written (over earlier results or not)."""

    check_audit_outputs(entries, out, [out / LITERATURE_MD, out / LITERATURE_JSON], overwrite=overwrite)
    audits: list[EntryAudit] = []
    failures: list[Exception] = []
    verb = CreatedOutputs()  # ``out`` and the tables; then one record per entry
    records = [verb]
    try:
        try:
            verb.folder(out)
        except OSError as e:
            raise InputError(f"cannot create this folder: {e.strerror or e}", out) from e
        for entry in entries:
            record = CreatedOutputs()
            records.append(record)
            try:
                audits.append(
                    audit_entry(entry, out, cache_dir=cache_dir, mirror=mirror, n_resamples=n_resamples, seed=seed, overwrite=overwrite, created=record)
                )
            except (InputError, RuntimeFailure) as e:
                record.undo()  # the failed entry's copies and run go now; the others' stay
                if not keep_going:
                    raise
                failures.append(e)
                audits.append(
                    EntryAudit(name=entry.name, model=entry.model, decoding=entry.decoding, dataset=entry.dataset,
                               parser=f"text:{entry.parser.rule}", status=f"not audited: {e}", notes=list(entry.notes))
                )  # fmt: skip
        if not any(a.status == "audited" for a in audits):
            raise _nothing_audited(audits, failures, out)
        provenance = literature_provenance(registry, n_resamples, seed)
        verb.new_files([out / LITERATURE_MD, out / LITERATURE_JSON])
        write_atomic(out / LITERATURE_MD, literature_markdown(audits, provenance))
        data = {"provenance": provenance.model_dump(mode="json", exclude={"table"}), "entries": [a.as_json() for a in audits]}
        write_atomic(out / LITERATURE_JSON, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    except BaseException:
        for made in reversed(records):  # the entries' first, then ``out`` itself if empty again
            made.undo()
        raise
    return audits


def _nothing_audited(audits: Sequence[EntryAudit], failures: Sequence[Exception], out: Path) -> Exception:
    """Every entry failed: exit 1 when each failure was the network's, else 2; the table is not written."""
    first = next((a for a in audits), None)
    reason = f"; {first.name}: {first.status.removeprefix('not audited: ')}" if first is not None else ""
    text = f"no entry could be audited ({len(audits)} tried){reason}; {out / LITERATURE_MD} was not written"
    if failures and all(isinstance(f, RuntimeFailure) for f in failures):
        return RuntimeFailure(text)
    return InputError(text)


def literature_provenance(registry: Registry, n_resamples: int, seed: int) -> LiteratureProvenance:

    return LiteratureProvenance(table="literature", halluprobe=__version__, registry_sha256=registry_digest(registry), resamples=n_resamples, seed=seed)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (a published row may quote a '|')."""
    return text.replace("|", "\\|")


def _num(value: float | None, decimals: int) -> str:
    return "-" if value is None else f"{value:.{decimals}f}"


def _verdict(equal: bool | None, difference: float | None, decimals: int) -> str:
    if equal is None:
        return "-"
    if equal:
        return "equal"
    return f"differs by {difference:+.{decimals}f}" if difference is not None else "differs"


def _headline(values: dict[str, float | None]) -> str:
    return ", ".join(f"{k} {_num(None if v is None else 100 * v, 2)}" for k, v in values.items())


LITERATURE_HEADER = ("entry", "figure", "published", "authors' rule", "reproduced", f"text:{STRICT_RULE}", "95% CI (images)")


def literature_grid(audits: Sequence[EntryAudit]) -> Grid:
    """literature.md's table: a row per published figure (an entry with none: its recomputed
    headline; one not audited: why), cells as written (check compares them as text)."""
    rows: list[tuple[str, ...]] = []
    for a in audits:
        if not a.status.startswith("audited"):
            rows.append((a.name, "-", "-", a.status, "-", "-", "-"))
            continue
        for f in a.figures:
            ci = "-" if f.ci is None else f"[{_num(f.ci[0], f.decimals + 1)}, {_num(f.ci[1], f.decimals + 1)}]"
            rows.append((a.name, f"{f.metric}: {f.where}", _num(f.published, f.decimals), _num(f.authors, f.decimals + 1),
                         _verdict(f.equal, f.difference, f.decimals + 1), _num(f.strict, f.decimals + 1), ci))  # fmt: skip
        if not a.figures:
            shown, strict = _headline(a.recomputed), _headline(a.recomputed_strict) or "-"
            ci = "-" if a.recomputed_ci is None else f"{HEADLINE[0]} [{100 * a.recomputed_ci[0]:.2f}, {100 * a.recomputed_ci[1]:.2f}]"
            rows.append((a.name, "none published", "-", shown, "-", strict, ci))
    return Grid(LITERATURE_HEADER, tuple(tuple(Cell(text) for text in row) for row in rows))


def literature_markdown(audits: Sequence[EntryAudit], provenance: LiteratureProvenance) -> str:
    """The audit's Markdown: a provenance comment, the table, then each entry's confounds and notes."""
    grid = literature_grid(audits)
    lines = [marked_comment(provenance, "markdown"), "", *markdown_table(grid.header, [[c.text for c in row] for row in grid.rows])]
    lines.append("")
    for a in audits:
        lines.append(f"- **{a.name}** ({a.model}; {a.decoding}; {a.dataset}; parser {a.parser}): {a.status}")
        if a.questions_are:
            shown = "; ".join(f"{split}: {', '.join(names) if names else 'no pinned file'}" for split, names in a.questions_are.items())
            lines.append(f"  - which pinned questions these are (by content fingerprint, or by key where the answers carry their labels): {shown}")
        missed = [f for f in a.figures if f.equal is False]
        if missed:  # said in words, by source: a published figure the released file does not give
            by_source: dict[str, list[str]] = {}
            for f in missed:
                by_source.setdefault(f.source, []).append(
                    f"{f.metric} {_num(f.published, f.decimals)} (recomputed {_num(f.authors, f.decimals + 1)})"
                )
            shown = "; ".join(f"{where}: {', '.join(items)}" for where, items in by_source.items())
            lines.append(f"  - NOT reproduced by the released answers: {shown}")
        if a.rule_changes is not None:
            lines.append(f"  - parser confound: {a.parser} and text:{STRICT_RULE} classify {a.rule_changes} of {a.answers} answers differently")
        lines.extend(f"  - {note}" for note in a.notes)
    return "\n".join(lines) + "\n"


def list_markdown(registry: Registry) -> str:
    """``literature list``: one row per entry, and whether this build can audit it."""

    lines = ["| entry | model | decoding | dataset | format | parser | published | source | in this build |", "|---|---|---|---|---|---|---|---|---|"]
    for e in registry.entries:
        dataset = f"{e.dataset}@{e.version}" if e.version else f"{e.dataset} (own draw)"
        published = ", ".join(f"{f.metric} {f.value:g}" for f in e.published) or "none"
        missing = missing_capability(e)
        lines.append(
            f"| {e.name} | {_cell(e.model)} | {_cell(e.decoding)} | {dataset} | {e.format} | text:{e.parser.rule} | {published} | {e.repository}@{e.commit} | "
            f"{'auditable' if missing is None else _cell(missing)} |"
        )
    return "\n".join(lines) + "\n"
