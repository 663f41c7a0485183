"""Audit a run: how the measurement itself moves the numbers (readouts, tokens, labels, order).

``audit_run`` reads a run directory (``run.json`` + ``samples.jsonl``) and never the model. It
puts every readout side by side (invalid legacy readouts computed anyway, marked as forced),
tests each against the headline readout on the same questions, measures agreement between
readouts, diagnoses the first token, follows F1 as questions accumulate, profiles which absent
objects get "yes", and rescores the stored answers against alternative label files.
``compare_runs`` does the paired comparison between runs over the same questions. The results are
typed records (``records_audit.AuditReport``, ``records_audit.RunComparison``);
``RunDir.write_audit`` stores the audit as ``audit.json``.

Nothing here computes a metric of its own: per-split / pooled / macro metrics and their CIs come
from :func:`halluprobe.metrics.score.score_rows`; the paired test (McNemar and ΔF1 with its
paired image-bootstrap CI) from :mod:`halluprobe.metrics.paired`, which the corrections table
uses too; percentile CIs, ECE, convergence and ``stable_after`` from :mod:`halluprobe.metrics.stats`.

The package: ``table`` (a run as columns, the headline the run names), ``diagnostics``,
``relabel``, ``build`` (``audit_run``), ``compare`` (``compare_runs``), ``summary`` (the terminal
lines). Conventions (the design note ``docs/design/audit.md`` says why):

- "answered" = a sample without ``error``; a readout missing from an answered sample is
  ``unknown`` (as ``score``).
- Paired comparisons are over questions answered by both sides; the unknown policy maps an
  unknown decision before "correct" is decided (``wrong``: never correct; ``drop``: a question
  either side leaves unknown is dropped from that pair). ``b`` = the readout (or run) right and
  the reference wrong, ``c`` the reverse; ``delta_f1`` = readout minus reference. The headline
  is not compared with itself (absent from ``paired``).
- The headline: ``dynamic`` unless asked; a run without it (an imported one) is audited under
  the readout it names: the importing tool's recorded rule, else its first text rule.
"""

from __future__ import annotations

from halluprobe.audit.build import audit_run
from halluprobe.audit.compare import compare_runs
from halluprobe.audit.summary import summarise_audit
from halluprobe.records_audit import AUDIT_SCHEMA_VERSION

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "audit_run",
    "compare_runs",
    "summarise_audit",
]
