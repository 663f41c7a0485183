"""The decoding section of the CHAIR page: when the runs of a report are a decoding comparison
(one plain greedy run, one or more runs of a decoding method, at most one plain sampled run, all
on the same questions), the table of ``halluprobe decoding`` on them (shipped ground truth, the
lemmatizer family, the report's bootstrap): Markdown under its provenance comment (which
``halluprobe check`` verifies) and the same tables as HTML.

Runs that are not such a comparison (two greedy runs, runs on other questions) get no section:
the page is then the CHAIR page as before.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from halluprobe.errors import InputError

__all__ = ["DecodingComparison", "decoding_comparison", "decoding_section", "markdown_tables_as_html"]

_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a cell's own pipe is written \| (formatting.markdown_cell)


@dataclass(frozen=True)
class DecodingComparison:
    """The roles of a report's runs in a decoding comparison."""

    baseline: Path
    methods: tuple[Path, ...]
    sampled: Path | None


def decoding_comparison(rundirs: Sequence[Path]) -> DecodingComparison | None:
    """The runs' roles (read from each ``run.json``), or None when they are not a decoding comparison."""
    from halluprobe.decoding_runs import read_decoding_run, refuse_other_questions

    if len(rundirs) < 2 or not all((Path(p) / "run.json").is_file() for p in rundirs):
        return None  # one run, or an imported caption file: nothing to compare
    greedy, methods, sampled = [], [], []
    for path in rundirs:
        run = read_decoding_run(path, "method")
        (methods if run.method is not None else sampled if run.sampled else greedy).append(path)
    if len(greedy) != 1 or not methods or len(sampled) > 1:
        return None
    try:
        refuse_other_questions(greedy[0], [*methods, *sampled])
    except InputError:
        return None  # runs on other questions: compared nowhere, so not a comparison
    return DecodingComparison(greedy[0], tuple(methods), sampled[0] if sampled else None)


def markdown_tables_as_html(markdown: str) -> str:
    """The decoding Markdown as HTML: headings, pipe tables and paragraphs, the comment left out."""
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
    return '<section class="run">\n' + "\n".join(out) + "\n</section>\n"


def decoding_section(rundirs: Sequence[Path], *, n_resamples: int, seed: int) -> tuple[str, str] | None:
    """(Markdown, HTML) of the decoding table of ``rundirs``; None when they are not a comparison."""
    from halluprobe.benchmarks.chair.families import family_named
    from halluprobe.benchmarks.chair.groundtruth import shipped_ground_truth
    from halluprobe.decoding_render import decoding_markdown, decoding_provenance
    from halluprobe.decoding_table import decoding_table

    roles = decoding_comparison(rundirs)
    if roles is None:
        return None
    family = family_named("lemmatizer")
    result = decoding_table(roles.baseline, roles.methods, sampled_baseline=roles.sampled, family=family,
                            ground_truth=shipped_ground_truth(family.name), n_resamples=n_resamples, seed=seed)  # fmt: skip
    markdown = decoding_markdown(result, decoding_provenance(result))
    return markdown, markdown_tables_as_html(markdown)
