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
from halluprobe.check.sources import locate_run
from halluprobe.hallusion_table import hallusion_grid
from halluprobe.judging.hallusion_judge import hallusion_answers
from halluprobe.judging.hallusion_score import score_judged
from halluprobe.judging.store import JudgmentDir
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
