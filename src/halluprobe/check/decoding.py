"""Decoding tables (``halluprobe decoding --markdown`` / ``--latex``) recomputed from their
``halluprobe-decoding-provenance`` comment: every run dir it names (fingerprint and samples
sha256 checked), the CHAIR family and ground truth, the PROVE score folders (``scores.jsonl``
sha256) and the bootstrap go through :func:`halluprobe.captions.comparison.table.decoding_table` again;
every table under the comment (per run, paired differences, length bins, PROVE) is compared
cell by cell with the grid its writer renders (:func:`halluprobe.captions.comparison.render.decoding_grids`),
numbers at the precision they are written with. A comment that names nothing to recompute (no
CHAIR family and no PROVE scores), or tables of which no cell is compared, is bad input: a
check that compares nothing never passes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from halluprobe.captions.chair.families import TOKENIZERS, family_named
from halluprobe.captions.comparison.render import decoding_grids
from halluprobe.captions.comparison.runs import LoadedRun, load_comparison
from halluprobe.captions.comparison.table import decoding_table
from halluprobe.check.chair import ground_truth_described
from halluprobe.check.compare import compare_table
from halluprobe.check.findings import CheckResult, Finding
from halluprobe.check.parse import check_bounds, latex_table_under, markdown_table_under, marked_comments
from halluprobe.check.sources import locate_run
from halluprobe.errors import InputError
from halluprobe.provenance import DECODING_PROVENANCE_MARK, DecodingProvenance, read_payload
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.tables import Style

__all__ = ["DecodingTable", "check_decoding_table", "extract_decoding_tables"]

_ANY_COMMENT = re.compile(r"halluprobe-(?:[a-z]+-)?provenance")  # the next table's comment ends this one's tables


@dataclass(frozen=True)
class WrittenPart:
    """One table of a decoding comparison as written (what :func:`compare_table` reads)."""

    path: str
    style: Style
    header: tuple[int, list[str]]
    rows: list[tuple[int, list[str]]]


@dataclass(frozen=True)
class DecodingTable:
    """The text under a decoding provenance comment: the comment's data and where it is."""

    path: str
    line: int
    provenance: DecodingProvenance
    syntax: Style
    lines: list[str]


def _parse(payload: str, path: str, line: int) -> DecodingProvenance:
    """The comment's record (:func:`~halluprobe.provenance.read_payload`), checked for what a
    recomputation reads."""

    prov = read_payload(DECODING_PROVENANCE_MARK, payload, path, line)
    assert isinstance(prov, DecodingProvenance)  # the mark decides the kind
    roles = [r.role for r in prov.runs]
    if len(roles) < 2:
        raise InputError("decoding provenance comment: 'runs' must list the baseline and the method runs ({path, role, ...})", path, line)
    if roles[0] != "greedy baseline" or "method" not in roles or roles.count("sampled baseline") > (roles[-1] == "sampled baseline"):
        raise InputError("decoding provenance comment: 'runs' must be the greedy baseline, the methods, then the sampled baseline if any", path, line)
    if prov.family is not None and prov.ground_truth is None:
        raise InputError("decoding provenance comment: 'family' must name a CHAIR family, with its 'ground_truth'", path, line)
    if (prov.tokenizer or "punkt") not in TOKENIZERS:
        raise InputError("decoding provenance comment: 'tokenizer' must name a CHAIR tokenizer (punkt or line)", path, line)
    check_bounds(prov, path, line, "decoding")
    return prov


def extract_decoding_tables(path: str | Path, text: str) -> list[DecodingTable]:
    """Every decoding comparison under its provenance comment in ``text``; a malformed comment is bad input."""
    found = []
    for index, payload, style, lines in marked_comments(text, DECODING_PROVENANCE_MARK):
        provenance = _parse(payload, str(path), index + 1)
        found.append(DecodingTable(str(path), index + 1, provenance, style, lines))
    return found


def _tables_under(lines: list[str], index: int, syntax: Style, count: int | None, path: str) -> list[WrittenPart]:
    """The first ``count`` (default: all) tables below the comment at ``lines[index]`` (pipe tables or
    tabulars), before the next heading of level 1 or 2 or the next provenance comment."""
    reader = latex_table_under if syntax == "latex" else markdown_table_under
    starts: list[int] = []
    previous_pipe = False
    for j in range(index + 1, len(lines)):
        stripped = lines[j].strip()
        if len(starts) == count or _ANY_COMMENT.search(stripped) or re.match(r"^#{1,2}\s", stripped):
            break
        pipe = stripped.startswith("|")
        if (syntax == "latex" and stripped.startswith(r"\begin{tabular}")) or (syntax == "markdown" and pipe and not previous_pipe):
            starts.append(j)
        previous_pipe = pipe
    if count is not None and len(starts) < count:
        raise InputError(f"{len(starts)} tables under the decoding provenance comment, its source has {count}: not the table its provenance names",
                         path, index + 1)  # fmt: skip
    tables = []
    for start in starts:
        style, header, rows = reader(lines, start - 1, path)
        tables.append(WrittenPart(path, style, header, rows))
    return tables


def _loaded_runs(table: DecodingTable, runs: Sequence[Path], result: CheckResult) -> list[LoadedRun] | None:
    """Every run dir the comment names, located and read once; None (findings recorded) when one
    is missing or changed."""
    where = (table.path, table.line)
    loaded, usable = [], True
    for source in table.provenance.runs:
        path = locate_run(source.path, runs)
        run = RunDir(path)
        if not run.header_path.is_file() or not run.samples_path.is_file():
            result.findings.append(Finding("run-missing", *where, f"run dir {path} is missing (no run.json or samples.jsonl)"))
            usable = False
            continue
        header, samples_sha256 = run.read_header(), sha256_file(run.samples_path)
        if source.fingerprint is not None and header.fingerprint != source.fingerprint:
            result.findings.append(Finding("run-changed", *where, f"run dir {path} is another run now (its fingerprint changed)"))
            usable = False
        elif source.samples_sha256 is not None and samples_sha256 != source.samples_sha256:
            result.findings.append(Finding("run-changed", *where, f"samples of {path} changed since this was written (samples.jsonl sha256)"))
            usable = False
        elif usable:  # the samples are parsed only where every run so far is the one the comment names
            loaded.append(LoadedRun(path, header, tuple(run.read_samples()), samples_sha256))
    return loaded if usable else None


def _prove_paths(table: DecodingTable, runs: Sequence[Path], result: CheckResult) -> list[Path] | None:
    where = (table.path, table.line)
    paths, usable = [], True
    for source in table.provenance.prove_scores:
        folder = locate_run(source.path, runs)
        scores = folder / "scores.jsonl"
        if not scores.is_file():
            result.findings.append(Finding("file-missing", *where, f"{scores} is missing"))
            usable = False
        elif sha256_file(scores) != source.scores_sha256:
            result.findings.append(Finding("file-changed", *where, f"{scores} changed since this was written (sha256)"))
            usable = False
        paths.append(folder)
    return paths if usable else None


def check_decoding_table(table: DecodingTable, runs: Sequence[Path], result: CheckResult) -> None:
    """Recompute one decoding comparison and add a finding for every cell that differs; a comment
    that names nothing to recompute, or tables of which no cell is compared, is bad input."""

    prov = table.provenance
    family_name = prov.family
    if family_name is None and not prov.prove_scores:
        raise InputError("decoding provenance comment names no CHAIR family and no PROVE scores: nothing to recompute, "
                         "so the tables under it cannot be checked", table.path, table.line)  # fmt: skip
    loaded, prove = _loaded_runs(table, runs, result), _prove_paths(table, runs, result)
    if loaded is None or prove is None:
        return
    family = truth = None
    if family_name is not None:
        try:
            family = family_named(family_name, tokenizer=prov.tokenizer or "punkt")
        except ValueError as err:
            raise InputError(f"decoding provenance comment: {err}", table.path, table.line) from None
        assert prov.ground_truth is not None  # _parse refuses a family without
        truth = ground_truth_described((table.path, table.line), family.name, prov.ground_truth, runs, result)
        if truth is None:
            return
    roles = [r.role for r in prov.runs]
    sampled = loaded[-1] if roles[-1] == "sampled baseline" else None
    methods = loaded[1:-1] if sampled is not None else loaded[1:]
    # the writer chose these runs (other models only with --allow-other-models, which the comment
    # does not record): the check recomputes the numbers of the runs it names
    compared_runs = load_comparison(loaded[0], methods, sampled, allow_other_models=True)
    recomputed = decoding_table(compared_runs, family=family, ground_truth=truth, truncate=bool(prov.truncate_incomplete),
                                prove_scores=prove, chair=family is not None, n_resamples=prov.bootstrap.n_resamples,
                                seed=prov.bootstrap.seed)  # fmt: skip
    expected = decoding_grids(recomputed, "latex" if table.syntax == "latex" else "markdown")
    written = _tables_under(table.lines, table.line - 1, table.syntax, len(expected), table.path)
    compared = 0
    for found, grid in zip(written, expected):
        findings, cells = compare_table(found, grid)
        result.findings.extend(findings)
        compared += cells
    if not compared:
        raise InputError("no cell of a decoding table under this comment was compared: it cannot be checked", table.path, table.line)
    result.cells += compared
