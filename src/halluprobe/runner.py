"""Questions -> requests -> backend (through :func:`halluprobe.ask.ask`) -> samples.jsonl.

A sample stores what the backend gave: the first token's log-probabilities over every candidate
id (or piece), the top-k first tokens and the greedy text. Readouts are applied when scoring
(:mod:`halluprobe.readouts.apply`), so the run does not depend on which readouts or text rules
are asked later.
"""

from __future__ import annotations

import datetime as _dt
import logging
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from halluprobe.ask import ask
from halluprobe.backends.base import Backend, CountsRequests, RecordsSignals
from halluprobe.benchmarks.pope import read_questions, split_name
from halluprobe.clip_signal import CLIP_SIGNAL, ClipScorer
from halluprobe.errors import InputError
from halluprobe.files import resolve_image
from halluprobe.readouts.value import TEXT_PREFIX
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.text import TEXT_RULES
from halluprobe.readouts.tokensets import greedy_answer
from halluprobe.records import (
    DECODING_KEYS,
    ICD_INSTRUCTION,
    ClipSimilarity,
    GenerateConfig,
    Question,
    QuestionKey,
    Request,
    Response,
    RunHeader,
    Sample,
    TokenSets,
)
from halluprobe.rundir import RunDir, fingerprint_of, sha256_file

__all__ = [
    "check_decoding_asked",
    "RunConfig",
    "RunSummary",
    "run_questions",
    "make_sample",
    "make_header",
    "run_fingerprint",
    "limit_questions",
    "read_benchmarks",
    "check_signals_asked",
]

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]


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
        from halluprobe.backends.hf_decode import contrast_branch

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


@dataclass
class RunSummary:
    answered: int = 0
    skipped: int = 0
    errors: int = 0
    total: int = 0
    errors_left: int = 0  # errored samples in the whole run dir once every question has one
    by_split: dict[str, int] = field(default_factory=dict)


def _offset_argmax(response: Response, sets: TokenSets | None) -> str | None:
    if sets is None or not response.first_token:
        return None
    top = response.first_token[0]
    return None if greedy_answer(top, sets) is not None else top.piece


def make_sample(question: Question, prompt: str, response: Response, sets: TokenSets | None) -> Sample:
    """One response as stored: raw outputs only; readouts are applied when scoring."""
    return Sample(
        split=question.split,
        question_id=question.question_id,
        image=question.image,
        object=question.object,
        label=question.label,
        prompt=prompt,
        first_token=response.first_token,
        candidates=response.candidates,
        offset_argmax=None if response.error else _offset_argmax(response, sets),
        text=response.text,
        signals=response.signals,
        latency_s=response.latency_s,
        error=response.error,
    )


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
        backend_info=backend.info(),
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
    loads (:func:`~halluprobe.backends.hf_decode_rules.check_decoding`)."""
    from halluprobe.backends.hf_decode_rules import check_decoding

    check_decoding(
        config.decode, sample=config.sample, temperature=config.temperature, top_p=config.top_p, sample_top_k=config.sample_top_k,
        seed=config.seed, open_ended=config.open_ended, backend=config.backend, model=config.model,
    )  # fmt: skip


def _with_clip(clip: ClipScorer, samples: list[Sample], image_paths: list[str]) -> list[Sample]:
    """The samples with their clip signal; a question whose image CLIP cannot read is an error
    (never a sample that a clip correction would silently read as its base pass)."""
    todo = [i for i, s in enumerate(samples) if s.error is None and s.object]
    try:
        found: list[ClipSimilarity | str] = clip.similarities([(image_paths[i], samples[i].object or "") for i in todo])
    except Exception as err:  # a failed CLIP pass (out of memory, a NaN): the batch's answers are kept as errors
        log.exception("clip signal failed")
        found = [f"clip signal: {type(err).__name__}: {err}"] * len(todo)
    out = list(samples)
    for i, similarity in zip(todo, found):
        update = {"error": similarity} if isinstance(similarity, str) else {"clip": similarity}
        out[i] = samples[i].model_copy(update=update)
    return out


def run_questions(
    backend: Backend,
    questions: Sequence[Question],
    images_root: Path,
    rundir: RunDir,
    config: RunConfig,
    header: RunHeader,
    progress: ProgressFn | None = None,
    clip: ClipScorer | None = None,
) -> RunSummary:
    """Answer every question not yet in the run dir, appending samples batch by batch.
    ``clip``: the scorer of the ``clip`` signal (needed when ``config.signals`` has it)."""
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
                header.benchmark_paths.get(q_open.split),
            )
    if config.resume and rundir.exists() and not config.force:
        old_shard = rundir.read_header().shard
        if old_shard != header.shard:
            raise InputError(
                f"refusing to resume: the run dir holds shard {old_shard or 'none (all questions)'}, "
                f"not {header.shard or 'none (all questions)'}",
                rundir.header_path,
            )
    if config.backend_signals:  # a signal the backend cannot record is refused before the run dir is written
        if not isinstance(backend, RecordsSignals):
            raise InputError(
                f"the {config.backend} backend records none of the signals {', '.join(config.backend_signals)}: "
                "they need the hf backend (clip is recorded beside any backend)"
            )
        backend.check_signals(config.backend_signals)
    if (clip is None) != (header.clip is None):
        raise ValueError("run_questions: give the clip scorer to make_header and run_questions alike")
    check_signals_asked(config, clip is not None, questions, header.benchmark_paths)
    if config.decode is not None or config.sample or any(v is not None for v in (config.temperature, config.top_p, config.sample_top_k, config.seed)):
        check_decoding_asked(config)
        decoding_engine = getattr(backend, "decoding_engine", None)
        if not callable(decoding_engine):
            raise InputError(f"the {config.backend} backend cannot apply --decode or --sample: they need the hf backend's decoding loop")
        decoding_engine(config.generate_config())  # a method the model's family cannot run: refused here
    if ("no-image" in config.signals or config.decode_branch == "no-image") and questions:
        # a template that cannot render a prompt without the image is refused here, not mid-run
        backend.render_prompt(questions[0].text, config.template, image=False)
    # run dirs of halluprobe 0.1: their fingerprint held the rule list as given, which for an
    # open-ended run was the default list although its header stored none
    old_fingerprints = {
        run_fingerprint(header, legacy=True),
        run_fingerprint(header.model_copy(update={"text_rules": list(_TEXT_FINGERPRINT)}), legacy=True),
    }
    if config.resume and rundir.exists():
        # 0.1's form over the rule list that run was given (--text-rules pope): the list does not
        # change what is stored, only whether text is
        old_rules = rundir.read_header().text_rules
        if bool(old_rules) == bool(header.text_rules):
            old_fingerprints.add(run_fingerprint(header.model_copy(update={"text_rules": list(old_rules)}), legacy=True))
    done = rundir.start(
        header, resume=config.resume, force=config.force, overwrite=config.overwrite,
        also_accept=old_fingerprints, retry_errors=config.retry_errors,
    )  # fmt: skip
    todo = [q for q in questions if q.key not in done]
    summary = RunSummary(skipped=len(questions) - len(todo), total=len(questions))
    if done:
        log.info("resuming: %d of %d questions already answered", summary.skipped, len(questions))

    by_key: dict[QuestionKey, Question] = {q.key: q for q in todo}
    prompts: dict[tuple[str, bool], str] = {}  # (question text, with image) -> rendered prompt: few distinct texts

    def render(text: str, image: bool = True) -> str:
        if (text, image) not in prompts:
            prompts[(text, image)] = backend.render_prompt(text, config.template, image=image)
        return prompts[(text, image)]

    requests: list[Request] = []
    for q in todo:
        variants: dict[str, str] = {}
        if "instruction" in config.signals or config.decode_branch == "instruction":
            variants["instruction"] = render(f"{config.instruction} {q.text}")
        if "no-image" in config.signals or config.decode_branch == "no-image":
            variants["no-image"] = render(q.text, image=False)
        requests.append(
            Request(
                split=q.split,
                question_id=q.question_id,
                image_path=str(resolve_image(q.image, images_root, source=header.benchmark_paths.get(q.split))),
                prompt=render(q.text),
                variants=variants,
            )
        )
    prompt_of = {r.key: r.prompt for r in requests}

    sets = None if config.open_ended else header.token_sets
    request_of = {r.key: r for r in requests}
    if clip is not None:  # each image embedded once, whatever order the backend answers in
        clip.expect([(r.image_path, by_key[r.key].object or "") for r in requests])
    if progress:
        progress(summary.skipped, summary.total)
    try:
        for batch in ask(backend, requests, config.generate_config()):
            samples = [make_sample(by_key[r.key], prompt_of[r.key], r, sets) for r in batch]
            if clip is not None:
                samples = _with_clip(clip, samples, [request_of[r.key].image_path for r in batch])
            rundir.append(samples)
            summary.answered += len(samples)
            summary.errors += sum(1 for s in samples if s.error)
            for s in samples:
                summary.by_split[s.split] = summary.by_split.get(s.split, 0) + 1
            if progress:
                progress(summary.skipped + summary.answered, summary.total)
    finally:  # a failed or interrupted run still records what its requests did
        stats = backend.request_stats() if isinstance(backend, CountsRequests) and requests else None
        if stats:
            rundir.add_request_stats(stats)
    if summary.skipped + summary.answered == summary.total:
        stored = rundir.read_samples()  # count over the whole run, resumed parts included
        summary.errors_left = sum(1 for s in stored if s.error)
        if summary.errors_left and not config.accept_errors:
            log.warning(
                "%d sample(s) are errors: the run is not marked complete; `--resume` asks them again, "
                "`--accept-errors` marks it complete with them (scored as wrong)",
                summary.errors_left,
            )
        else:
            rundir.mark_complete(
                {
                    "questions": len(stored),
                    "errors": summary.errors_left,
                    "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                }
            )
    return summary
