"""HallusionBench's judged tables (``hallusion score --markdown/--latex``) recomputed from their
``halluprobe-hallusion-provenance`` comment: the run dir and the judgment dir it names (the stored
verdicts are the ledger: no model and no judge is run), scored again through
:func:`halluprobe.judging.hallusion_score.score_judged` with the comment's readings and bootstrap,
and compared cell by cell (:func:`halluprobe.hallusion_table.hallusion_grid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe.check.compare import compare_table
from halluprobe.check.findings import CheckResult, Finding
from halluprobe.check.parse import MarkedTable, marked_tables
from halluprobe.check.sources import judgment_findings, locate_run
from halluprobe.hallusion_table import hallusion_grid
from halluprobe.judging.hallusion_judge import hallusion_answers
from halluprobe.judging.hallusion_score import score_judged
from halluprobe.provenance_judged import HALLUSION_PROVENANCE_MARK, HallusionProvenance
from halluprobe.rundir import RunDir, sha256_file

__all__ = ["check_hallusion_table", "extract_hallusion_tables"]


def extract_hallusion_tables(path: str | Path, text: str) -> list[MarkedTable]:
    """Every table under a HallusionBench provenance comment in ``text`` (:func:`marked_tables`)."""
    return marked_tables(path, text, HALLUSION_PROVENANCE_MARK, "HallusionBench")


def check_hallusion_table(table: MarkedTable, runs: Sequence[Path], result: CheckResult) -> None:
    """Recompute one HallusionBench table from its run dir and judgment dir; a finding for every
    cell that differs, and for a samples or judgments file missing or changed."""
    prov = table.provenance
    assert isinstance(prov, HallusionProvenance)  # the mark decides the kind
    where = (table.path, table.line)
    rundir = RunDir(locate_run(prov.samples.path, runs))
    run_missing = not (rundir.header_path.is_file() and rundir.samples_path.is_file())
    if run_missing:
        result.findings.append(Finding("file-missing", *where, f"run dir {rundir.path} is missing (no run.json or samples.jsonl)"))
    elif sha256_file(rundir.samples_path) != prov.samples.sha256:
        result.findings.append(Finding("file-changed", *where, f"{rundir.samples_path} changed since this was written (sha256)"))
    findings, store = judgment_findings(prov.judgments, runs, where)
    result.findings.extend(findings)
    if run_missing or store is None:
        return
    header, samples, _ = hallusion_answers(rundir.path)
    boot = prov.bootstrap
    scores = score_judged(header, samples, store.read_header(), store.read_judgments(), prov.readouts, where=str(store.judgments_path),
                          source=rundir.path, n_resamples=boot.n_resamples, seed=boot.seed)  # fmt: skip
    grid = hallusion_grid(scores, syntax="latex" if table.style == "latex" else "markdown")
    found, compared = compare_table(table, grid)
    result.findings.extend(found)
    result.cells += compared
