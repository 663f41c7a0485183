"""Typed records for every stage boundary: Question -> Request -> Response -> Sample -> Metrics.

Persisted records are frozen and reject unknown keys; every persisted file carries
``schema_version``. Every float a record accepts is finite (NaN and +-inf are refused, from
Python and from JSON alike), so whatever a record holds is written as a JSON number and read
back equal: JSON has no NaN or infinity, and pydantic would write them as ``null``. A question's key is ``(split, question_id)``: ``question_id`` alone repeats
across splits.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "SCHEMA_VERSION",
    "FrozenRecord",
    "Label",
    "Decision",
    "QuestionKey",
    "QuestionKind",
    "Question",
    "Request",
    "GenerateConfig",
    "ICD_INSTRUCTION",
    "YES_NO_STOP_STRINGS",
    "TokenLogprob",
    "SignalLogprobs",
    "ClipSimilarity",
    "ClipSetting",
    "Response",
    "ReadoutResult",
    "Sample",
    "TokenSets",
    "RunHeader",
    "Metrics",
    "ScoreReport",
    "AUDIT_SCHEMA_VERSION",
    "BootstrapSettings",
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
    "AuditReport",
    "ComparedRun",
    "RunDifferences",
    "RunComparison",
]

SCHEMA_VERSION = 1

Label = Literal["yes", "no"]
Decision = Literal["yes", "no", "unknown"]
QuestionKey = tuple[str, int]
QuestionKind = Literal["yes_no", "open", "choice"]


def _is_none(value: Any) -> bool:
    return value is None


def _absent_when_none() -> Any:
    """A field whose key is left out of the JSON when it is None (as the dict never had it)."""
    return Field(default=None, exclude_if=_is_none)


class FrozenRecord(BaseModel):
    """Base of every persisted or configuration record: immutable, unknown keys refused, floats finite."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Question(FrozenRecord):
    """One benchmark question. Unknown keys of third-party lines are kept in ``metadata``.

    ``kind``: ``yes_no`` (POPE and its kin; the label is scored), ``open`` (PROVE: answered in
    free form with ``run --open-ended``; the yes/no ``label`` is a placeholder no yes/no metric
    may read) or ``choice`` (Auto-Probe's AttriBait). A file line carries ``"kind"`` only when it
    is not ``yes_no``.
    """

    split: str
    question_id: int
    image: str
    text: str
    label: Label
    object: str | None = None
    kind: QuestionKind = "yes_no"
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> QuestionKey:
        return (self.split, self.question_id)

    @property
    def is_open(self) -> bool:
        """An open question: its label is a placeholder (see ``kind``)."""
        return self.kind == "open"


class Request(FrozenRecord):
    """What a backend sees: a rendered prompt and an image path, nothing of the benchmark."""

    split: str
    question_id: int
    image_path: str
    prompt: str
    # other renderings of the same question that correction signals read, by signal name
    # ("instruction": the question under ICD's disturbing instruction)
    variants: dict[str, str] = Field(default_factory=dict)

    @property
    def key(self) -> QuestionKey:
        return (self.split, self.question_id)


# ICD's disturbance instruction (Wang et al. 2024): put in front of the question for the
# "instruction" signal. The official code draws one of several per question; one fixed
# instruction keeps a run deterministic.
ICD_INSTRUCTION = "You are a confused objects detector to provide a fuzzy overview or impression of the image."


class GenerateConfig(FrozenRecord):
    """How a backend answers: passed with each call, never set in a backend's constructor.

    ``max_new_tokens`` = 0 asks for the first token's log-probabilities only (no text).
    ``stop_strings``: None is the yes/no default (a sentence end or a newline ends the greedy
    answer: :data:`YES_NO_STOP_STRINGS`); ``()`` lets only EOS or ``max_new_tokens`` end it
    (descriptions, open-ended answers, extraction).
    """

    max_new_tokens: int = Field(default=0, ge=0)
    top_k: int = Field(default=10, ge=1)
    stop_strings: tuple[str, ...] | None = None
    # contrast inputs to capture beside the plain pass, for corrections read at score time
    # (halluprobe.corrections): "noised", "no-image", "instruction", "layer:N", ...
    signals: tuple[str, ...] = ()
    # the "instruction" signal's disturbing instruction (recorded; the runner renders the variant)
    instruction: str | None = None

    @property
    def stops(self) -> tuple[str, ...]:
        """The stop strings in force."""
        return YES_NO_STOP_STRINGS if self.stop_strings is None else self.stop_strings


# A yes/no answer needs a few tokens: stop at a sentence end or a newline (EOS stops anyway).
YES_NO_STOP_STRINGS: tuple[str, ...] = (".", "\n")


class TokenLogprob(FrozenRecord):
    id: int | None
    piece: str
    logprob: float


class SignalLogprobs(FrozenRecord):
    """A contrast input's first step (a correction's signal): the log-probability of every yes/no
    id, and the step's largest logit and log-normaliser (the plausibility cut-offs need the
    largest log-probability, ``max_logit - log_normaliser``). Nothing vocabulary-sized."""

    candidates: dict[str, float]
    max_logit: float
    log_normaliser: float
    # DoLa: Jensen-Shannon divergence of this layer's next-token distribution from the final one
    jsd: float | None = None


class ClipSimilarity(FrozenRecord):
    """The ``clip`` signal of one question (:mod:`halluprobe.clip_signal`): cosine similarities
    of CLIP's text embedding of the object's caption ("a photo of a {object}.") with the image
    embedding (``object_global``) and with the best-matching image patch (``object_patch``), the
    same two for a caption that names no object ("a photo."), and the model's logit scale."""

    object_global: float
    object_patch: float
    empty_global: float
    empty_patch: float
    logit_scale: float


class ClipSetting(FrozenRecord):
    """How a run recorded the ``clip`` signal (``run.json``; part of the fingerprint)."""

    model: str
    revision: str | None = None
    object_caption: str
    empty_caption: str


class Response(FrozenRecord):
    """What a backend returns for one request: first-token log-probabilities, text, timing."""

    split: str
    question_id: int
    first_token: list[TokenLogprob] = Field(default_factory=list)
    # log-probability of every id in every readout's token set, keyed by str(id) (JSON keys);
    # for a backend with TokenSets.keyed_by == "piece": every returned piece, keyed by the piece
    candidates: dict[str, float] = Field(default_factory=dict)
    text: str | None = None
    signals: dict[str, SignalLogprobs] = Field(default_factory=dict)
    latency_s: float = 0.0
    error: str | None = None

    @property
    def key(self) -> QuestionKey:
        return (self.split, self.question_id)


class ReadoutResult(FrozenRecord):
    decision: Decision
    # log-mass of the yes (no) set; None when the set has no mass (log 0 = -inf has no JSON form)
    yes_score: float | None = None
    no_score: float | None = None
    p_yes: float | None = Field(default=None, ge=0.0, le=1.0)

    @field_validator("yes_score", "no_score", mode="before")
    @classmethod
    def _no_mass_is_none(cls, value: object) -> object:
        # -inf is a legitimate score (no mass at all): stored as null in memory as on disk, so
        # both read alike; NaN and +inf still fail the finite-float check
        return None if isinstance(value, float) and value == float("-inf") else value


class Sample(FrozenRecord):
    """One line of ``samples.jsonl``."""

    schema_version: int = SCHEMA_VERSION
    split: str
    question_id: int
    image: str
    object: str | None
    label: Label
    prompt: str
    first_token: list[TokenLogprob] = Field(default_factory=list)
    candidates: dict[str, float] = Field(default_factory=dict)
    offset_argmax: str | None = None
    text: str | None = None
    readouts: dict[str, ReadoutResult] = Field(default_factory=dict)
    signals: dict[str, SignalLogprobs] = Field(default_factory=dict)
    latency_s: float = 0.0
    error: str | None = None
    # the clip signal (recorded by the runner, not the backend); absent from runs without it
    clip: ClipSimilarity | None = _absent_when_none()

    @property
    def key(self) -> QuestionKey:
        return (self.split, self.question_id)


class TokenSets(FrozenRecord):
    """Yes/no token sets derived from a model's own tokenizer, plus the legacy LLaVA-1.5 ids check."""

    yes_ids: list[int]
    no_ids: list[int]
    yes_pieces: list[str]
    no_pieces: list[str]
    legacy_valid: bool
    # id -> the piece this tokenizer has at that id (None when out of its vocabulary)
    legacy_pieces: dict[str, str | None] = Field(default_factory=dict)
    vocab_size: int
    tokenizer_fingerprint: str
    # "id": candidates are keyed by str(token id) and the sets list ids (a local tokenizer);
    # "piece": the backend reports token strings only (an OpenAI-compatible server): candidates
    # are keyed by the returned piece and the sets are derived from those pieces per sample.
    keyed_by: Literal["id", "piece"] = "id"


class RunHeader(FrozenRecord):
    """``run.json``: written before the first sample; resume refuses a differing fingerprint."""

    schema_version: int = SCHEMA_VERSION
    halluprobe_version: str
    created_at: str
    fingerprint: str
    backend: str
    backend_info: dict[str, Any]
    model: str
    template: str
    readouts: list[str]
    text_rules: list[str]
    max_new_tokens: int
    token_sets: TokenSets | None
    benchmarks: dict[str, str]  # split -> sha256 of the benchmark file
    benchmark_paths: dict[str, str]
    images_root: str
    limit: int | None = None
    # "I/N" when this run answers one shard of the questions (not part of the fingerprint:
    # shards of one run share it, and `halluprobe merge` checks that)
    shard: str | None = None
    # free-form answers to open questions (PROVE): no stop at '.', no logit or text readouts
    open_ended: bool = False
    # what every backend call of the run was given (None: a run dir of halluprobe 0.1)
    generate: GenerateConfig | None = None
    seed: int = 0
    packages: dict[str, str] = Field(default_factory=dict)
    # split -> the published COCO POPE versions its benchmark file is (by sha256; docs/pope-versions.md);
    # an empty list: not a published file. Absent in run dirs written before versions were pinned.
    pope_versions: dict[str, list[str]] = Field(default_factory=dict)
    # the clip signal's model and captions, when the run recorded it (absent otherwise)
    clip: ClipSetting | None = _absent_when_none()


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


class ScoreReport(FrozenRecord):
    """``metrics.json`` and the ``--json`` score object."""

    schema_version: int = SCHEMA_VERSION
    readout: str
    unknown_policy: Literal["wrong", "no", "yes", "drop"]
    splits: dict[str, Metrics]
    pooled: Metrics
    macro: Metrics
    bootstrap: dict[str, Any] = Field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# the audit (``audit.json``) and the comparison of runs; docs/design/audit.md says what each is.
# Field order is the file's key order: audit.json must stay byte-identical to what the untyped
# dict gave, so fields are never reordered and optional keys absent from old files stay absent.

AUDIT_SCHEMA_VERSION = 1
_PolicyName = Literal["wrong", "no", "yes", "drop"]
_Interval = tuple[float, float]


def _json_text(data: Any) -> str:
    """The audit files' format: Python's json (its float repr), two-space indent, UTF-8 as is."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


class BootstrapSettings(FrozenRecord):
    n_resamples: int
    seed: int
    level: float
    unit: str  # what is resampled: "image"
    method: str  # "percentile"


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
