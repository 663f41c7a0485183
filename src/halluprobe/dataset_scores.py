"""DASH-B's and POPEv2's own metrics for a run dir on those datasets (shown by ``score``).

A run is on DASH-B or POPEv2 when its header says so: a question fingerprint of the pinned
files (``run.json``'s ``question_fingerprints``, or an import's ``question_datasets``), or a
split named ``dashb`` / ``popev2``. Other runs get nothing here, so their output is unchanged.
"""

from __future__ import annotations

from pathlib import Path

from halluprobe.benchmarks.datasets import identify_fingerprint
from halluprobe.metrics.datasets import dashb_scores, popev2_paired_drop
from halluprobe.records import RunHeader
from halluprobe.rundir import RunDir
from halluprobe.scoring import read_scored_run, readout_rows

__all__ = ["run_datasets", "dataset_metric_lines"]


def run_datasets(header: RunHeader) -> set[str]:
    """The pinned datasets (of :mod:`halluprobe.benchmarks.datasets`) a run's questions are."""

    found = {split for split in header.benchmarks if split in ("dashb", "popev2")}
    for fp in (header.question_fingerprints or {}).values():
        found.update(name.split("@", 1)[0] for name in identify_fingerprint(fp))
    for names in (header.backend_info.get("question_datasets") or {}).values():
        found.update(str(name).split("@", 1)[0] for name in names)
    return found & {"dashb", "popev2"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def dataset_metric_lines(
    path: str | Path, readout: str, *, force_invalid: bool = False, n_resamples: int = 1000, seed: int = 0
) -> list[str]:
    """Lines for a terminal: DASH-B's TPR / TNR / their mean, POPEv2's paired drop; [] for other runs."""

    datasets = run_datasets(RunDir(path).read_header())
    if not datasets:
        return []
    _, header, samples = read_scored_run(path, readout, force_invalid=force_invalid)
    rows = readout_rows(readout, header, samples)
    lines = []
    if "dashb" in datasets:
        d = dashb_scores(rows, n_resamples=n_resamples, seed=seed)
        ci = f" [{_pct(d.mean_ci[0])}, {_pct(d.mean_ci[1])}]" if d.mean_ci else ""
        lines.append(
            f"DASH-B: mean of TPR and TNR {_pct(d.mean_tpr_tnr)}{ci} (TPR {_pct(d.tpr)} of {d.n_pos}, TNR {_pct(d.tnr)} of {d.n_neg}; "
            f"accuracy {_pct(d.accuracy)}, harmonic mean {_pct(d.harmonic_mean)})"
        )
    if "popev2" in datasets:
        p = popev2_paired_drop(rows, n_resamples=n_resamples, seed=seed)
        ci = f" [{p.ci[0]:.3f}, {p.ci[1]:.3f}]" if p.ci else ""
        drop = "-" if p.mean_drop is None else f"{p.mean_drop:.3f}"
        lines.append(
            f"POPEv2: paired drop in p(yes), original to edited, {drop}{ci} over {p.pairs} pairs "
            f"({p.both_correct} yes then no, {p.yes_to_both} yes to both; {p.unpaired} unpaired)"
        )
    return lines
