"""Typed audits -> one typed view model that both the HTML template and the Markdown twin read.

The view holds the audit's own records (``Metrics``, ``PairedTest``, ``Calibration``, ...)
arranged by section, so the template, the Markdown twin and the figures read attributes that a
type checker (and Jinja's StrictUndefined) can verify, and the two outputs cannot drift apart.
Empty sections are empty lists or dicts: a report of a run without logit readouts (no
``p_yes``) still renders, with that section saying why it is empty; a page whose runs are all
text only (imported answers) leaves the logit sections out (``LOGIT_SECTIONS``).
``report.build`` builds the view from audits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from halluprobe.records_audit import (
    Calibration,
    ConfusionCounts,
    CurvePoint,
    GreedyAgreement,
    ImportedFrom,
    ObjectRate,
    PairedTest,
    PairRate,
    PieceCount,
    PieceShare,
    PYesByLabel,
    TextDynamicDisagreement,
)
from halluprobe.records_scores import BootstrapSettings, Metrics

__all__ = [
    "LOGIT_SECTIONS",
    "add_section",
    "SECTIONS",
    "Leaderboard",
    "LeaderboardRow",
    "MetricsRow",
    "ReadoutRow",
    "RelabelRow",
    "ReportView",
    "RunView",
    "TokenView",
    "piece",
    "short_readout",
]

# Section ids, in page order: the template, the Markdown twin and the tests all use these.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("run", "Run"),
    ("headline", "Headline metrics"),
    ("readouts", "Readout comparison"),
    ("confusion", "Confusion matrices"),
    ("convergence", "Convergence"),
    ("p-yes", "Distribution of p(yes)"),
    ("calibration", "Calibration"),
    ("profile", "Hallucination profile"),
    ("tokens", "Token diagnostic"),
)
# sections that read logits: left out of a page whose runs are all text only (imported answers)
LOGIT_SECTIONS: tuple[str, ...] = ("p-yes", "calibration", "tokens")
LEADERBOARD = ("leaderboard", "Leaderboard")  # first, with several runs
RELABEL = ("relabel", "Labels")  # last, when the audit rescored against other label files

# -- number formatting: halluprobe.formatting (shared by HTML and Markdown, re-exported here) --


def piece(text: Any) -> str:
    """A token piece as its Python repr, so leading spaces and control characters show."""
    return repr(text) if isinstance(text, str) else str(text)


def short_readout(name: str) -> str:
    """A readout's name for a narrow column head: ``text:pope`` -> ``pope``, ``legacy_2tok`` -> ``2tok``."""
    return name.removeprefix("text:").removeprefix("legacy_")


# -- the view model ------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricsRow:
    """A row of the headline table: one split, pooled or macro."""

    name: str
    kind: Literal["split", "pooled", "macro"]
    m: Metrics


@dataclass(frozen=True)
class ReadoutRow:
    """A readout in the comparison table: its macro metrics and its test against the headline."""

    name: str
    headline: bool
    valid: bool
    forced: bool
    m: Metrics  # macro
    pooled: Metrics
    paired: PairedTest | None  # None for the headline itself
    agreement: float | None  # with the headline

    @property
    def muted(self) -> bool:
        """Scored only because it was forced (legacy ids that are not yes/no here)."""
        return self.forced or not self.valid


@dataclass(frozen=True)
class TokenView:
    yes: list[tuple[int, str]]  # (id, piece)
    no: list[tuple[int, str]]
    # a server backend reports pieces, not ids: its sets are derived per sample (no list to show)
    by_piece: bool
    legacy_valid: bool | None
    legacy: list[tuple[str, str | None]]  # (id, the piece this vocabulary has there)
    vocab_size: int | None
    fingerprint: str | None
    offset_rate: float | None
    offset_pieces: list[PieceCount]
    first_pieces: list[PieceShare]
    first_total: int
    text_dynamic: dict[str, TextDynamicDisagreement]  # text rule -> counts
    greedy: dict[str, GreedyAgreement]  # logit readout -> against the greedy first token


@dataclass(frozen=True)
class RelabelRow:
    """One label file (or all of them together): what changed, and how far the headline's
    macro metrics move when the stored answers are scored against it."""

    name: str
    split: str
    matched: int
    removed: int
    flipped: int
    to_yes: int
    to_no: int
    added: int
    before: Metrics
    after: Metrics | None  # None when nothing was left to rescore
    shift: dict[str, float | None]  # macro metric -> new minus old
    combined: bool


@dataclass(frozen=True)
class RunView:
    index: int
    label: str
    path: str
    model: str
    backend: str
    backend_info: dict[str, Any]
    template: str
    prompt: str | None
    created_at: str
    n: int
    errors: int
    complete: bool
    split_sizes: dict[str, int]
    missing_readouts: list[str]
    packages: dict[str, str]
    version: str | None
    benchmarks: dict[str, str]
    benchmark_paths: dict[str, str]
    seed: int | None
    headline: str
    policy: str
    bootstrap: BootstrapSettings
    headline_rows: list[MetricsRow]
    readouts: list[ReadoutRow]
    confusion: dict[str, ConfusionCounts]  # headline readout, split -> counts
    curves: dict[str, list[CurvePoint]]
    stable_after: dict[str, int | None]
    convergence_tol: float
    convergence_metric: str
    p_yes: dict[str, PYesByLabel]
    calibration: dict[str, Calibration]
    profile_objects: list[ObjectRate]
    profile_pairs: list[PairRate]
    tokens: TokenView
    relabel: list[RelabelRow]
    agreement: dict[str, dict[str, float | None]]
    figures: dict[str, str] = field(default_factory=dict)  # section id -> SVG, filled by build_figures
    # the corrections table of a run that recorded signals (corrections_table.CorrectionsReport)
    corrections: Any = None
    imported: ImportedFrom | None = None  # what an imported run was made from
    text_only: bool = False  # no token sets, no p(yes), no first token: answers as text only
    headline_note: str | None = None  # where the run named its own headline: which, and why
    # an imported run's Parsers section (report.parsers.ParsersView): rule changes, the rule a published number needs
    parsers: Any = None
    logprobs: str | None = None  # a server run's reading: "exact" or "top-K pieces" (RunHeader.logprob_label)

    def metrics_row(self, kind: Literal["pooled", "macro"]) -> Metrics:
        return next(r.m for r in self.headline_rows if r.kind == kind)


@dataclass(frozen=True)
class LeaderboardRow:
    run: RunView
    label: str
    macro: Metrics
    pooled: Metrics
    paired: PairedTest | None  # None for the reference run
    rank: int = 0


@dataclass(frozen=True)
class Leaderboard:
    rows: list[LeaderboardRow]  # ranked by macro F1
    reference: str | None
    common_questions: int | None
    readout: str | None
    paired_available: bool


@dataclass(frozen=True)
class ReportView:
    """The whole page: one run view per audit, and the leaderboard when there are several."""

    title: str
    runs: list[RunView]
    leaderboard: Leaderboard | None
    sections: list[tuple[str, str]]
    headline: str
    policy: str
    bootstrap: BootstrapSettings | None
    bootstrap_text: str
    show_errors: bool
    any_forced: bool
    version: str | None
    figures: dict[str, str] = field(default_factory=dict)  # the leaderboard figure
    text_only: bool = False  # every run is text only: no logit section, no "same forward pass"
    imported_only: bool = False  # every run was imported (answers from another tool's files)
    scored_by: str | None = None  # the halluprobe that scored the runs (this one)

    def template_context(self) -> dict[str, Any]:
        """The top-level names the Jinja template reads (the fields, not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def add_section(page: str, markdown: str, section: tuple[str, str], entry: tuple[str, str]) -> tuple[str, str]:
    """``section`` (Markdown, HTML) added to the page before its footer (and to its table of
    contents as ``entry``: id, title) and at the end of the Markdown twin."""
    section_md, section_html = section
    footer = page.rfind("\n<footer>")
    at = footer + 1 if footer != -1 else page.rfind("</main>")
    if at > 0:
        page = page[:at] + section_html + "\n" + page[at:]
    nav_end = page.find("</nav>")
    if nav_end != -1:
        page = page[:nav_end] + f'<a href="#{entry[0]}">{entry[1]}</a>' + page[nav_end:]
    return page, markdown.rstrip("\n") + "\n\n" + section_md
