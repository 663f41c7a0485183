"""The judged benchmarks' provenance records: a table of stored verdicts (a judgment dir, the
ledger) that ``check`` recomputes with no model and no judge. Each kind has its own mark; the
comment is written and read by :mod:`halluprobe.provenance` like every other kind's
(docs/design/provenance.md):

- ``halluprobe-mmhal-provenance``: mmhal, MMHal-Bench's judged table (:class:`MMHalProvenance`);
- ``halluprobe-hallusion-provenance``: hallusion, HallusionBench's judged aAcc / fAcc / qAcc
  beside the rule-based readings (:class:`HallusionProvenance`).
"""

from __future__ import annotations

from typing import Literal

from halluprobe.provenance_sources import FileSource
from halluprobe.records import FrozenRecord
from halluprobe.records_scores import BootstrapSettings

__all__ = ["MMHAL_PROVENANCE_MARK", "HALLUSION_PROVENANCE_MARK", "MMHalProvenance", "HallusionProvenance"]

MMHAL_PROVENANCE_MARK = "halluprobe-mmhal-provenance"
HALLUSION_PROVENANCE_MARK = "halluprobe-hallusion-provenance"


class MMHalProvenance(FrozenRecord):
    """``halluprobe-mmhal-provenance``: MMHal-Bench's judged table. The stored verdicts are the
    ledger: the template and the judgments recompute every cell, no judge needed."""

    table: Literal["mmhal"]
    template: FileSource  # the response template as given, sha256 of its bytes
    judgments: FileSource  # the judgment dir as given, sha256 of its judgments.jsonl
    judge: str  # backend:model as configured (judge.json)
    prompt_sha256: str  # the judge prompt template's
    unparseable: Literal["zero", "wrong", "drop"]
    compat: bool  # the official summarizer's aggregation (unparseable = 0, types by position)
    bootstrap: BootstrapSettings
    halluprobe: str


class HallusionProvenance(FrozenRecord):
    """``halluprobe-hallusion-provenance``: HallusionBench's judged table. The run's answers and
    the stored verdicts recompute every cell (the judged row and each rule-based reading), no
    model and no judge needed."""

    table: Literal["hallusion"]
    samples: FileSource  # the run dir as given, sha256 of its samples.jsonl
    judgments: FileSource  # the judgment dir as given, sha256 of its judgments.jsonl
    judge: str  # backend:model as configured (judge.json)
    prompt_sha256: str  # the judge prompt template's
    readouts: tuple[str, ...]  # the rule-based readings shown beside the judged one
    bootstrap: BootstrapSettings
    halluprobe: str
