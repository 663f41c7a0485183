"""The score's records: the metrics of one split, the bootstrap settings of every CI, and the
score report (``metrics.json``, ``score --json``). The records the run writes are in records.py."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictInt, field_serializer, field_validator, model_validator

from halluprobe.records import SCHEMA_VERSION, FrozenRecord, UnknownPolicy, absent_when_none

__all__ = ["BootstrapSettings", "Metrics", "ScoreReport"]


class Metrics(FrozenRecord):
    """Metrics of one split (or pooled / macro). Counts beside every ratio; CIs beside them."""

    n: int
    tp: int
    fp: int
    tn: int
    fn: int
    unknown: int
    errors: int = 0
    accuracy: float | None
    precision: float | None
    recall: float | None
    f1: float | None
    yes_ratio: float | None
    unknown_rate: float | None
    htr: float | None
    auroc: float | None = None
    ece: float | None = None
    ci: dict[str, tuple[float, float] | None] = Field(default_factory=dict)


class BootstrapSettings(FrozenRecord):
    """How CIs were drawn, the one shape of metrics.json, audit.json, corrections and provenance
    comments: a key a writer never had stays out of its JSON; ``resamples`` (older) reads too."""

    n_resamples: StrictInt  # strict: a comment's ``true`` is not 1 resample
    seed: StrictInt
    level: float | None = absent_when_none()
    unit: str | None = absent_when_none()  # the audit's: what is resampled ("image")
    method: str | None = absent_when_none()
    cluster: str | None = absent_when_none()  # metrics.json's name for the unit
    n_clusters: int | None = absent_when_none()
    macro: str | None = absent_when_none()
    draws: int | None = absent_when_none()  # the corrections table's sampled draws

    @model_validator(mode="before")
    @classmethod
    def _resamples_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "resamples" in data and "n_resamples" not in data:
            data = {("n_resamples" if k == "resamples" else k): v for k, v in data.items()}
        return data


class ScoreReport(FrozenRecord):
    """``metrics.json`` and the ``--json`` score object."""

    schema_version: int = SCHEMA_VERSION
    readout: str
    unknown_policy: UnknownPolicy
    splits: dict[str, Metrics]
    pooled: Metrics
    macro: Metrics
    bootstrap: BootstrapSettings | None = None  # None: written as {} (a report scored without the settings)

    @field_validator("bootstrap", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == {} else value

    @field_serializer("bootstrap")
    def _score_order(self, value: BootstrapSettings | None) -> dict[str, Any]:
        data = {} if value is None else value.model_dump(mode="json")  # metrics.json's key order: method first
        return {k: data[k] for k in ("method", "cluster", "n_clusters", "n_resamples", "seed", "level", "macro", *data) if k in data}
