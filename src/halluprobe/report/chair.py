"""The CHAIR section of a report: both normaliser families side by side, the objects most
often hallucinated, and CHAIR against caption length (shorter captions hallucinate less, so a
method that shortens captions "reduces" CHAIR: the section shows it).

Tables carry a provenance comment (``halluprobe-chair-provenance {JSON}``: the run, its
fingerprint and samples sha256, the families, the ground truth, the options and the bootstrap)
above them; ``halluprobe check`` recomputes the families table from it (``check.chair``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from halluprobe import __version__
from halluprobe.captions.chair.evaluate import ChairResults
from halluprobe.captions.chair.length import chair_by_equal_count_groups
from halluprobe.captions.chair.scoring import CaptionScore, ChairSettings, ChairSummary
from halluprobe.formatting import format_ratio, markdown_table
from halluprobe.provenance import ChairProvenance, ChairSource, marked_comment
from halluprobe.records_scores import BootstrapSettings
from halluprobe.tables import Cell, Grid, latex_escape

__all__ = [
    "chair_grid", "chair_latex_table", "chair_provenance", "chair_section", "hallucinated_objects",
]  # fmt: skip

_METRICS = (("chair_s", "CHAIR_s", 100), ("chair_i", "CHAIR_i", 100), ("recall", "Recall", 100), ("length", "Len", 1))


def chair_provenance(results: ChairResults, source: Mapping[str, Any], bootstrap: BootstrapSettings | None = None) -> ChairProvenance:
    """What the table was computed from: ``source`` (the run: path, fingerprint, samples sha256;
    or a caption file: path, sha256, format), per family the ground truth and the options
    recorded with the result, and the ``bootstrap`` (resamples, seed) of its CIs."""

    first = results.first.settings
    described = ChairSource.model_validate(source)
    if described.captions is not None and first.format:
        described = ChairSource.model_validate({**described.model_dump(), "format": first.format})
    optional: dict[str, Any] = {}  # keys an older table never had stay out of the comment
    if bootstrap is not None:
        optional["bootstrap"] = BootstrapSettings(n_resamples=bootstrap.n_resamples, seed=bootstrap.seed)
    if "tokenizer" in first.model_fields_set and first.tokenizer != "punkt":  # punkt's tables (and every older one) name none
        optional["tokenizer"] = first.tokenizer
    ground_truth = {}
    for family, result in results.families.items():
        truth = result.summary.settings.ground_truth
        assert truth is not None  # every family's settings name what it counted against
        ground_truth[family] = truth.model_dump(mode="json")
    return ChairProvenance(
        table="chair", source=described, families=tuple(results.families), ground_truth=ground_truth,
        truncate_incomplete=first.truncate_incomplete, prompt=first.prompt, max_new_tokens=first.max_new_tokens,
        halluprobe=__version__, **optional,
    )  # fmt: skip


def _comment(provenance: ChairProvenance, syntax: Literal["markdown", "latex"]) -> str:
    return marked_comment(provenance, syntax)


def _cell(summary: ChairSummary, metric: str, scale: int) -> Cell:
    """A metric as written (one decimal, scaled) and the scaled numbers it shows, for ``check``."""
    value, ci = summary.value(metric), getattr(summary.ci, metric)
    text = format_ratio(value, ci, digits=1, ci_digits=1, scale=scale, missing="n/a")
    if value is None:
        return Cell(text, (None,))
    return Cell(text, (scale * value,) if not ci else (scale * value, scale * ci[0], scale * ci[1]))


_LATEX_HEADER = ("Family", "$n$", "CHAIR$_s$", "CHAIR$_i$", "Recall", "Len")


def chair_grid(results: ChairResults, style: Literal["markdown", "latex"] = "markdown") -> Grid:
    """The families-side-by-side table: one row per family, n and each metric with its CI."""
    header = _LATEX_HEADER if style == "latex" else ("family", "n", *(label for _, label, _ in _METRICS))
    rows = tuple(
        (Cell(f), Cell(str(r.summary.n), (r.summary.n,)), *(_cell(r.summary, m, s) for m, _, s in _METRICS))
        for f, r in results.families.items()
    )
    return Grid(header, rows)


def hallucinated_objects(scores: Sequence[CaptionScore], top: int = 10) -> list[tuple[str, int, int]]:
    """(category, captions hallucinating it, mentions) for the most often hallucinated."""
    captions: Counter[str] = Counter()
    mentions: Counter[str] = Counter()
    for s in scores:
        captions.update(set(s.hallucinated))
        mentions.update(s.hallucinated)
    return [(name, n, mentions[name]) for name, n in sorted(captions.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]


def chair_section(
    results: ChairResults,
    scores: Mapping[str, Sequence[CaptionScore]],
    source: Mapping[str, Any],
    *,
    bootstrap: BootstrapSettings | None = None,
    title: str = "CHAIR",
) -> str:
    """The Markdown section: families side by side, top hallucinated objects, CHAIR by length."""
    lines = [f"## {title}", "", _comment(chair_provenance(results, source, bootstrap), "markdown")]
    grid = chair_grid(results)
    lines += markdown_table(list(grid.header), [[c.text for c in row] for row in grid.rows])
    first = results.first.settings
    gt = first.ground_truth
    year = f" {gt.year}" if gt is not None and gt.year else ""
    lines += ["", f"Ground truth: {gt.source if gt is not None else None}{year}; prompt: {first.prompt!s}; "
              f"max_new_tokens: {first.max_new_tokens}; truncate_incomplete: {first.truncate_incomplete}"
              f"{_tokenizer_note(first)}. CHAIR_s, CHAIR_i, Recall in %, Len in words per caption; 95% image-bootstrap CIs.", ""]  # fmt: skip
    lines += ["### Objects most often hallucinated", ""]
    top = {f: hallucinated_objects(s) for f, s in scores.items()}
    depth = max((len(v) for v in top.values()), default=0)
    lines += markdown_table(["rank", *results.families], [[k + 1, *(f"{v[k][0]} ({v[k][1]} captions)" if k < len(v) else "" for v in top.values())] for k in range(depth)])
    lines += ["", "### CHAIR against caption length", ""]
    binned = {f: chair_by_equal_count_groups(s) for f, s in scores.items()}
    rows = []
    for f, groups in binned.items():
        for g in groups:
            rows.append([f, f"{g.lengths[0]}-{g.lengths[1]}", g.n, format_ratio(g.chair_s, digits=1, scale=100),
                         format_ratio(g.chair_i, digits=1, scale=100, missing="n/a")])  # fmt: skip
    lines += markdown_table(["family", "length (words)", "captions", "CHAIR_s", "CHAIR_i"], rows)
    return "\n".join(lines) + "\n"


def _tokenizer_note(settings: ChairSettings) -> str:
    """``; tokenizer: line`` where the captions were not split by punkt (punkt's text is unchanged)."""
    tokenizer = settings.tokenizer or "punkt"
    return "" if tokenizer == "punkt" else f"; tokenizer: {tokenizer} (words split without punkt's sentence split)"


def chair_latex_table(results: ChairResults, source: Mapping[str, Any], *, bootstrap: BootstrapSettings | None = None) -> str:
    """The families-side-by-side table in booktabs LaTeX, its provenance comment above it."""
    body = [
        _comment(chair_provenance(results, source, bootstrap), "latex"),
        r"\begin{tabular}{lrrrrr}", r"\toprule",
        " & ".join(_LATEX_HEADER) + " \\\\", r"\midrule",
    ]  # fmt: skip
    for row in chair_grid(results, "latex").rows:
        body.append(" & ".join(latex_escape(c.text) for c in row) + " \\\\")
    body += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(body) + "\n"
