"""Typed records for every stage boundary: Question -> Request -> Response -> Sample -> Metrics.

Persisted records are frozen and reject unknown keys; every persisted file carries
``schema_version``. Every float a record accepts is finite (NaN and +-inf are refused, from
Python and from JSON alike), so whatever a record holds is written as a JSON number and read
back equal: JSON has no NaN or infinity, and pydantic would write them as ``null``. A question's key is ``(split, question_id)``: ``question_id`` alone repeats
across splits.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SerializationInfo, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

__all__ = [
    "DECODING_KEYS",
    "DecodeSpec",
    "SCHEMA_VERSION",
    "UNKNOWN_POLICIES",
    "UnknownPolicy",
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
    "LogprobMode",
]

# How an unknown answer (neither yes nor no) is counted: as wrong, as a no, as a yes, or
# dropped. Defined once here; every policy parameter and record field uses this type.
UnknownPolicy = Literal["wrong", "no", "yes", "drop"]
UNKNOWN_POLICIES: tuple[UnknownPolicy, ...] = get_args(UnknownPolicy)

SCHEMA_VERSION = 1

Label = Literal["yes", "no"]
Decision = Literal["yes", "no", "unknown"]
QuestionKey = tuple[str, int]
QuestionKind = Literal["yes_no", "open", "choice"]
# how a server run read its first-token log-probabilities: "exact" (the candidate ids by token id,
# normalised over the whole vocabulary) or "pieces" (the top-K returned strings)
LogprobMode = Literal["exact", "pieces"]


def _is_none(value: Any) -> bool:
    return value is None


def absent_when_none() -> Any:
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


class DecodeSpec(FrozenRecord):
    """A decoding method (``run --decode vcd:alpha=1,beta=0.1``), parsed once where it enters
    (:func:`~halluprobe.backends.hf.decode_rules.parse_decode_spec`): ``method`` and ``params``,
    every setting it decodes with from the spec alone (defaults included; the model's layers are
    added when its rule is built). Written as ``text``, the spec as typed, so run.json and the
    fingerprint keep the bytes of the string this replaced. A bare string (run.json of any
    version) reads back as the method with ``params`` None: a record of what was asked, resolved
    by the decoding rules only if decoded with again."""

    text: str
    method: str
    params: dict[str, float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"text": value, "method": value.partition(":")[0]}
        return value

    @model_serializer(mode="plain")
    def _as_text(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


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
    # (halluprobe.readouts.corrections): "noised", "no-image", "instruction", "layer:N", ...
    signals: tuple[str, ...] = ()
    # the "instruction" signal's disturbing instruction (recorded; the runner renders the variant)
    instruction: str | None = None
    # Free-form decoding (issue 24; backends/hf_decode.py): the method and its settings
    # (written as typed, "vcd:alpha=1,beta=0.1"; None: plain decoding) and the sampling settings
    # (None: greedy). Left out of run.json when None, so the headers of runs without them keep their bytes.
    decode: DecodeSpec | None = None
    sample: bool | None = None
    temperature: float | None = Field(default=None, gt=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    sample_top_k: int | None = Field(default=None, ge=1)
    seed: int | None = None

    @model_serializer(mode="wrap")
    def _without_unset_decoding(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for key in DECODING_KEYS:
            if out.get(key) is None:
                out.pop(key, None)
        return out

    @property
    def decodes(self) -> bool:
        """Whether the answers come from the decoding loop (a method, or sampling)."""
        return self.decode is not None or bool(self.sample)

    @property
    def stops(self) -> tuple[str, ...]:
        """The stop strings in force."""
        return YES_NO_STOP_STRINGS if self.stop_strings is None else self.stop_strings


# GenerateConfig's decoding fields (absent from run.json and the fingerprint when None)
DECODING_KEYS: tuple[str, ...] = ("decode", "sample", "temperature", "top_p", "sample_top_k", "seed")

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
    # the model a server named in its answer (a judge's ledger records it); never persisted in samples
    served_model: str | None = absent_when_none()

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
    clip: ClipSimilarity | None = absent_when_none()

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
    clip: ClipSetting | None = absent_when_none()
    # split -> content fingerprint of its benchmark file (benchmarks/fingerprint.py): which
    # published questions these are, whatever their bytes. Absent in older run dirs; not part
    # of the run's fingerprint, so their resume is unchanged.
    question_fingerprints: dict[str, str] | None = absent_when_none()
    # a server run's reading (openai backend); absent in run dirs of earlier versions and of local
    # backends: a piece-keyed run without it was read from the top-K pieces (see logprob_label)
    logprob_mode: LogprobMode | None = absent_when_none()

    @property
    def logprob_label(self) -> str | None:
        """What people read: "exact" or "top-K pieces"; None for a local backend's run."""
        if self.logprob_mode == "exact":
            return "exact"
        if self.logprob_mode == "pieces" or (self.token_sets is not None and self.token_sets.keyed_by == "piece"):
            k = self.backend_info.get("top_logprobs")
            return f"top-{k if isinstance(k, int) else 20} pieces"
        return None


