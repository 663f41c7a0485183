"""What every import format shares: the imported answer, the labels index, the run dir it becomes.

An imported run is an ordinary run dir: one ``Sample`` per answer with the answer as ``text``
(no first-token outputs), the label from POPE labels (or the tool's own file where it carries
them), ``backend = "import:<format>"`` and every text rule listed, so ``score --readout
text:RULE``, ``audit`` and ``report`` apply any rule at score time. The importing tool's own
parse decision, where its file stores one, is kept as ``Sample.readouts["<tool>:<rule>"]``: a
readout that cannot be recomputed, read as stored. ``manifest.json`` lists every input answer
that was not imported, with its reason, and the counts per split.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from halluprobe import __version__
from halluprobe.benchmarks.fingerprint import fingerprint_info
from halluprobe.benchmarks.question_file import read_questions, refuse_open_questions, split_name
from halluprobe.benchmarks.versions import detect_versions, normalise_question, versions_of_file
from halluprobe.errors import InputError
from halluprobe.files import fresh_out_dir, plain_component, write_atomic
from halluprobe.jsonl import parse_int_id, read_text, replace_lone_surrogates
from halluprobe.readouts.text import TEXT_RULES
from halluprobe.readouts.value import TEXT_PREFIX
from halluprobe.records import Decision, GenerateConfig, Label, Question, ReadoutResult, RunHeader, Sample
from halluprobe.rundir import MANIFEST, OWNED_FILES, RunDir, fingerprint_of, sha256_file

__all__ = [
    "IMPORTED_RUN_FILES",
    "Imported",
    "ImportResult",
    "InputFiles",
    "LabelIndex",
    "as_int_id",
    "check_import_out",
    "owned_by_import",
    "refuse_unsafe_splits",
    "label_version",
    "labelled_answer",
    "refuse_duplicates",
    "write_imported_run",
    "yes_no",
]



@dataclass(frozen=True)
class Imported:
    """One answer taken from a third-party file, paired with its labelled question."""

    split: str
    question_id: int
    image: str
    prompt: str
    text: str
    label: Label
    object: str | None
    source: str  # "file:line" (or "file:row N") of the answer, for messages and the manifest
    tool_readouts: dict[str, Decision] = field(default_factory=dict)


class InputFiles:
    """The input files of one import, each read once: its text for the reader that parses it
    (and for format detection before that), the sha256 of the same bytes for the run header."""

    def __init__(self) -> None:
        self._read: dict[Path, tuple[str, str]] = {}  # path -> (text, sha256)

    def text(self, path: Path, what: str) -> str:
        if path not in self._read:
            raw, text = read_text(path, what)
            self._read[path] = (text, hashlib.sha256(raw).hexdigest())
        return self._read[path][0]

    def sha256(self, path: Path) -> str:
        """The digest of the bytes read; a file no reader read as text (an .xlsx sheet, a JSON
        sheet read by ``jsonl.read_records``) is hashed now."""
        return self._read[path][1] if path in self._read else sha256_file(path)


@dataclass
class ImportResult:
    """What a format reader produced; :func:`write_imported_run` turns it into a run dir."""

    format: str
    answers: list[Imported]
    sources: list[Path]
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {"source", "reason"}
    labels: dict[str, Path] = field(default_factory=dict)  # split -> labels file used
    label_sha256: dict[str, str] = field(default_factory=dict)  # split -> sha256 of that file (LabelIndex.sha256)
    inputs: InputFiles = field(default_factory=InputFiles)  # what the reader read, with its sha256
    versions: dict[str, Any] = field(default_factory=dict)  # split -> what version the questions match
    model: str = "unknown"
    max_new_tokens: int = 128
    tool_rules: dict[str, str] = field(default_factory=dict)  # readout name -> what it is
    notes: list[str] = field(default_factory=list)
    unanswered: dict[str, int] = field(default_factory=dict)  # split -> labelled questions without an answer

    def note_model(self, line: dict[str, Any]) -> None:
        """The model is the first answer line's string ``model_id`` (LLaVA's, VCD's and
        MARINE's answer lines carry one); later lines do not change it."""
        if self.model == "unknown" and isinstance(line.get("model_id"), str):
            self.model = line["model_id"]


def labelled_answer(
    labelled: Question, *, prompt: str, text: str, source: str, tool_readouts: dict[str, Decision] | None = None
) -> Imported:
    """An answer paired with its labelled question: split, id, image, label and object are the
    labels file's, the prompt and text the answer line's."""
    return Imported(
        split=labelled.split,
        question_id=labelled.question_id,
        image=labelled.image,
        prompt=prompt,
        text=text,
        label=labelled.label,
        object=labelled.object,
        source=source,
        tool_readouts=dict(tool_readouts or {}),
    )


def yes_no(value: object) -> Decision:
    """A tool's stored yes/no decision (any case, stripped); anything else is unknown."""
    folded = str(value).strip().lower() if value is not None else ""
    return folded if folded in ("yes", "no") else "unknown"  # type: ignore[return-value]


def as_int_id(value: object, what: str, path: Path | str, line: int | None, *, digits_ok: bool = False) -> int:
    """An integer question id; booleans, floats and (unless ``digits_ok``) strings are refused
    (:func:`halluprobe.jsonl.parse_int_id`, the project's one id parser)."""
    return parse_int_id(value, what, path, line, digits_ok=digits_ok)


def label_version(split: str, digest: str, questions: Sequence[Question]) -> list[str]:
    """The published versions a labels file is: by its sha256 (``digest``) when it is a
    published file as committed, else by its question set."""
    return versions_of_file(digest) or detect_versions(split, [(q.image, q.text) for q in questions])


class LabelIndex:
    """POPE label files, one per split (the split from the file name, ``coco_pope_random.json``),
    looked up by split and image + normalised question text, or by split and question id. A
    question asked twice (one image and text under two ids: AMBER's own files repeat 10) is kept
    under each id: looked up by text, the repeat of the answer's own id is the one paired."""

    def __init__(self, paths: Iterable[str | Path]) -> None:

        self.files: dict[str, Path] = {}
        self.sha256: dict[str, str] = {}  # hashed once here: versions and the run header reuse it
        self._versions: dict[str, list[str]] | None = None
        self.questions: dict[str, list[Question]] = {}
        self._by_text: dict[str, dict[tuple[str, str], list[Question]]] = {}
        self._by_id: dict[str, dict[int, Question]] = {}
        for raw in paths:
            path = Path(raw)
            split = split_name(path)
            if split in self.files:
                raise InputError(f"two labels files for split {split!r}: {self.files[split]} and this one", path)
            questions = read_questions(path, split=split)
            refuse_open_questions(questions, path)
            by_text: dict[tuple[str, str], list[Question]] = {}
            for q in questions:
                by_text.setdefault((q.image, normalise_question(q.text)), []).append(q)
            self.files[split] = path
            self.sha256[split] = sha256_file(path)
            self.questions[split] = questions
            self._by_text[split] = by_text
            self._by_id[split] = {q.question_id: q for q in questions}

    @property
    def splits(self) -> list[str]:
        return list(self.files)

    def by_text(self, split: str, image: str, text: str, question_id: int | None = None) -> Question | None:
        """The labelled question of this image and text; of a repeated one, the repeat whose id is
        ``question_id`` (None where it is neither: :meth:`repeats` names them)."""
        found = self._by_text[split].get((image, normalise_question(text)), [])
        if len(found) == 1:
            return found[0]
        return next((q for q in found if q.question_id == question_id), None)

    def repeats(self, split: str, image: str, text: str) -> list[Question]:
        """The labelled questions of this image and text where there are several, else []."""
        found = self._by_text[split].get((image, normalise_question(text)), [])
        return found if len(found) > 1 else []

    def by_id(self, split: str, question_id: int) -> Question | None:
        return self._by_id[split].get(question_id)

    def unanswered(self, answers: Iterable[Imported]) -> dict[str, int]:
        """Per split, how many labelled questions no answer pairs with (answers of an older,
        smaller version: LLaVA-1.5's 2,910 random questions against the current 3,000)."""
        answered = {(a.split, a.question_id) for a in answers}
        return {s: sum((s, q.question_id) not in answered for q in qs) for s, qs in self.questions.items()}

    def recorded(self) -> dict[str, Any]:
        """What an :class:`ImportResult` records of these labels (its keyword arguments): the
        files, their sha256 and the POPE versions they are."""
        return {"labels": dict(self.files), "label_sha256": dict(self.sha256), "versions": {"labels": self.versions()}}

    def versions(self) -> dict[str, list[str]]:
        if self._versions is None:  # asked by each reader and again by a mismatch message
            self._versions = {split: label_version(split, self.sha256[split], self.questions[split]) for split in self.files}
        return self._versions


def refuse_duplicates(answers: Sequence[Imported]) -> None:
    """One answer per (split, question): a second one is bad input, named by both sources."""
    seen: dict[tuple[str, int], str] = {}
    for a in answers:
        key = (a.split, a.question_id)
        if key in seen:
            path, _, line = a.source.rpartition(":")
            raise InputError(
                f"duplicate answer to {a.split} question {a.question_id} (first at {seen[key]})",
                path or a.source,
                int(line) if line.isascii() and line.isdigit() else None,
            )
        seen[key] = a.source


# the files an import writes into its run dir (``--overwrite`` removes these, nothing else)
IMPORTED_RUN_FILES = (*OWNED_FILES, MANIFEST)


def owned_by_import(name: str) -> bool:
    """Whether ``name`` is one of :data:`IMPORTED_RUN_FILES`."""
    return name in IMPORTED_RUN_FILES


def check_import_out(out: str | Path, *, overwrite: bool) -> None:
    """Before anything is read: ``--out`` absent or an empty folder, or ``--overwrite``; never a
    file or a dangling link. Nothing is created or removed here."""
    fresh_out_dir(out, overwrite=overwrite, owned=lambda _name: False, create=False)


def refuse_unsafe_splits(answers: Sequence[Imported]) -> None:
    """A split names files (``export``'s ``<split>_answers.json``): it must be one plain file
    name, refused at the answer that carries it (file:line)."""
    for split in dict.fromkeys(a.split for a in answers):
        first = next(a for a in answers if a.split == split)
        path, _, line = first.source.rpartition(":")
        plain_component(split, "split", path or first.source, int(line) if line.isascii() and line.isdigit() else None)


def _without_lone_surrogates(a: Imported) -> Imported:
    """A JSON ``"\\ud83d"`` (half an emoji, cut) has no UTF-8 form: U+FFFD in its place, or no
    sample holding it could be written."""
    fix = replace_lone_surrogates
    return replace(
        a, split=fix(a.split), image=fix(a.image), prompt=fix(a.prompt), text=fix(a.text),
        object=None if a.object is None else fix(a.object), source=fix(a.source),
    )  # fmt: skip


def write_imported_run(result: ImportResult, out: str | Path, *, overwrite: bool = False) -> RunDir:
    """Write ``result`` as a complete run dir (``run.json``, ``samples.jsonl``,
    ``manifest.json``, ``complete.json``) into a new or empty folder; with ``overwrite``, an
    existing folder whose earlier run files (only those) are removed first."""

    if not result.answers:
        raise InputError("no answer could be imported: " + "; ".join(s["reason"] for s in result.skipped[:3]), result.sources[0])
    result.answers = [_without_lone_surrogates(a) for a in result.answers]
    result.model = replace_lone_surrogates(result.model)
    refuse_duplicates(result.answers)
    refuse_unsafe_splits(result.answers)
    sources = {str(p): result.inputs.sha256(p) for p in result.sources}
    labels = {split: str(p) for split, p in result.labels.items()}
    label_sums = result.label_sha256
    splits = list(dict.fromkeys(a.split for a in result.answers))
    # where a split's labels came from the answers themselves, its "benchmark" is its first file
    first_file = {a.split: a.source.rsplit(":", 1)[0] for a in reversed(result.answers)}
    header = RunHeader(
        halluprobe_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        fingerprint=fingerprint_of({"import": result.format, "sources": sources, "labels": label_sums}),
        backend=f"import:{result.format}",
        backend_info={
            "format": result.format,
            "sources": sources,
            "labels": labels,
            "pope_version": result.versions,
            "tool_readouts": result.tool_rules,
            "manifest": MANIFEST,
            **fingerprint_info(result.labels),  # which published questions the labels are
        },
        model=result.model,
        template="(imported: the prompt of each sample is the one the answers file records)",
        readouts=[TEXT_PREFIX + rule for rule in TEXT_RULES] + list(result.tool_rules),
        text_rules=list(TEXT_RULES),
        max_new_tokens=result.max_new_tokens,
        token_sets=None,
        # a split's labels file, or the answers file itself where the labels came from it
        benchmarks={s: label_sums.get(s, sources.get(first_file[s], "")) for s in splits},
        benchmark_paths={s: labels.get(s, first_file[s]) for s in splits},
        images_root="",
        generate=GenerateConfig(max_new_tokens=result.max_new_tokens, stop_strings=()),
        pope_versions={s: list(result.versions.get("labels", {}).get(s, [])) for s in splits},
    )
    fresh_out_dir(out, overwrite=overwrite, owned=owned_by_import)
    rundir = RunDir(out)
    rundir.start(header, resume=False, force=False, overwrite=overwrite)
    rundir.append(
        Sample(
            split=a.split,
            question_id=a.question_id,
            image=a.image,
            object=a.object,
            label=a.label,
            prompt=a.prompt,
            text=a.text,
            readouts={name: ReadoutResult(decision=d) for name, d in a.tool_readouts.items()},
        )
        for a in result.answers
    )
    counts = {s: sum(a.split == s for a in result.answers) for s in splits}
    manifest = {
        "schema_version": 1,
        "format": result.format,
        "sources": sources,
        "labels": labels,
        "pope_version": result.versions,
        "imported": {"total": len(result.answers), "splits": counts},
        "skipped": result.skipped,
        "unanswered": result.unanswered,
        "tool_readouts": result.tool_rules,
        "notes": result.notes,
    }
    write_atomic(rundir.path / MANIFEST, replace_lone_surrogates(json.dumps(manifest, indent=2, ensure_ascii=False)) + "\n")
    rundir.mark_complete({"imported": len(result.answers), "skipped": len(result.skipped), "splits": counts})
    return rundir
