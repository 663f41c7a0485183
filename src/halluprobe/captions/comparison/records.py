"""The decoding comparison as records: what ``halluprobe decoding`` computes (:mod:`.table`,
:mod:`.prove`), what its renderers, ``check`` and the report read, and what ``--json`` prints
(``ComparisonResult.model_dump(mode="json")``: the keys and their order are the table's JSON
since issue 24; a key absent there is absent here, not null)."""

from __future__ import annotations

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
)

from halluprobe.captions.chair.groundtruth import GroundTruthNote
from halluprobe.captions.chair.length import QuartileBin
from halluprobe.captions.chair.scoring import Difference
from halluprobe.records import FrozenRecord
from halluprobe.records_scores import BootstrapSettings

__all__ = [
    "LEVEL",
    "ChairComparison",
    "ChairIntervals",
    "ComparisonResult",
    "DecodingRun",
    "Interval",
    "MetricDifferences",
    "PairedRun",
    "ProveComparison",
    "ProveDifference",
    "ProveDifferences",
    "ProveIntervals",
    "ProvePaired",
    "ProveRun",
    "RunChair",
    "RunLengthBins",
    "SettingValue",
]

Interval = tuple[float, float]
LEVEL = 0.95  # every CI of the comparison (metrics.stats' default level)
SettingValue = bool | int | float | str  # a GenerateConfig decoding setting as run.json holds it


class DecodingRun(FrozenRecord):
    """One run of a decoding table: where it is, what it is called, how it was decoded."""

    path: str
    role: str  # "greedy baseline", "sampled baseline" or "method"
    name: str
    method: str | None  # the run.json's decode, as written ("vcd:alpha=1"); None: plain decoding
    settings: dict[str, SettingValue] = Field(default_factory=dict)  # generate's decoding keys, sorted
    sampling: dict[str, SettingValue] = Field(default_factory=dict)  # the sampling keys, in SAMPLING_KEYS' order
    sampled: bool = False
    fingerprint: str
    samples_sha256: str


class MetricDifferences(FrozenRecord):
    """One method against one baseline: CHAIR's metrics, then the length-free rates."""

    chair_s: Difference
    chair_i: Difference
    recall: Difference
    length: Difference
    halluc_per_100_words: Difference
    chair_s_at_baseline_length: Difference


class ChairIntervals(FrozenRecord):
    """A run's 95% image-bootstrap CIs (None: no resamples, or undefined)."""

    chair_s: Interval | None
    chair_i: Interval | None
    recall: Interval | None
    length: Interval | None
    halluc_per_100_words: Interval | None
    chair_s_at_baseline_length: Interval | None


class RunChair(FrozenRecord):
    """CHAIR of one run on the images every run captioned."""

    name: str
    role: str
    family: str
    n: int
    chair_s: float | None
    chair_i: float | None
    recall: float | None
    length: float | None
    ci: ChairIntervals
    halluc_per_100_words: float | None
    chair_s_at_baseline_length: float | None


class PairedRun(FrozenRecord):
    """A method (or the sampled baseline) minus the greedy baseline, and minus the sampled one
    where there is one; ``sampling_matches``: whether a sampled method drew as the sampled
    baseline did (None: the method is not sampled). Both absent from the JSON without a sampled
    baseline, and for the sampled baseline's own row."""

    name: str
    vs_greedy: MetricDifferences
    vs_sampled: MetricDifferences | None = None
    sampling_matches: bool | None = None

    @model_serializer(mode="wrap")
    def _without_sampled(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        out: dict[str, object] = handler(self)
        if self.vs_sampled is None:
            out.pop("vs_sampled", None)
            out.pop("sampling_matches", None)
        return out


class RunLengthBins(FrozenRecord):
    name: str
    bins: list[QuartileBin]


class ChairComparison(FrozenRecord):
    """The CHAIR part of a decoding comparison."""

    family: str
    tokenizer: str
    identity: dict[str, str]
    ground_truth: GroundTruthNote
    truncate_incomplete: bool
    images: int
    images_dropped: int  # captioned by some run but not by every one
    metrics: list[str]
    length_bounds: list[int]  # the greedy baseline's quartile bounds
    per_run: list[RunChair]
    paired: list[PairedRun]
    length_bins: list[RunLengthBins]


class ProveIntervals(FrozenRecord):
    hscore: Interval | None
    tscore: Interval | None


class ProveRun(FrozenRecord):
    """PROVE's scores of one run (``prove score``'s output, summarised)."""

    name: str
    role: str
    n: int
    errors: int
    hscore: float | None
    tscore: float | None
    n_hscore: int
    n_tscore: int
    ci: ProveIntervals


class ProveDifference(FrozenRecord):
    """a - b over the ``n`` questions both runs score, resampled by image."""

    n: int
    a: float | None
    b: float | None
    diff: float | None
    ci: Interval | None


class ProveDifferences(FrozenRecord):
    hscore: ProveDifference
    tscore: ProveDifference


class ProvePaired(FrozenRecord):
    name: str
    vs_greedy: ProveDifferences
    vs_sampled: ProveDifferences | None = Field(default=None, exclude_if=lambda value: value is None)


class ProveComparison(FrozenRecord):
    per_run: list[ProveRun]
    paired: list[ProvePaired]


class ComparisonResult(FrozenRecord):
    """The whole decoding comparison: the runs, the bootstrap, CHAIR (absent with ``--no-chair``)
    and PROVE (absent without ``--prove-scores``)."""

    runs: list[DecodingRun]
    bootstrap: BootstrapSettings
    chair: ChairComparison | None = Field(default=None, exclude_if=lambda value: value is None)
    prove: ProveComparison | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("bootstrap", mode="before")
    @classmethod
    def _fixed_level(cls, value: object) -> object:
        """The JSON's two keys read back with the fixed level, unit and method."""
        if isinstance(value, dict) and set(value) == {"n_resamples", "seed"}:
            return {**value, "level": LEVEL, "unit": "image", "method": "percentile"}
        return value

    @field_serializer("bootstrap")
    def _resamples_and_seed(self, bootstrap: BootstrapSettings) -> dict[str, int]:
        # the table's JSON and provenance name these two (level, unit and method are fixed)
        return {"n_resamples": bootstrap.n_resamples, "seed": bootstrap.seed}
