"""What a run is before any question is asked: its settings (:class:`RunConfig`), the
benchmark files read, the header written first (:func:`make_header`) with its fingerprint, and
the checks made before any model loads. :mod:`halluprobe.runner` asks the questions.
"""

from __future__ import annotations

import datetime as _dt
import logging
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from halluprobe.backends.base import Backend
from halluprobe.benchmarks.pope import read_questions, split_name
from halluprobe.clip_signal import CLIP_SIGNAL, ClipScorer
from halluprobe.errors import InputError
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.text import TEXT_RULES
from halluprobe.readouts.value import TEXT_PREFIX
from halluprobe.records import DECODING_KEYS, ICD_INSTRUCTION, GenerateConfig, Question, RunHeader
from halluprobe.rundir import fingerprint_of, sha256_file

__all__ = [
    "RunConfig",
    "check_decoding_asked",
    "check_signals_asked",
    "limit_questions",
    "make_header",
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
    # free-form decoding (open-ended runs, hf backend): the method ("vcd:alpha=1"), and sampling
    decode: str | None = None
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
        from halluprobe.backends.hf.decode import contrast_branch

        return contrast_branch(self.decode) if self.decode is not None else None


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


def limit_questions(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """The first ``limit`` questions of each split, in file order (all of them when None)."""
    if limit is None:
        return list(questions)
    kept: list[Question] = []
    per_split: dict[str, int] = {}
    for q in questions:
        if per_split.get(q.split, 0) < limit:
            per_split[q.split] = per_split.get(q.split, 0) + 1
            kept.append(q)
    return kept


def _package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("halluprobe", "torch", "transformers", "pydantic", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


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
            **({"decoding": {k: getattr(header.generate, k) for k in DECODING_KEYS if getattr(header.generate, k) is not None}}
               if header.generate is not None and header.generate.decodes else {}),
        }
    )


def _backend_info(backend: Backend, config: RunConfig) -> dict[str, Any]:
    """``backend.info()``, and for a ``--decode`` run every setting its method decodes with
    (``decoding``: defaults and the model's layers resolved; a record, outside the fingerprint,
    which holds the spec as typed)."""
    info = backend.info()
    describe = getattr(backend, "decoding_settings", None)
    if config.decode is not None and callable(describe):
        info = {**info, "decoding": describe(config.decode)}
    return info


def make_header(
    config: RunConfig,
    backend: Backend,
    benchmarks: dict[str, tuple[Path, str]],
    images_root: Path,
    clip: ClipScorer | None = None,
) -> RunHeader:
    """The header: written before the first sample. ``benchmarks``: split -> (path, sha256);
    ``clip``: the scorer of the ``clip`` signal, when the run records it."""
    from halluprobe import __version__
    from halluprobe.benchmarks.fingerprint import content_fingerprint
    from halluprobe.benchmarks.pope import read_questions
    from halluprobe.benchmarks.versions import versions_of_file

    text_rules = [] if config.open_ended else list(config.text_rules)
    header = RunHeader(
        halluprobe_version=__version__,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        fingerprint="",
        backend=config.backend,
        backend_info=_backend_info(backend, config),
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
    )
    return header.model_copy(update={"fingerprint": run_fingerprint(header)})


def check_signals_asked(config: RunConfig, has_scorer: bool, questions: Sequence[Question], sources: Mapping[str, str]) -> None:
    """Signals need a yes/no run; the clip signal needs its scorer (and the scorer the signal) and
    an object per question. ``sources``: split -> benchmark file (named in the error). Checked
    before any model loads."""
    if config.open_ended and config.signals:
        raise InputError("--signals records what yes/no corrections read: an open-ended run has no yes/no answer to correct")
    wanted = CLIP_SIGNAL in config.signals
    if wanted and not has_scorer:
        raise InputError("the clip signal needs a CLIP model: give --clip-model PATH")
    if has_scorer and not wanted:
        raise InputError("--clip-model is given but the clip signal is not asked: add clip to --signals")
    if wanted:
        missing = next((q for q in questions if not q.object), None)
        if missing is not None:
            raise InputError(
                f"question {missing.question_id} (split {missing.split!r}) names no object: the clip signal scores the object",
                sources.get(missing.split),
            )


def check_decoding_asked(config: RunConfig) -> None:
    """``--decode`` / ``--sample`` settings that cannot run, refused in one line before any model
    loads (:func:`~halluprobe.backends.hf.decode_rules.check_decoding`)."""
    from halluprobe.backends.hf.decode_rules import check_decoding

    check_decoding(
        config.decode, sample=config.sample, temperature=config.temperature, top_p=config.top_p, sample_top_k=config.sample_top_k,
        seed=config.seed, open_ended=config.open_ended, backend=config.backend, model=config.model,
    )  # fmt: skip
