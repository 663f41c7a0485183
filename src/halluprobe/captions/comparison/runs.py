"""The runs a decoding table compares, each read once (``run.json`` through the typed header,
``samples.jsonl`` once, plus the sha256 of its bytes the provenance names), their roles and the
checks that they belong together: the same model and the same questions about the same images
with the same prompts, so that a per-image difference pairs like with like.

A run's method is its header's ``generate.decode`` (``vcd:alpha=1,beta=0.1``); a run without
one is named by its folder. Every decoding setting of ``generate`` (``sample``, ``temperature``,
``top_p``, ``sample_top_k``, ``seed``) is reported, and the sampling ones apart, so a method's
sampling can be set beside the sampled baseline's. Before issue 31 the raw JSON was read a
second time for these keys; it was read only after the typed header had accepted the file, so
the shapes it also knew (a top-level ``decode``, ``decode`` as an object, ``do_sample``) were
refused then as now (tested). The one difference: a hand-edited number reads as the header's
type (``"temperature": 1`` names the run ``temperature=1.0``, as every run halluprobe writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from halluprobe.captions.chair.runs import sample_captions
from halluprobe.captions.chair.scoring import Caption
from halluprobe.captions.comparison.records import DecodingRun, SettingValue
from halluprobe.errors import InputError
from halluprobe.records import DECODING_KEYS, GenerateConfig, RunHeader, Sample
from halluprobe.rundir import RunDir, sha256_file

__all__ = [
    "SAMPLING_KEYS",
    "ComparisonRuns",
    "LoadedRun",
    "decoding_identity",
    "load_comparison",
    "load_run",
    "refuse_other_models",
    "refuse_other_questions",
    "run_captions_of",
]

SAMPLING_KEYS = ("sample", "temperature", "top_p", "sample_top_k", "seed")
ROLES = ("greedy baseline", "method", "sampled baseline")


@dataclass(frozen=True)
class LoadedRun:
    """A run dir read once: its header, its samples and their sha256."""

    path: Path
    header: RunHeader
    samples: tuple[Sample, ...]
    samples_sha256: str

    @property
    def rundir(self) -> RunDir:
        return RunDir(self.path)


def load_run(path: Path) -> LoadedRun:
    """``run.json`` and ``samples.jsonl`` of ``path``, each read once (bad input: one line)."""
    rundir = RunDir(path)
    header = rundir.read_header()  # refuses a folder without run.json, or a malformed one
    if not rundir.samples_path.is_file():
        raise InputError("no samples.jsonl beside run.json", rundir.samples_path)
    return LoadedRun(Path(path), header, tuple(rundir.read_samples()), sha256_file(rundir.samples_path))


def decoding_identity(generate: GenerateConfig | None, folder_name: str) -> tuple[str, str | None, dict[str, SettingValue], dict[str, SettingValue], bool]:
    """(name, method, decoding settings, sampling settings, sampled?) of a run's ``generate``."""
    method = None if generate is None or generate.decode is None or not generate.decode.text else generate.decode.text
    given: dict[str, SettingValue] = {}
    for key in DECODING_KEYS:
        value = None if generate is None or key == "decode" else getattr(generate, key)
        if value is not None:
            given[key] = value
    settings = dict(sorted(given.items()))
    sampling = {k: given[k] for k in SAMPLING_KEYS if k in given}
    # a temperature without `sample` said (hand-written headers) samples, as transformers' would
    sampled = generate is not None and (bool(generate.sample) or (generate.sample is None and generate.temperature is not None))
    name = method if method else folder_name
    if sampled:
        name += " (sampled" + "".join(f", {k}={v}" for k, v in sampling.items() if k != "sample") + ")"
    return name, method, settings, sampling, sampled


def decoding_run(run: LoadedRun, role: str) -> DecodingRun:
    """The run as a table names it."""
    name, method, settings, sampling, sampled = decoding_identity(run.header.generate, run.path.resolve().name)
    return DecodingRun(path=str(run.path), role=role, name=name, method=method, settings=settings, sampling=sampling, sampled=sampled,
                       fingerprint=run.header.fingerprint, samples_sha256=run.samples_sha256)  # fmt: skip


def run_captions_of(run: LoadedRun) -> list[Caption]:
    """The captions of a loaded run, as ``captions.chair.runs.run_captions`` reads them from a run
    dir (the samples are not read again): a yes/no run is refused, errored samples left out."""
    if not run.header.open_ended:
        raise InputError("a run of yes/no answers: CHAIR scores captions (build the questions with `halluprobe build chair`, "
                         "run them with `halluprobe run --open-ended`, or import a caption file)", run.rundir.header_path)  # fmt: skip
    return sample_captions(run.samples, run.rundir.samples_path)


def refuse_other_questions(baseline: LoadedRun, others: Sequence[LoadedRun]) -> None:
    """One line, naming the run's samples file, when a run asked other questions (a question
    missing or added, another image or another prompt) than the baseline."""
    base = {s.key: (s.image, s.prompt) for s in baseline.samples}
    for run in others:
        theirs = {s.key: (s.image, s.prompt) for s in run.samples}
        where = run.rundir.samples_path
        extra = sorted(set(theirs) - set(base))
        missing = sorted(set(base) - set(theirs))
        if extra or missing:
            key = (extra or missing)[0]
            raise InputError(f"not the questions of the baseline {baseline.path}: {len(missing)} of its questions missing, {len(extra)} others "
                             f"(e.g. {key[0]}/{key[1]})", where)  # fmt: skip
        for key, (image, prompt) in sorted(base.items()):
            if theirs[key][0] != image:
                raise InputError(f"question {key[0]}/{key[1]} is about {theirs[key][0]!r}, the baseline's about {image!r}: other images", where)
            if theirs[key][1] != prompt:
                raise InputError(f"question {key[0]}/{key[1]} asked {theirs[key][1]!r}, the baseline {prompt!r}: other questions", where)


def refuse_other_models(baseline: LoadedRun, others: Sequence[LoadedRun]) -> None:
    """One line, naming the run's ``run.json``, when a run's model is not the baseline's: a
    decoding method is compared on the model the baseline decoded (``--allow-other-models``)."""
    for run in others:
        if run.header.model != baseline.header.model:
            raise InputError(f"the model {run.header.model!r} is not the greedy baseline's {baseline.header.model!r}: a decoding table "
                             "compares methods on one model (--allow-other-models to compare anyway)", run.rundir.header_path)  # fmt: skip


@dataclass(frozen=True)
class ComparisonRuns:
    """The runs of one comparison, each read once, with their roles."""

    loaded: tuple[LoadedRun, ...]  # the greedy baseline, the methods, then the sampled baseline if any
    runs: tuple[DecodingRun, ...]

    @property
    def sampled(self) -> bool:
        return self.runs[-1].role == "sampled baseline"


def _refuse_wrong_baselines(runs: ComparisonRuns) -> None:
    """One line when a baseline's run.json says it is not one: a greedy baseline decoded with a
    method or by sampling, a sampled baseline decoded with a method, or a run halluprobe decoded
    greedily given as the sampled baseline (an imported run, which records no sampling, is
    taken as given)."""
    for run, loaded in zip(runs.runs, runs.loaded):
        header = loaded.rundir.header_path
        if run.role == "greedy baseline" and (run.method is not None or run.sampled):
            how = f"with {run.method}" if run.method is not None else "by sampling"
            raise InputError(f"the greedy baseline was decoded {how}: give a run without --decode and --sample first", header)
        if run.role == "sampled baseline" and run.method is not None:
            raise InputError(f"the sampled baseline was decoded with {run.method}: give a plain --sample run", header)
        if run.role == "sampled baseline" and not run.sampled and not loaded.header.backend.startswith("import:"):
            raise InputError("the sampled baseline was decoded greedily: give a run made with --sample --seed", header)


def load_comparison(
    baseline: Path | LoadedRun,
    methods: Sequence[Path | LoadedRun],
    sampled_baseline: Path | LoadedRun | None,
    *,
    allow_other_models: bool = False,
) -> ComparisonRuns:
    """The runs read (or taken as read), their roles from the argument order, refused in one line
    when their run.json contradicts a role, when a run asked other questions, or (unless
    ``allow_other_models``) when a run's model is not the baseline's."""
    if not methods:
        raise InputError("give at least one method run after the greedy baseline")
    given = [baseline, *methods, *([sampled_baseline] if sampled_baseline is not None else [])]
    paths = [g.path if isinstance(g, LoadedRun) else Path(g) for g in given]
    if len({p.resolve() for p in paths}) != len(paths):
        raise InputError("a run is given twice: the baseline, the methods and the sampled baseline are different runs")
    loaded = tuple(g if isinstance(g, LoadedRun) else load_run(g) for g in given)
    roles = ["greedy baseline", *(["method"] * len(methods)), *(["sampled baseline"] if sampled_baseline is not None else [])]
    runs = ComparisonRuns(loaded, tuple(decoding_run(run, role) for run, role in zip(loaded, roles)))
    _refuse_wrong_baselines(runs)
    refuse_other_questions(loaded[0], loaded[1:])
    if not allow_other_models:
        refuse_other_models(loaded[0], loaded[1:])
    return runs
