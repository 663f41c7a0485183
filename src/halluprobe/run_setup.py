"""What a run is before any question is asked: its settings (:class:`RunConfig`), its plan
(:func:`plan_run`: the benchmark files read, the questions chosen and every check that needs no
model, made once before any model loads; :func:`check_backend`: what only the loaded model can
answer, asked once before the run dir is written), and the header written first
(:func:`make_header`) with its fingerprint. :mod:`halluprobe.runner` executes the plan.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from halluprobe import __version__
from halluprobe.backends.base import Backend, DecodesText, RecordsSignals
from halluprobe.backends.hf.decode_rules import BRANCHES, check_decoding, resolved
from halluprobe.benchmarks.fingerprint import content_fingerprint
from halluprobe.benchmarks.question_file import read_questions, split_name
from halluprobe.benchmarks.versions import versions_of_file
from halluprobe.clip_signal import CLIP_SIGNAL, ClipScorer
from halluprobe.errors import InputError
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.text import TEXT_RULES
from halluprobe.readouts.value import TEXT_PREFIX
from halluprobe.records import DECODING_KEYS, ICD_INSTRUCTION, DecodeSpec, GenerateConfig, Question, RunHeader
from halluprobe.rundir import RunDir, fingerprint_of, sha256_file
from halluprobe.shards import Shard, limit_questions, select_shard

__all__ = [
    "MAX_NEW_TOKENS",
    "RunConfig",
    "RunPlan",
    "check_backend",
    "make_header",
    "plan_questions",
    "plan_run",
    "read_benchmarks",
    "run_fingerprint",
]

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class RunConfig:
    model: str
    backend: str = "hf"
    template: str | None = None
    # Any non-empty list asks for the greedy text (every text rule can be applied at score
    # time); empty: first-token log-probabilities only. The names are recorded in run.json.
    text_rules: tuple[str, ...] = ("pope", "exact", "yorn", "strict")
    max_new_tokens: int = 8
    top_k: int = 10
    limit: int | None = None
    resume: bool = False
    force: bool = False
    overwrite: bool = False
    shard: str | None = None  # "I/N": recorded in the header, not part of the fingerprint
    # Open questions (PROVE): full greedy answers of up to max_new_tokens (no stop at '.'),
    # no yes/no readouts.
    open_ended: bool = False
    # --resume asks errored samples again (a later answer replaces the error in samples.jsonl)
    retry_errors: bool = True
    # mark the run complete even though some samples are errors
    accept_errors: bool = False
    # contrast passes recorded per question for corrections read at score time (halluprobe.readouts.corrections)
    signals: tuple[str, ...] = ()
    # the disturbing instruction put in front of each question for the "instruction" signal (ICD)
    instruction: str = ICD_INSTRUCTION
    # free-form decoding (open-ended runs, hf backend): the method, parsed where it entered
    # (hf_decode_rules.parse_decode_spec: "vcd:alpha=1"), and sampling
    decode: DecodeSpec | None = None
    sample: bool = False
    temperature: float | None = None
    top_p: float | None = None
    sample_top_k: int | None = None
    seed: int | None = None

    @property
    def generates_text(self) -> bool:
        return self.open_ended or bool(self.text_rules)

    @property
    def backend_signals(self) -> tuple[str, ...]:
        """The signals the answering backend records: all but ``clip`` (the runner's own)."""
        return tuple(s for s in self.signals if s != CLIP_SIGNAL)

    def generate_config(self) -> GenerateConfig:
        """What each backend call is given: text only when a text rule or open answers need it."""
        return GenerateConfig(
            max_new_tokens=self.max_new_tokens if self.generates_text else 0,
            top_k=self.top_k,
            stop_strings=() if self.open_ended else None,
            signals=self.backend_signals,
            instruction=self.instruction if "instruction" in self.signals or self.decode_branch == "instruction" else None,
            decode=self.decode,
            sample=True if self.sample else None,
            temperature=self.temperature if self.sample else None,
            top_p=self.top_p if self.sample else None,
            sample_top_k=self.sample_top_k if self.sample else None,
            seed=self.seed if self.sample else None,
        )

    @property
    def decode_branch(self) -> str | None:
        """The contrast branch the decoding method runs beside the base one (a request variant)."""
        return BRANCHES[self.decode.method] if self.decode is not None else None

    @property
    def asks_decoding(self) -> bool:
        """Whether any decoding setting is given (each is checked, even one that needs another)."""
        sampling = (self.temperature, self.top_p, self.sample_top_k, self.seed)
        return self.decode is not None or self.sample or any(v is not None for v in sampling)


def read_benchmarks(files: Sequence[Path]) -> tuple[list[Question], dict[str, tuple[Path, str]]]:
    """Every question of the benchmark files, and split -> (resolved path, sha256) for the
    header; a missing file or two files of one split are refused."""
    questions: list[Question] = []
    fingerprints: dict[str, tuple[Path, str]] = {}
    for path in files:
        if not path.is_file():
            raise InputError("benchmark file not found", path)
        split = split_name(path)
        if split in fingerprints:
            raise InputError(f"two benchmark files give the split {split!r}", path)
        questions.extend(read_questions(path, split=split))
        fingerprints[split] = (path.resolve(), sha256_file(path))
    return questions, fingerprints


def _package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("halluprobe", "torch", "transformers", "pydantic", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


MAX_NEW_TOKENS = 32_768  # longer than any VLM context halluprobe runs (LLaVA-1.5: 4,096)

# stands for "greedy text is stored" in the fingerprint (halluprobe 0.1's default rule list)
_TEXT_FINGERPRINT = ("pope", "exact", "yorn", "strict")


def run_fingerprint(header: RunHeader, *, legacy: bool = False) -> str:
    """What may not change between a run and its resume: a change here is refused.

    Which text rules a run lists does not change what it stores (any rule is applied at score
    time), so only whether it generates text counts: a run that does is fingerprinted with the
    default rule list of halluprobe 0.1 (so a default run keeps the fingerprint it had there),
    one that does not with an empty list. ``legacy``: 0.1's form, the rule list as given, so
    that any older run dir can still be resumed.
    """
    rules = list(header.text_rules) if legacy else (list(_TEXT_FINGERPRINT) if header.text_rules else [])
    return fingerprint_of(
        {
            "backend": header.backend,
            "model": header.model,
            "dtype": header.backend_info.get("dtype"),
            "template": header.template,
            "text_rules": rules,
            "max_new_tokens": header.max_new_tokens,
            "tokenizer": header.token_sets.tokenizer_fingerprint if header.token_sets else None,
            "benchmarks": dict(sorted(header.benchmarks.items())),
            # only when set, so the fingerprints of existing yes/no runs do not change
            **({"open_ended": True} if header.open_ended else {}),
            **({"signals": list(header.generate.signals)} if header.generate is not None and header.generate.signals else {}),
            **({"instruction": header.generate.instruction} if header.generate is not None and header.generate.instruction else {}),
            **({"clip": header.clip.model_dump(mode="json")} if header.clip is not None else {}),
            # only when set: a resume with another method or other sampling settings is refused
            **({"decoding": _decoding_fields(header.generate)} if header.generate is not None and header.generate.decodes else {}),
            # only when exact: a piece-read run keeps the fingerprint earlier versions gave it, and
            # a resume or merge of an exact run with a piece-read one is refused
            **({"logprobs": "exact"} if header.logprob_mode == "exact" else {}),
        }
    )


def _decoding_fields(generate: GenerateConfig) -> dict[str, Any]:
    """The decoding settings as run.json writes them (the spec as typed), those set only."""
    written = generate.model_dump(mode="json")
    return {k: written[k] for k in DECODING_KEYS if written.get(k) is not None}


def _backend_info(backend: Backend, config: RunConfig) -> dict[str, Any]:
    """``backend.info()``, and for a ``--decode`` run every setting its method decodes with
    (``decoding``: defaults and the model's layers resolved; a record, outside the fingerprint,
    which holds the spec as typed)."""
    info = backend.info()
    if config.decode is not None and isinstance(backend, DecodesText):
        info = {**info, "decoding": backend.decoding_settings(config.decode)}
    return info


def make_header(
    config: RunConfig,
    backend: Backend,
    benchmarks: Mapping[str, tuple[Path, str]],
    images_root: Path,
    clip: ClipScorer | None = None,
) -> RunHeader:
    """The header: written before the first sample. ``benchmarks``: split -> (path, sha256);
    ``clip``: the scorer of the ``clip`` signal, when the run records it."""

    text_rules = [] if config.open_ended else list(config.text_rules)
    info = _backend_info(backend, config)
    header = RunHeader(
        halluprobe_version=__version__,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        fingerprint="",
        backend=config.backend,
        backend_info=info,
        model=config.model,
        template=config.template or "chat",
        # every readout the stored outputs allow: all text rules whenever text is generated
        readouts=[] if config.open_ended else list(LOGIT_READOUTS) + ([TEXT_PREFIX + r for r in TEXT_RULES] if text_rules else []),
        text_rules=text_rules,
        max_new_tokens=config.max_new_tokens,
        token_sets=backend.token_sets(),
        benchmarks={split: sha for split, (_, sha) in benchmarks.items()},
        benchmark_paths={split: str(path) for split, (path, _) in benchmarks.items()},
        images_root=str(images_root),
        limit=config.limit,
        shard=config.shard,
        open_ended=config.open_ended,
        generate=config.generate_config(),
        packages=_package_versions(),
        pope_versions={split: versions_of_file(sha) for split, (_, sha) in benchmarks.items()},
        clip=clip.setting() if clip is not None else None,
        # what each file asks, whatever its bytes (a file only named, as a test's stand-in, has none)
        question_fingerprints={split: content_fingerprint(read_questions(path, split=split)) for split, (path, _) in benchmarks.items() if Path(path).is_file()} or None,
        # a server backend says how it read the log-probabilities (docs/design/openai-backend.md)
        logprob_mode=info.get("logprob_mode"),
    )
    return header.model_copy(update={"fingerprint": run_fingerprint(header)})


@dataclass(frozen=True)
class RunPlan:
    """A run decided before any model loads (:func:`plan_run`): what :func:`~halluprobe.runner.execute_plan`
    does, with every check that needs no model already made."""

    config: RunConfig
    questions: tuple[Question, ...]  # to answer (limited, then sharded), in file order
    benchmarks: Mapping[str, tuple[Path, str]]  # split -> (benchmark file, sha256)
    images_root: Path
    rundir: RunDir
    generate: GenerateConfig  # what each backend call is given (the decode spec typed)
    variants: tuple[str, ...]  # the renderings asked beside each prompt: "instruction", "no-image"
    clip: bool  # the clip signal is recorded (its scorer is built by the caller, outside the plan)

    @property
    def sources(self) -> dict[str, str]:
        """split -> the benchmark file an error about one of its questions names."""
        return {split: str(path) for split, (path, _) in self.benchmarks.items()}


def plan_run(config: RunConfig, benchmark: Sequence[Path], images_root: Path, out: Path, *, shard: Shard | None = None, clip: bool = False) -> RunPlan:
    """``halluprobe run``'s plan: the files read and every check that needs no model, once, in
    this order, before any model loads. ``shard``: the part of the questions to answer (parsed
    at the edge, as ``config.decode``); ``clip``: a CLIP model is given."""
    if not images_root.is_dir():
        raise InputError("images root is not a directory", images_root)
    if out.exists() and not out.is_dir():
        raise InputError("--out must be a run directory, not a file", out)
    if config.generates_text and config.max_new_tokens == 0:
        raise InputError("--max-new-tokens 0 stores no text: give --no-text for a logits-only run")
    if config.max_new_tokens > MAX_NEW_TOKENS:  # the decoding loop runs until EOS or this: 10^9 never ends
        raise InputError(f"--max-new-tokens {config.max_new_tokens} is over the limit of {MAX_NEW_TOKENS:,}")
    questions, benchmarks = read_benchmarks(benchmark)
    return plan_questions(config, select_shard(limit_questions(questions, config.limit), shard), benchmarks, images_root, RunDir(out), clip=clip)


def plan_questions(
    config: RunConfig, questions: Sequence[Question], benchmarks: Mapping[str, tuple[Path, str]], images_root: Path, rundir: RunDir, *, clip: bool
) -> RunPlan:
    """The plan of questions already chosen (:func:`plan_run`'s, or a caller's that holds a
    model already: the demo, :func:`~halluprobe.runner.run_questions`)."""
    sources = {split: str(path) for split, (path, _) in benchmarks.items()}
    if config.decode is not None and config.decode.params is None:  # a spec read back from a string: parsed here, once
        config = replace(config, decode=resolved(config.decode))
    if config.asks_decoding:
        check_decoding(
            config.decode, sample=config.sample, temperature=config.temperature, top_p=config.top_p, sample_top_k=config.sample_top_k,
            seed=config.seed, open_ended=config.open_ended, backend=config.backend, model=config.model,
        )  # fmt: skip
        if config.temperature is not None and math.isinf(config.temperature):  # > 0, so passed above; GenerateConfig refuses it later
            raise InputError(f"--temperature must be a finite number > 0, not {config.temperature:g}")
    _check_signals(config, clip, questions, sources)
    if rundir.exists() and not (config.resume or config.overwrite):
        raise InputError("run directory already holds a run; pass --resume or --overwrite", rundir.header_path)
    for rule in config.text_rules:
        if rule not in TEXT_RULES:
            raise InputError(f"unknown text rule {rule!r}; known: {', '.join(TEXT_RULES)}")
    if not config.open_ended:
        # an open question's label is a placeholder: a yes/no run over it would score nonsense
        q_open = next((q for q in questions if q.is_open), None)
        if q_open is not None:
            raise InputError(
                f"question {q_open.question_id} (split {q_open.split!r}) is an open question (kind 'open'): "
                "answer open questions with `halluprobe run --open-ended`",
                sources.get(q_open.split),
            )
    if config.resume and rundir.exists() and not config.force:
        old_shard = rundir.read_header().shard
        if old_shard != config.shard:
            raise InputError(
                f"refusing to resume: the run dir holds shard {old_shard or 'none (all questions)'}, "
                f"not {config.shard or 'none (all questions)'}",
                rundir.header_path,
            )
    asked = set(config.signals) | {config.decode_branch}
    variants = tuple(v for v in ("instruction", "no-image") if v in asked)
    return RunPlan(config, tuple(questions), dict(benchmarks), images_root, rundir, config.generate_config(), variants, clip)


def _check_signals(config: RunConfig, clip: bool, questions: Sequence[Question], sources: Mapping[str, str]) -> None:
    """Signals need a yes/no run; the clip signal needs its scorer (and the scorer the signal) and
    an object per question. ``sources``: split -> benchmark file (named in the error)."""
    if config.open_ended and config.signals:
        raise InputError("--signals records what yes/no corrections read: an open-ended run has no yes/no answer to correct")
    wanted = CLIP_SIGNAL in config.signals
    if wanted and not clip:
        raise InputError("the clip signal needs a CLIP model: give --clip-model PATH")
    if clip and not wanted:
        raise InputError("--clip-model is given but the clip signal is not asked: add clip to --signals")
    if wanted:
        missing = next((q for q in questions if not q.object), None)
        if missing is not None:
            raise InputError(
                f"question {missing.question_id} (split {missing.split!r}) names no object: the clip signal scores the object",
                sources.get(missing.split),
            )


def check_backend(plan: RunPlan, backend: Backend) -> None:
    """What only the loaded model can answer, asked once through its capabilities (protocols),
    before the run dir is written: the signals it records (layers it has), the decoding method
    on its family and layers (no engine is built), a prompt without the image."""
    config = plan.config
    if config.backend_signals:
        if not isinstance(backend, RecordsSignals):
            raise InputError(
                f"the {config.backend} backend records none of the signals {', '.join(config.backend_signals)}: "
                "they need the hf backend (clip is recorded beside any backend)"
            )
        backend.check_signals(config.backend_signals)
    if plan.generate.decodes:
        if not isinstance(backend, DecodesText):
            raise InputError(f"the {config.backend} backend cannot apply --decode or --sample: they need the hf backend's decoding loop")
        backend.check_decoding(plan.generate)
    if "no-image" in plan.variants and plan.questions:
        # a template that cannot render a prompt without the image is refused here, not mid-run
        backend.render_prompt(plan.questions[0].text, config.template, image=False)
