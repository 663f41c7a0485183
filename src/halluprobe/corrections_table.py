"""The corrections table: every correction read from one run, against a correctly read greedy
baseline, beside the sampled baseline and the readout confound of the same run.

Rows: ``dynamic`` (the greedy baseline, read from the model's own yes/no sets), the readout
confound (``legacy_2tok`` where its ids are valid for the vocabulary, else the text rule that
scores worst), and each correction. Columns: macro accuracy, precision, recall, F1 with its
image-bootstrap CI, yes-ratio; the paired difference in macro F1 from the greedy baseline with
its paired image-bootstrap CI and McNemar's exact p (``metrics.paired``, the audit's test: under
``--unknown drop`` over the questions both rows answer); and each row's F1 under sampling at
temperature 1 (*expected* counts: every answer contributes its probability of yes, no random
draw), with its difference from the sampled baseline (the comparison contrastive-decoding
papers make). A grid sweep chooses each method's setting on image folds and reports its
held-out F1; the best setting on the whole run is shown too, labelled optimistic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from halluprobe.errors import InputError
from halluprobe.metrics.paired import ImageBootstrap, SampleTable, paired_test
from halluprobe.metrics.score import ScoreRow, score_rows
from halluprobe.readouts.apply import check_readout
from halluprobe.readouts.corrections import CORRECTIONS, parse_correction
from halluprobe.readouts.text import TEXT_RULES
from halluprobe.readouts.value import Readout
from halluprobe.records import RunHeader, Sample, UnknownPolicy
from halluprobe.records_scores import BootstrapSettings
from halluprobe.scoring import read_scored_run, readout_rows
from halluprobe.tomlfile import read_toml

__all__ = ["MAX_GRID_SETTINGS", "CorrectionRow", "CorrectionsReport", "corrections_table", "default_corrections", "drawn_f1", "read_grid", "expected_f1"]

BASELINE = "dynamic"


@dataclass(frozen=True)
class CorrectionRow:
    name: str
    kind: str  # "baseline", "confound", "correction"
    accuracy: float | None
    precision: float | None
    recall: float | None
    f1: float | None
    f1_ci: tuple[float, float] | None
    yes_ratio: float | None
    delta_f1: float | None  # minus the greedy baseline's macro F1
    delta_f1_ci: tuple[float, float] | None
    mcnemar_p: float | None
    f1_sampled: float | None  # macro F1 of the expected counts at temperature 1
    delta_sampled: float | None  # minus the sampled baseline's
    inert: str | None = None
    chosen_on: str | None = None  # grid rows: "folds" (held-out) or "test (optimistic)"
    # with draws: macro F1 of seeded sampled answers (temperature 1): mean, 2.5th, 97.5th percentile
    f1_draws: tuple[float, float, float] | None = None
    # a correction row's answers read as neither yes nor no (summed over splits): an F1 of 0
    # from a setting whose answers are all unknown reads nothing, it is not the method's result.
    # Counted for corrections only: the confound row is the readout that scores worst by design
    unknown: int = 0


@dataclass
class CorrectionsReport:
    run: str
    policy: str
    n: int
    rows: list[CorrectionRow] = field(default_factory=list)
    bootstrap: BootstrapSettings = field(default_factory=lambda: BootstrapSettings(n_resamples=0, seed=0))

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run, "policy": self.policy, "n": self.n, "bootstrap": self.bootstrap.model_dump(mode="json"),
            "rows": [_row_json(row) for row in self.rows],
        }  # fmt: skip

    @property
    def any_unknown(self) -> bool:
        return any(row.unknown for row in self.rows)


def _row_json(row: CorrectionRow) -> dict[str, Any]:
    """A row as JSON; ``unknown`` only where a row has unknown answers (earlier tables unchanged)."""
    return {k: v for k, v in row.__dict__.items() if k != "unknown" or v}


def _p_yes(row: ScoreRow) -> float:
    """The probability a sampled answer is yes: ``p_yes``, or the decision when there is none."""
    return row.p_yes if row.p_yes is not None else float(row.decision == "yes")


def expected_f1(rows: Sequence[ScoreRow]) -> float | None:
    """Macro F1 of the expected confusion counts when each answer is sampled: a question whose
    readout gives ``p_yes`` is answered yes with that probability, one without (a text rule)
    keeps its decision, and an errored one is never right. F1 per split from the summed
    probabilities, then the mean over splits."""
    by_split: dict[str, list[ScoreRow]] = {}
    for r in rows:
        by_split.setdefault(r.split, []).append(r)
    values = []
    for split_rows in by_split.values():
        tp = sum(_p_yes(r) for r in split_rows if r.label == "yes" and not r.error)
        fp = sum(_p_yes(r) for r in split_rows if r.label == "no" and not r.error)
        positives = sum(1 for r in split_rows if r.label == "yes")
        denominator = tp + fp + positives  # 2TP + FP + (every yes label not answered yes)
        values.append(2 * tp / denominator if denominator else None)
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined and len(defined) == len(values) else None


def _table(rows: Sequence[ScoreRow]) -> SampleTable:
    """The run's questions as columns (every readout's rows come in this order)."""
    return SampleTable.build([r.split for r in rows], [r.image for r in rows], [r.label for r in rows], [r.error for r in rows])


def _decisions(rows: Sequence[ScoreRow]) -> np.ndarray:
    return np.array([r.decision for r in rows], dtype=object)


def drawn_f1(rows: Sequence[ScoreRow], draws: int, seed: int, policy: UnknownPolicy) -> tuple[float, float, float] | None:
    """Macro F1 of ``draws`` seeded samplings of every answer (yes with its ``p_yes``): the mean
    and the 2.5th and 97.5th percentiles across draws. An answer without ``p_yes`` keeps its
    decision (an errored one stays an error)."""
    rng = np.random.default_rng(seed)
    table = _table(rows)
    kept = _decisions(rows)
    p = np.array([np.nan if r.p_yes is None else r.p_yes for r in rows])
    sampled = ~np.isnan(p)
    values = []
    for _ in range(draws):
        decisions = kept.copy()
        decisions[sampled] = np.where(rng.random(int(sampled.sum())) < p[sampled], "yes", "no")
        f1 = table.macro_f1(decisions, policy)
        if f1 is not None:
            values.append(f1)
    if not values:
        return None
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(np.mean(values)), float(lo), float(hi)


def _confound(header: RunHeader, samples: Sequence[Sample], policy: UnknownPolicy) -> str | None:
    """legacy_2tok where its ids are this vocabulary's yes/no pieces, else the worst text rule."""
    sets = header.token_sets
    if sets is not None and sets.legacy_valid and "legacy_2tok" in header.readouts:
        return "legacy_2tok"
    worst: tuple[float, str] | None = None
    for rule in TEXT_RULES:
        name = f"text:{rule}"
        try:
            check_readout(name, header, samples, force_invalid=False, source=None)
        except InputError:
            continue
        f1 = score_rows(readout_rows(name, header, samples), readout=name, policy=policy, n_resamples=0).macro.f1
        if f1 is not None and (worst is None or f1 < worst[0]):
            worst = (f1, name)
    return worst[1] if worst else None


def default_corrections(header: RunHeader) -> list[str]:
    """The methods a run's signals (``GenerateConfig.signals`` as asked: ``noised``,
    ``layers:0,2``, ``attention:0.5,2,16``, ..., and ``clip``) allow, at their published
    default settings."""
    signals = header.generate.signals if header.generate is not None else ()
    names = {signal.partition(":")[0] for signal in signals}
    specs = []
    if header.clip is not None:
        specs.append("clip:beta=1")
    if "noised" in names:
        specs.append("vcd:alpha=1,beta=0.1")
    if "instruction" in names:
        specs.append("icd:alpha=1,beta=0.1")
    if "layers" in names:
        specs.append("dola:relative_top=0.1")
    if {"attention", "no-image"} <= names:
        specs.append("pai:gamma=1.1")
    if "no-image" in names:
        specs.append("m3id:lambda=0.02,t=0")  # inert at the first answer token: shown as such
    return specs


# a grid's settings are each a full readout over the run: beyond this many, refused up front
MAX_GRID_SETTINGS = 1_000


def read_grid(path: str | Path) -> list[str]:
    """A grid TOML file: one table per method, each key a list of values (or one value);
    every combination is one correction spec, e.g. ``[vcd] alpha = [0.5, 1, 2]``. More than
    :data:`MAX_GRID_SETTINGS` combinations in all are refused before any is built."""

    p = Path(path)
    data = read_toml(p, "the grid")
    specs: list[str] = []
    total = sum(math.prod(len(v) if isinstance(v, list) else 1 for v in t.values()) for t in data.values() if isinstance(t, dict))
    if total > MAX_GRID_SETTINGS:
        raise InputError(f"the grid has {total:,} settings, over the limit of {MAX_GRID_SETTINGS:,}", p)
    for method, table in data.items():
        if method not in CORRECTIONS:
            raise InputError(f"unknown correction {method!r} in the grid; known: {', '.join(CORRECTIONS)}", p)
        if not isinstance(table, dict):
            raise InputError(f"[{method}] must be a table of parameter lists", p)
        keys = list(table)
        for key in keys:
            if key not in CORRECTIONS[method].defaults:
                raise InputError(f"[{method}] has no parameter {key!r}; it takes {', '.join(CORRECTIONS[method].defaults)}", p)
        lists = [v if isinstance(v, list) else [v] for v in table.values()]
        for values in itertools.product(*lists):
            spec = method + (":" + ",".join(f"{k}={v}" for k, v in zip(keys, values)) if keys else "")
            try:
                parse_correction(spec)  # a value out of bounds or not a number: named with the grid file
            except InputError as err:
                raise InputError(err.problem, p) from None
            specs.append(spec)
    if not specs:
        raise InputError("the grid names no correction", p)
    return specs


def _folds(images: Sequence[str], k: int, seed: int) -> dict[str, int]:
    distinct = sorted(set(images))
    order = np.random.default_rng(seed).permutation(len(distinct))
    return {distinct[i]: rank % k for rank, i in enumerate(order)}


def corrections_table(
    path: str | Path,
    specs: Sequence[str],
    *,
    grid: Sequence[str] = (),
    folds: int = 5,
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
    draws: int = 0,
) -> CorrectionsReport:
    """The table for one run dir; ``specs`` are shown as given, ``grid`` settings are chosen per
    method on image folds (held-out F1) and on the whole run (optimistic)."""
    _, header, samples = read_scored_run(path, BASELINE)
    for spec in [*specs, *grid]:
        parse_correction(spec)  # a correction, not any readout
        check_readout(spec, header, samples, force_invalid=False, source=Path(path) / "run.json")
    base_rows = readout_rows(BASELINE, header, samples)
    table = _table(base_rows)
    base = _decisions(base_rows)
    boot = ImageBootstrap(table, n_resamples=n_resamples, seed=seed)  # one set of image weights for every row
    images = [r.image for r in base_rows]
    base_sampled = expected_f1(base_rows)
    report = CorrectionsReport(
        run=str(path), policy=policy, n=len(samples), bootstrap=BootstrapSettings(n_resamples=n_resamples, seed=seed, draws=draws)
    )

    def row(name: str, kind: str, rows: list[ScoreRow], chosen_on: str | None = None) -> CorrectionRow:
        scored = score_rows(rows, readout=name, policy=policy, n_resamples=n_resamples, seed=seed).macro
        is_base = name == BASELINE and kind == "baseline"
        paired = None if is_base else paired_test(boot, _decisions(rows), base, policy)
        sampled = expected_f1(rows)
        return CorrectionRow(
            name=name, kind=kind, accuracy=scored.accuracy, precision=scored.precision, recall=scored.recall,
            f1=scored.f1, f1_ci=scored.ci.get("f1"), yes_ratio=scored.yes_ratio,
            delta_f1=None if paired is None else paired.delta_f1,
            delta_f1_ci=None if paired is None else paired.delta_f1_ci,
            mcnemar_p=None if paired is None else paired.mcnemar_p,
            f1_sampled=sampled,
            delta_sampled=None if sampled is None or base_sampled is None else sampled - base_sampled,
            inert=Readout.parse(name).inert_reason if kind == "correction" and chosen_on != "folds" else None,
            chosen_on=chosen_on,
            f1_draws=drawn_f1(rows, draws, seed, policy) if draws else None,
            unknown=scored.unknown,  # every row: a readout that reads nothing shows it (issue 25)
        )  # fmt: skip

    report.rows.append(row(BASELINE, "baseline", base_rows))
    confound = _confound(header, samples, policy)
    if confound is not None:
        report.rows.append(row(confound, "confound", readout_rows(confound, header, samples)))
    for spec in specs:
        report.rows.append(row(spec, "correction", readout_rows(spec, header, samples)))
    if grid:
        report.rows.extend(_grid_rows(grid, header, samples, table, images, folds, seed, policy, row))
    return report


def _grid_rows(grid: Sequence[str], header: RunHeader, samples: Sequence[Sample], table: SampleTable, images: list[str],
               k: int, seed: int, policy: UnknownPolicy, row: Any) -> list[CorrectionRow]:  # fmt: skip
    """Per method: the setting chosen on k-1 image folds, evaluated on the held-out fold (the
    held-out decisions of all folds scored together), and the best setting on the whole run."""
    if k < 2:
        raise InputError(f"--folds must be at least 2, not {k}")
    if k > len(set(images)):  # a fold without an image would choose a setting on nothing
        raise InputError(f"--folds {k} is more than the run's {len(set(images))} images")
    fold_of = _folds(images, k, seed)
    fold = np.array([fold_of[i] for i in images])
    rows_of = {spec: readout_rows(spec, header, samples) for spec in grid}
    decisions = {spec: _decisions(rows) for spec, rows in rows_of.items()}
    out: list[CorrectionRow] = []
    for method in dict.fromkeys(Readout.parse(s).method for s in grid):
        settings = [s for s in grid if Readout.parse(s).method == method]
        held_out: list[ScoreRow] = [None] * len(images)  # type: ignore[list-item]
        chosen: list[str] = []
        for f in range(k):
            train = np.flatnonzero(fold != f)
            best = max(settings, key=lambda s: table.macro_f1(decisions[s], policy, train) or -1.0)
            chosen.append(best)
            for i in np.flatnonzero(fold == f):
                held_out[i] = rows_of[best][i]
        label = f"{method} (chosen on {k} image folds: {', '.join(sorted(set(chosen)))})"
        out.append(row(label, "correction", held_out, chosen_on="folds"))
        whole = np.arange(len(images))
        best_on_test = max(settings, key=lambda s: table.macro_f1(decisions[s], policy, whole) or -1.0)
        out.append(row(best_on_test, "correction", rows_of[best_on_test], chosen_on="test (optimistic)"))
    return out
