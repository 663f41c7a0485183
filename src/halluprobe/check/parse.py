"""Tables as written under a provenance comment: found in ``.tex`` / ``.md`` text and split
into rows of cell texts with their lines (LaTeX tabular, Markdown pipe table, or the terminal
table pasted in a code block). The comment's numbers that bound work (bootstrap resamples,
seed) are validated here, before anything is recomputed: a file someone else wrote decides
how much ``check`` computes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from halluprobe.errors import InputError
from halluprobe.provenance import PROVENANCE_MARK, AnyProvenance, Provenance, comment_payload, read_marked, read_payload
from halluprobe.tables import Style

__all__ = [
    "MAX_RESAMPLES",
    "MAX_SEED",
    "FoundTable",
    "MarkedTable",
    "check_bounds",
    "extract_tables",
    "latex_table_under",
    "marked_comments",
    "marked_tables",
    "markdown_table_under",
]

# bootstrap work a comment may ask for: 0 (no CIs, `score --resamples 0`) up to 100 000
# resamples; a seed numpy's generators take the same way on every platform (below 2**32)
MAX_RESAMPLES = 100_000
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class FoundTable:
    """A table as written under its provenance comment: rows of cell texts with their lines
    (a terminal row is its label and the rest of the line, split by the source's shape)."""

    path: str
    line: int
    provenance: Provenance
    style: Style
    header: tuple[int, list[str]]
    rows: list[tuple[int, list[str]]]


def check_bounds(provenance: object, path: str | Path, line: int, label: str = "") -> None:
    """Refuse a comment whose resamples or seed are out of bounds (bad input, file:line):
    ``provenance`` is any record with a ``bootstrap`` (None: a CHAIR table written before it
    was recorded, refused too). ``label`` names the comment (``CHAIR``, ``decoding``)."""
    boot = getattr(provenance, "bootstrap", None)
    if boot is None:
        raise InputError(f"{label} provenance comment: no 'bootstrap' {{resamples, seed}} (written before halluprobe recorded it?)", path, line)
    for key, value, top in (("resamples", boot.n_resamples, MAX_RESAMPLES), ("seed", boot.seed, MAX_SEED)):
        finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if not finite or not 0 <= value <= top:
            what = f"{label} provenance comment: bootstrap {key}" if label else f"provenance comment: {key}"
            raise InputError(f"{what} {value!r} is out of bounds (expected an integer from 0 to {top})", path, line)


_LATEX_RULE = re.compile(r"^\\(toprule|midrule|bottomrule|hline|cmidrule|cline|addlinespace)\b")
_UNESCAPED_PERCENT = re.compile(r"(?<!\\)%.*$")
_UNESCAPED_AMP = re.compile(r"(?<!\\)&")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")  # a cell's own pipe is written \| (formatting.markdown_cell)
_BOX = str.maketrans({ch: " " for ch in "│┃┏┓┗┛┡┩┳┻╇╋━─└┘┴┬┼├┤╭╮╰╯║═╔╗╚╝╠╣╦╩╬|"})
_LOOKAHEAD = 8  # lines between a comment and its table (a title, a caption, blank lines)


def extract_tables(path: str | Path, text: str) -> list[FoundTable]:
    """Every table under a provenance comment in ``text``; a comment with no table under it,
    or a malformed one, is bad input."""
    lines = text.split("\n")
    tables = []
    for index, line in enumerate(lines):
        parsed = read_marked(line, path, index + 1, (PROVENANCE_MARK,))
        if parsed is None:
            continue
        provenance, syntax = parsed
        assert isinstance(provenance, Provenance)  # the score tables' mark holds their kinds only
        check_bounds(provenance, path, index + 1)
        reader = _latex_table if syntax == "latex" else _markdown_table
        style, header, rows = reader(lines, index, str(path))
        tables.append(FoundTable(str(path), index + 1, provenance, style, header, rows))
    return tables


def _table_start(lines: list[str], index: int, path: str, starts: tuple[str, ...]) -> tuple[int, str]:
    """The line under the comment at ``index`` where a table begins, and which start it has."""
    seen = 0
    for j in range(index + 1, len(lines)):
        stripped = lines[j].strip()
        if "halluprobe-provenance" in stripped:
            break
        for start in starts:
            if stripped.startswith(start):
                return j, start
        seen += bool(stripped)
        if seen > _LOOKAHEAD:
            break
    raise InputError(f"no table under the provenance comment (expected a line starting with {' or '.join(starts)})", path, index + 1)


def _latex_table(lines: list[str], index: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    begin, _ = _table_start(lines, index, path, (r"\begin{tabular}",))
    rows: list[tuple[int, list[str]]] = []
    pending, first = "", 0
    for j in range(begin + 1, len(lines)):
        content = _UNESCAPED_PERCENT.sub("", lines[j]).strip()
        if content.startswith(r"\end{tabular}"):
            break
        if not content or _LATEX_RULE.match(content):
            continue
        first = first or j + 1
        pending = f"{pending} {content}".strip()
        if r"\\" in pending:
            row = pending.split(r"\\", 1)[0]
            rows.append((first, [c.strip() for c in _UNESCAPED_AMP.split(row)]))
            pending, first = "", 0
    else:
        raise InputError(r"the tabular under the provenance comment has no \end{tabular}", path, begin + 1)
    if not rows:
        raise InputError("the tabular under the provenance comment has no rows", path, begin + 1)
    return "latex", rows[0], rows[1:]


def latex_table_under(lines: list[str], index: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    """The LaTeX tabular under the comment at ``lines[index]``: (style, header, rows)."""
    return _latex_table(lines, index, path)


def markdown_table_under(lines: list[str], index: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    """The Markdown pipe table (or pasted terminal table) under the comment at ``lines[index]``."""
    return _markdown_table(lines, index, path)


def _markdown_table(lines: list[str], index: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    start, kind = _table_start(lines, index, path, ("|", "```"))
    if kind == "```":
        return _terminal_table(lines, start, path)
    rows = []
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if not stripped.startswith("|"):
            break
        inner = stripped[1:-1] if stripped.endswith("|") and not stripped.endswith("\\|") else stripped[1:]
        cells = [c.strip().replace("\\|", "|") for c in _UNESCAPED_PIPE.split(inner)]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue  # the separator under the header
        rows.append((j + 1, cells))
    if not rows:
        raise InputError("the pipe table under the provenance comment has no rows", path, start + 1)
    return "markdown", rows[0], rows[1:]


def _terminal_table(lines: list[str], fence: int, path: str) -> tuple[Style, tuple[int, list[str]], list[tuple[int, list[str]]]]:
    """The rich table ``score`` and ``demo`` print, pasted in a code block (box lines or not):
    the header is the line that starts with ``split``; rows follow while a line reads
    ``LABEL NUMBER ...``."""
    header: tuple[int, list[str]] | None = None
    rows: list[tuple[int, list[str]]] = []
    for j in range(fence + 1, len(lines)):
        if lines[j].strip().startswith("```"):
            break
        tokens = lines[j].translate(_BOX).split()
        if header is None:
            if tokens[:1] == ["split"]:
                header = (j + 1, tokens)
            continue
        if not tokens:
            continue  # a rule line of the box
        if len(tokens) < 2 or tokens[1][0] not in "0123456789-−":
            break
        rows.append((j + 1, [tokens[0], " ".join(tokens[1:])]))
    if header is None:
        raise InputError("no table header (a line starting with 'split') in the code block under the provenance comment", path, fence + 1)
    return "terminal", header, rows


def marked_comments(text: str, mark: str) -> Iterator[tuple[int, str, Style, list[str]]]:
    """(0-based line index, payload, style, the text's lines) of every comment carrying ``mark``
    (:func:`halluprobe.provenance.comment_payload`); the mark in prose is not a comment. The
    CHAIR and decoding tables' checks read their comments here."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        found = comment_payload(line, mark) if mark in line else None
        if found is not None:
            yield index, found[1], found[0], lines


@dataclass(frozen=True)
class MarkedTable:
    """A table under a comment of one mark (the judged benchmarks' tables: MMHal-Bench,
    HallusionBench), its record read and its bootstrap bounded."""

    path: str
    line: int
    provenance: AnyProvenance
    style: Style
    header: tuple[int, list[str]]
    rows: list[tuple[int, list[str]]]


def marked_tables(path: str | Path, text: str, mark: str, label: str) -> list[MarkedTable]:
    """Every table under a ``mark`` comment in ``text`` (LaTeX or Markdown); a malformed comment,
    or one whose bootstrap is out of bounds, is bad input (file:line, the comment named by
    ``label``)."""
    found = []
    for index, payload, style, lines in marked_comments(text, mark):
        provenance = read_payload(mark, payload, str(path), index + 1)
        check_bounds(provenance, str(path), index + 1, label)
        reader = markdown_table_under if style == "markdown" else latex_table_under
        style, header, rows = reader(lines, index, str(path))
        found.append(MarkedTable(str(path), index + 1, provenance, style, header, rows))
    return found
