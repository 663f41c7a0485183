"""HallusionBench's judged tables (``hallusion score --markdown/--latex``) recomputed from their
``halluprobe-hallusion-provenance`` comment: the run dir and the judgment dir it names (the stored
verdicts are the ledger: no model and no judge is run), scored again through
:func:`halluprobe.judging.hallusion_score.score_judged` with the comment's readings and bootstrap,
and compared cell by cell (:func:`halluprobe.hallusion_table.hallusion_grid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from halluprobe.check.compare import compare_table
from halluprobe.check.findings import CheckResult, Finding
from halluprobe.check.parse import check_bounds, latex_table_under, markdown_table_under, marked_comments
from halluprobe.check.sources import locate_run
from halluprobe.hallusion_table import hallusion_grid
from halluprobe.judging.hallusion_judge import hallusion_answers
from halluprobe.judging.hallusion_score import score_judged
from halluprobe.judging.store import JudgmentDir
from halluprobe.provenance import read_payload
from halluprobe.provenance_judged import HALLUSION_PROVENANCE_MARK, HallusionProvenance
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.tables import Style

__all__ = ["HallusionTable", "check_hallusion_table", "extract_hallusion_tables"]


@dataclass(frozen=True)
class HallusionTable:
    """A HallusionBench judged table as written under its provenance comment."""

    path: str
    line: int
    provenance: HallusionProvenance
    style: Style
    header: tuple[int, list[str]]
    rows: list[tuple[int, list[str]]]


def extract_hallusion_tables(path: str | Path, text: str) -> list[HallusionTable]:
    """Every table under a HallusionBench provenance comment in ``text``; a malformed comment, or
    one whose bootstrap is out of bounds, is bad input (file:line)."""
    found = []
    for index, payload, style, lines in marked_comments(text, HALLUSION_PROVENANCE_MARK):
        provenance = read_payload(HALLUSION_PROVENANCE_MARK, payload, str(path), index + 1)
        assert isinstance(provenance, HallusionProvenance)  # the mark decides the kind
        check_bounds(provenance, str(path), index + 1, "HallusionBench")
        reader = markdown_table_under if style == "markdown" else latex_table_under
        style, header, rows = reader(lines, index, str(path))
        found.append(HallusionTable(str(path), index + 1, provenance, style, header, rows))
    return found


def check_hallusion_table(table: HallusionTable, runs: Sequence[Path], result: CheckResult) -> None:
    """Recompute one HallusionBench table from its run dir and judgment dir; a finding for every
    cell that differs, and for a samples or judgments file missing or changed."""
    prov = table.provenance
    where = (table.path, table.line)
    rundir = RunDir(locate_run(prov.samples.path, runs))
    store = JudgmentDir(locate_run(prov.judgments.path, runs))
    missing = [f"run dir {rundir.path} is missing (no run.json or samples.jsonl)"] if not (rundir.header_path.is_file() and rundir.samples_path.is_file()) else []
    if not store.header_path.is_file() or not store.judgments_path.is_file():
        missing.append(f"judgment dir {store.path} is missing (no judge.json or judgments.jsonl)")
    result.findings.extend(Finding("file-missing", *where, why) for why in missing)
    if missing:
        return
    for path, source in ((rundir.samples_path, prov.samples), (store.judgments_path, prov.judgments)):
        if sha256_file(path) != source.sha256:
            result.findings.append(Finding("file-changed", *where, f"{path} changed since this was written (sha256)"))
    header, samples, _ = hallusion_answers(rundir.path)
    boot = prov.bootstrap
    scores = score_judged(header, samples, store.read_header(), store.read_judgments(), prov.readouts, where=str(store.judgments_path),
                          source=rundir.path, n_resamples=boot.n_resamples, seed=boot.seed)  # fmt: skip
    grid = hallusion_grid(scores, syntax="latex" if table.style == "latex" else "markdown")
    found, compared = compare_table(table, grid)
    result.findings.extend(found)
    result.cells += compared
