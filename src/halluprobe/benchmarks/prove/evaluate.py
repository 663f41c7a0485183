"""``halluprobe prove score``: read responses, extract their tuples, score, write the results.

Responses come from either

- a **run directory** of ``halluprobe run`` over the questions that ``halluprobe prove
  questions`` wrote: sample ``question_id`` N is the PROVE file's record N (0-based), the
  sample's image must be that record's image and its prompt must contain that record's question
  (else exit 2: the run answered other questions); the response is the sample's ``text``; or
- a **file** (JSON array or JSON Lines, read by :func:`halluprobe.jsonl.read_records`) of ``{"question_id", "response"}`` objects, optionally
  with ``"response_tuples"`` (then no extraction runs for that response).

Outputs in ``out_dir``: ``scores.jsonl`` (one :class:`~.scoring.QuestionScore` per question, in
the data file's order: which tuple matched what, at which similarity, with which p_yes) and
``summary.json`` (:class:`~.scoring.ProveSummary`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from halluprobe.benchmarks.prove.data import ProveItem
from halluprobe.benchmarks.prove.extraction import Extractor, TupleCache, extract_all
from halluprobe.benchmarks.prove.scene_graph import AttributeTuple, EntityTuple, RelationTuple, parse_tuple
from halluprobe.benchmarks.prove.scoring import (
    Embedder,
    EntailmentReader,
    ProveSummary,
    QuestionScore,
    score_question,
)
from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.jsonl import read_records
from halluprobe.rundir import RunDir

__all__ = ["ProveResponse", "read_responses", "score_responses", "write_scores"]

log = logging.getLogger(__name__)

AnyTuple = EntityTuple | AttributeTuple | RelationTuple


@dataclass(frozen=True)
class ProveResponse:
    text: str | None
    tuples: list[AnyTuple] | None = None  # given with the response: no extraction
    error: str | None = None


def _from_rundir(path: Path, items: list[ProveItem]) -> dict[str, ProveResponse]:
    """Samples matched to PROVE records by question identity, never by position alone.

    ``halluprobe prove questions`` numbers its lines by record index, so sample ``question_id``
    N names record N; the sample must also be about that record's image and its prompt must hold
    that record's question (PROVE asks several questions per image, so the image alone does not
    identify one). A run over a reordered or different questions file is refused.
    """

    rundir = RunDir(path)
    rundir.read_header()  # a folder without run.json is no run: refused, not "no response" for every record
    out: dict[str, ProveResponse] = {}
    for s in rundir.read_samples():
        if not 0 <= s.question_id < len(items):
            raise InputError(f"sample question_id {s.question_id} is not a record index of the PROVE file ({len(items)} records)", rundir.samples_path)
        item = items[s.question_id]
        if s.image != item.image:
            raise InputError(f"sample {s.question_id} is about {s.image!r}, but PROVE record {s.question_id} is about {item.image!r}", rundir.samples_path)
        if item.question.strip() not in s.prompt:
            raise InputError(
                f"sample {s.question_id} did not ask PROVE record {s.question_id}'s question {item.question!r} "
                "(the run's questions file does not match the PROVE file)",
                rundir.samples_path,
            )
        if item.question_id in out:
            raise InputError(f"PROVE record {s.question_id} is answered twice (again by split {s.split!r})", rundir.samples_path)
        out[item.question_id] = ProveResponse(text=s.text, error=s.error or (None if s.text is not None else "the sample has no text"))
    return out


def _from_file(path: Path, items: list[ProveItem]) -> dict[str, ProveResponse]:

    known = {it.question_id for it in items}
    out: dict[str, ProveResponse] = {}
    for rec in read_records(path, "responses"):
        obj, where, line = rec.value, rec.where, rec.line
        if "question_id" not in obj or "response" not in obj:
            raise InputError(f'{where}a response is {{"question_id", "response"[, "response_tuples"]}}', path, line)
        qid = str(obj["question_id"])
        if qid not in known:
            raise InputError(f"{where}question id {qid!r} is not in the PROVE file", path, line)
        if qid in out:
            raise InputError(f"{where}duplicate response for question {qid!r}", path, line)
        if not isinstance(obj["response"], str):
            raise InputError(f"{where}question {qid}: response must be a string", path, line)
        tuples = None
        if obj.get("response_tuples") is not None:
            try:
                tuples = [parse_tuple(t) for t in obj["response_tuples"]]
            except (ValueError, TypeError) as err:
                raise InputError(f"{where}question {qid}: response_tuples: {err}", path, line) from None
        out[qid] = ProveResponse(text=obj["response"], tuples=tuples)
    return out


def read_responses(path: str | Path, items: list[ProveItem]) -> dict[str, ProveResponse]:
    """PROVE question id -> response, from a run directory or a responses file."""
    path = Path(path)
    if path.is_dir():
        return _from_rundir(path, items)
    if not path.is_file():
        raise InputError("responses not found (a run directory or a JSON / JSON Lines file)", path)
    return _from_file(path, items)


def score_responses(
    items: list[ProveItem],
    responses: dict[str, ProveResponse],
    embedder: Embedder,
    extractor: Extractor,
    *,
    cache: TupleCache | None = None,
    entailment: EntailmentReader | None = None,
    match_threshold: float = 0.7,
    entail_threshold: float = 0.5,
) -> list[QuestionScore]:
    """Score every item (an item without a response is an errored score, never dropped)."""
    need = [qid for qid, r in responses.items() if r.error is None and r.tuples is None and r.text is not None]
    extracted = dict(zip(need, extract_all([responses[q].text or "" for q in need], extractor, cache)))
    scores = []
    for item in items:
        r = responses.get(item.question_id)
        error: str | None
        tuples: list[AnyTuple] = []
        if r is None:
            error = "no response"
        elif r.error is not None:
            error = r.error
        elif r.tuples is not None:
            error, tuples = None, r.tuples
        else:
            x = extracted[item.question_id]
            error, tuples = (f"tuple extraction failed: {x.error}" if x.error else None), x.tuples
        scores.append(
            score_question(
                item,
                None if r is None else r.text,
                tuples,
                embedder,
                entailment=entailment,
                match_threshold=match_threshold,
                entail_threshold=entail_threshold,
                error=error,
            )
        )
    return scores


def write_scores(out_dir: str | Path, scores: list[QuestionScore], summary: ProveSummary, *, overwrite: bool = False) -> tuple[Path, Path]:
    """``scores.jsonl`` and ``summary.json``; existing files are kept unless ``overwrite``."""
    out = Path(out_dir)
    lines, summ = out / "scores.jsonl", out / "summary.json"
    for p in (lines, summ):
        if p.exists() and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", p)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(lines, "".join(s.model_dump_json() + "\n" for s in scores))
    write_atomic(summ, summary.model_dump_json(indent=2) + "\n")  # last: its presence means both are whole
    return lines, summ
