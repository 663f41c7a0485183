"""The sources a table or claim names: run dirs (and answers or labels files) located among
``--runs``, their state (missing, incomplete, changed since), and their score reports
recomputed once each."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from halluprobe.check.findings import Finding
from halluprobe.errors import InputError
from halluprobe.judging.store import JudgmentDir
from halluprobe.jsonl import loads, read_text
from halluprobe.provenance_sources import FileSource, RunSource
from halluprobe.records import UnknownPolicy
from halluprobe.records_scores import ScoreReport
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.scoring import score_rundir

__all__ = ["RunCache", "file_findings", "judgment_findings", "locate_run", "run_findings"]

def locate_run(reference: str, runs: Sequence[Path]) -> Path:
    """The run dir a table or claim names: among ``--runs``, the one whose path ends with the
    most of the reference's trailing parts (``/tmp/x/halluprobe-demo/run`` serves
    ``halluprobe-demo/run``); without a match, the reference itself (from the current folder)."""
    ref_parts = [p for p in Path(reference).parts if p not in (".", "")]
    best: list[Path] = []
    best_len = 0
    for run in runs:
        run_parts = [p for p in Path(run).parts if p not in (".", "")]
        common = 0
        while common < min(len(ref_parts), len(run_parts)) and ref_parts[-1 - common] == run_parts[-1 - common]:
            common += 1
        if common > best_len:
            best, best_len = [run], common
        elif common == best_len and common > 0:
            best.append(run)
    if len(best) > 1:
        raise InputError(f"--runs: {len(best)} dirs match the run {reference!r} equally well: {', '.join(map(str, best))}")
    return best[0] if best else Path(reference)


class RunCache:
    """Recomputed score reports, one per (run, readout, policy, seed, resamples, forced)."""

    def __init__(self) -> None:
        self._reports: dict[tuple[str, str, str, int, int, bool], ScoreReport] = {}

    def report(
        self, path: Path, readout: str, policy: UnknownPolicy, seed: int, resamples: int, force_invalid: bool = False
    ) -> ScoreReport:
        key = (str(path.resolve()), readout, policy, seed, resamples, force_invalid)
        if key not in self._reports:
            self._reports[key] = score_rundir(
                path, readout=readout, policy=policy, n_resamples=resamples, seed=seed, write=False,
                force_invalid=force_invalid,
            )  # fmt: skip
        return self._reports[key]

    def point_report(self, path: Path, readout: str, policy: UnknownPolicy, force_invalid: bool = False) -> ScoreReport:
        """Point values only: any report already computed for the run serves, else one without bootstrap."""
        resolved = str(path.resolve())
        for (run, r, p, _, _, forced), report in self._reports.items():
            if (run, r, p, forced) == (resolved, readout, policy, force_invalid):
                return report
        return self.report(path, readout, policy, 0, 0, force_invalid=force_invalid)


def run_findings(source: RunSource, path: Path, readout: str, policy: UnknownPolicy, where: tuple[str, int]) -> tuple[list[Finding], bool]:
    """What is wrong with a named run dir, and whether it can be recomputed at all."""
    file, line = where
    rundir = RunDir(path)
    if not rundir.header_path.is_file() or not rundir.samples_path.is_file():
        return [Finding("run-missing", file, line, f"run dir {path} is missing (no run.json or samples.jsonl)")], False
    findings = []
    if not rundir.complete_path.exists():
        findings.append(Finding("run-incomplete", file, line, f"run dir {path} is not complete (no complete.json)"))
    if source.fingerprint is not None and rundir.read_header().fingerprint != source.fingerprint:
        findings.append(Finding("run-changed", file, line, f"run dir {path} is another run now (its fingerprint changed)"))
    elif source.samples_sha256 is not None and sha256_file(rundir.samples_path) != source.samples_sha256:
        findings.append(Finding("run-changed", file, line, f"samples of {path} changed since this was written (samples.jsonl sha256)"))
    if rundir.metrics_path.is_file():
        try:
            scored = loads(read_text(rundir.metrics_path, "metrics file")[1])
        except (InputError, json.JSONDecodeError):
            scored = {}
        if isinstance(scored, dict) and scored.get("readout") == readout and scored.get("unknown_policy") not in (None, policy):
            findings.append(
                Finding(
                    "policy", file, line,
                    f"{path}/metrics.json was scored with unknown={scored['unknown_policy']}; this is checked with unknown={policy}",
                )  # fmt: skip
            )
    return findings, True


def file_findings(source: FileSource, runs: Sequence[Path], where: tuple[str, int]) -> tuple[list[Finding], Path | None]:
    """What is wrong with a named input file (an answers or labels file), and its path when it
    can be read at all. Located like a run dir: ``--runs`` may name it."""
    file, line = where
    path = locate_run(source.path, runs)
    if not path.is_file():
        return [Finding("file-missing", file, line, f"{path} is missing")], None
    if sha256_file(path) != source.sha256:
        return [Finding("file-changed", file, line, f"{path} changed since this was written (sha256)")], path
    return [], path


def judgment_findings(source: FileSource, runs: Sequence[Path], where: tuple[str, int]) -> tuple[list[Finding], JudgmentDir | None]:
    """What is wrong with a judged table's judgment dir (``source``: its judgments file, whose
    folder holds judge.json), and the dir when it can be read at all. Located like a run dir."""
    file, line = where
    store = JudgmentDir(locate_run(source.path, runs))
    if not store.header_path.is_file() or not store.judgments_path.is_file():
        return [Finding("file-missing", file, line, f"judgment dir {store.path} is missing (no judge.json or judgments.jsonl)")], None
    if sha256_file(store.judgments_path) != source.sha256:
        return [Finding("file-changed", file, line, f"{store.judgments_path} changed since this was written (sha256)")], store
    return [], store
