"""The decoding section of a report: when a report's caption runs are a decoding comparison (one
plain greedy run, one or more runs of a decoding method, at most one plain sampled run, all on
the same questions), the table of ``halluprobe decoding`` on them, counted as the report's
:class:`ChairCounting` says (by default: the lemmatizer family, punkt's words, the shipped ground
truth; the report's bootstrap): Markdown under its provenance comment (which ``halluprobe check``
verifies) and the same tables as HTML. The CHAIR page shows it after its CHAIR sections, the
yes/no page after its own sections (the demo's report: its POPE run and its caption runs).

Runs that are not such a comparison (two greedy runs, runs on other questions or of other
models) get no section on the CHAIR page: the page is then the CHAIR page as before. Each run's
``run.json`` and ``samples.jsonl`` are read once for the roles, the checks and the table.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluprobe.captions.chair.families import FAMILIES, counting_options, family_named
from halluprobe.captions.chair.groundtruth import load_ground_truth, shipped_ground_truth
from halluprobe.captions.comparison.render import (
    decoding_markdown,
    decoding_provenance,
)
from halluprobe.captions.comparison.runs import (
    decoding_identity,
    load_comparison,
    load_run,
)
from halluprobe.captions.comparison.table import decoding_table
from halluprobe.errors import InputError

if TYPE_CHECKING:
    from halluprobe.captions.comparison.runs import ComparisonRuns

__all__ = ["ChairCounting", "chair_counting", "decoding_comparison", "decoding_section", "markdown_tables_as_html"]

_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a cell's own pipe is written \| (formatting.markdown_cell)


@dataclass(frozen=True)
class ChairCounting:
    """How a report counts CHAIR (``halluprobe report --family --tokenizer --ground-truth``).

    ``family``: ``both`` (the CHAIR sections show both families; the decoding table, which names
    one, the lemmatizer's), ``lemmatizer`` or ``singularize`` (that family everywhere);
    ``tokenizer``: a name in ``families.TOKENIZERS``; ``ground_truth``: object lines or a saved
    ground truth (``chair --ground-truth``'s file), None for the sets shipped for the standard lists."""

    family: str = "both"
    tokenizer: str = "punkt"
    ground_truth: Path | None = None

    @property
    def section_families(self) -> tuple[str, ...]:
        """The families of the CHAIR sections (full names)."""

        return FAMILIES if self.family == "both" else (f"chair@{self.family}",)

    @property
    def decoding_family(self) -> str:
        """The one family of the decoding table."""
        return "lemmatizer" if self.family == "both" else self.family

    @property
    def options(self) -> str:
        """The ``halluprobe report`` options that count as this does ("" for the defaults), each followed by a space."""
        given = [("--family", self.family, "both"), ("--tokenizer", self.tokenizer, "punkt"),
                 ("--ground-truth", None if self.ground_truth is None else str(self.ground_truth), None)]  # fmt: skip
        return "".join(f"{flag} {value} " for flag, value, default in given if value != default)

    @functools.cached_property
    def _given_truth(self) -> Any:
        """``ground_truth`` read once, however many runs and families count against it."""

        assert self.ground_truth is not None
        return load_ground_truth(self.ground_truth)

    def truth_for(self, family: str) -> Any:
        """The ground truth ``family`` (a full name) counts against."""

        return shipped_ground_truth(family) if self.ground_truth is None else self._given_truth


def chair_counting(family: str | None = None, tokenizer: str | None = None, ground_truth: Path | None = None) -> ChairCounting:
    """The counting the options name (None: the default); an unknown family or tokenizer is bad input."""

    family = (family or "both").removeprefix("chair@")
    tokenizer = counting_options(family, tokenizer or "punkt", allow_both=True)[1]
    if ground_truth is not None and not Path(ground_truth).is_file():
        raise InputError("ground truth file not found", ground_truth)
    return ChairCounting(family, tokenizer, None if ground_truth is None else Path(ground_truth))


def decoding_comparison(rundirs: Sequence[Path]) -> ComparisonRuns | None:
    """The runs, each read once, in their roles (read from each ``run.json``), or None when they
    are not a decoding comparison."""

    if len(rundirs) < 2 or not all((Path(p) / "run.json").is_file() for p in rundirs):
        return None  # one run, or an imported caption file: nothing to compare
    greedy, methods, sampled = [], [], []
    for path in rundirs:
        run = load_run(Path(path))
        _, method, _, _, is_sampled = decoding_identity(run.header.generate, run.path.resolve().name)
        (methods if method is not None else sampled if is_sampled else greedy).append(run)
    if len(greedy) != 1 or not methods or len(sampled) > 1:
        return None
    try:
        return load_comparison(greedy[0], methods, sampled[0] if sampled else None)
    except InputError:
        return None  # runs on other questions or of other models: compared nowhere, so not a comparison


def markdown_tables_as_html(markdown: str, section_id: str | None = None) -> str:
    """The decoding Markdown as HTML: headings, pipe tables and paragraphs, the comment left out;
    ``section_id`` names the section (a page's table of contents links to it)."""
    out: list[str] = []
    lines = markdown.split("\n")
    k = 0
    while k < len(lines):
        line = lines[k].strip()
        if line.startswith("|"):
            block = []
            while k < len(lines) and lines[k].strip().startswith("|"):
                block.append([c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(lines[k].strip()[1:-1])])
                k += 1
            head, body = block[0], [r for r in block[1:] if not all(c and set(c) <= set("-:") for c in r)]
            out.append('<table class="data">')
            out.append("<thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr></thead>")
            out.append("<tbody>" + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body) + "</tbody>")
            out.append("</table>")
            continue
        if line.startswith("### "):
            out.append(f"<h3>{html.escape(line[4:])}</h3>")
        elif line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line and not line.startswith("<!--"):
            out.append(f"<p>{html.escape(line)}</p>")
        k += 1
    opening = '<section class="run">' if section_id is None else f'<section id="{html.escape(section_id)}" class="run">'
    return opening + "\n" + "\n".join(out) + "\n</section>\n"


def decoding_section(
    rundirs: Sequence[Path], *, n_resamples: int, seed: int, counting: ChairCounting | None = None, section_id: str | None = None
) -> tuple[str, str] | None:
    """(Markdown, HTML) of the decoding table of ``rundirs``, CHAIR counted as ``counting`` says
    (default: the lemmatizer family, punkt, the shipped ground truth); None when they are not a comparison."""

    runs = decoding_comparison(rundirs)
    if runs is None:
        return None
    counting = counting or ChairCounting()
    family = family_named(counting.decoding_family, tokenizer=counting.tokenizer)
    result = decoding_table(runs, family=family, ground_truth=counting.truth_for(family.name), n_resamples=n_resamples, seed=seed)
    markdown = decoding_markdown(result, decoding_provenance(result))
    return markdown, markdown_tables_as_html(markdown, section_id)
