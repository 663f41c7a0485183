"""The corrections verb: inference-time corrections read from one run's stored signals (yes/no
runs). Free-form runs, one per decoding method, are compared by the decoding verb (cli/decoding.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from halluprobe.cli._app import MAX_RESAMPLES, ResamplesOption, SeedOption, UnknownOption, app, console, errors, refuse_over_limit
from halluprobe.errors import InputError

__all__ = ["MAX_DRAWS", "MAX_FOLDS", "corrections_cmd"]

# bounds on work taken from flags: each is far beyond what a table needs, and each refusal is one
# line before any work starts (10^8 draws would otherwise run for days without a word)
MAX_FOLDS = 100
MAX_DRAWS = 10_000


def _refuse_unbounded(folds: int, draws: int, resamples: int) -> None:
    for flag, value, limit in (("--folds", folds, MAX_FOLDS), ("--draws", draws, MAX_DRAWS), ("--resamples", resamples, MAX_RESAMPLES)):
        refuse_over_limit(flag, value, limit)


def _cell(value: Optional[float], ci: Any = None, signed: bool = False) -> str:
    from halluprobe.formatting import format_ratio

    if value is None:
        return "-"
    return ("+" if signed and value >= 0 else "") + format_ratio(value, ci)


@app.command("corrections")
def corrections_cmd(
    rundir: Annotated[Path, typer.Argument(help="Run directory recorded with `halluprobe run --signals ...`.")],
    correction: Annotated[
        Optional[list[str]],
        typer.Option(help="Correction to read, e.g. vcd:alpha=1,beta=0.1, dola:relative_top=0.1, clip:beta=1, bias:b=0.5 (repeatable; none and no --grid: every method the run's signals allow, at its default setting)."),
    ] = None,
    grid: Annotated[Optional[Path], typer.Option(help="TOML grid of settings per method ([vcd] alpha = [0.5, 1, 2]).")] = None,
    folds: Annotated[int, typer.Option(min=2, help="Image folds on which a grid setting is chosen (held-out F1).")] = 5,
    unknown: UnknownOption = "wrong",
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
    draws: Annotated[
        int, typer.Option(min=0, help="Also sample every answer this many times (seeded, temperature 1): F1 mean and 95% range.")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table (with a provenance comment for `check`).")] = False,
    latex: Annotated[bool, typer.Option("--latex", help="Print a booktabs LaTeX table (with a provenance comment for `check`).")] = False,
) -> None:
    """Corrections (VCD, ICD, M3ID, PAI, DoLa, CLIP certainty, bias) read from stored signals, against the greedy
    dynamic baseline, the sampled baseline and the readout confound of the same run."""
    from halluprobe.corrections_table import corrections_table, default_corrections, read_grid
    from halluprobe.rundir import RunDir

    with errors():
        _refuse_unbounded(folds, draws, resamples)
        specs = read_grid(grid) if grid is not None else []
        header = RunDir(rundir).read_header()
        if header.open_ended:  # free-form answers: each method is a run of its own, judged by CHAIR / PROVE
            raise InputError(
                f"{rundir} holds free-form answers; compare decoding methods on such runs with "
                f"`halluprobe decoding {rundir} METHOD_RUN... [--sampled-baseline RUN]`"
            )
        if not correction and not specs:  # the methods the run's signals allow, at their default settings
            correction = default_corrections(header)
        report = corrections_table(
            rundir, correction or [], grid=specs, folds=folds, policy=unknown, n_resamples=resamples, seed=seed, draws=draws,  # type: ignore[arg-type]
        )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    title = f"{rundir}: corrections, macro over splits, unknown={unknown}, {report.n} questions"
    if markdown or latex:
        from halluprobe.provenance import corrections_provenance
        from halluprobe.tables import render_corrections

        # a grid's rows are chosen on folds: only a table of named corrections can be recomputed
        with errors():
            provenance = None if specs else corrections_provenance(rundir, report, correction or [])
        typer.echo(render_corrections(report, title, "latex" if latex else "markdown", provenance))
        return
    header = ["method", "kind", "acc", "P", "R", "F1 [95% CI]", "yes", "ΔF1 vs greedy [95% CI]", "McNemar p", "F1 sampled", "Δ vs sampled"]
    header += [f"F1 of {draws} draws [95%]"] if draws else []
    header += ["unknown"] if report.any_unknown else []  # an F1 of 0 from answers all unknown is shown as such
    lines = []
    for row in report.rows:
        kind = row.kind + (f", chosen on {row.chosen_on}" if row.chosen_on else "") + (f", inert: {row.inert}" if row.inert else "")
        lines.append([
            row.name, kind, _cell(row.accuracy), _cell(row.precision), _cell(row.recall), _cell(row.f1, row.f1_ci),
            _cell(row.yes_ratio), _cell(row.delta_f1, row.delta_f1_ci, signed=True),
            "-" if row.mcnemar_p is None else f"{row.mcnemar_p:.3g}", _cell(row.f1_sampled), _cell(row.delta_sampled, signed=True),
            *([_cell(row.f1_draws[0], row.f1_draws[1:]) if row.f1_draws else "-"] if draws else []),
            *([f"{row.unknown}/{report.n}"] if report.any_unknown else []),
        ])  # fmt: skip
    from rich.table import Table

    table = Table(title=title)
    for col in header:
        table.add_column(col, justify="left" if col in ("method", "kind") else "right")
    for cells in lines:
        table.add_row(*cells)
    console().print(table)
