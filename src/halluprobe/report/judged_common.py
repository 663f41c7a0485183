"""What the report's judged sections share: a judgment dir as read for the report, its judge
ledger's lines, and a section's Markdown and HTML built from the same lines and tables."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from halluprobe.errors import InputError
from halluprobe.formatting import markdown_table
from halluprobe.judging.ledger import JudgeHeader, Judgment
from halluprobe.judging.store import JudgmentDir
from halluprobe.records import FrozenRecord

__all__ = ["JudgedDir", "SectionWriter", "ledger_lines", "read_judged"]


class JudgedDir(FrozenRecord):
    """One judgment dir as read for the report: its path (as given), judge header and verdicts."""

    path: str
    header: JudgeHeader
    judgments: tuple[Judgment, ...]

    @property
    def judgments_path(self) -> str:
        return str(JudgmentDir(self.path).judgments_path)


def read_judged(path: Path, benchmarks: Sequence[str]) -> JudgedDir:
    """A judgment dir of one of ``benchmarks`` (another is refused: one line naming its judge.json)."""
    store = JudgmentDir(path)
    header = store.read_header()
    if header.benchmark not in benchmarks:
        raise InputError(f"a judgment dir of {header.benchmark!r}: the report renders the judgments of {', '.join(benchmarks)} "
                         "(score it with its own verb)", store.header_path)  # fmt: skip
    return JudgedDir(path=str(path), header=header, judgments=tuple(store.read_judgments()))


def ledger_lines(judged: JudgedDir, *, n: int, unparseable: int, errors: int, policy: str) -> list[str]:
    """The ledger of one judgment dir, one line per fact."""
    h = judged.header
    served = sorted({j.judge_model_reported for j in judged.judgments if j.judge_model_reported})
    return [
        f"judge as configured: {h.backend}:{h.model}",
        f"judge as served: {', '.join(served) if served else 'not reported by the backend'}",
        f"prompt ({h.template_name}) sha256: {h.template_sha256}",
        f"unparseable {unparseable}, errors {errors} of {n} ({policy})",
    ]


class SectionWriter:
    """A section's Markdown and HTML, written side by side."""

    def __init__(self, entry: tuple[str, str], lede: str) -> None:
        sid, title = entry
        self.md = [f"## {title}", "", lede, ""]
        self.page = [f'<section id="{sid}">', f"<h2>{html.escape(title)}</h2>", f'<p class="lede">{html.escape(lede)}</p>']

    def heading(self, text: str) -> None:
        self.md += [f"**{text}**", ""]
        self.page.append(f"<h3>{html.escape(text)}</h3>")

    def lines(self, lines: Sequence[str]) -> None:
        self.md += [*[f"- {line}" for line in lines], ""]
        self.page.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        self.md += [*markdown_table(header, rows), ""]
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        self.page.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def done(self) -> tuple[str, str]:
        """(Markdown, HTML)."""
        return "\n".join(self.md).rstrip("\n") + "\n", "\n".join(self.page + ["</section>"]) + "\n"
