"""CHAIR tables (``halluprobe chair --out``'s ``chair_report.md`` / ``chair_table.tex``, the
report's CHAIR section) recomputed from their ``halluprobe-chair-provenance`` comment: the
captions (a run dir, or a caption file and its format), each family's ground truth (shipped, or
object lines named by path and sha256), ``truncate_incomplete``, the tokenizer (punkt's when the
comment names none) and the bootstrap, scored again
through :func:`halluprobe.captions.chair.evaluate.chair_results` and compared cell by cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluprobe.captions.chair.evaluate import chair_results
from halluprobe.captions.chair.families import FAMILIES, TOKENIZERS
from halluprobe.captions.chair.groundtruth import load_ground_truth, shipped_ground_truth
from halluprobe.captions.chair.inputs import read_captions
from halluprobe.check.compare import compare_table
from halluprobe.check.findings import CheckResult, Finding
from halluprobe.check.parse import check_bounds, latex_table_under, markdown_table_under, marked_comments
from halluprobe.check.sources import file_findings, locate_run
from halluprobe.errors import InputError
from halluprobe.provenance import CHAIR_PROVENANCE_MARK, ChairProvenance, read_payload
from halluprobe.provenance_sources import FileSource
from halluprobe.report.chair import chair_grid
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.tables import Style

if TYPE_CHECKING:
    from halluprobe.captions.chair.groundtruth import GroundTruth
    from halluprobe.captions.chair.scoring import Caption, ChairSettings

__all__ = ["ChairTable", "check_chair_table", "extract_chair_tables", "ground_truth_described"]



@dataclass(frozen=True)
class ChairTable:
    """A CHAIR table as written under its provenance comment."""

    path: str
    line: int
    provenance: ChairProvenance
    style: Style
    header: tuple[int, list[str]]
    rows: list[tuple[int, list[str]]]


def _parse(payload: str, path: str, line: int) -> ChairProvenance:
    """The comment's record (:func:`~halluprobe.provenance.read_payload`), checked for what a
    recomputation reads (its bootstrap among them)."""

    prov = read_payload(CHAIR_PROVENANCE_MARK, payload, path, line)
    assert isinstance(prov, ChairProvenance)  # the mark decides the kind
    if not prov.families or any(f not in FAMILIES for f in prov.families):
        raise InputError(f"CHAIR provenance comment: 'families' must list some of {', '.join(FAMILIES)}", path, line)
    if prov.source.run is None and prov.source.captions is None:
        raise InputError("CHAIR provenance comment: 'source' must name a run dir ('run') or a caption file ('captions')", path, line)
    if any(f not in prov.ground_truth for f in prov.families):
        raise InputError("CHAIR provenance comment: 'ground_truth' must describe every family's", path, line)
    if (prov.tokenizer or "punkt") not in TOKENIZERS:  # absent: punkt's (every table written before it was recorded)
        raise InputError(f"CHAIR provenance comment: 'tokenizer' must be one of {', '.join(TOKENIZERS)}", path, line)
    check_bounds(prov, path, line, "CHAIR")
    assert prov.bootstrap is not None  # check_bounds refuses a comment without
    return prov


def extract_chair_tables(path: str | Path, text: str) -> list[ChairTable]:
    """Every table under a CHAIR provenance comment in ``text``; a malformed comment is bad input."""
    found = []
    for index, payload, style, lines in marked_comments(text, CHAIR_PROVENANCE_MARK):
        provenance = _parse(payload, str(path), index + 1)
        reader = markdown_table_under if style == "markdown" else latex_table_under
        style, header, rows = reader(lines, index, str(path))
        found.append(ChairTable(str(path), index + 1, provenance, style, header, rows))
    return found


def _captions(table: ChairTable, runs: Sequence[Path], result: CheckResult) -> tuple[list[Caption], ChairSettings] | None:
    """The captions the table names, and the settings recorded with them; None when missing."""

    source = table.provenance.source
    where = (table.path, table.line)
    if source.run is not None:
        path = locate_run(source.run, runs)
        run = RunDir(path)
        if not run.header_path.is_file() or not run.samples_path.is_file():
            result.findings.append(Finding("run-missing", *where, f"run dir {path} is missing (no run.json or samples.jsonl)"))
            return None
        if source.fingerprint is not None and run.read_header().fingerprint != source.fingerprint:
            result.findings.append(Finding("run-changed", *where, f"run dir {path} is another run now (its fingerprint changed)"))
        elif source.samples_sha256 is not None and sha256_file(run.samples_path) != source.samples_sha256:
            result.findings.append(Finding("run-changed", *where, f"samples of {path} changed since this was written (samples.jsonl sha256)"))
        return read_captions(path, None)
    assert source.captions is not None  # _parse refuses a source that names neither
    findings, file = file_findings(FileSource(path=source.captions, sha256=source.sha256 or ""), runs, where)
    result.findings.extend(findings)
    if file is None:
        return None
    return read_captions(file, source.format)


def ground_truth_described(
    where: tuple[str, int], family: str, described: Mapping[str, Any], runs: Sequence[Path], result: CheckResult
) -> GroundTruth | None:
    """The ground truth a family was scored against, from its description (``GroundTruth.describe``);
    None (its finding recorded) when it cannot be had. The decoding table's check reads it too."""

    kind = described.get("source")
    if kind == "shipped":
        return shipped_ground_truth(family)
    files = described.get("files")
    if kind == "objects" and isinstance(files, dict) and len(files) == 1:
        (name, sha), = files.items()
        findings, path = file_findings(FileSource(path=str(name), sha256=str(sha)), runs, where)
        result.findings.extend(findings)
        return None if path is None else load_ground_truth(path)
    result.findings.append(Finding(
        "file-missing", *where,
        f"{family}: a ground truth built from COCO's annotations is not recomputed here: its cached JSON (chair --out) "
        "as --ground-truth writes a table check can recompute",
    ))  # fmt: skip
    return None


def check_chair_table(table: ChairTable, runs: Sequence[Path], result: CheckResult) -> None:
    """Recompute one CHAIR table and add a finding for every cell that differs."""

    prov = table.provenance
    read = _captions(table, runs, result)
    if read is None:
        return
    captions, settings = read
    truths = {}
    for family in prov.families:
        truth = ground_truth_described((table.path, table.line), family, prov.ground_truth[family], runs, result)
        if truth is None:
            return
        truths[family] = truth
    assert prov.bootstrap is not None  # _parse refuses a comment without
    results, _ = chair_results(captions, settings, prov.families, truths.__getitem__,
                               truncate=bool(prov.truncate_incomplete), n_resamples=prov.bootstrap.n_resamples,
                               seed=prov.bootstrap.seed, tokenizer=prov.tokenizer or "punkt")  # fmt: skip
    grid = chair_grid(results, "latex" if table.style == "latex" else "markdown")
    findings, compared = compare_table(table, grid)
    result.findings.extend(findings)
    result.cells += compared
