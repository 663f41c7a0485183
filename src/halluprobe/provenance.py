"""The provenance comment a table for people carries: what it was computed from and how.

A provenance comment is one line, ``% halluprobe-provenance {JSON}`` in LaTeX or
``<!-- halluprobe-provenance {JSON} -->`` in Markdown, placed just above the table. The JSON
names the run dirs (path, fingerprint, samples.jsonl sha256) or, for a third-party answers
file, that file and its labels files (path, sha256), the readout, the unknown policy, the
bootstrap seed and resamples, and the halluprobe version: everything ``halluprobe check``
needs to recompute every cell (see ``docs/design/provenance.md``). The tables themselves are
rendered by :mod:`halluprobe.tables`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from halluprobe import __version__
from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.records import FrozenRecord, ScoreReport, UnknownPolicy
from halluprobe.rundir import RunDir, sha256_file

__all__ = [
    "PROVENANCE_MARK",
    "PROVENANCE_SCHEMA",
    "RunSource",
    "FileSource",
    "Provenance",
    "run_source",
    "score_provenance",
    "answers_provenance",
    "readouts_provenance",
    "headline_provenance",
    "corrections_provenance",
    "marked_comment",
    "provenance_comment",
    "parse_provenance",
]

PROVENANCE_MARK = "halluprobe-provenance"
PROVENANCE_SCHEMA = 1


class RunSource(FrozenRecord):
    """One run dir a table was computed from. Without ``fingerprint`` and ``samples_sha256``
    (a run anyone regenerates, such as the README's demo run) only the numbers are checked."""

    path: str
    fingerprint: str | None = None
    samples_sha256: str | None = None


class FileSource(FrozenRecord):
    """A file a table was computed from (``score --answers``: the answers and labels files),
    the path as given and the sha256 of its bytes."""

    path: str
    sha256: str


class Provenance(FrozenRecord):
    """What a table was computed from and how: enough to recompute every cell."""

    provenance: int = PROVENANCE_SCHEMA
    # score: one readout, a row per split; readouts: every readout side by side (the audit's
    # table), one row each, ``readout`` being the headline
    # corrections: the corrections table (halluprobe corrections), ``readouts`` being its corrections
    # headline: the report's headline metrics (report.md), a row per run and split, in %
    # study: the multi-model table (audit --table), a row per model and split, F1 per readout
    table: Literal["score", "readouts", "corrections", "headline", "study"]
    runs: tuple[RunSource, ...] = ()  # empty for a score table of an answers file
    # score --answers: the answers file and its POPE labels files (one per split), instead of runs
    answers: FileSource | None = None
    labels: tuple[FileSource, ...] | None = None
    names: tuple[str, ...] | None = None  # headline of several runs: the report's name of each run
    readout: str
    readouts: tuple[str, ...] = ()
    forced: tuple[str, ...] = ()  # legacy readouts scored although invalid for the vocabulary
    unknown: UnknownPolicy
    seed: int
    resamples: int
    halluprobe: str


def run_source(path: str | Path) -> RunSource:
    """A run dir as a table names it: the path as given, its fingerprint and samples sha256."""
    rundir = RunDir(path)
    header = rundir.read_header()
    return RunSource(path=str(path), fingerprint=header.fingerprint, samples_sha256=sha256_file(rundir.samples_path))


def score_provenance(rundir: str | Path, report: ScoreReport) -> Provenance:
    """The provenance of a score table of ``rundir`` (readout, policy and bootstrap from ``report``)."""
    return Provenance(
        table="score",
        runs=(run_source(rundir),),
        readout=report.readout,
        unknown=report.unknown_policy,
        seed=int(report.bootstrap.get("seed", 0)),
        resamples=int(report.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )


def answers_provenance(answers: str | Path, labels: Sequence[str | Path], report: ScoreReport) -> Provenance:
    """The provenance of a score table of a third-party answers file scored against ``labels``
    (``score --answers``): the files as given, with their sha256; the rule is the readout."""
    return Provenance(
        table="score",
        answers=FileSource(path=str(answers), sha256=sha256_file(answers)),
        labels=tuple(FileSource(path=str(p), sha256=sha256_file(p)) for p in labels),
        readout=report.readout,
        unknown=report.unknown_policy,
        seed=int(report.bootstrap.get("seed", 0)),
        resamples=int(report.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )


def provenance_comment(provenance: Provenance, syntax: Literal["markdown", "latex"]) -> str:
    """The one-line comment: ``% halluprobe-provenance {...}`` or ``<!-- ... -->``."""
    return marked_comment(PROVENANCE_MARK, provenance.model_dump(mode="json", exclude_none=True), syntax)


def marked_comment(mark: str, data: Mapping[str, Any], syntax: Literal["markdown", "latex"]) -> str:
    """``data`` as one comment line after ``mark`` (the score tables', CHAIR's or the decoding
    table's), the form ``check`` reads back (check.parse.marked_comments)."""
    payload = json.dumps(data, ensure_ascii=True, separators=(", ", ": "), default=str)
    if syntax == "latex":
        return f"% {mark} {payload}"
    # a path holding "-->" would end the comment early: JSON lets '>' be written escaped
    return f"<!-- {mark} {payload.replace('>', chr(92) + 'u003e')} -->"


_LATEX_COMMENT = re.compile(r"^\s*%\s*" + PROVENANCE_MARK + r"\s+(.*?)\s*$")
_MARKDOWN_COMMENT = re.compile(r"^\s*<!--\s*" + PROVENANCE_MARK + r"\s+(.*?)\s*-->\s*$")


def parse_provenance(line: str, path: str | Path, number: int) -> tuple[Provenance, Literal["markdown", "latex"]] | None:
    """The provenance a line carries and its comment syntax; None for a line without the mark.
    A line that has the mark but not the form is bad input (file:line)."""
    if PROVENANCE_MARK not in line:
        return None
    for syntax, pattern in (("latex", _LATEX_COMMENT), ("markdown", _MARKDOWN_COMMENT)):
        match = pattern.match(line)
        if match:
            break
    else:
        forms = f"'% {PROVENANCE_MARK} {{...}}' or '<!-- {PROVENANCE_MARK} {{...}} -->'"
        raise InputError(f"malformed provenance comment: expected {forms}", path, number)
    try:
        data = loads(match.group(1))
    except json.JSONDecodeError as err:
        raise InputError(f"malformed provenance comment: {err.msg} at column {err.colno}", path, number) from None
    except (ValueError, RecursionError) as err:  # an integer past Python's digit limit; nesting too deep
        raise InputError(f"malformed provenance comment: {str(err) or type(err).__name__}", path, number) from None
    try:
        provenance = Provenance.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "comment"
        raise InputError(f"malformed provenance comment: {where}: {first.get('msg', 'invalid')}", path, number) from None
    if provenance.provenance != PROVENANCE_SCHEMA:
        raise InputError(
            f"provenance version {provenance.provenance} is not readable by this halluprobe (reads {PROVENANCE_SCHEMA})", path, number
        )
    if (provenance.answers is None) == (not provenance.runs):
        raise InputError("malformed provenance comment: it names run dirs or an answers file (one of the two)", path, number)
    if provenance.answers is not None and (provenance.table != "score" or not provenance.labels):
        raise InputError("malformed provenance comment: an answers file makes a score table, with its labels files", path, number)
    return provenance, syntax  # type: ignore[return-value]


def readouts_provenance(rundir: str | Path, reports: Mapping[str, ScoreReport], forced: Collection[str], headline: str) -> Provenance:
    """The provenance of a readouts table of ``rundir``."""
    first = reports[headline]
    return Provenance(
        table="readouts",
        runs=(run_source(rundir),),
        readout=headline,
        readouts=tuple(reports),
        forced=tuple(r for r in reports if r in forced),
        unknown=first.unknown_policy,
        seed=int(first.bootstrap.get("seed", 0)),
        resamples=int(first.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )


def headline_provenance(
    rundirs: Sequence[str | Path], names: Sequence[str], *, readout: str, policy: UnknownPolicy, seed: int, resamples: int
) -> Provenance:
    """The provenance of the report's headline table: its run dirs (and their names when
    several), the headline readout, policy and bootstrap the audits used."""
    return Provenance(
        table="headline",
        runs=tuple(run_source(p) for p in rundirs),
        names=tuple(names) if len(rundirs) > 1 else None,
        readout=readout,
        unknown=policy,
        seed=seed,
        resamples=resamples,
        halluprobe=__version__,
    )


def corrections_provenance(rundir: str | Path, report: Any, corrections: Sequence[str]) -> Provenance:
    """The provenance of a corrections table: the corrections named, policy and bootstrap."""
    return Provenance(
        table="corrections",
        runs=(run_source(rundir),),
        readout="dynamic",
        readouts=tuple(corrections),
        unknown=report.policy,
        seed=int(report.bootstrap.get("seed", 0)),
        resamples=int(report.bootstrap.get("n_resamples", 0)),
        halluprobe=__version__,
    )
