"""A run killed mid-way and resumed, checked against an uninterrupted reference: shared by the
prefix-cache and the model-family tests."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _scored import with_readouts

from halluprobe.records import Question, QuestionKey, RunHeader, Sample
from halluprobe.rundir import RunDir
from halluprobe.run_setup import RunConfig
from halluprobe.runner import run_questions


class Killed(Exception):
    """Stands for a kill: raised by the backend's answer generator mid-run."""


def reference_samples(backend: Any, questions: list[Question], images: Path, run: RunDir, config: RunConfig,
                      header: RunHeader) -> dict[QuestionKey, Sample]:  # fmt: skip
    """An uninterrupted run's samples, with every readout applied, by key."""
    run_questions(backend, questions, images, run, config, header)
    return {s.key: s for s in with_readouts(run.read_samples(), run.read_header())}


def kill_then_resume(backend: Any, questions: list[Question], images: Path, run: RunDir, config: RunConfig, header: RunHeader,
                     monkeypatch: pytest.MonkeyPatch, *, die_after: int) -> None:  # fmt: skip
    """Run with batches of 2 until the answer generator dies after ``die_after`` batches, then
    resume the same run dir to the end."""
    real_answer = backend.answer

    def dying(*args: Any, **kwargs: Any) -> Any:
        for i, batch in enumerate(real_answer(*args, **kwargs)):
            if i == die_after:
                raise Killed
            yield batch

    monkeypatch.setattr(backend.batching, "size", 2)
    monkeypatch.setattr(backend, "answer", dying)
    with pytest.raises(Killed):
        run_questions(backend, questions, images, run, config, header)
    assert 0 < len(run.read_samples()) < len(questions)
    monkeypatch.setattr(backend, "answer", real_answer)
    run_questions(backend, questions, images, run, replace(config, resume=True), header)


def assert_same_as_reference(run: RunDir, expected: dict[QuestionKey, Sample], n_questions: int) -> None:
    """Every question exactly once, complete, with the reference's decisions, text and numbers."""
    samples = with_readouts(run.read_samples(), run.read_header())
    keys = [s.key for s in samples]
    assert len(keys) == len(set(keys)) == n_questions and set(keys) == set(expected)
    assert run.complete_path.exists()
    for s in samples:
        assert {n: r.decision for n, r in s.readouts.items()} == {n: r.decision for n, r in expected[s.key].readouts.items()}
        assert s.text == expected[s.key].text
        for token_id, value in s.candidates.items():
            assert value == pytest.approx(expected[s.key].candidates[token_id], abs=1e-4)
