"""``literature audit``: recompute a published figure from the authors' own released answers.

Per registry entry: download every pinned file into the cache (sha256 checked) and copy it
under ``OUT/<name>/files``, import the answers as a run dir (``OUT/<name>/run``), score it with
the authors' rule (counting an unreadable answer as they do) and with halluprobe's
``text:strict``, and set each published figure beside its recomputation: equal at the
published precision or not, and by how much; the image-clustered CI; which POPE content the
labels are (by content fingerprint); how many answers the two rules classify differently.
An entry this build cannot audit (its import format or parser is not here) is listed with
the reason instead of a number. An entry that fails leaves nothing it created under ``OUT``
(:mod:`halluprobe.benchmarks.created`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluprobe.audit.overlap import NOT_COCO, overlap_counts_line, trained_on_line
from halluprobe.benchmarks.coco_split import image_overlap
from halluprobe.benchmarks.created import removed_on_failure
from halluprobe.benchmarks.datasets import DATASETS, SourceFile
from halluprobe.benchmarks.download import already_pinned, copy_pinned
from halluprobe.benchmarks.question_file import split_name
from halluprobe.errors import InputError
from halluprobe.files import refuse_outputs
from halluprobe.imports.common import IMPORTED_RUN_FILES
from halluprobe.imports.formats import FORMATS, import_answers
from halluprobe.literature.questions import (
    check_own_draw,
    dataset_coverage,
    fetch_offline_hint,
)
from halluprobe.literature.registry import Entry, Figure, PinnedFile
from halluprobe.metrics.datasets import dashb_scores
from halluprobe.metrics.score import score_rows
from halluprobe.metrics.stats import cluster_bootstrap
from halluprobe.readouts.text import ALL_TEXT_RULES
from halluprobe.scoring import read_scored_run, readout_rows

if TYPE_CHECKING:
    from halluprobe.benchmarks.created import CreatedOutputs
    from halluprobe.metrics.score import ScoreRow
    from halluprobe.records import RunHeader, Sample
    from halluprobe.records_scores import ScoreReport

# a recomputed figure (a ratio in [0, 1]) and its image-clustered CI
ValueWithCi = tuple["float | None", "tuple[float, float] | None"]

__all__ = ["STRICT_RULE", "HEADLINE", "FigureCheck", "EntryAudit", "missing_capability", "audit_entry", "fetch_entry_files", "copy_target", "check_audit_outputs", "import_arguments", "new_entry_audit", "recompute_entry"]

STRICT_RULE = "strict"
HEADLINE = ("f1_macro", "accuracy_macro", "yes_ratio_macro")  # what an entry with no published figure shows


@dataclass(frozen=True)
class FigureCheck:
    """One published figure and its recomputations (in the figure's own scale)."""

    metric: str
    where: str
    source: str  # the file the figure is stated in
    published: float
    decimals: int
    authors: float | None
    equal: bool | None
    difference: float | None
    strict: float | None
    ci: tuple[float, float] | None


@dataclass
class EntryAudit:
    name: str
    model: str
    decoding: str
    dataset: str
    parser: str
    status: str  # "audited", or why not
    figures: list[FigureCheck] = field(default_factory=list)
    recomputed: dict[str, float | None] = field(default_factory=dict)  # headline numbers when nothing is published
    recomputed_strict: dict[str, float | None] = field(default_factory=dict)  # the same under text:strict
    recomputed_ci: tuple[float, float] | None = None  # image-clustered CI of the first headline number
    questions_are: dict[str, list[str]] = field(default_factory=dict)  # split -> pinned files its labels are
    rule_changes: int | None = None  # answers the authors' rule and strict classify differently
    answers: int | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def missing_capability(entry: Entry) -> str | None:
    """Why this build cannot audit ``entry`` (its import format or parse rule is absent), or None."""

    if entry.format not in FORMATS:
        return f"needs the import format {entry.format!r}, not in this build (formats: {', '.join(FORMATS)})"
    if entry.parser.rule not in ALL_TEXT_RULES:
        return f"needs the text rule text:{entry.parser.rule}, not in this build"
    return None


def fetch_entry_files(
    entry: Entry,
    dest: Path,
    *,
    cache_dir: Path | None = None,
    mirror: str | None = None,
    overwrite: bool = False,
    created: CreatedOutputs | None = None,
) -> dict[str, list[Path]]:
    """Download (or take from the cache) every file of ``entry``, sha256 checked, copied under
    ``dest``; role -> paths. Two files of one name (one split each) keep their repository folders apart.

    Every file is fetched and every destination checked before ``dest`` is touched: a failed
    download or a file there with other content (refused unless ``overwrite``) leaves no folder
    and no copy. What is created is recorded in ``created`` (the caller undoes it) or, with none,
    removed here when a copy fails (:mod:`halluprobe.benchmarks.created`)."""

    planned: list[tuple[str, Path, Path, str]] = []  # (role, cached copy, destination, sha256)
    for role, f in entry.files():
        repository, commit = entry.repository_of(f)
        cached = fetch_offline_hint(SourceFile(repository, commit, f.path, f.sha256, f.size), cache_dir=cache_dir, mirror=mirror)
        target = copy_target(dest, role, f)
        already_pinned(target, f.sha256, overwrite=overwrite)  # refuses another file there now, before any copy
        planned.append((role, cached, target, f.sha256))
    out: dict[str, list[Path]] = {"answers": [], "questions": [], "labels": []}
    with removed_on_failure(created) as made:
        for role, cached, target, sha256 in planned:
            _made_folder(made, target.parent)
            made.new_files([target])
            out[role].append(copy_pinned(cached, target, sha256, overwrite=overwrite))
    return out


def copy_target(dest: Path, role: str, f: PinnedFile) -> Path:
    """Where ``f``'s copy goes under ``dest`` (answers keep their repository path apart)."""
    return dest / role / f.path.replace("/", "__") if role == "answers" else dest / role / f.path.rsplit("/", 1)[-1]


def check_audit_outputs(entries: Sequence[Entry], out: Path, tables: Sequence[Path], *, overwrite: bool) -> None:
    """Every file the audit of ``entries`` would write, checked before anything is fetched or
    written (:func:`halluprobe.files.refuse_outputs`): the ``tables``, each auditable entry's
    run files, and each copy (kept when it is already the pinned file; another file there is
    refused unless ``overwrite``)."""

    runs = [out / e.name / "run" / name for e in entries if missing_capability(e) is None for name in IMPORTED_RUN_FILES]
    refuse_outputs([*tables, *runs], overwrite=overwrite)
    for e in entries:
        for role, f in e.files():
            target = copy_target(out / e.name / "files", role, f)
            refuse_outputs([target], overwrite=True)  # a folder or a dangling link there: refused either way
            already_pinned(target, f.sha256, overwrite=overwrite)


def _made_folder(made: CreatedOutputs, folder: Path) -> Path:
    """``folder`` created (and recorded); a file in its way is bad input naming it."""
    try:
        return made.folder(folder)
    except OSError as e:
        raise InputError(f"cannot create this folder: {e.strerror or e}", folder) from e


def _value(metric: str, report: ScoreReport, rows: Sequence[ScoreRow], n_resamples: int, seed: int) -> ValueWithCi:
    """``metric`` (ratio in [0, 1]) and its image-clustered CI from a score report or, for DASH-B's, the rows."""
    if metric.startswith("dashb_"):

        d = dashb_scores(rows, n_resamples=n_resamples, seed=seed)
        value = {"dashb_mean": d.mean_tpr_tnr, "dashb_tpr": d.tpr, "dashb_tnr": d.tnr, "dashb_accuracy": d.accuracy,
                 "dashb_harmonic": d.harmonic_mean}[metric]  # fmt: skip
        return value, d.mean_ci if metric == "dashb_mean" else _dashb_rate_ci(metric, rows, n_resamples, seed)
    macro = metric.endswith("_macro")
    name = metric.removesuffix("_macro")
    table = report.macro if macro else (next(iter(report.splits.values())) if len(report.splits) == 1 else report.pooled)
    return getattr(table, name), table.ci.get(name)


def _dashb_rate_ci(metric: str, rows: Sequence[ScoreRow], n_resamples: int, seed: int) -> tuple[float, float] | None:
    """Image-clustered CI of DASH-B's TPR, TNR or plain accuracy (an unknown answer is wrong, as
    DASH-B counts it); the harmonic mean has none here."""
    import numpy as np


    wanted = {"dashb_tpr": "yes", "dashb_tnr": "no", "dashb_accuracy": None}
    if metric not in wanted or not rows or n_resamples < 1:  # resamples 0: no CI
        return None
    correct = np.array([r.decision == r.label for r in rows], dtype=float)
    counted = np.array([wanted[metric] is None or r.label == wanted[metric] for r in rows], dtype=bool)

    def rate(idx: np.ndarray) -> float | None:
        chosen = idx[counted[idx]]
        return float(correct[chosen].mean()) if len(chosen) else None

    return cluster_bootstrap([r.image for r in rows], rate, n_resamples=n_resamples, seed=seed)


def _scaled(value: float | None, scale: int) -> float | None:
    return None if value is None else value * scale


def _check(fig: Figure, authors: ValueWithCi, strict: ValueWithCi) -> FigureCheck:
    a = _scaled(authors[0], fig.scale)
    ci = authors[1]
    equal = None if a is None else round(a, fig.decimals) == round(fig.value, fig.decimals)
    return FigureCheck(
        metric=fig.metric,
        where=fig.where,
        source=fig.path,
        published=fig.value,
        decimals=fig.decimals,
        authors=a,
        equal=equal,
        difference=None if a is None else a - fig.value,
        strict=_scaled(strict[0], fig.scale),
        ci=None if ci is None else (ci[0] * fig.scale, ci[1] * fig.scale),
    )


def _check_dataset(entry: Entry, questions_are: dict[str, list[str]], labels: list[Path]) -> None:
    """The labels must be the pinned dataset version the entry names (by content fingerprint):
    a figure recomputed on other questions would be compared with the wrong thing."""

    if entry.version is None or entry.dataset not in DATASETS or not labels:
        return
    want = f"{entry.dataset}@{entry.version}:"
    for split, names in questions_are.items():
        if not any(name.startswith(want) for name in names):
            where = next((p for p in labels if split in p.name), labels[0])
            found = ", ".join(names) or "no pinned file"
            raise InputError(f"the {split} labels match no fingerprint of {want[:-1]} (they are: {found})", where)


def new_entry_audit(entry: Entry) -> EntryAudit:
    """An audit of ``entry`` with nothing measured yet (status ``audited``)."""
    return EntryAudit(
        name=entry.name, model=entry.model, decoding=entry.decoding, parser=f"text:{entry.parser.rule}",
        dataset=f"{entry.dataset}@{entry.version}" if entry.version else f"{entry.dataset} (own draw, fingerprint {(entry.fingerprint or '?')[:12]})",
        status="audited", notes=list(entry.notes),
    )  # fmt: skip


def recompute_entry(entry: Entry, rundir: Path, result: EntryAudit, *, n_resamples: int, seed: int) -> tuple[RunHeader, list[Sample]]:
    """Score the run dir of ``entry``'s answers with the authors' rule (their unknown policy) and
    with ``text:strict``, and fill ``result``: each published figure beside its recomputation
    (or, with none published, the headline numbers), and how many answers the two rules
    classify differently. Returns the run's header and samples."""

    authors_rule = f"text:{entry.parser.rule}"
    _, header, samples = read_scored_run(rundir, authors_rule)
    authors_rows = readout_rows(authors_rule, header, samples)
    strict_rows = readout_rows(f"text:{STRICT_RULE}", header, samples)
    policy = entry.parser.unknown
    authors = score_rows(authors_rows, readout=authors_rule, policy=policy, n_resamples=n_resamples, seed=seed)
    strict = score_rows(strict_rows, readout=f"text:{STRICT_RULE}", policy=policy, n_resamples=n_resamples, seed=seed)
    for fig in entry.published:
        result.figures.append(
            _check(fig, _value(fig.metric, authors, authors_rows, n_resamples, seed), _value(fig.metric, strict, strict_rows, n_resamples, seed))
        )
    if not entry.published:  # nothing published: the headline numbers, recomputed
        for metric in HEADLINE:
            value, ci = _value(metric, authors, authors_rows, n_resamples, seed)
            result.recomputed[metric] = value
            result.recomputed_strict[metric] = _value(metric, strict, strict_rows, n_resamples, seed)[0]
            if metric == HEADLINE[0]:
                result.recomputed_ci = ci
    result.rule_changes = sum(a.decision != s.decision for a, s in zip(authors_rows, strict_rows))
    result.answers = len(authors_rows)
    return header, samples


def audit_entry(
    entry: Entry,
    out: Path,
    *,
    cache_dir: Path | None = None,
    mirror: str | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    overwrite: bool = False,
    created: CreatedOutputs | None = None,
) -> EntryAudit:
    """Fetch, import and score one entry under ``out/<name>`` (see the module docstring).

    A failure (a download, a pin, answers that are not the pinned questions) leaves nothing this
    entry created: no copy, no run dir, no empty folder; what was there before is kept. The
    record is ``created`` (the caller undoes it) or, with none, undone here."""

    result = new_entry_audit(entry)
    missing = missing_capability(entry)
    run = out / entry.name / "run"
    if missing is None:

        refuse_outputs((run / name for name in IMPORTED_RUN_FILES), overwrite=overwrite)
    with removed_on_failure(created) as made:
        files = fetch_entry_files(entry, out / entry.name / "files", cache_dir=cache_dir, mirror=mirror, overwrite=overwrite, created=made)
        if missing is not None:
            result.status = f"not audited: {missing}"
            return result
        _made_folder(made, run)
        made.new_files(run / name for name in IMPORTED_RUN_FILES)  # what an import may write into its run dir
        rundir, _ = import_answers(entry.format, files["answers"], run, model=entry.model, overwrite=overwrite, **import_arguments(entry, files))
        _check_run(entry, rundir.path, files, result, cache_dir=cache_dir, mirror=mirror, n_resamples=n_resamples, seed=seed)
    return result


def _check_run(
    entry: Entry, rundir: Path, files: dict[str, list[Path]], result: EntryAudit, *, cache_dir: Path | None, mirror: str | None, n_resamples: int, seed: int
) -> None:
    """Score the imported run into ``result`` and check its questions are the pinned ones (an
    InputError when they are not)."""
    header, samples = recompute_entry(entry, rundir, result, n_resamples=n_resamples, seed=seed)
    result.questions_are = dict(header.backend_info.get("question_datasets") or {})
    counts = image_overlap(s.image for s in samples)  # the benchmark's overlap with COCO train2017, or why none is counted
    result.notes.extend([overlap_counts_line(counts), trained_on_line()] if counts.is_coco else [NOT_COCO])
    _check_dataset(entry, result.questions_are, files["labels"])
    if not files["labels"]:  # labels inside the answers (DASH-B's): which of the pinned questions they are
        result.questions_are.update(dataset_coverage(entry, samples, cache_dir=cache_dir, mirror=mirror))
    result.notes.extend(f"{split} labels are no pinned file: {hint}" for split, hint in (header.backend_info.get("question_hints") or {}).items())
    if entry.fingerprint is not None:
        prints = set((header.backend_info.get("question_fingerprints") or {}).values())
        if entry.fingerprint in prints:
            pass  # the labels the answers were paired with are the pinned draw
        elif not prints and files["questions"]:  # labels without question text (MARINE's): the draw is the question file
            result.questions_are.update(check_own_draw(entry.fingerprint, samples, files["questions"][0], files["answers"][0]))
        else:
            raise InputError(f"the questions match no fingerprint the registry pins: expected {entry.fingerprint}", files["answers"][0])


def import_arguments(entry: Entry, files: dict[str, list[Path]]) -> dict[str, Any]:
    """What ``import_answers`` takes for the entry's format besides the answers files: llava its
    POPE labels (and LLaVA's question file where the entry has one: pooled answers); marine its
    id-keyed labels and the split (the entry's, else the pinned question file's name); dashb
    nothing (labels are in the answers array); any other format its labels files."""

    if entry.format == "llava":
        return {"labels": files["labels"], "questions": files["questions"][0] if files["questions"] else None}
    if entry.format == "marine":
        split = entry.split or (split_name(files["questions"][0]) if files["questions"] else None)
        return {"labels": files["labels"], "split": split}
    if entry.format == "dashb":
        return {"split": entry.split} if entry.split else {}
    return {"labels": files["labels"]}
