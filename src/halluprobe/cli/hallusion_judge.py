"""HallusionBench's official score: a run's answers judged with the official prompt by any backend
(the judge ledger), and the judged aAcc / fAcc / qAcc beside the rule-based readings."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Optional

import typer

from halluprobe.cli._app import (
    MAX_RESAMPLES,
    ResamplesOption,
    SeedOption,
    app,
    errors,
    refuse_over_limit,
)
from halluprobe.cli._backend import BackendSpec, with_secondary_backend
from halluprobe.errors import InputError
from halluprobe.files import refuse_outputs, write_atomic

if TYPE_CHECKING:
    from halluprobe.judging.hallusion_score import JudgedHallusion

__all__ = ["hallusion_app"]

hallusion_app = typer.Typer(help="HallusionBench's official score: the judge's correct / incorrect / unclear per question, with the ledger.", no_args_is_help=True)
app.add_typer(hallusion_app, name="hallusion")

_RUN = Annotated[Path, typer.Argument(help="Run directory of HallusionBench questions (`build hallusionbench`, run with --text).")]


def _write_table(path: Path, syntax: Literal["markdown", "latex"], rundir: Path, digest: str, judgments: Path, result: JudgedHallusion,
                 *, n_resamples: int, seed: int) -> None:  # fmt: skip
    """`hallusion score --markdown/--latex`: the table `check` recomputes, under its provenance comment."""
    from halluprobe.hallusion_table import hallusion_grid, hallusion_provenance, render_hallusion

    provenance = hallusion_provenance(rundir, digest, judgments, result, n_resamples=n_resamples, seed=seed)
    text = render_hallusion(hallusion_grid(result, syntax=syntax), provenance, syntax, without_figure=result.judged.slices[-1].without_figure > 0)
    write_atomic(path, text + "\n")


@hallusion_app.command("judge")
@with_secondary_backend("judge", dest="judge_spec", label="the judge")
def hallusion_judge_cmd(
    rundir: _RUN,
    images: Annotated[Path, typer.Option(help="The figures' root: the file a judge request carries (a text-only server judge, as the official GPT-4: --judge-backend-option send_images=false).")],
    out: Annotated[Path, typer.Option(help="Judgment dir (judge.json, judgments.jsonl); an existing one by the same judge is resumed by item id.")],
    questions: Annotated[Optional[Path], typer.Option(help="HallusionBench.json the run was built from (default: the pinned file, fetched and cached).")] = None,
    prompt_script: Annotated[Optional[Path], typer.Option(help="The judge prompt's script (default: tianyi-lab/HallusionBench utils.py at the pinned commit, fetched and cached; read, never run).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="The judge's reply length.")] = 256,
    overwrite: Annotated[bool, typer.Option(help="Replace a judgment dir made by another judge or on other answers.")] = False,
    judge_spec: Optional[BackendSpec] = None,
) -> None:
    """Judge every stored answer not yet judged; no model under test is loaded."""
    from halluprobe.benchmarks.dataset_files import fetch_source
    from halluprobe.benchmarks.hallusionbench import (
        HALLUSIONBENCH_JUDGE_SCRIPT,
        HALLUSIONBENCH_SOURCE,
        answer_details,
        hallusion_judge_template,
        parse_hallusion_verdict,
    )
    from halluprobe.judging.hallusion_judge import (
        HALLUSION_TEMPLATE_NAME,
        hallusion_answers,
        hallusion_judge_items,
    )
    from halluprobe.judging.judge import judge_generation, judge_items
    from halluprobe.judging.ledger import judge_header
    from halluprobe.judging.store import JudgmentDir

    with errors():
        if judge_spec is None:
            raise InputError("--judge-model is required (the judge: any backend, e.g. --judge-backend openai --judge-endpoint URL)")
        _, samples, digest = hallusion_answers(rundir)
        qfile = questions if questions is not None else fetch_source(HALLUSIONBENCH_SOURCE)
        template = hallusion_judge_template(prompt_script if prompt_script is not None else fetch_source(HALLUSIONBENCH_JUDGE_SCRIPT))
        items = hallusion_judge_items(samples, answer_details(qfile), images, template, source=qfile)
        backend = judge_spec.load()
        generation = judge_generation(max_new_tokens)
        header = judge_header(benchmark="hallusionbench", template_name=HALLUSION_TEMPLATE_NAME, backend=judge_spec.backend, model=judge_spec.model, info=backend.info(),
                                  generation=generation, answers=rundir, answers_sha256=digest, template=template)  # fmt: skip
        result = judge_items(backend, items, store=JudgmentDir(out), header=header, parse=parse_hallusion_verdict, overwrite=overwrite)
    typer.echo(f"{out}: judged {result.asked} (errors {result.errors}), {result.skipped} judged before")


@hallusion_app.command("score")
def hallusion_score_cmd(
    rundir: _RUN,
    judgments: Annotated[Path, typer.Option(help="Judgment dir of `hallusion judge` on this run's answers.")],
    readout: Annotated[Optional[list[str]], typer.Option(help="Rule-based readout shown beside the judged one (repeatable; default: those of `halluprobe hallusionbench` the run has).")] = None,
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    markdown: Annotated[Optional[Path], typer.Option(help="Also write the table as Markdown to this file (with its provenance comment for `check`).")] = None,
    latex: Annotated[Optional[Path], typer.Option(help="Also write the table as booktabs LaTeX to this file (with its provenance comment for `check`).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing --markdown / --latex file.")] = False,
) -> None:
    """The judged aAcc, fAcc, qAcc (official grouping) beside each rule-based reading, with their disagreement;
    --markdown / --latex write it as a table that `halluprobe check` recomputes from the stored verdicts."""
    from halluprobe.judging.hallusion_judge import hallusion_answers
    from halluprobe.judging.hallusion_score import (
        default_readouts,
        render_judged,
        score_judged,
    )
    from halluprobe.judging.store import JudgmentDir

    with errors():
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)
        refuse_outputs([p for p in (markdown, latex) if p is not None], overwrite=overwrite, flag="--markdown/--latex")
        header, samples, digest = hallusion_answers(rundir)
        store = JudgmentDir(judgments)
        judge = store.read_header()
        if judge.benchmark != "hallusionbench":
            raise InputError(f"a judgment dir of {judge.benchmark!r}, not of HallusionBench", store.header_path)
        if judge.answers_sha256 != digest:
            raise InputError("judged on other answers (answers_sha256 differs from this run's samples.jsonl)", store.header_path)
        names = readout or default_readouts(header, samples)
        result = score_judged(header, samples, judge, store.read_judgments(), names, where=str(store.judgments_path),
                              source=rundir, n_resamples=resamples, seed=seed)  # fmt: skip
        for path, syntax in ((markdown, "markdown"), (latex, "latex")):
            if path is not None:
                _write_table(path, syntax, rundir, digest, judgments, result, n_resamples=resamples, seed=seed)
    typer.echo(json.dumps(asdict(result), indent=2) if as_json else render_judged(result))


@hallusion_app.command("agree")
def hallusion_agree_cmd(
    rundir: _RUN,
    a: Annotated[Path, typer.Option("--a", help="Judgment dir of the first judge.")],
    b: Annotated[Path, typer.Option("--b", help="Judgment dir of the second judge (the same answers).")],
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
) -> None:
    """Two judges on the same answers: per-question agreement, Cohen's kappa, and the paired difference of aAcc (sets resampled)."""
    from halluprobe.formatting import format_ratio
    from halluprobe.judging.agreement import agreement, paired_difference
    from halluprobe.judging.hallusion_judge import hallusion_answers
    from halluprobe.judging.hallusion_score import correct_and_sets, judged_rows
    from halluprobe.judging.store import JudgmentDir

    with errors():
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)
        _, samples, digest = hallusion_answers(rundir)
        dirs = [JudgmentDir(a), JudgmentDir(b)]
        headers = [d.read_header() for d in dirs]
        for d, h in zip(dirs, headers):
            if h.benchmark != "hallusionbench" or h.answers_sha256 != digest:
                raise InputError("not a HallusionBench judgment of this run's answers (benchmark or answers_sha256 differ)", d.header_path)
        judged = [d.read_judgments() for d in dirs]
        agree = agreement(judged[0], judged[1])
        (ca, sets), (cb, _) = (correct_and_sets(judged_rows(samples, j, str(d.judgments_path))) for j, d in zip(judged, dirs))
        diff = paired_difference(sets, lambda r: float(ca.mean() if r is None else ca[r].mean()),
                                 lambda r: float(cb.mean() if r is None else cb[r].mean()), n_resamples=resamples, seed=seed)  # fmt: skip
    for label, h in zip("ab", headers):
        typer.echo(f"{label}: judge {h.backend}:{h.model} prompt sha256 {h.template_sha256[:12]}")
    kappa = "n/a" if agree.kappa is None else f"{agree.kappa:.3f}"
    typer.echo(f"agreement {agree.agreed}/{agree.n} questions (correct / incorrect / unclear / unparseable), Cohen's kappa {kappa}")
    typer.echo(f"aAcc: a {format_ratio(diff.a, None, digits=4, missing='n/a')}  b {format_ratio(diff.b, None, digits=4, missing='n/a')}  "
               f"a-b {format_ratio(diff.difference, diff.ci, digits=4, ci_digits=4, missing='n/a')}")  # fmt: skip
