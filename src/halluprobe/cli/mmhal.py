"""MMHal-Bench verbs: questions for a run, a judge pass with its ledger, scores, two judges compared."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Optional

import typer

from halluprobe.cli._app import (
    MAX_RESAMPLES,
    ResamplesOption,
    SeedOption,
    app,
    data_app,
    errors,
    refuse_over_limit,
)
from halluprobe.cli._backend import BackendSpec, with_secondary_backend
from halluprobe.errors import InputError
from halluprobe.files import refuse_outputs, write_atomic

if TYPE_CHECKING:
    from halluprobe.benchmarks.mmhal import MMHalFile
    from halluprobe.judging.mmhal_score import MMHalScore
    from halluprobe.judging.store import JudgmentDir

__all__ = ["mmhal_app"]

mmhal_app = typer.Typer(help="MMHal-Bench: 96 open questions rated 0-6 by a judge (any backend), with the judge ledger.", no_args_is_help=True)
app.add_typer(mmhal_app, name="mmhal")

_TEMPLATE = Annotated[Path, typer.Option(help="MMHal-Bench's response template (JSON array of 96; RLAIF-V eval/data/mmhal-bench_answer_template.json).")]


def _ledger(score: object) -> str:
    from halluprobe.judging.mmhal_score import MMHalScore

    assert isinstance(score, MMHalScore)
    return (f"judge {score.judge_backend}:{score.judge_model} template sha256 {score.template_sha256[:12]}; "
            f"unparseable {score.unparseable}, errors {score.errors} of {score.n} (--unparseable {score.policy})")  # fmt: skip


def _write_table(path: Path, syntax: Literal["markdown", "latex"], template: Path, judgments: Path, mmhal: MMHalFile, store: JudgmentDir,
                 score: MMHalScore, *, compat: bool) -> None:  # fmt: skip
    """`mmhal score --markdown/--latex`: the table `check` recomputes, under its provenance comment."""
    from halluprobe.judging.mmhal_score import ordered_judgments
    from halluprobe.mmhal_table import mmhal_grid, mmhal_provenance, render_mmhal

    header = store.read_header()
    judged = ordered_judgments(mmhal, store.read_judgments(), str(store.judgments_path))
    provenance = mmhal_provenance(template, judgments, header, policy=score.policy, compat=compat, n_resamples=score.n_resamples, seed=score.seed)
    text = render_mmhal(mmhal_grid(score, mmhal, judged, header, compat=compat, syntax=syntax), provenance, syntax)
    write_atomic(path, text + "\n")


@data_app.command("mmhal")
def data_mmhal_cmd(
    out: Annotated[Path, typer.Option(help="Where the template goes (JSON).")],
    url: Annotated[Optional[str], typer.Option(help="A mirror of the same file (http(s):// or file://); its sha256 must match the pin.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace another file at --out.")] = False,
    script_url: Annotated[Optional[str], typer.Option(help="A mirror of the judge script (http(s):// or file://); its sha256 must match the pin.")] = None,
) -> None:
    """Download MMHal-Bench's response template and the official judge script (RLAIF-V at a pinned
    commit, each checked by sha256; the script is cached for `mmhal judge`, which reads its prompt)."""
    from halluprobe.benchmarks.mmhal import (
        MMHAL_TEMPLATE_SHA256,
        fetch_mmhal_judge_script,
        fetch_mmhal_template,
    )

    with errors():
        path = fetch_mmhal_template(out, url=url, overwrite=overwrite)
        script = fetch_mmhal_judge_script(url=script_url)
    typer.echo(f"{path}: sha256 {MMHAL_TEMPLATE_SHA256[:12]} (pinned)")
    typer.echo(f"{script}: the judge prompt's script (pinned)")


@mmhal_app.command("questions")
def mmhal_questions_cmd(
    template: _TEMPLATE,
    out: Annotated[Path, typer.Option(help="Benchmark JSON Lines for `halluprobe run --open-ended`.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output file.")] = False,
) -> None:
    """Write the 96 questions as benchmark lines (question_id = template index; image = the file name of image_src)."""
    from halluprobe.benchmarks.mmhal import read_mmhal
    from halluprobe.benchmarks.question_file import write_questions
    from halluprobe.judging.mmhal_judge import mmhal_questions

    with errors():
        mmhal = read_mmhal(template)
        if out.exists() and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", out)
        write_questions(out, mmhal_questions(mmhal))
    note = "" if mmhal.pinned else " (not the pinned release: its sha256 differs)"
    typer.echo(f"{out}: {len(mmhal.items)} open questions{note}")


@mmhal_app.command("judge")
@with_secondary_backend("judge", dest="judge_spec", label="the judge")
def mmhal_judge_cmd(
    template: _TEMPLATE,
    answers: Annotated[Path, typer.Option(help="Run dir of `run --open-ended` over `mmhal questions`, or the template filled in (model_answer).")],
    images: Annotated[Path, typer.Option(help="Images root: the file a judge request carries (a text-only server judge: --judge-backend-option send_images=false).")],
    out: Annotated[Path, typer.Option(help="Judgment dir (judge.json, judgments.jsonl); an existing one by the same judge is resumed.")],
    max_new_tokens: Annotated[int, typer.Option(help="The judge's reply length.")] = 1024,
    overwrite: Annotated[bool, typer.Option(help="Replace a judgment dir made by another judge or on other answers.")] = False,
    prompt_script: Annotated[Optional[Path], typer.Option(help="The judge prompt's script (default: RLAIF-V's eval_gpt_mmhal.py at the pinned commit, fetched and cached; its `template` string is read, never run).")] = None,
    judge_spec: Optional[BackendSpec] = None,
) -> None:
    """Judge every answer not yet judged (resumable by item id); no model under test is loaded."""
    from halluprobe.benchmarks.mmhal import (
        judge_prompt_template,
        parse_rating,
        read_mmhal,
    )
    from halluprobe.judging.judge import judge_generation, judge_items
    from halluprobe.judging.ledger import judge_header
    from halluprobe.judging.mmhal_judge import (
        MMHAL_TEMPLATE_NAME,
        mmhal_answers,
        mmhal_judge_items,
    )
    from halluprobe.judging.store import JudgmentDir

    with errors():
        if judge_spec is None:
            raise InputError("--judge-model is required (the judge: any backend, e.g. --judge-backend openai --judge-endpoint URL)")
        mmhal = read_mmhal(template)
        found, digest = mmhal_answers(mmhal, answers)
        prompt = judge_prompt_template(prompt_script)
        items = mmhal_judge_items(mmhal, found, images, prompt)
        backend = judge_spec.load()
        generation = judge_generation(max_new_tokens)
        header = judge_header(benchmark="mmhal", template_name=MMHAL_TEMPLATE_NAME, backend=judge_spec.backend, model=judge_spec.model, info=backend.info(),
                              generation=generation, answers=answers, answers_sha256=digest, template=prompt)  # fmt: skip
        result = judge_items(backend, items, store=JudgmentDir(out), header=header, parse=parse_rating, overwrite=overwrite)
    typer.echo(f"{out}: judged {result.asked} (errors {result.errors}), {result.skipped} judged before")


@mmhal_app.command("score")
def mmhal_score_cmd(
    template: _TEMPLATE,
    judgments: Annotated[Path, typer.Option(help="Judgment dir of `mmhal judge`.")],
    unparseable: Annotated[Literal["zero", "wrong", "drop"], typer.Option(help="An unparseable verdict: zero (score 0, the official rule), wrong (a hallucination, out of the average), drop.")] = "zero",
    bootstrap: ResamplesOption = 1000,
    seed: SeedOption = 0,
    compat: Annotated[bool, typer.Option("--compat", help="Print the official summarizer's output (warnings included) only.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
    markdown: Annotated[Optional[Path], typer.Option(help="Also write the table as Markdown to this file (with its provenance comment for `check`; --compat: the official aggregation).")] = None,
    latex: Annotated[Optional[Path], typer.Option(help="Also write the table as booktabs LaTeX to this file (with its provenance comment for `check`).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing --markdown / --latex file.")] = False,
) -> None:
    """Average score (0-6) and hallucination rate (share < 3), overall and per type, with the ledger."""
    from halluprobe.benchmarks.mmhal import read_mmhal
    from halluprobe.formatting import format_ratio
    from halluprobe.judging.mmhal_score import compat_lines, score_mmhal
    from halluprobe.judging.store import JudgmentDir

    with errors():
        refuse_over_limit("--bootstrap", bootstrap, MAX_RESAMPLES)
        refuse_outputs([p for p in (markdown, latex) if p is not None], overwrite=overwrite, flag="--markdown/--latex")
        mmhal = read_mmhal(template)
        store = JudgmentDir(judgments)
        score = score_mmhal(mmhal, store.read_header(), store.read_judgments(), policy=unparseable,
                            where=str(store.judgments_path), n_resamples=bootstrap, seed=seed)  # fmt: skip
        for path, syntax in ((markdown, "markdown"), (latex, "latex")):
            if path is not None:
                _write_table(path, syntax, template, judgments, mmhal, store, score, compat=compat)
    if as_json:
        typer.echo(score.model_dump_json(indent=2))
        return
    if compat:
        typer.echo("\n".join(compat_lines(score.compat)))
        return
    typer.echo(_ledger(score))
    typer.echo(f"average score {format_ratio(score.average, score.average_ci, digits=2, ci_digits=2, missing='n/a')}  "
               f"hallucination rate {format_ratio(score.hallucination_rate, score.hallucination_rate_ci, digits=3, missing='n/a')}")  # fmt: skip
    for t in score.per_type:
        typer.echo(f"  {t.question_type:<12} n={t.n:<3} score {format_ratio(t.average, t.average_ci, digits=2, ci_digits=2, missing='n/a')}  "
                   f"hallucination {format_ratio(t.hallucination_rate, t.hallucination_rate_ci, digits=3, ci_digits=3, missing='n/a')}")  # fmt: skip
    typer.echo(f"official compat (unparseable = 0): average {score.compat.average:.2f}, hallucination rate "
               f"{score.compat.hallucination_rate:.2f}, {len(score.compat.warnings)} warning(s)")  # fmt: skip


@mmhal_app.command("agree")
def mmhal_agree_cmd(
    template: _TEMPLATE,
    a: Annotated[Path, typer.Option("--a", help="Judgment dir of the first judge.")],
    b: Annotated[Path, typer.Option("--b", help="Judgment dir of the second judge (the same answers).")],
    unparseable: Annotated[Literal["zero", "wrong", "drop"], typer.Option(help="How both judges' unparseable verdicts are scored.")] = "zero",
    bootstrap: ResamplesOption = 1000,
    seed: SeedOption = 0,
) -> None:
    """Two judges on the same answers: per-item agreement, Cohen's kappa, and the paired difference."""
    from halluprobe.benchmarks.mmhal import read_mmhal
    from halluprobe.formatting import format_ratio
    from halluprobe.judging.agreement import agreement, paired_difference
    from halluprobe.judging.mmhal_score import item_values, mean_of, ordered_judgments
    from halluprobe.judging.store import JudgmentDir

    with errors():
        refuse_over_limit("--bootstrap", bootstrap, MAX_RESAMPLES)
        mmhal = read_mmhal(template)
        dirs = [JudgmentDir(a), JudgmentDir(b)]
        headers = [d.read_header() for d in dirs]
        if headers[0].answers_sha256 != headers[1].answers_sha256:
            raise InputError("the two judges judged different answers (answers_sha256 differ)", dirs[1].header_path)
        judged = [ordered_judgments(mmhal, d.read_judgments(), str(d.judgments_path)) for d in dirs]
        agree = agreement(judged[0], judged[1])
        images = [item.image_id for item in mmhal.items]
        lines = []
        for k, name in ((0, "average score"), (1, "hallucination rate")):
            va, vb = item_values(judged[0], unparseable)[k], item_values(judged[1], unparseable)[k]
            diff = paired_difference(images, lambda r, v=va: mean_of(v, r), lambda r, v=vb: mean_of(v, r), n_resamples=bootstrap, seed=seed)  # type: ignore[misc]
            lines.append(f"{name}: a {format_ratio(diff.a, None, digits=3, missing='n/a')}  b {format_ratio(diff.b, None, digits=3, missing='n/a')}  "
                         f"a-b {format_ratio(diff.difference, diff.ci, digits=3, ci_digits=3, missing='n/a')}")  # fmt: skip
    for label, h in zip("ab", headers):
        typer.echo(f"{label}: judge {h.backend}:{h.model} template sha256 {h.template_sha256[:12]}")
    kappa = "n/a" if agree.kappa is None else f"{agree.kappa:.3f}"
    typer.echo(f"agreement {agree.agreed}/{agree.n} items, Cohen's kappa {kappa} (--unparseable {unparseable})")
    typer.echo("\n".join(lines))
