"""MMHal-Bench's judged tables (``mmhal score --markdown/--latex``) recomputed from their
``halluprobe-mmhal-provenance`` comment: the template and the judgment dir it names (the stored
verdicts are the ledger: no model and no judge is run), scored again through
:func:`halluprobe.judging.mmhal_score.score_mmhal` under the comment's ``--unparseable`` policy,
aggregation and bootstrap, and compared cell by cell (:func:`halluprobe.mmhal_table.mmhal_grid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe.benchmarks.mmhal import read_mmhal
from halluprobe.check.compare import compare_table
from halluprobe.check.findings import CheckResult
from halluprobe.check.parse import MarkedTable, marked_tables
from halluprobe.check.sources import file_findings, judgment_findings
from halluprobe.judging.mmhal_score import ordered_judgments, score_mmhal
from halluprobe.mmhal_table import mmhal_grid
from halluprobe.provenance_judged import MMHAL_PROVENANCE_MARK, MMHalProvenance

__all__ = ["check_mmhal_table", "extract_mmhal_tables"]


def extract_mmhal_tables(path: str | Path, text: str) -> list[MarkedTable]:
    """Every table under a MMHal provenance comment in ``text`` (:func:`marked_tables`)."""
    return marked_tables(path, text, MMHAL_PROVENANCE_MARK, "MMHal")


def check_mmhal_table(table: MarkedTable, runs: Sequence[Path], result: CheckResult) -> None:
    """Recompute one MMHal-Bench table from its template and judgment dir; a finding for every
    cell that differs, and for a template or judgments file missing or changed."""
    prov = table.provenance
    assert isinstance(prov, MMHalProvenance)  # the mark decides the kind
    where = (table.path, table.line)
    findings, template = file_findings(prov.template, runs, where)
    result.findings.extend(findings)
    if template is None:
        return
    findings, store = judgment_findings(prov.judgments, runs, where)
    result.findings.extend(findings)
    if store is None:
        return
    header = store.read_header()
    mmhal = read_mmhal(template)
    judgments = store.read_judgments()
    boot = prov.bootstrap
    score = score_mmhal(mmhal, header, judgments, policy=prov.unparseable, where=str(store.judgments_path),
                        n_resamples=0 if prov.compat else boot.n_resamples, seed=boot.seed)  # fmt: skip
    judged = ordered_judgments(mmhal, judgments, str(store.judgments_path))
    grid = mmhal_grid(score, mmhal, judged, header, compat=prov.compat, syntax="latex" if table.style == "latex" else "markdown")
    found, compared = compare_table(table, grid)
    result.findings.extend(found)
    result.cells += compared
