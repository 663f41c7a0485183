"""Verbs that read run dirs only: score, audit, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from halluprobe.cli._app import MAX_RESAMPLES, ResamplesOption, SeedOption, UnknownOption, app, console, errors, refuse_over_limit
from halluprobe.cli.judged import JudgmentsOption, MMHalTemplateOption, UnparseableOption, judged_part
from halluprobe.cli.overlap import ImagesOption, say_notes, score_part
from halluprobe.errors import InputError
from halluprobe.rundir import RunDir, refuse_run_file

__all__ = ["score_cmd", "audit_cmd", "report_cmd"]


@app.command("score")
def score_cmd(
    rundir: Annotated[Optional[Path], typer.Argument(help="Run directory written by `halluprobe run`.")] = None,
    readout: Annotated[
        str,
        typer.Option(
            help="Readout to apply: dynamic, legacy_2tok, legacy_8tok, text:RULE (any rule, on the stored text), a "
            "correction NAME:key=value,... over recorded signals (see `halluprobe corrections`), threshold:yes_ratio=R, "
            "or a decision another tool stored (lmms-eval:exact, vlmevalkit:auxmatch)."
        ),
    ] = "dynamic",
    unknown: UnknownOption = "wrong",
    answers: Annotated[Optional[Path], typer.Option(help="Third-party answers file ({question, answer} lines).")] = None,
    labels: Annotated[
        Optional[list[Path]], typer.Option(help="POPE-format labels file for --answers, one per split; repeatable.")
    ] = None,
    rule: Annotated[str, typer.Option(help="Text rule for --answers: pope, exact, yorn, strict, or a literature rule (vcd, pai, marine, dashb, repope).")] = "pope",
    force_invalid: Annotated[bool, typer.Option(help="Score a legacy readout even where its ids are invalid.")] = False,
    per_question: Annotated[
        Optional[Path],
        typer.Option(help="Also write one JSON line per question (split, question_id, label, decision, p_yes) to this new file."),
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing --per-question file (never a run dir's own file).")] = False,
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the score object as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table to paste into a paper.")] = False,
    latex: Annotated[bool, typer.Option("--latex", help="Print a booktabs LaTeX table (with a provenance comment for `check`).")] = False,
    compat: Annotated[
        Optional[str], typer.Option(help="Print the numbers lmms-eval or vlmevalkit would print (their quirks included), as JSON.")
    ] = None,
    images: ImagesOption = "all",
) -> None:
    """Score a run dir (writes RUNDIR/metrics.json) or a third-party answers file."""
    from halluprobe.readouts.text import label_dependence_note
    from halluprobe.readouts.value import Readout
    from halluprobe.scoring import score_answers_file, score_rundir
    from halluprobe.tables import score_table

    note = label_dependence_note(f"text:{rule}" if answers is not None else readout)
    if note is not None:  # the decisions are not a parse of the answer alone: say so on stderr
        typer.echo(note, err=True)
    with errors():
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)
        if images != "all":  # one COCO 2017 part of the run's images (cli/overlap.py)
            return score_part(rundir, images, readout, unknown, force_invalid, resamples, seed, as_json, (answers, labels, per_question, compat, markdown, latex))
        if overwrite and per_question is None:
            raise InputError("--overwrite is for --per-question: score writes no other file of yours")
        if answers is not None or labels is not None:
            if answers is None or not labels or rundir is not None:
                raise InputError("third-party scoring takes --answers FILE and --labels FILE, and no RUNDIR")
            if per_question is not None or compat is not None:
                raise InputError("--per-question and --compat are for a run dir")
            if force_invalid:  # answers are read by a text rule: there is no legacy id to force
                raise InputError("--force-invalid is for a run dir's legacy readouts; --answers is read by a text rule")
            report = score_answers_file(answers, labels, rule=rule, policy=unknown, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
            title = f"{answers.name}: text:{rule}, unknown={unknown}"
        elif compat is not None and rundir is not None:
            if per_question is not None:  # --compat prints another tool's numbers only: F would never be written
                raise InputError("--compat prints another tool's numbers and writes no file: drop --per-question (or score without --compat)")
            from halluprobe.scoring import compat_rundir
            parsed = Readout.parse(readout)
            typer.echo(json.dumps(compat_rundir(rundir, readout=parsed, tool=compat, force_invalid=force_invalid), indent=2))
            return
        else:
            if rundir is None:
                raise InputError("give a RUNDIR, or --answers and --labels")
            if per_question is not None:  # checked before anything is scored or written
                from halluprobe.files import refuse_existing

                refuse_run_file(per_question, "--per-question")
                refuse_existing(per_question, overwrite=overwrite, flag="--per-question")
            report = score_rundir(
                rundir, readout=Readout.parse(readout), policy=unknown, force_invalid=force_invalid,  # type: ignore[arg-type]
                n_resamples=resamples, seed=seed, per_question=per_question,
            )  # fmt: skip
            logprobs = RunDir(rundir).read_header().logprob_label  # a server run: how it was read
            title = f"{rundir}: {readout}, unknown={unknown}" + (f", log-probabilities: {logprobs}" if logprobs else "")
            if logprobs and as_json:  # stdout stays the JSON object
                typer.echo(f"{rundir}: log-probabilities read: {logprobs}", err=True)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    elif markdown or latex:
        from halluprobe.provenance import answers_provenance, score_provenance
        from halluprobe.tables import render_latex, render_score_markdown
        with errors():  # the table names its source: the run dir, or the answers and labels files
            provenance = score_provenance(rundir, report) if rundir is not None else answers_provenance(answers, labels or (), report)  # type: ignore[arg-type]
        typer.echo(render_latex(report, title, provenance) if latex else render_score_markdown(report, title, provenance))
    else:
        console().print(score_table(report, title))
        if rundir is not None:  # DASH-B's and POPEv2's own metrics, for runs on those datasets
            from halluprobe.dataset_scores import dataset_metric_lines

            with errors():
                for line in dataset_metric_lines(rundir, readout, force_invalid=force_invalid, n_resamples=resamples, seed=seed):
                    typer.echo(line)


@app.command("audit")
def audit_cmd(
    rundirs: Annotated[list[Path], typer.Argument(help="Run directories (several: compared side by side).")],
    labels: Annotated[
        Optional[list[Path]], typer.Option(help="Alternative labels (e.g. RePOPE), matched by split and question_id; repeatable.")
    ] = None,
    headline: Annotated[
        Optional[str], typer.Option(help="The readout the others are compared with [default: dynamic, else the readout the run names].")
    ] = None,
    unknown: UnknownOption = "wrong",
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the audit object as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Also print every readout side by side as Markdown (with provenance).")] = False,
    latex: Annotated[bool, typer.Option("--latex", help="Also print every readout side by side as booktabs LaTeX (with provenance).")] = False,
    table: Annotated[
        bool, typer.Option("--table", help="Print the multi-model table instead: model x split rows, F1 per readout (Markdown, or --latex).")
    ] = False,
    rule_changes: Annotated[
        bool, typer.Option("--rule-changes", help="Print instead how many answers change class between every pair of text rules (the literature's included).")
    ] = False,
) -> None:
    """Audit run dirs: every readout side by side, paired tests, token diagnostic, convergence,
    hallucination profile, relabelling. Writes RUNDIR/audit.json; reads run dirs only."""
    from halluprobe.audit import audit_run, compare_runs, summarise_audit

    if rule_changes:  # reads the runs only: audit.json is not written
        from halluprobe.rule_changes import render_rule_changes, rule_changes_of_run

        with errors():
            typer.echo("\n".join(render_rule_changes(rule_changes_of_run(rundir), f"{rundir}: text rules") for rundir in rundirs), nl=False)
        return
    if table:
        from halluprobe.study_table import study_table

        with errors():
            if labels:  # the multi-model table scores each run's own labels: refused, not ignored
                raise InputError("--table shows each run's own labels; --labels (the relabelling) is for the audit without --table")
            typer.echo(study_table(rundirs, "latex" if latex else "markdown", policy=unknown, n_resamples=0, seed=seed))
        return
    audits = []
    with errors():
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)
        for rundir in rundirs:
            audit = audit_run(
                rundir, headline=headline, labels=labels or (), policy=unknown, n_resamples=resamples, seed=seed  # type: ignore[arg-type]
            )
            RunDir(rundir).write_audit(audit)
            audits.append(audit)
            say_notes(rundir, audit, headline=as_json)  # the terminal summary says the headline note; --json keeps stdout JSON
        comparison = (
            compare_runs(rundirs, readout=headline, policy=unknown, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
            if len(rundirs) > 1
            else None
        )
    if as_json:
        payload: Any = (
            audits[0].to_json_dict()
            if comparison is None
            else {"audits": [a.to_json_dict() for a in audits], "comparison": comparison.to_json_dict()}
        )
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    for rundir, audit in zip(rundirs, audits):
        typer.echo(f"{rundir}/audit.json")
        for line in summarise_audit(audit):
            typer.echo(f"  {line}")
        if markdown or latex:
            _print_readouts_table(rundir, audit.headline, unknown, resamples, seed, "latex" if latex else "markdown")
    if comparison is not None:
        typer.echo(json.dumps(comparison.to_json_dict()["paired"], indent=2))


def _print_readouts_table(rundir: Path, headline: str, unknown: str, resamples: int, seed: int, syntax: str) -> None:
    """The run's readouts side by side, under a provenance comment that `halluprobe check` reads."""
    from halluprobe.provenance import readouts_provenance
    from halluprobe.scoring import readouts_reports
    from halluprobe.tables import render_readouts
    with errors():
        reports, forced = readouts_reports(rundir, policy=unknown, n_resamples=resamples, seed=seed)
        provenance = readouts_provenance(rundir, reports, forced, headline)
    typer.echo(render_readouts(reports, f"{rundir}: every readout, unknown={unknown}", syntax, provenance, forced))  # type: ignore[arg-type]


@app.command("report")
def report_cmd(
    rundirs: Annotated[list[Path], typer.Argument(help="Run directories (several become a leaderboard).")],
    out: Annotated[Path, typer.Option(help="HTML file to write; a Markdown twin is written beside it.")] = Path("report.html"),
    labels: Annotated[Optional[list[Path]], typer.Option(help="Alternative labels files for the relabelling section.")] = None,
    headline: Annotated[Optional[str], typer.Option(help="Headline readout [default: dynamic, else the readout the run names].")] = None,
    resamples: Annotated[int, typer.Option(min=0, help="Bootstrap resamples.")] = 1000,
    seed: SeedOption = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace --out (or its .md twin) even where it is not a report halluprobe wrote.")] = False,
    family: Annotated[
        str | None,
        typer.Option(help="CHAIR family for runs of open answers: lemmatizer (OPERA's chair.py), singularize (the original) or both "
                     "(default: both in the CHAIR sections, the lemmatizer in the decoding table)."),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="How CHAIR splits captions into words: punkt (nltk word_tokenize, as the evaluators) or line (no punkt data), default punkt."),
    ] = None,
    ground_truth: Annotated[
        Path | None,
        typer.Option(help="CHAIR ground truth for captions: object lines {image_id|image, objects} or a saved ground truth "
                     "(default: the sets shipped for the standard lists)."),
    ] = None,
    judgments: JudgmentsOption = None,
    mmhal_template: MMHalTemplateOption = None,
    unparseable: UnparseableOption = "zero",
) -> None:
    """Write one self-contained HTML page (and Markdown) from run dirs: tables, tests and plots.
    Runs of open answers to CHAIR questions (or imported captions) get the CHAIR page instead.
    Yes/no runs given with caption runs that are a decoding comparison (a greedy run, method runs,
    at most one sampled run) get the yes/no page with the captions' decoding table (as the demo's).
    A report halluprobe wrote earlier is replaced; any other file at --out or its twin is refused."""
    from halluprobe.audit import audit_run, compare_runs
    from halluprobe.report.decoding_section import chair_counting
    from halluprobe.report.page import render_report

    with errors():
        if out.is_dir():
            raise InputError("--out must be an HTML file, not a directory", out)
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)
        for target in (out, out.with_suffix(".md")):
            _refuse_foreign_report(target, overwrite)
        yes_no, captions = _split_runs(rundirs)
        counting = chair_counting(family, tokenizer, ground_truth)
        judged = judged_part(judgments, mmhal_template, unparseable, rundirs, resamples, seed)  # cli/judged.py; none without --judgments
        if not captions and (family, tokenizer, ground_truth) != (None, None, None):
            raise InputError("--family, --tokenizer and --ground-truth count CHAIR of captions; these runs hold yes/no answers")
        if not yes_no:
            for flag, given in (("--labels", labels), ("--headline", headline)):
                if given:
                    raise InputError(f"{flag} applies to yes/no runs; these runs hold open answers (their report is CHAIR's)")
            from halluprobe.report.chair_page import render_chair_report

            html, md = render_chair_report(rundirs, out, n_resamples=resamples, seed=seed, counting=counting, judged=judged)
            return typer.echo(f"{html}\n{md}")
        if captions:
            from halluprobe.report.decoding_section import decoding_comparison

            if decoding_comparison(captions) is None:  # refused before any audit is computed
                raise InputError("a run of open answers (captions) shares a report with yes/no runs only when the caption runs are a decoding "
                                 "comparison (one greedy run, method runs, at most one sampled run): report them apart", captions[0] / "run.json")
        audits = [audit_run(rundir, headline=headline, labels=labels or (), n_resamples=resamples, seed=seed) for rundir in yes_no]
        for rundir, audit in zip(yes_no, audits):
            say_notes(rundir, audit)
        comparison = compare_runs(yes_no, readout=headline, n_resamples=resamples, seed=seed) if len(yes_no) > 1 else None
        html, md = render_report(yes_no, out, audits=audits, comparison=comparison, captions=captions, chair=counting,
                                 n_resamples=resamples, seed=seed, judged=judged)  # fmt: skip
    typer.echo(f"{html}\n{md}")


def _split_runs(rundirs: list[Path]) -> tuple[list[Path], list[Path]]:
    """(yes/no runs, runs of open answers) in the order given: the open answers (captions) get the
    CHAIR page, or, beside yes/no runs, the decoding section of the yes/no page; never a yes/no score."""
    yes_no, captions = [], []
    for rundir in rundirs:
        run = RunDir(rundir)
        (captions if run.header_path.is_file() and run.read_header().open_ended else yes_no).append(rundir)
    return yes_no, captions


# the first bytes a report halluprobe wrote begins with: such a file is replaced without --overwrite
_REPORT_MARKS = (b'<meta name="generator" content="halluprobe', b"# halluprobe report")


def _refuse_foreign_report(target: Path, overwrite: bool) -> None:
    """--out (or its Markdown twin) may replace a report halluprobe wrote, never a run dir's file,
    and any other file only with --overwrite."""
    from halluprobe.files import refuse_existing

    refuse_run_file(target, "--out")
    if target.is_file() and not target.is_symlink():
        try:
            with open(target, "rb") as fh:
                head = fh.read(4096)
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror or err}", target) from None
        if any(mark in head for mark in _REPORT_MARKS):
            return
    refuse_existing(target, overwrite=overwrite, flag="--out")
