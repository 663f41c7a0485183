"""``report --judgments DIR``: the judged benchmarks' sections of the report (MMHal-Bench, HallusionBench;
docs/design/report.md); the logic is in ``halluprobe.report.judged_section``, imported inside
the function (``--help`` stays fast)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from halluprobe.errors import InputError

__all__ = ["JudgmentsOption", "MMHalTemplateOption", "UnparseableOption", "judged_part"]

JudgmentsOption = Annotated[
    Optional[list[Path]],
    typer.Option("--judgments", help="A judgment dir of `mmhal judge` or `hallusion judge` (repeatable; HallusionBench's judged run among "
                 "the RUNDIRS): a section per judged benchmark, its numbers with CIs, the judge ledger, and two judges' agreement."),
]  # fmt: skip
MMHalTemplateOption = Annotated[Optional[Path], typer.Option(help="MMHal-Bench's response template, for --judgments of MMHal-Bench.")]
UnparseableOption = Annotated[
    Literal["zero", "wrong", "drop"],
    typer.Option("--unparseable", help="MMHal-Bench --judgments: an unparseable verdict scores zero (the official rule), wrong (a hallucination), or is dropped."),
]  # fmt: skip


def judged_part(judgments: list[Path] | None, template: Path | None, policy: str, runs: list[Path], resamples: int,
                seed: int) -> list[tuple[tuple[str, str], tuple[str, str]]]:  # fmt: skip
    """The sections ``render_report`` / ``render_chair_report`` add last; none without --judgments."""
    from halluprobe.report.judged_section import judged_sections

    if not judgments:
        if template is not None or policy != "zero":
            raise InputError("--mmhal-template and --unparseable apply to --judgments: give a judgment dir")
        return []
    return judged_sections(judgments, runs=runs, mmhal_template=template, policy=policy, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
