"""``halluprobe check``: every number a paper reports, recomputed from the run dirs it names.

The package, bottom to top: :mod:`~halluprobe.check.findings` (what a check reports),
:mod:`~halluprobe.check.parse` (tables found under a provenance comment, and the comment's
bounds), :mod:`~halluprobe.check.compare` (cells at their written precision) and
:mod:`~halluprobe.check.sources` (run dirs and files located, checked, recomputed once);
:mod:`~halluprobe.check.claims` (numbers in prose) and :mod:`~halluprobe.check.chair` (CHAIR
tables, recomputed from their ``halluprobe-chair-provenance`` comment), then
:mod:`~halluprobe.check.decoding` (decoding tables, from their ``halluprobe-decoding-provenance``
comment, reusing the CHAIR module's ground truth), :mod:`~halluprobe.check.literature`
(``literature.md`` against its ``literature.json``) and :mod:`~halluprobe.check.score` (the
score tables' checkers); :mod:`~halluprobe.check.registry` lists every table kind with its
extractor and checker, and :mod:`~halluprobe.check.verify`'s :func:`check_files` dispatches on
it for tables, and checks claims. Each module imports only those listed before it. See ``docs/design/provenance.md``.
"""

from __future__ import annotations

from halluprobe.check.chair import ChairTable, check_chair_table, extract_chair_tables
from halluprobe.check.claims import CLAIM_METRICS, Claim, Written, check_claims, parse_written, read_claims
from halluprobe.check.compare import compare_cell, compare_number, compare_table
from halluprobe.check.decoding import DecodingTable, check_decoding_table, extract_decoding_tables
from halluprobe.check.findings import CheckResult, Finding, FindingKind
from halluprobe.check.literature import LiteratureTable, check_literature_table, extract_literature_tables
from halluprobe.check.parse import MAX_RESAMPLES, MAX_SEED, FoundTable, check_bounds, extract_tables
from halluprobe.check.registry import TABLE_KINDS, TableKind
from halluprobe.check.sources import RunCache, file_findings, locate_run, run_findings
from halluprobe.check.verify import check_files

__all__ = [
    "CLAIM_METRICS",
    "TABLE_KINDS",
    "MAX_RESAMPLES",
    "MAX_SEED",
    "ChairTable",
    "CheckResult",
    "Claim",
    "DecodingTable",
    "Finding",
    "FindingKind",
    "FoundTable",
    "LiteratureTable",
    "RunCache",
    "TableKind",
    "Written",
    "check_bounds",
    "check_chair_table",
    "check_claims",
    "check_decoding_table",
    "check_files",
    "check_literature_table",
    "compare_cell",
    "compare_number",
    "compare_table",
    "extract_chair_tables",
    "extract_decoding_tables",
    "extract_literature_tables",
    "extract_tables",
    "file_findings",
    "locate_run",
    "parse_written",
    "read_claims",
    "run_findings",
]
