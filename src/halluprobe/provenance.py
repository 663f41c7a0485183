"""Where a table for people came from: one typed provenance record per table kind, one writer,
one reader.

A comment is one line just above the table, ``% MARK {JSON}`` (LaTeX) or ``<!-- MARK {JSON}
-->`` (Markdown); its record (:data:`AnyProvenance`, a union on ``table``) names what ``check``
needs to recompute every cell. Each kind keeps the mark and shape it was always written with,
so tables of earlier versions read back into the same records (docs/design/provenance.md):

- ``halluprobe-provenance``: score, readouts (the audit's table), corrections, headline
  (``report.md``), study (:class:`Provenance`);
- ``halluprobe-chair-provenance``: chair (:class:`ChairProvenance`);
- ``halluprobe-decoding-provenance``: decoding (:class:`DecodingProvenance`);
- ``halluprobe literature audit:`` with ``key=value`` pairs: literature
  (:class:`LiteratureProvenance`);
- ``halluprobe-mmhal-provenance``, ``halluprobe-hallusion-provenance``: mmhal and hallusion,
  the judged benchmarks' tables (:mod:`halluprobe.provenance_judged`).

The sources a record names (run dirs, files) are :mod:`halluprobe.provenance_sources`'.

:func:`marked_comment` writes any record, :func:`read_marked` reads any comment back (a
comment without a ``table`` key takes its kind from its mark). The tables themselves are
rendered by :mod:`halluprobe.tables`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, TypeAdapter, ValidationError, field_serializer, model_serializer

from halluprobe import __version__
from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.provenance_judged import HALLUSION_PROVENANCE_MARK, MMHAL_PROVENANCE_MARK, HallusionProvenance, MMHalProvenance
from halluprobe.provenance_sources import FileSource, RunSource, run_source
from halluprobe.records import FrozenRecord, UnknownPolicy
from halluprobe.records_scores import BootstrapSettings, ScoreReport
from halluprobe.rundir import sha256_file

__all__ = [
    "AnyRecord", "PROVENANCE_MARK", "CHAIR_PROVENANCE_MARK", "DECODING_PROVENANCE_MARK", "LITERATURE_PROVENANCE_MARK", "PROVENANCE_SCHEMA",
    "Provenance", "ChairSource", "ChairProvenance", "DecodingRun", "ProveScores",
    "DecodingProvenance", "LiteratureProvenance", "AnyProvenance", "Syntax", "score_provenance",
    "answers_provenance", "readouts_provenance", "headline_provenance", "corrections_provenance", "marked_comment",
    "comment_payload", "read_marked", "read_payload"
]  # fmt: skip

PROVENANCE_MARK = "halluprobe-provenance"
CHAIR_PROVENANCE_MARK = "halluprobe-chair-provenance"
DECODING_PROVENANCE_MARK = "halluprobe-decoding-provenance"
LITERATURE_PROVENANCE_MARK = "halluprobe literature audit:"
PROVENANCE_SCHEMA = 1

Syntax = Literal["markdown", "latex"]


class Provenance(FrozenRecord):
    """The score tables' record (``halluprobe-provenance``): enough to recompute every cell."""

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

    @property
    def bootstrap(self) -> BootstrapSettings:
        return BootstrapSettings(n_resamples=self.resamples, seed=self.seed)


class _AsWritten(FrozenRecord):
    """A record whose JSON holds the keys it was made with, no others (a None given is written
    null, a key never given is left out): the CHAIR and decoding comments' shapes."""

    @model_serializer(mode="wrap")
    def _given_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}


class ChairSource(_AsWritten):
    """A CHAIR table's captions: a run dir (``run``, fingerprint, samples sha256) or a caption
    file (``captions``, sha256, format)."""

    run: str | None = None
    fingerprint: str | None = None
    samples_sha256: str | None = None
    captions: str | None = None
    sha256: str | None = None
    format: str | None = None


class ChairProvenance(_AsWritten):
    """``halluprobe-chair-provenance``: a CHAIR table (families side by side)."""

    table: Literal["chair"]
    source: ChairSource
    families: tuple[str, ...]
    ground_truth: dict[str, dict[str, Any]]  # family -> GroundTruth.describe() as written (JSON)
    truncate_incomplete: bool | None = None
    prompt: str | list[str] | None = None  # several questions: each
    max_new_tokens: int | str | None = None  # an imported run: "unknown (imported)"
    halluprobe: str | None = None
    bootstrap: BootstrapSettings | None = None  # absent in tables written before it was recorded
    tokenizer: str | None = None  # absent: punkt's

    @field_serializer("bootstrap")
    def _resamples_key(self, value: BootstrapSettings | None) -> dict[str, int] | None:
        return None if value is None else {"resamples": value.n_resamples, "seed": value.seed}


class DecodingRun(FrozenRecord):
    path: str
    role: Literal["greedy baseline", "method", "sampled baseline"]
    name: str | None = None
    fingerprint: str | None = None
    samples_sha256: str | None = None


class ProveScores(FrozenRecord):
    path: str
    scores_sha256: str | None = None


class DecodingProvenance(_AsWritten):
    """``halluprobe-decoding-provenance``: the decoding comparison's tables."""

    table: Literal["decoding"]
    runs: tuple[DecodingRun, ...]  # greedy baseline, methods, sampled baseline if any
    family: str | None = None  # None: --no-chair
    ground_truth: dict[str, Any] | None = None
    truncate_incomplete: bool | None = None
    prove_scores: tuple[ProveScores, ...] = ()
    bootstrap: BootstrapSettings
    halluprobe: str | None = None
    tokenizer: str | None = None  # absent: punkt's

    @field_serializer("bootstrap")
    def _bootstrap_keys(self, value: BootstrapSettings) -> dict[str, int]:
        return {"n_resamples": value.n_resamples, "seed": value.seed}


class LiteratureProvenance(FrozenRecord):
    """``literature.md``'s record (``halluprobe literature audit: key=value, ...``): the
    registry's digest and the bootstrap; the cells are in ``literature.json`` beside it."""

    table: Literal["literature"]
    halluprobe: str
    registry_sha256: str
    resamples: int
    seed: int

    @property
    def bootstrap(self) -> BootstrapSettings:
        return BootstrapSettings(n_resamples=self.resamples, seed=self.seed)


AnyRecord = Provenance | ChairProvenance | DecodingProvenance | LiteratureProvenance | MMHalProvenance | HallusionProvenance
AnyProvenance = Annotated[AnyRecord, Field(discriminator="table")]
_ANY = TypeAdapter(AnyProvenance)
# the mark decides the kinds a comment may hold (and the kind of one without a ``table`` key)
_KINDS: dict[str, tuple[str, ...]] = {
    PROVENANCE_MARK: ("score", "readouts", "corrections", "headline", "study"),
    CHAIR_PROVENANCE_MARK: ("chair",),
    DECODING_PROVENANCE_MARK: ("decoding",),
    LITERATURE_PROVENANCE_MARK: ("literature",),
    MMHAL_PROVENANCE_MARK: ("mmhal",),
    HALLUSION_PROVENANCE_MARK: ("hallusion",),
}
_LABELS = {PROVENANCE_MARK: "", CHAIR_PROVENANCE_MARK: "CHAIR ", DECODING_PROVENANCE_MARK: "decoding ", LITERATURE_PROVENANCE_MARK: "literature ",
           MMHAL_PROVENANCE_MARK: "MMHal ", HALLUSION_PROVENANCE_MARK: "HallusionBench "}


def _bootstrap(report: Any) -> BootstrapSettings:
    """A report's bootstrap; one scored without it (an older metrics.json) as 0 resamples, seed 0."""
    return report.bootstrap or BootstrapSettings(n_resamples=0, seed=0)


def score_provenance(rundir: str | Path, report: ScoreReport) -> Provenance:
    """The provenance of a score table of ``rundir`` (readout, policy and bootstrap from ``report``)."""
    return Provenance(
        table="score",
        runs=(run_source(rundir),),
        readout=report.readout,
        unknown=report.unknown_policy,
        seed=_bootstrap(report).seed,
        resamples=_bootstrap(report).n_resamples,
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
        seed=_bootstrap(report).seed,
        resamples=_bootstrap(report).n_resamples,
        halluprobe=__version__,
    )


def _mark_of(provenance: FrozenRecord) -> str:
    kind = getattr(provenance, "table", None)
    return next(mark for mark, kinds in _KINDS.items() if kind in kinds)


def marked_comment(provenance: AnyRecord, syntax: Syntax) -> str:
    """The one comment line of any record, under its kind's mark, the form :func:`read_marked`
    reads back: JSON (the score tables' without null keys), or ``key=value`` pairs for
    ``literature.md`` (Markdown only), as each was always written."""
    mark = _mark_of(provenance)
    if isinstance(provenance, LiteratureProvenance):
        if syntax != "markdown":
            raise ValueError("literature.md's comment is Markdown")
        pairs = ", ".join(f"{k}={v}" for k, v in provenance.model_dump(mode="json", exclude={"table"}).items())
        return f"<!-- {mark} {pairs} -->"
    data = provenance.model_dump(mode="json", exclude_none=isinstance(provenance, Provenance))
    payload = json.dumps(data, ensure_ascii=True, separators=(", ", ": "))
    if syntax == "latex":
        return f"% {mark} {payload}"
    # a path holding "-->" would end the comment early: JSON lets '>' be written escaped
    return f"<!-- {mark} {payload.replace('>', chr(92) + 'u003e')} -->"


def _comment_patterns(mark: str) -> tuple[tuple[Syntax, re.Pattern[str]], ...]:
    escaped = re.escape(mark)
    return (("latex", re.compile(rf"^\s*%\s*{escaped}\s+(.*?)\s*$")), ("markdown", re.compile(rf"^\s*<!--\s*{escaped}\s+(.*?)\s*-->\s*$")))


_PATTERNS = {mark: _comment_patterns(mark) for mark in _KINDS}


def comment_payload(line: str, mark: str) -> tuple[Syntax, str] | None:
    """The syntax and payload of a comment line under ``mark``; None for a line that is not one."""
    for syntax, pattern in _PATTERNS[mark]:
        match = pattern.match(line)
        if match:
            return syntax, match.group(1)
    return None


def read_marked(line: str, path: str | Path, number: int, marks: Collection[str] = tuple(_KINDS)) -> tuple[AnyProvenance, Syntax] | None:
    """The record a comment line carries (any of ``marks``) and its syntax; None for a line
    without a mark, or (but for the score tables' mark, whose every line is a comment) with
    one in prose. A comment that does not read is bad input (file:line)."""
    for mark in marks:
        if mark not in line:
            continue
        found = comment_payload(line, mark)
        if found is not None:
            return read_payload(mark, found[1], path, number), found[0]
        if mark == PROVENANCE_MARK:
            forms = f"'% {PROVENANCE_MARK} {{...}}' or '<!-- {PROVENANCE_MARK} {{...}} -->'"
            raise InputError(f"malformed provenance comment: expected {forms}", path, number)
    return None


def read_payload(mark: str, payload: str, path: str | Path, number: int) -> AnyProvenance:
    """The record of a comment's payload under ``mark`` (JSON; ``key=value`` pairs for the
    literature mark). Without a ``table`` key, the mark decides the kind."""
    label = f"{_LABELS[mark]}provenance comment"
    bad = f"malformed {label}"
    if mark == LITERATURE_PROVENANCE_MARK and not payload.lstrip().startswith("{"):
        data: Any = dict(pair.partition("=")[::2] for pair in payload.split(", ") if pair)
    else:
        try:
            data = loads(payload)
        except (json.JSONDecodeError, ValueError, RecursionError) as err:  # ValueError: past the digit limit; nesting too deep
            why = f"{err.msg} at column {err.colno}" if isinstance(err, json.JSONDecodeError) else str(err) or type(err).__name__
            raise InputError(f"{bad if mark == PROVENANCE_MARK else label + ' is not JSON'}: {why}", path, number) from None
    if not isinstance(data, dict):
        raise InputError(f"{bad}: expected a JSON object", path, number)
    kinds = _KINDS[mark]
    if "table" not in data and len(kinds) == 1:
        data = {"table": kinds[0], **data}
    if "table" in data and data["table"] not in kinds:
        raise InputError(f"{bad}: table {data['table']!r} is not one of {', '.join(kinds)}", path, number)
    try:
        provenance = _ANY.validate_python(data) if "table" in data else Provenance.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = first.get("loc", ())[1 if "table" in data else 0 :]  # the union's tag first
        where = ".".join(str(p) for p in loc) or "comment"
        raise InputError(f"{bad}: {where}: {first.get('msg', 'invalid')}", path, number) from None
    if isinstance(provenance, Provenance):
        _score_rules(provenance, path, number)
    return provenance


def _score_rules(provenance: Provenance, path: str | Path, number: int) -> None:
    if provenance.provenance != PROVENANCE_SCHEMA:
        raise InputError(
            f"provenance version {provenance.provenance} is not readable by this halluprobe (reads {PROVENANCE_SCHEMA})", path, number
        )
    if (provenance.answers is None) == (not provenance.runs):
        raise InputError("malformed provenance comment: it names run dirs or an answers file (one of the two)", path, number)
    if provenance.answers is not None and (provenance.table != "score" or not provenance.labels):
        raise InputError("malformed provenance comment: an answers file makes a score table, with its labels files", path, number)


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
        seed=_bootstrap(first).seed,
        resamples=_bootstrap(first).n_resamples,
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
        seed=_bootstrap(report).seed,
        resamples=_bootstrap(report).n_resamples,
        halluprobe=__version__,
    )
