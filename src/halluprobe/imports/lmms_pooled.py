"""lmms-eval's pooled ``pope`` task (v0.4 and later) paired with the three POPE label files.

The pooled task asks the three splits' questions in one ``test`` split and, since v0.4, logs no
document: a sample keeps its question text (``input``, with the "Answer the question using a
single word or phrase." suffix), its image where lmms-eval could name one (``input_media``, 0.7.1
and later; never for lmms-lab/POPE's rows, whose image is decoded and whose ``image_source`` has
no file extension, so a real POPE log pairs by question text and id), the
question id (inside the metric entries; ids 1..3000 repeat in every split), its position in the
dataset (``doc_id``), the answer and the label (``target``). The split comes from the label file
a sample's question is found in:

1. Each sample is looked up by (image, normalised question text) in every label file (by
   question text and id where the log names no image); its ``question_id`` and ``target`` are
   then a check: a candidate with another id or label is not the sample's question.
2. One candidate left: that split and question.
3. Several: POPE's splits share most questions (the same image, text and id in two or three
   splits: 1,535 of COCO POPE's 3,000 random questions are asked identically in all three). The
   pooled dataset lists each split in one block of ``doc_id``s, so where the blocks that the
   unambiguous samples of a file span do not overlap, the block around the sample's ``doc_id``
   names its split (between two blocks, the one whose copy of the question is still free);
   where the log holds the whole pooled dataset (doc_ids 0..N-1), the blocks are the label
   files' sizes, checked against every unambiguous sample.
4. Still ambiguous: when the samples asking one such question are as many as the splits that
   ask it and all gave the same answer, they are assigned to those splits in order (no number
   can depend on which is which). Otherwise the sample is listed in the manifest as ambiguous.

A file with a sample that pairs with no labelled question may be missing a split's labels
(its block then sits between the others, its shared questions matching a neighbour's): there,
only samples inside a block's span are placed, and step 4 is not used.

Nothing is dropped silently: every sample not imported is listed with its reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import PurePosixPath
from typing import Any

from halluprobe.benchmarks.versions import normalise_question
from halluprobe.imports.common import LabelIndex
from halluprobe.records import Question

__all__ = ["PooledPairing", "PooledSample", "image_of_media", "pair_pooled"]

_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")


@dataclass(frozen=True)
class PooledSample:
    """One logged sample of a pooled task, before its split is known."""

    source: str  # "file:line"
    file: str
    doc_id: int | None
    question_id: int
    prompt: str
    image: str | None  # the image file's stem, from input_media
    answer: str
    target: str
    prediction: str


@dataclass
class PooledPairing:
    """Where each sample went: its labelled question, or the reason it was not imported."""

    matched: list[tuple[PooledSample, Question]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def image_of_media(media: Any) -> str | None:
    """The stem of the first image file ``input_media`` names (a path or URL); None when it
    names none (absent, or inline ``data:`` images only)."""
    entries = media if isinstance(media, list) else [media]
    for entry in entries:
        if not isinstance(entry, str) or entry.startswith("data:"):
            continue
        name = PurePosixPath(entry.split("?", 1)[0].replace("\\", "/")).name
        if name.lower().endswith(_IMAGE_SUFFIXES):
            return name.rsplit(".", 1)[0]
    return None


def _stem(image: str) -> str:
    name = PurePosixPath(image.replace("\\", "/")).name
    return name.rsplit(".", 1)[0] if name.lower().endswith(_IMAGE_SUFFIXES) else name


def _candidates(sample: PooledSample, index: dict[tuple, list[Question]]) -> list[Question]:
    text = normalise_question(sample.prompt)
    if sample.image is not None:
        return index.get(("image", sample.image, text), [])
    return index.get(("id", text, sample.question_id), [])


def _build_index(labels: LabelIndex) -> dict[tuple, list[Question]]:
    index: dict[tuple, list[Question]] = defaultdict(list)
    for split in labels.splits:
        for q in labels.questions[split]:
            text = normalise_question(q.text)
            index[("image", _stem(q.image), text)].append(q)
            index[("id", text, q.question_id)].append(q)
    return index


def _blocks(
    matched: list[tuple[PooledSample, Question]], samples: list[PooledSample], labels: LabelIndex
) -> dict[str, list[tuple[str, int, int]]]:
    """Per file, the splits' doc_id blocks in dataset order, (split, first, last), when the spans
    of their unambiguous samples do not overlap (else no blocks for that file). Where the file
    holds doc_ids 0..N-1 for N the labelled questions of those splits, and blocks of the label
    files' sizes in that order hold every unambiguous sample, those exact blocks are used."""
    spans: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for sample, q in matched:
        if sample.doc_id is None:
            continue
        low, high = spans[sample.file].get(q.split, (sample.doc_id, sample.doc_id))
        spans[sample.file][q.split] = (min(low, sample.doc_id), max(high, sample.doc_id))
    doc_ids: dict[str, set[int]] = defaultdict(set)
    for sample in samples:
        if sample.doc_id is not None:
            doc_ids[sample.file].add(sample.doc_id)
    blocks = {}
    for file, ranges in spans.items():
        ordered = sorted((low, high, split) for split, (low, high) in ranges.items())
        if not all(a[1] < b[0] for a, b in pairwise(ordered)):
            continue
        blocks[file] = [(split, low, high) for low, high, split in ordered]
        sizes = [len(labels.questions[split]) for _, _, split in ordered]
        if doc_ids[file] == set(range(sum(sizes))):  # the whole pooled dataset: blocks of known sizes
            starts = [sum(sizes[:k]) for k in range(len(sizes))]
            exact = [(split, start, start + size - 1) for (_, _, split), start, size in zip(ordered, starts, sizes)]
            if all(start <= low and high <= end for (_, start, end), (low, high, _) in zip(exact, ordered)):
                blocks[file] = exact
    return blocks


def _splits_around(doc_id: int, blocks: list[tuple[str, int, int]], *, inside_only: bool) -> set[str]:
    """The splits whose block can hold ``doc_id``: after the previous block's last sample and
    before the next block's first (a doc_id between two blocks may belong to either); with
    ``inside_only``, within a block's span only."""
    if inside_only:
        return {split for split, low, high in blocks if low <= doc_id <= high}
    around = set()
    for k, (split, _, _) in enumerate(blocks):
        after_previous = k == 0 or doc_id > blocks[k - 1][2]
        before_next = k == len(blocks) - 1 or doc_id < blocks[k + 1][1]
        if after_previous and before_next:
            around.add(split)
    return around


def pair_pooled(samples: list[PooledSample], labels: LabelIndex) -> PooledPairing:
    """Pair every pooled sample with its labelled question (see the module docstring)."""
    index = _build_index(labels)
    out = PooledPairing()
    ambiguous: list[tuple[PooledSample, list[Question]]] = []
    for sample in samples:
        found = _candidates(sample, index)
        where = f"image {sample.image}" if sample.image is not None else f"question_id {sample.question_id} (the log names no image)"
        if not found:
            out.skipped.append({"source": sample.source, "reason": f"no labelled question has {where} and the text {sample.prompt!r}"})
            continue
        same_id = [q for q in found if q.question_id == sample.question_id]
        if not same_id:
            named = ", ".join(f"{q.split} question {q.question_id}" for q in found)
            out.skipped.append({"source": sample.source, "reason": f"its image and text are {named} in the labels, but the log's question_id is {sample.question_id}"})
            continue
        fits = [q for q in same_id if q.label == sample.target]
        if not fits:
            out.skipped.append({"source": sample.source, "reason": f"target {sample.target!r} but the labels say {same_id[0].label!r} ({same_id[0].split} question {same_id[0].question_id})"})
            continue
        if len(fits) == 1:
            out.matched.append((sample, fits[0]))
        else:
            ambiguous.append((sample, fits))
    _list_conflicts(out)
    taken = {(q.split, q.question_id) for _, q in out.matched}
    blocks = _blocks(out.matched, samples, labels)
    unpaired = {s["source"] for s in out.skipped}
    troubled = {sample.file for sample in samples if sample.source in unpaired}
    by_block = 0
    still: list[tuple[PooledSample, list[Question]]] = []
    # in doc_id order, so that a question placed in an earlier block is no longer free for a later one
    for sample, fits in sorted(ambiguous, key=lambda pair: (pair[0].doc_id is None, pair[0].doc_id or 0)):
        # a file with samples no label pairs may lack a split's labels, whose block then lies
        # between the others: its shared questions must not be pulled into a neighbour's block
        inside_only = sample.file in troubled
        around = _splits_around(sample.doc_id, blocks[sample.file], inside_only=inside_only) if sample.doc_id is not None and sample.file in blocks else set()
        inside = [q for q in fits if q.split in around and (q.split, q.question_id) not in taken]
        if len(inside) == 1:
            out.matched.append((sample, inside[0]))
            taken.add((inside[0].split, inside[0].question_id))
            by_block += 1
        else:
            still.append((sample, fits))
    if by_block:
        out.notes.append(f"{by_block} samples ask a question that several splits ask identically: their split is the doc_id block of that split in the pooled dataset")
    by_answer = _assign_identical_answers(still, taken, out, troubled)
    if by_answer:
        out.notes.append(
            f"{by_answer} samples ask a question that several splits ask identically and gave the same answer each time: "
            "assigned to those splits in order (no number depends on the assignment)"
        )
    position = {id(sample): n for n, sample in enumerate(samples)}
    out.matched.sort(key=lambda pair: position[id(pair[0])])  # the log's order, as the other imports keep it
    return out


def _list_conflicts(out: PooledPairing) -> None:
    """Two samples that each pair with one and the same question only: a split's labels are
    missing (its questions shared with another split pair with that split's) or the log repeats
    a sample. Neither can be told from the other: both are listed, not imported."""
    claims: dict[tuple[str, int], list[PooledSample]] = defaultdict(list)
    for sample, q in out.matched:
        claims[(q.split, q.question_id)].append(sample)
    conflicted = {key: group for key, group in claims.items() if len(group) > 1}
    if not conflicted:
        return
    out.matched = [(sample, q) for sample, q in out.matched if (q.split, q.question_id) not in conflicted]
    for (split, qid), group in conflicted.items():
        for sample in group:
            others = ", ".join(other.source.rsplit(":", 1)[-1] for other in group if other is not sample)
            out.skipped.append({
                "source": sample.source,
                "reason": f"conflict: {split} question {qid} is also the only match of line {others}; "
                "are the labels of every split in the log given?",
            })  # fmt: skip


def _assign_identical_answers(
    still: list[tuple[PooledSample, list[Question]]], taken: set[tuple[str, int]], out: PooledPairing, troubled: set[str]
) -> int:
    """Samples of one shared question, as many as its free splits and all answered alike, in
    split order; never in a troubled file (its samples may belong to a split without labels)."""
    groups: dict[tuple[tuple[str, int], ...], list[PooledSample]] = defaultdict(list)
    for sample, fits in still:
        groups[tuple(sorted((q.split, q.question_id) for q in fits))].append(sample)
    fits_of = {id(sample): fits for sample, fits in still}
    assigned = 0
    for keys, group in groups.items():
        free = [q for q in sorted(fits_of[id(group[0])], key=lambda q: q.split) if (q.split, q.question_id) not in taken]
        alike = len({s.answer for s in group}) == 1 and not any(s.file in troubled for s in group)
        if len(group) == len(free) == len(keys) and alike:
            for sample, q in zip(group, free):
                out.matched.append((sample, q))
                taken.add((q.split, q.question_id))
            assigned += len(group)
            continue
        splits = ", ".join(split for split, _ in keys)
        for sample in group:
            out.skipped.append({
                "source": sample.source,
                "reason": f"ambiguous: question {keys[0][1]} is asked identically in {splits}, and neither the doc_id blocks "
                f"nor identical answers tell which split this answer belongs to",
            })  # fmt: skip
    return assigned
