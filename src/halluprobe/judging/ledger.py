"""The judge ledger: what a judgment dir records about its judge and about every verdict."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from halluprobe.records import SCHEMA_VERSION, FrozenRecord, GenerateConfig

__all__ = ["JUDGMENTS_SCHEMA", "JudgeHeader", "Judgment", "Verdict", "judge_header", "template_sha256"]

JUDGMENTS_SCHEMA = 1

# A parsed verdict: a benchmark's own value (MMHal: a rating 0-6; a label for others).
Verdict = int | str


def template_sha256(template: str) -> str:
    """The hash every table prints beside a judged number: the template's UTF-8 bytes."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


class JudgeHeader(FrozenRecord):
    """``judge.json``: who judged what, with which prompt and settings. A resumed pass must match it."""

    schema_version: int = JUDGMENTS_SCHEMA
    halluprobe_schema: int = SCHEMA_VERSION
    benchmark: str
    backend: str
    model: str  # as configured (the judge's --judge-model)
    backend_info: dict[str, Any] = Field(default_factory=dict)  # the backend's info(): endpoint, dtype...
    template_name: str
    template: str
    template_sha256: str
    generation: GenerateConfig
    answers: str  # where the judged answers came from (a run dir or a responses file)
    answers_sha256: str


class Judgment(FrozenRecord):
    """One line of ``judgments.jsonl``: a complete ledger entry for one judged item."""

    item_id: str
    judge_model: str
    # the model the server named in its answer (the openai backend reads the reply's "model");
    # None for a backend that reports none (hf, scripted)
    judge_model_reported: str | None = None
    template_sha256: str
    prompt_sha256: str
    generation: GenerateConfig
    reply: str | None = None
    status: Literal["parsed", "unparseable", "error"]
    verdict: Verdict | None = None
    reason: str | None = None  # why unparseable, or the backend's error


def judge_header(*, benchmark: str, template_name: str, backend: str, model: str, info: dict[str, Any],
                 generation: GenerateConfig, answers: Path, answers_sha256: str, template: str) -> JudgeHeader:  # fmt: skip
    """The ledger header of a judgment dir: ``benchmark``'s answers (``answers``, their sha256)
    judged by ``backend``/``model`` with the prompt ``template`` (named ``template_name``)."""
    return JudgeHeader(benchmark=benchmark, backend=backend, model=model, backend_info=info, template_name=template_name,
                       template=template, template_sha256=template_sha256(template), generation=generation,
                       answers=str(answers), answers_sha256=answers_sha256)  # fmt: skip
