"""Samples as score time sees them: each stored sample with every readout its run allows applied
(halluprobe.readouts.apply), so tests can assert on decisions next to the raw outputs."""

from __future__ import annotations

from pathlib import Path

from halluprobe.readouts.apply import apply_all
from halluprobe.records import RunHeader, Sample
from halluprobe.rundir import RunDir


def with_readouts(samples: list[Sample], header: RunHeader) -> list[Sample]:
    return [s.model_copy(update={"readouts": apply_all(s, header)}) for s in samples]


def scored_samples(path: str | Path) -> list[Sample]:
    rundir = RunDir(path)
    return with_readouts(rundir.read_samples(), rundir.read_header())
