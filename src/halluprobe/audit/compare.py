"""``compare_runs``: several runs over the same questions, one readout, each against the first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from halluprobe.audit.build import paired_record
from halluprobe.audit.table import bootstrap_settings, choose_headline, load_run, score_readout, score_tables
from halluprobe.errors import InputError
from halluprobe.metrics.binary import check_policy
from halluprobe.metrics.paired import ImageBootstrap, paired_test
from halluprobe.records import QuestionKey, RunHeader, UnknownPolicy
from halluprobe.records_audit import ComparedRun, PairedTest, RunComparison, RunDifferences, ScoreTables

__all__ = ["compare_runs", "run_labels"]


def run_labels(headers: list[RunHeader], paths: list[Path]) -> tuple[list[str], RunDifferences]:
    """Short distinguishing names: what differs (model, template, both), else the dir name."""
    models = [h.model for h in headers]
    templates = [h.template for h in headers]
    differs = RunDifferences(model=len(set(models)) > 1, template=len(set(templates)) > 1)
    names = []
    for h, p in zip(headers, paths):
        parts = []
        if differs.model:
            parts.append(Path(h.model).name or h.model)
        if differs.template:
            parts.append(h.template)
        names.append(" | ".join(parts) or p.name or str(p))
    if len(set(names)) < len(names):  # e.g. two models with the same folder name
        names = [f"{n} ({p.name or p})" if names.count(n) > 1 and n != (p.name or str(p)) else n for n, p in zip(names, paths)]
    if len(set(names)) < len(names):
        names = [f"{n} #{i + 1}" for i, n in enumerate(names)]
    return names, differs


def compare_runs(
    rundirs: Sequence[str | Path],
    *,
    readout: str | None = None,
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
) -> RunComparison:
    """Several runs over the same questions (differing in prompt template or model), one readout
    (None: ``dynamic``, or the readout the first run names where it has none).

    ``table``: each run's metrics over the questions every run has; ``paired``: each later run
    against the first over the questions both answered (McNemar, delta F1 = run minus first with
    a paired image bootstrap). Raises InputError for fewer than two runs, a readout a run lacks,
    runs that share no question, or runs that disagree on a shared question's label.
    """
    policy = check_policy(policy)
    paths = [Path(p) for p in rundirs]
    if len(paths) < 2:
        raise InputError("compare needs at least two run directories")
    tables = [load_run(p) for p in paths]
    readout, _ = choose_headline(tables[0], readout)
    for p, t in zip(paths, tables):
        if readout not in t.readouts:
            raise InputError(f"readout {readout!r} is not in this run; it has: {', '.join(t.readouts)}", p)
    headers = [t.header for t in tables]
    names, differs = run_labels(headers, paths)
    index = [{s.key: i for i, s in enumerate(t.samples)} for t in tables]
    common: list[QuestionKey] = [k for k in index[0] if all(k in other for other in index[1:])]
    if not common:
        raise InputError(f"the runs share no question ({', '.join(str(p) for p in paths)})")
    first = tables[0]
    for p, t, idx in zip(paths[1:], tables[1:], index[1:]):
        for k in common:
            if t.samples[idx[k]].label != first.samples[index[0][k]].label:
                raise InputError(f"the runs disagree on the label of question {k}: not the same benchmark", p)

    table: dict[str, ScoreTables] = {}
    for name, t, idx in zip(names, tables, index):
        rows_at = np.array([idx[k] for k in common], dtype=np.int64)
        report = score_readout(t, readout, policy=policy, n_resamples=n_resamples, seed=seed, rows=rows_at)
        table[name] = score_tables(report)

    paired: dict[str, PairedTest] = {}
    ref_idx = index[0]
    for name, t, idx in zip(names[1:], tables[1:], index[1:]):
        both = [k for k in common if not first.table.errors[ref_idx[k]] and not t.table.errors[idx[k]]]
        a_at = np.array([idx[k] for k in both], dtype=np.int64)
        b_at = np.array([ref_idx[k] for k in both], dtype=np.int64)
        pair = first.table.subset(b_at)
        boot = ImageBootstrap(pair, n_resamples=n_resamples, seed=seed)
        paired[name] = paired_record(paired_test(boot, t.table.decisions[readout][a_at], pair.decisions[readout], policy))

    kind: dict[tuple[bool, bool], Literal["both", "model", "template", "neither"]] = {
        (True, True): "both", (True, False): "model", (False, True): "template", (False, False): "neither"
    }  # fmt: skip
    return RunComparison(
        readout=readout,
        policy=policy,
        bootstrap=bootstrap_settings(n_resamples, seed),
        runs=[
            ComparedRun(
                path=str(p),
                label=name,
                model=h.model,
                template=h.template,
                n=t.n,
                errors=int(t.table.errors.sum()),
                valid=t.valid(readout),
                forced=not t.valid(readout),
            )
            for p, name, h, t in zip(paths, names, headers, tables)
        ],
        differ_in=kind[(differs.model, differs.template)],
        differs=differs,
        common_questions=len(common),
        reference=names[0],
        table=table,
        paired=paired,
    )
