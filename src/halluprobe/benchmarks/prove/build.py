"""Build a PROVE-style benchmark: LM question/answer pairs, each verified by a sandboxed program.

Input: one record per image, ``{"image", "caption", "tuples"}`` (JSON array or JSON Lines), where
``tuples`` is the image's scene graph (any shape :func:`~.scene_graph.parse_tuple` reads).

For each image a language model (any halluprobe backend, greedy, no stop strings: ``GenerateConfig(stop_strings=())``)
answers :data:`QA_PROMPT` with a JSON array of ``{"question", "answer", "program"}``; the program
defines ``verify(graph)`` over the SceneGraph API and returns the answer. A pair is **kept** when

1. the model's output parses strictly (else every pair of that image is dropped: ``invalid_output``);
2. its program passes the sandbox and returns normally (``program_refused`` / ``program_failed``);
3. the returned value equals the stated answer (``answer_mismatch``; see :func:`same_answer`);
4. its question is not a near-duplicate (cosine of question embeddings >= ``dup_threshold``) of a
   pair already kept for the same image (``near_duplicate``);
5. tuple extraction of its answer and question succeeds and the answer has tuples beyond the
   question's (``extraction_failed``: else the item's ``qa_diff_tuples`` would be empty and its
   hscore never defined).

Kept pairs become PROVE records (:class:`~.data.ProveItem`: ``qa_diff_tuples`` = the answer's
extracted tuples minus the question's); every dropped pair is recorded with its reason.

Nothing collected is lost: with ``answers_path`` (``OUT/answers.jsonl``), every model answer is
appended there as it arrives (fsynced), and a build started again (after a crash, a failed
write, a kill) asks only for what that file does not hold yet for the same model, answer length
and prompt. :func:`run_program` returns an outcome for every program, and a string the model
wrote that has no UTF-8 form (a lone surrogate) gets U+FFFD before it is run or written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from halluprobe.ask import ask
from halluprobe.benchmarks.prove.data import ProveItem
from halluprobe.benchmarks.prove.extraction import Extractor
from halluprobe.benchmarks.prove.sandbox import SandboxLimits, run_program
from halluprobe.benchmarks.prove.scene_graph import SANDBOX_API, SceneGraph
from halluprobe.benchmarks.prove.scoring import Embedder, exclude_question_tuples
from halluprobe.errors import InputError
from halluprobe.files import append_durable, resolve_image, write_atomic
from halluprobe.jsonl import loads, read_log_lines, read_records, replace_lone_surrogates
from halluprobe.records import SCHEMA_VERSION, FrozenRecord, GenerateConfig, Request, Response

__all__ = [
    "QA_PROMPT",
    "CaptionRecord",
    "Dropped",
    "BuildResult",
    "read_captions",
    "parse_qa_output",
    "same_answer",
    "build_prove",
    "BUILD_FILES",
    "ANSWERS_FILE",
    "CollectedAnswer",
    "read_answers",
    "build_outputs",
    "write_build",
]

log = logging.getLogger(__name__)

QA_PROMPT = """You write questions about an image from its detailed caption and scene graph, and a Python program that verifies each answer on the graph.
The program defines verify(graph) and may call only these graph methods: {api}. No imports, no names starting with an underscore.
Answer with one JSON array and nothing else; each element is {{"question": ..., "answer": ..., "program": ...}}.

Caption: A brown dog lies on a red sofa.
Scene graph: [["dog"], ["sofa"], ["dog", "brown"], ["sofa", "red"], ["dog", "lying on", "sofa"]]
Pairs: [{{"question": "What colour is the sofa the dog lies on?", "answer": "red", "program": "def verify(graph):\\n    return graph.attributes_of('sofa')[0]"}}]

Caption: {caption}
Scene graph: {tuples}
Pairs:"""

DropReason = Literal[
    "invalid_output", "program_refused", "program_failed", "answer_mismatch", "near_duplicate", "extraction_failed", "backend_error"
]


class CaptionRecord(FrozenRecord):
    image: str
    caption: str
    tuples: list[Any]


class CollectedAnswer(FrozenRecord):
    """One line of ``answers.jsonl``: a model's answer to one image's :data:`QA_PROMPT`."""

    schema_version: int = SCHEMA_VERSION
    model: str
    max_new_tokens: int
    image: str
    prompt: str
    text: str | None = None
    error: str | None = None


class Dropped(FrozenRecord):
    """One pair (or one image's whole output) not kept, and why."""

    schema_version: int = SCHEMA_VERSION
    image: str
    reason: DropReason
    detail: str
    question: str | None = None
    answer: str | None = None
    program: str | None = None
    raw: str | None = None


@dataclass
class BuildResult:
    items: list[ProveItem] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {"kept": len(self.items)}
        for d in self.dropped:
            out[d.reason] = out.get(d.reason, 0) + 1
        return out


def read_captions(path: str | Path) -> list[CaptionRecord]:
    """Caption records; one-line errors naming the file and the record."""

    path = Path(path)
    out = []
    for row in read_records(path, "captions"):
        try:
            rec = CaptionRecord.model_validate(row.value)
            SceneGraph(rec.tuples)
        except Exception as err:  # pydantic ValidationError or a bad tuple: one line
            msg = str(err).strip().splitlines()
            raise InputError(f"{row.where}{msg[0] if len(msg) == 1 else ' '.join(m.strip() for m in msg[:3])}", path, row.line) from None
        out.append(rec)
    return out


def parse_qa_output(raw: str) -> list[dict[str, str]]:
    """Strict parse of the model's pairs; ValueError with a one-line reason."""
    try:
        data = loads(raw.strip())
    except json.JSONDecodeError as err:
        raise ValueError(f"not one JSON array ({err.msg} at column {err.colno})") from None
    if not isinstance(data, list):
        raise ValueError(f"a JSON {type(data).__name__}, not an array")
    pairs = []
    for i, el in enumerate(data):
        if not isinstance(el, dict) or set(el) != {"question", "answer", "program"} or not all(isinstance(v, str) and v.strip() for v in el.values()):
            raise ValueError(f"element {i} is not {{question, answer, program}} with non-empty strings")
        # a lone surrogate (an escaped half emoji) could be neither run nor written: U+FFFD instead
        pairs.append({k: replace_lone_surrogates(str(v)) for k, v in el.items()})
    return pairs


def _norm(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(sorted(_norm(v) for v in value))
    text = " ".join(str(value).lower().split()).rstrip(".")
    return text


def same_answer(result: Any, answer: str) -> bool:
    """Equal after normalisation: case, spaces, a final period; True/False as yes/no; 2.0 as 2;
    a list as its sorted elements joined by ", " (so ["red", "blue"] equals "blue, red")."""
    return _norm(result) == _norm(answer)


def read_answers(path: str | Path) -> list[CollectedAnswer]:
    """The answers collected so far (none when the file does not exist); a line cut by a crash
    is skipped, any other bad line is one InputError naming it."""
    from pydantic import ValidationError


    path = Path(path)
    if not path.exists():
        return []
    answers = []
    for number, line in read_log_lines(path, "collected answers"):
        try:
            answers.append(CollectedAnswer.model_validate_json(line))
        except ValidationError as err:
            first = err.errors()[0]
            raise InputError(f"invalid collected answer: {'.'.join(map(str, first['loc'])) or 'line'}: {first['msg']}", path, number) from None
    return answers


def build_prove(
    records: Sequence[CaptionRecord],
    backend: Any,
    *,
    images_root: Path,
    embedder: Embedder,
    extractor: Extractor,
    template: str | None = None,
    max_new_tokens: int = 1024,
    dup_threshold: float = 0.9,
    limits: SandboxLimits | None = None,
    answers_path: str | Path | None = None,
) -> BuildResult:
    """Ask, verify, deduplicate; see the module docstring. ``answers_path``: where answers are
    kept as they arrive, and read back from when the build is started again."""

    result = BuildResult()
    requests = [
        Request(
            split="prove-build",
            question_id=i,
            image_path=str(resolve_image(rec.image, images_root)),
            prompt=backend.render_prompt(
                QA_PROMPT.format(api=", ".join(SANDBOX_API), caption=rec.caption, tuples=json.dumps([list(t.model_dump(exclude={"kind", "count"}).values()) for t in SceneGraph(rec.tuples).tuples()])),
                template,
            ),
        )
        for i, rec in enumerate(records)
    ]
    model = str(backend.info().get("model"))
    answers: dict[int, Any] = {}
    if answers_path is not None:
        # an answer collected before (same model, length cap, image and prompt) is not asked again
        done = {(a.image, a.prompt): a for a in read_answers(answers_path) if a.model == model and a.max_new_tokens == max_new_tokens and a.error is None}
        for request in requests:
            old = done.get((records[request.question_id].image, request.prompt))
            if old is not None:
                answers[request.question_id] = Response(split=request.split, question_id=request.question_id, text=old.text)
        if answers:
            log.info("prove build: %d of %d answers collected before, not asked again", len(answers), len(requests))
    todo = [r for r in requests if r.question_id not in answers]
    by_id = {r.question_id: r for r in todo}
    for batch in ask(backend, todo, GenerateConfig(max_new_tokens=max_new_tokens, top_k=1, stop_strings=())):
        if answers_path is not None:
            collected = [
                CollectedAnswer(model=model, max_new_tokens=max_new_tokens, image=records[r.question_id].image, prompt=by_id[r.question_id].prompt, text=r.text, error=r.error)
                for r in batch
            ]
            append_durable(answers_path, "".join(a.model_dump_json() + "\n" for a in collected))
        for r in batch:
            answers[r.question_id] = r
    candidates: list[tuple[CaptionRecord, SceneGraph, dict[str, str]]] = []
    for i, rec in enumerate(records):
        r = answers.get(i)
        if r is None or r.error is not None or r.text is None:
            detail = "no answer" if r is None else (r.error or "no text")
            result.dropped.append(Dropped(image=rec.image, reason="backend_error", detail=detail))
            continue
        try:
            pairs = parse_qa_output(r.text)
        except ValueError as err:
            result.dropped.append(Dropped(image=rec.image, reason="invalid_output", detail=f"invalid LM output: {err}", raw=r.text))
            continue
        graph = SceneGraph(rec.tuples)
        for pair in pairs:
            run = run_program(pair["program"], graph, limits)
            common = {"image": rec.image, "question": pair["question"], "answer": pair["answer"], "program": pair["program"]}
            if run.outcome == "refused":
                result.dropped.append(Dropped(reason="program_refused", detail=run.reason or "", **common))
            elif not run.ok:
                result.dropped.append(Dropped(reason="program_failed", detail=f"{run.outcome}: {run.reason}", **common))
            elif not same_answer(run.result, pair["answer"]):
                detail = f"program returned {json.dumps(run.result)[:200]}, not the stated answer {pair['answer']!r}"
                result.dropped.append(Dropped(reason="answer_mismatch", detail=detail, **common))
            else:
                candidates.append((rec, graph, pair))
    kept: dict[str, list[tuple[str, Any]]] = {}  # image -> [(question id, embedding)]
    vectors = embedder.encode([p["question"] for _, _, p in candidates]) if candidates else []
    texts = [t for _, _, p in candidates for t in (p["answer"], p["question"])]
    extracted = extractor.extract(texts) if texts else []
    for n, ((rec, graph, pair), vec) in enumerate(zip(candidates, vectors)):
        near = [(qid, float(vec @ other)) for qid, other in kept.get(rec.image, [])]
        dup = max(near, key=lambda x: x[1], default=None)
        if dup is not None and dup[1] >= dup_threshold:
            result.dropped.append(
                Dropped(image=rec.image, reason="near_duplicate", detail=f"near-duplicate of {dup[0]} (cos {dup[1]:.3f} >= {dup_threshold})",
                        question=pair["question"], answer=pair["answer"], program=pair["program"])  # fmt: skip
            )
            continue
        answer_x, question_x = extracted[2 * n], extracted[2 * n + 1]
        diff = [] if answer_x.error or question_x.error else exclude_question_tuples(answer_x.tuples, question_x.tuples)
        if not diff:
            # no tuples to recall: the item's hscore would always be undefined
            if answer_x.error or question_x.error:
                detail = "; ".join(f"{what}: {x.error}" for what, x in (("answer", answer_x), ("question", question_x)) if x.error)
            else:
                detail = f"the answer has no tuples beyond the question's ({len(answer_x.tuples)} extracted from the answer)"
            result.dropped.append(
                Dropped(image=rec.image, reason="extraction_failed", detail=detail, question=pair["question"], answer=pair["answer"], program=pair["program"])
            )
            continue
        qid = f"{rec.image}#{len(kept.get(rec.image, []))}"
        result.items.append(
            ProveItem(
                question_id=qid,
                image=rec.image,
                caption=rec.caption,
                question=pair["question"],
                answer=pair["answer"],
                image_tuples=graph.tuples(),
                qa_diff_tuples=diff,
                metadata={"program": pair["program"], "extractor": extractor.identity},
            )
        )
        kept.setdefault(rec.image, []).append((qid, vec))
    log.info("prove build: %s", result.counts())
    return result


# written in this order: build.json last, so its presence means the set is complete
BUILD_FILES = ("prove.jsonl", "dropped.jsonl", "build.json")
# the model's answers as they arrive (build_prove's answers_path): kept across builds, never overwritten
ANSWERS_FILE = "answers.jsonl"


def build_outputs(out_dir: str | Path, *, overwrite: bool = False) -> list[Path]:
    """The output files of :func:`write_build`; InputError when one exists and not ``overwrite``."""
    files = [Path(out_dir) / name for name in BUILD_FILES]
    for f in files:
        if f.exists() and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", f)
    return files


def write_build(out_dir: str | Path, result: BuildResult, settings: dict[str, Any], *, overwrite: bool = False) -> list[Path]:
    """``prove.jsonl`` (a PROVE file: :func:`~.data.read_prove` reads it), ``dropped.jsonl`` and
    ``build.json`` (counts and ``settings``), each carrying ``schema_version``, each written
    atomically. Refuses, before writing anything, when one exists and not ``overwrite``."""

    files = build_outputs(out_dir, overwrite=overwrite)
    items = "".join(
        json.dumps({"schema_version": SCHEMA_VERSION, **it.model_dump(exclude={"metadata"}), **it.metadata}, ensure_ascii=False) + "\n"
        for it in result.items
    )
    dropped = "".join(d.model_dump_json() + "\n" for d in result.dropped)
    build = json.dumps({"schema_version": SCHEMA_VERSION, "counts": result.counts(), **settings}, indent=2, ensure_ascii=False) + "\n"
    for f, text in zip(files, (items, dropped, build)):
        write_atomic(f, text)
    return files
