"""The inputs a provenance record names: a run dir (:class:`RunSource`, its fingerprint and
samples sha256) or a file (:class:`FileSource`, its sha256), the path as given. Shared by the
score tables' record (:mod:`halluprobe.provenance`) and the judged benchmarks' records
(:mod:`halluprobe.provenance_judged`); ``check`` locates and re-hashes them
(:mod:`halluprobe.check.sources`).
"""

from __future__ import annotations

from pathlib import Path

from halluprobe.records import FrozenRecord
from halluprobe.rundir import RunDir, sha256_file

__all__ = ["RunSource", "FileSource", "run_source"]


class RunSource(FrozenRecord):
    """One run dir a table was computed from. Without ``fingerprint`` and ``samples_sha256``
    (a run anyone regenerates, such as the README's demo run) only the numbers are checked."""

    path: str
    fingerprint: str | None = None
    samples_sha256: str | None = None


class FileSource(FrozenRecord):
    """A file a table was computed from (``score --answers``: the answers and labels files; a
    judged table: the judgments), the path as given and the sha256 of its bytes."""

    path: str
    sha256: str


def run_source(path: str | Path) -> RunSource:
    """A run dir as a table names it: the path as given, its fingerprint and samples sha256."""
    rundir = RunDir(path)
    header = rundir.read_header()
    return RunSource(path=str(path), fingerprint=header.fingerprint, samples_sha256=sha256_file(rundir.samples_path))
