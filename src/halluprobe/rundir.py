"""The run directory is the log: ``run.json`` (header) written first, ``samples.jsonl`` appended.

Samples are appended per batch, flushed and fsynced, so a killed run loses at most the batch in
flight. Resume skips keys already present, ignores a truncated last line (cut anywhere, inside a
multi-byte UTF-8 character too), and refuses a header whose fingerprint differs. Every reading
problem (not UTF-8, malformed or too deeply nested JSON, a directory where a file belongs, an
invalid record) is one :class:`InputError` naming the file and the line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from halluprobe.errors import InputError
from halluprobe.files import append_durable, drop_cut_tail, refuse_non_folder, write_atomic
from halluprobe.jsonl import loads, read_log_lines, read_text
from halluprobe.records import QuestionKey, RunHeader, Sample
from halluprobe.records_audit import AuditReport
from halluprobe.records_scores import ScoreReport

__all__ = ["RunDir", "OWNED_FILES", "AUDIT", "MANIFEST", "refuse_run_file", "differ_phrase", "fingerprint_of", "header_differences", "sha256_file", "sum_counts"]


_R = TypeVar("_R", bound=BaseModel)

HEADER = "run.json"
SAMPLES = "samples.jsonl"
COMPLETE = "complete.json"
METRICS = "metrics.json"
# request counts of a server backend, one entry per `run` invocation (written at its end)
REQUESTS = "requests.json"
# written by `halluprobe audit` (RunDir.write_audit)
AUDIT = "audit.json"
# every file a run writes into its directory: `run --overwrite` removes them all, so nothing of
# the previous run (its metrics, its audit) is read as the new run's
OWNED_FILES = (HEADER, SAMPLES, COMPLETE, METRICS, REQUESTS, AUDIT)
# written by `halluprobe import` beside the run's own files
MANIFEST = "manifest.json"


def refuse_run_file(path: str | Path, flag: str) -> None:
    """No verb's output may replace a file of a run dir (its header, samples, metrics, audit,
    manifest), not even with ``--overwrite``: the run would be unreadable or lie. Checked where
    the path leads (a symbolic link into a run dir counts)."""
    target = Path(path)
    resolved = target.resolve()
    for candidate in {target.absolute(), resolved}:
        if candidate.name in (*OWNED_FILES, MANIFEST) and (candidate.parent / HEADER).is_file():
            raise InputError(f"{flag} would replace a file of the run dir {candidate.parent}: choose another path", target)


def header_differences(old: RunHeader, new: RunHeader) -> list[str]:
    """What makes two run headers' fingerprints differ, in words (for a refusal message)."""

    def signals(h: RunHeader) -> tuple[object, ...]:
        return (h.generate.signals, h.generate.instruction) if h.generate is not None else ((), None)

    checks = [
        ("the backend", old.backend != new.backend),
        ("the model", old.model != new.model or old.backend_info.get("dtype") != new.backend_info.get("dtype")),
        ("the template", old.template != new.template),
        ("the text generation", bool(old.text_rules) != bool(new.text_rules) or old.max_new_tokens != new.max_new_tokens),
        ("the tokenizer", (old.token_sets and old.token_sets.tokenizer_fingerprint) != (new.token_sets and new.token_sets.tokenizer_fingerprint)),
        ("the benchmark files", old.benchmarks != new.benchmarks),
        ("the signals", signals(old) != signals(new) or old.open_ended != new.open_ended),
        ("the CLIP model (--clip-model)", old.clip != new.clip),
        ("the log-probability reading (exact or top-K pieces)", (old.logprob_mode == "exact") != (new.logprob_mode == "exact")),
    ]
    names = [name for name, differs in checks if differs]
    return names or ["the model, template, readouts or benchmark files"]


def differ_phrase(old: RunHeader, new: RunHeader) -> str:
    """``the template differs``, ``the signals and the CLIP model (--clip-model) differ``."""
    names = header_differences(old, new)
    return " and ".join(names) + (" differs" if len(names) == 1 and "files" not in names[0] else " differ")


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint_of(fields: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of what must not change between a run and its resume."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


class RunDir:
    """One run directory on disk."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def header_path(self) -> Path:
        return self.path / HEADER

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES

    @property
    def complete_path(self) -> Path:
        return self.path / COMPLETE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    @property
    def requests_path(self) -> Path:
        return self.path / REQUESTS

    @property
    def audit_path(self) -> Path:
        return self.path / AUDIT

    def exists(self) -> bool:
        return self.header_path.exists()

    # -- writing -------------------------------------------------------------------------

    def start(
        self,
        header: RunHeader,
        *,
        resume: bool,
        force: bool,
        overwrite: bool,
        also_accept: Collection[str] = (),
        retry_errors: bool = False,
    ) -> set[QuestionKey]:
        """Create or reopen the run dir; return the keys already answered (empty for a new run).
        A file or a dangling symbolic link where the folder belongs is refused (one line), and so
        is a folder without ``run.json`` that holds a run's file (a leftover ``samples.jsonl``
        would be appended to and scored as this run's), unless ``overwrite`` removes it.

        ``also_accept``: other fingerprints under which the same run was written (an earlier
        halluprobe's form). ``retry_errors``: errored samples do not count as answered; the
        answer appended later replaces the error (see :meth:`read_samples`)."""
        refuse_non_folder(self.path)
        if not self.exists():
            self._clear_leftovers(overwrite)
        if self.exists():
            if resume:
                old = self.read_header()
                if old.fingerprint not in {header.fingerprint, *also_accept} and not force:
                    raise InputError(
                        f"refusing to resume: {differ_phrase(old, header)} "
                        "from the existing run (pass --force to mix them anyway)",
                        self.header_path,
                    )
                drop_cut_tail(self.samples_path)  # a crash mid-write: cut it so appends stay valid
                self.complete_path.unlink(missing_ok=True)
                return {s.key for s in self.read_samples() if not (retry_errors and s.error)}
            if not overwrite:
                raise InputError(
                    "run directory already holds a run; pass --resume to continue it or --overwrite to replace it",
                    self.header_path,
                )
            for name in OWNED_FILES:
                try:
                    (self.path / name).unlink(missing_ok=True)
                except OSError as err:  # a directory in a file's place, no permission
                    raise InputError(f"cannot remove the previous run's file: {err.strerror or err}", self.path / name) from None
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.header_path, header.model_dump_json(indent=2) + "\n")
        self.samples_path.touch()
        return set()

    def _clear_leftovers(self, overwrite: bool) -> None:
        leftovers = [self.path / name for name in OWNED_FILES if (self.path / name).exists() or (self.path / name).is_symlink()]
        if leftovers and not overwrite:
            raise InputError(
                "a run's file without its run.json (what is left of another run?): pass --overwrite to replace it", leftovers[0]
            )
        for path in leftovers:
            try:
                path.unlink()
            except OSError as err:
                raise InputError(f"cannot remove the previous run's file: {err.strerror or err}", path) from None

    def append(self, samples: Iterable[Sample]) -> None:
        append_durable(self.samples_path, "".join(s.model_dump_json() + "\n" for s in samples))

    def read_yes_no_header(self) -> RunHeader:
        """The header of a run whose samples carry yes/no labels and readouts; an open-ended run
        (free-form answers to open questions, placeholder labels) is refused: exit 2, one line."""
        header = self.read_header()
        if header.open_ended:
            raise InputError(
                "an open-ended run (free-form answers; its labels are placeholders) has no yes/no metrics: "
                "score it with `halluprobe chair RUNDIR` (CHAIR captions; `halluprobe report` shows them), "
                "`halluprobe amber generative RUNDIR` (AMBER) or `halluprobe prove score --responses RUNDIR` (PROVE)",
                self.header_path,
            )
        return header

    def read_request_stats(self) -> dict[str, Any]:
        """``requests.json``: ``{"schema_version", "sessions": [...], "total": {...}}`` (empty if absent)."""
        if not self.requests_path.exists():
            return {"schema_version": 1, "sessions": [], "total": {}}
        _, text = read_text(self.requests_path, "request stats")
        try:
            data = loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"invalid request stats: {err.msg} (column {err.colno})", self.requests_path, err.lineno) from None
        return data if isinstance(data, dict) else {"schema_version": 1, "sessions": [], "total": {}}

    def add_request_stats(self, stats: dict[str, Any]) -> None:
        """Append one session's request counts and recompute the totals (atomic replace)."""
        data = self.read_request_stats()
        sessions = [*data.get("sessions", []), stats]
        self.write_request_stats(sessions)

    def write_request_stats(self, sessions: list[dict[str, Any]]) -> None:
        payload = {"schema_version": 1, "sessions": sessions, "total": sum_counts(sessions)}
        write_atomic(self.requests_path, json.dumps(payload, indent=2, sort_keys=True) + "\n")

    def write_metrics(self, report: ScoreReport) -> Path:
        """``metrics.json`` (atomic replace)."""
        return write_atomic(self.metrics_path, report.model_dump_json(indent=2) + "\n")

    def write_audit(self, audit: AuditReport) -> Path:
        """``audit.json`` (atomic replace), in the bytes ``AuditReport.to_json`` gives."""
        return write_atomic(self.audit_path, audit.to_json())

    def mark_complete(self, counts: dict[str, Any]) -> None:
        write_atomic(self.complete_path, json.dumps(counts, indent=2, sort_keys=True) + "\n")

    # -- reading -------------------------------------------------------------------------

    def read_header(self) -> RunHeader:
        if not self.header_path.exists():
            raise InputError("not a run directory (no run.json)", self.path)
        _, text = read_text(self.header_path, "run header")  # a directory, not UTF-8: one line
        try:
            return RunHeader.model_validate_json(text)
        except ValidationError as err:
            raise InputError(f"invalid run header: {_first_error(err)}", self.header_path, 1) from None

    def read_metrics(self) -> ScoreReport:
        """``metrics.json`` as ``score`` last wrote it."""
        return _read_record(self.metrics_path, ScoreReport, "metrics", "run `halluprobe score` first")

    def read_audit(self) -> AuditReport:
        """``audit.json`` as ``audit`` last wrote it (also one written before the audit was typed:
        the file format is the same)."""
        return _read_record(self.audit_path, AuditReport, "audit", "run `halluprobe audit` first")

    def read_first_sample(self) -> Sample | None:
        """The first sample (None when there is none yet), without reading the others."""
        if not self.samples_path.exists():
            return None
        try:
            with open(self.samples_path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, start=1):
                    if line.strip():
                        try:
                            return Sample.model_validate_json(line)
                        except ValidationError as err:
                            raise InputError(f"invalid sample: {_first_error(err)}", self.samples_path, number) from None
        except UnicodeDecodeError:
            raise InputError("not UTF-8 text", self.samples_path) from None
        return None

    def read_samples(self) -> list[Sample]:
        """All complete samples; a truncated last line (a crash mid-write: no newline after it,
        and incomplete JSON or cut inside a multi-byte character) is ignored. A complete line that
        is invalid (a hand-written ``NaN``, a p_yes of 2) is refused wherever it stands. A key may
        appear twice only when its first sample is an error that a resume asked again: the later
        line replaces it, in the earlier one's place (run order is kept)."""
        samples: list[Sample] = []
        seen: dict[QuestionKey, int] = {}  # key -> index in samples
        if not self.samples_path.exists():
            return samples
        for number, line in read_log_lines(self.samples_path, "samples"):
            try:
                sample = Sample.model_validate_json(line)
            except ValidationError as err:
                raise InputError(f"invalid sample: {_first_error(err)}", self.samples_path, number) from None
            if sample.key in seen:
                earlier = seen[sample.key]
                if samples[earlier].error is None:
                    raise InputError(f"duplicate sample {sample.key}", self.samples_path, number)
                samples[earlier] = sample  # an errored sample asked again on resume: the later answer counts
                continue
            seen[sample.key] = len(samples)
            samples.append(sample)
        return samples


def sum_counts(sessions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Add up the integer counts of several sessions, nested dicts included (floats too)."""
    total: dict[str, Any] = {}
    for session in sessions:
        for key, value in session.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
                continue
            if isinstance(value, dict):
                total[key] = sum_counts([total.get(key, {}), value])
            else:
                total[key] = total.get(key, 0) + value
    return total


def _read_record(path: Path, record: type[_R], what: str, hint: str) -> _R:
    if not path.exists():
        raise InputError(f"no {what} file here: {hint}", path)
    if path.is_dir():
        raise InputError(f"is a directory, not a {what} file", path)
    _, text = read_text(path, f"{what} file")
    try:
        return record.model_validate_json(text)
    except ValidationError as err:
        raise InputError(f"invalid {what} file: {_first_error(err)}", path) from None


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "line"
    return f"{where}: {first.get('msg', 'invalid')}"
