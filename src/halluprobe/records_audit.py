"""The audit's records: ``audit.json`` (``AuditReport``) and the comparison of runs
(``RunComparison``); docs/design/audit.md says what each field is.

Field order is the file's key order: audit.json must stay byte-identical to what the untyped
dict gave, so fields are never reordered and optional keys absent from old files stay absent
(new optional fields are left out of the JSON when None, so older audits read and write the same).
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

from pydantic import Field

from halluprobe.records import FrozenRecord, TokenSets
from halluprobe.records_scores import BootstrapSettings, Metrics

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "ImportedFile",
    "ImportedFrom",
    "RunInfo",
    "ScoreTables",
    "ReadoutScores",
    "PairedTest",
    "PieceCount",
    "PieceShare",
    "GreedyAgreement",
    "TextDynamicDisagreement",
    "CurvePoint",
    "ConvergenceRule",
    "ObjectRate",
    "PairRate",
    "HallucinationProfile",
    "ConfusionCounts",
    "PYesByLabel",
    "CalibrationBin",
    "Calibration",
    "MetricShift",
    "Relabel",
    "TrainingOverlap",
    "AuditReport",
    "ComparedRun",
    "RunDifferences",
    "RunComparison",
]


def _is_none(value: Any) -> bool:
    return value is None


def _absent_when_none() -> Any:
    """A field whose key is left out of the JSON when it is None (as the dict never had it)."""
    return Field(default=None, exclude_if=_is_none)


AUDIT_SCHEMA_VERSION = 1
_PolicyName = Literal["wrong", "no", "yes", "drop"]
_Interval = tuple[float, float]


def _json_text(data: Any) -> str:
    """The audit files' format: Python's json (its float repr), two-space indent, UTF-8 as is."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


class ImportedFile(FrozenRecord):
    """An input file of an imported run, as ``halluprobe import`` hashed it."""

    name: str
    path: str
    sha256: str


class ImportedFrom(FrozenRecord):
    """What an imported run is: answers as text from another tool's files (no model ran here)."""

    format: str  # the import format (``halluprobe import FORMAT``)
    tool: str | None  # the tool that wrote the files, where the format names one
    tool_version: str | None  # where the files or the import recorded it
    files: list[ImportedFile]
    labels: dict[str, str]  # split -> labels file
    pope_versions: dict[str, list[str]]  # split -> the published POPE versions its labels are
    question_versions: dict[str, list[str]] | None  # split -> versions its question file fits, where one was read
    tool_readouts: dict[str, str]  # the tool's stored decisions, readout name -> what it is


class RunInfo(FrozenRecord):
    """What the audit read: the run's header fields and counts."""

    path: str
    model: str
    backend: str
    template: str
    halluprobe_version: str
    fingerprint: str
    created_at: str
    packages: dict[str, str]
    token_sets: TokenSets | None
    legacy_valid: bool | None
    n: int
    answered: int
    errors: int
    splits: dict[str, int]  # split -> samples, order of first appearance
    complete: bool
    readouts: list[str]  # present in at least one sample
    missing_readouts: list[str]  # listed in run.json, in no sample
    imported: ImportedFrom | None = _absent_when_none()  # an imported run only (absent from older audits)
    logprobs: str | None = _absent_when_none()  # a server run's reading: "exact" or "top-K pieces"


class ScoreTables(FrozenRecord):
    """One readout's metrics as ``score`` gives them: per split, pooled, macro."""

    splits: dict[str, Metrics]
    pooled: Metrics
    macro: Metrics


class ReadoutScores(FrozenRecord):
    """``ScoreTables`` of a readout in the audit, with whether it is valid for the vocabulary."""

    valid: bool
    forced: bool  # scored although invalid (legacy ids that are not yes/no here)
    splits: dict[str, Metrics]
    pooled: Metrics
    macro: Metrics


class PairedTest(FrozenRecord):
    """A readout (or run) against the reference on the same questions: McNemar and delta F1.

    ``b`` = this side right and the reference wrong, ``c`` the reverse; deltas are this side
    minus the reference. ``forced`` is set in the audit only (runs compared have none)."""

    forced: bool | None = _absent_when_none()
    n: int
    mcnemar_p: float
    b: int
    c: int
    delta_f1: float | None
    delta_f1_ci: _Interval | None
    delta_f1_pooled: float | None
    delta_f1_pooled_ci: _Interval | None


class PieceCount(NamedTuple):
    """An off-set argmax piece and how many answered questions had it (a JSON pair)."""

    piece: str
    count: int


class PieceShare(NamedTuple):
    """A first-token argmax piece, its count and its share of the questions with a first token."""

    piece: str
    count: int
    share: float


class GreedyAgreement(FrozenRecord):
    """A logit readout against the greedy first token (whose argmax is in a yes or no set)."""

    in_set: int
    agree: int
    disagree: int  # a near tie for a mass rule; ids that are not this model's for a max rule
    offset: int  # the argmax is in neither set


class TextDynamicDisagreement(FrozenRecord):
    n: int
    differ: int  # both decided, differently
    text_unknown: int
    dynamic_unknown: int
    both_unknown: int


class CurvePoint(NamedTuple):
    """Pooled F1 after the first ``k`` samples in run order (a JSON pair)."""

    k: int
    f1: float | None


class ConvergenceRule(FrozenRecord):
    step: int
    metric: str
    tol: float


class ObjectRate(FrozenRecord):
    """An absent object: how often (``yes`` of ``n`` label-no questions) it was answered yes."""

    object: str
    yes: int
    n: int
    rate: float


class PairRate(FrozenRecord):
    """An adversarial negative by the positive asked just before it about the same image."""

    positive: str
    negative: str
    yes: int
    n: int
    rate: float


class HallucinationProfile(FrozenRecord):
    readout: str
    absent_questions: int
    absent_yes: int
    objects: list[ObjectRate]
    adversarial_pairs: list[PairRate]
    adversarial_unpaired: int


class ConfusionCounts(FrozenRecord):
    tp: int
    fp: int
    tn: int
    fn: int
    unknown: int


class PYesByLabel(FrozenRecord):
    """p_yes of the answered questions by their label, run order, rounded to 4 decimals."""

    yes: list[float]
    no: list[float]


class CalibrationBin(FrozenRecord):
    lo: float
    hi: float
    count: int
    mean_p: float | None
    frac_yes: float | None


class Calibration(FrozenRecord):
    n: int
    bins: list[CalibrationBin]
    ece: float | None


class MetricShift(FrozenRecord):
    """New minus old, metric name -> difference, for the macro and the pooled table."""

    macro: dict[str, float | None]
    pooled: dict[str, float | None]


class Relabel(FrozenRecord):
    """The stored answers rescored against other labels: one file (``file``, ``split``) or all
    files together (``files``)."""

    file: str | None = _absent_when_none()
    split: str | None = _absent_when_none()
    files: list[str] | None = _absent_when_none()
    splits: list[str]
    matched: int
    removed: int
    flipped: int
    flipped_to_yes: int
    flipped_to_no: int
    added: int
    image_mismatches: int
    metrics: dict[str, ScoreTables]  # valid readouts only
    shift: dict[str, MetricShift]


class TrainingOverlap(FrozenRecord):
    """A run's distinct images by COCO 2017 split (benchmarks/coco_split.py), and the readout
    scored over the questions about each part; present only where some image has a COCO name."""

    images: int
    coco_images: int  # with a COCO file name
    val2017: int  # held out from anything trained on train2017
    train2017: int  # train2014 / val2014 images outside val2017: train2017 since the 2017 re-split
    unplaced: int  # COCO names whose 2017 split the val2017 list cannot tell
    val2017_ids_sha256: str  # the pinned id list that decided it
    readout: str
    held_out: ScoreTables | None  # questions about val2017 images (None: none)
    in_train2017: ScoreTables | None  # questions about train2017 images (None: none)


class AuditReport(FrozenRecord):
    """``audit.json``: how much of a run's number is the measurement (``audit_run``)."""

    schema_version: int = AUDIT_SCHEMA_VERSION
    run: RunInfo
    headline: str
    policy: _PolicyName
    bootstrap: BootstrapSettings
    readouts: dict[str, ReadoutScores]
    paired: dict[str, PairedTest]  # every readout but the headline, against it
    agreement: dict[str, dict[str, float | None]]
    offset_rate: float | None
    offset_pieces: list[PieceCount]
    first_pieces: list[PieceShare]
    first_pieces_total: int
    first_pieces_distinct: int
    greedy: dict[str, GreedyAgreement]
    text_dynamic_disagreements: dict[str, TextDynamicDisagreement]  # text rule (no prefix) -> counts
    convergence: dict[str, list[CurvePoint]]
    stable_after: dict[str, int | None]
    convergence_rule: ConvergenceRule
    hallucination_profile: HallucinationProfile
    confusion: dict[str, dict[str, ConfusionCounts]]  # readout -> split -> counts
    p_yes: dict[str, PYesByLabel]
    calibration: dict[str, Calibration]
    relabel: dict[str, Relabel]  # labels file as given -> rescoring
    relabel_combined: Relabel | None = _absent_when_none()
    # where no headline was asked and the run has no ``dynamic``: which readout it named, and why
    headline_note: str | None = _absent_when_none()
    # COCO images only: how many are train2017 images, and the held-out score (absent otherwise)
    training_overlap: TrainingOverlap | None = _absent_when_none()

    def to_json_dict(self) -> dict[str, Any]:
        """The plain JSON object of ``audit.json`` (what ``audit_run`` returned before it was typed)."""
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        """The text of ``audit.json``."""
        return _json_text(self.to_json_dict())


class ComparedRun(FrozenRecord):
    path: str
    label: str  # short, distinguishing: what differs (model, template), else the folder name
    model: str
    template: str
    n: int
    errors: int
    valid: bool
    forced: bool


class RunDifferences(FrozenRecord):
    model: bool
    template: bool


class RunComparison(FrozenRecord):
    """``compare_runs``: runs over the same questions, one readout, each against the first."""

    schema_version: int = AUDIT_SCHEMA_VERSION
    readout: str
    policy: _PolicyName
    bootstrap: BootstrapSettings
    runs: list[ComparedRun]
    differ_in: Literal["model", "template", "both", "neither"]
    differs: RunDifferences
    common_questions: int
    reference: str  # the first run's label
    table: dict[str, ScoreTables]  # run label -> metrics over the common questions
    paired: dict[str, PairedTest]  # later runs' labels -> against the first

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        return _json_text(self.to_json_dict())
