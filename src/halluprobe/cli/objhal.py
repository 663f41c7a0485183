"""Object HalBench (RLAIF-V): ``data objhal`` fetches its pinned files, ``objhal`` scores answers
judge-free as RLAIF-V's script does without ``--use_gpt``, or with a judge as word extractor
(``--judge-model``: its ``--use_gpt``, the extractions in a judgment dir) (docs/design/chair.md)."""

from __future__ import annotations

import json
import os
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

if TYPE_CHECKING:  # for the annotations only: the command imports its modules when it runs
    from halluprobe.captions.objhal.rules import ObjhalVocabulary
    from halluprobe.captions.objhal.scoring import ObjhalResponse, ObjhalScore
from halluprobe.errors import InputError
from halluprobe.files import refuse_existing, refuse_non_folder, write_atomic

__all__ = ["data_objhal_cmd", "objhal_cmd"]


@data_app.command("objhal")
def data_objhal_cmd(
    out: Annotated[Path, typer.Option(help="Folder for the pinned files and objhal.jsonl.")],
    images: Annotated[Optional[Path], typer.Option(help="Folder for the 300 images the question file carries (default: OUT/images).")] = None,
    mirror: Annotated[
        Optional[str], typer.Option(help="GitHub raw mirror (URL or folder laid out <repo>/<commit>/<path>); else $HALLUPROBE_GITHUB_URL.")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace output files that differ from what this writes.")] = False,
) -> None:
    """Fetch Object HalBench's question file and synonyms_refine.txt at a pinned RLAIF-V commit,
    write objhal.jsonl (run it with `halluprobe run --open-ended`) and the images it carries."""
    from halluprobe.benchmarks.created import removed_on_failure
    from halluprobe.captions.objhal.sources import ENV_GITHUB_MIRROR, fetch_objhal

    with errors(), removed_on_failure() as created:
        refuse_non_folder(out, "--out")
        if images is not None:
            refuse_non_folder(images, "--images")
        paths = fetch_objhal(out, images or out / "images", mirror=mirror or os.environ.get(ENV_GITHUB_MIRROR) or None,
                             overwrite=overwrite, created=created)
    for path in paths:
        typer.echo(str(path))


@app.command("objhal")
@with_secondary_backend("judge", dest="judge_spec", label="the word extractor (RLAIF-V's --use_gpt)")
def objhal_cmd(
    answers: Annotated[Path, typer.Argument(help="A `run --open-ended` dir of objhal.jsonl, or RLAIF-V's answer file (JSON lines).")],
    coco: Annotated[Path, typer.Option(help="COCO 2014 annotations (folder or annotations_trainval2014.zip): train and val, as the script reads both.")],
    synonyms: Annotated[Path, typer.Option(help="synonyms_refine.txt as `data objhal` fetched it (its sha256 is checked).")],
    families: Annotated[str, typer.Option(help="CHAIR families scored beside: lemmatizer, singularize, both or none.")] = "both",
    tokenizer: Annotated[str, typer.Option(help="punkt (NLTK's word_tokenize, the script's) or line (no punkt data; see docs/design/chair.md).")] = "punkt",
    out: Annotated[Optional[Path], typer.Option(help="Write objhal_summary.json and objhal_answers.jsonl here.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace those two files (and a judgment dir made by another judge or on other answers).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    bootstrap: ResamplesOption = 1000,
    seed: SeedOption = 0,
    judgments: Annotated[Optional[Path], typer.Option(help="Judgment dir of the judge's extractions: filled (resumed by id) with --judge-model, else re-scored as stored.")] = None,
    images: Annotated[Optional[Path], typer.Option(help="Images the judge requests carry (`data objhal`'s; the script sends none: --judge-backend-option send_images=false).")] = None,
    unparseable: Annotated[Literal["drop", "empty"], typer.Option(help="An unparseable or errored extraction: drop (out of every rate) or empty (no objects).")] = "drop",
    prompt_script: Annotated[Optional[Path], typer.Option(help="The extraction prompt's script (default: RLAIF-V's eval_gpt_obj_halbench.py, pinned, fetched and cached; read, never run).")] = None,
    spacy_model: Annotated[str, typer.Option(help="spaCy pipeline normalising the judge's words (the script's: en_core_web_trf).")] = "en_core_web_trf",
    max_new_tokens: Annotated[int, typer.Option(help="The judge's reply length.")] = 512,
    compare: Annotated[Optional[Path], typer.Option(help="A second extractor's judgment dir on the same answers: agreement, kappa and the paired differences.")] = None,
    judge_spec: Optional[BackendSpec] = None,
) -> None:
    """Object HalBench's response- and mention-level hallucination rates, exactly as RLAIF-V's
    eval_gpt_obj_halbench.py counts them without --use_gpt (or with a judge as extractor:
    --judgments, --judge-model), with 95% image-bootstrap CIs, the caption-length groups and
    CHAIR's families on the same answers."""
    from halluprobe.audit.overlap import objhal_overlap_lines
    from halluprobe.benchmarks.download import sha256_of_file
    from halluprobe.captions.chair.evaluate import chair_results
    from halluprobe.captions.chair.families import (
        NltkLineTools,
        NltkTools,
        counting_options,
        family_named,
    )
    from halluprobe.captions.chair.groundtruth import (
        coco_annotation_files,
        ground_truth_from_coco,
    )
    from halluprobe.captions.chair.scoring import Caption, ChairSettings
    from halluprobe.captions.objhal.evaluate import objhal_result, read_responses
    from halluprobe.captions.objhal.rules import RuleExtractor, read_synonyms
    from halluprobe.captions.objhal.scoring import objhal_ground_truth, score_responses
    from halluprobe.captions.objhal.sources import N_IMAGES, RLAIFV_COMMIT, SYNONYMS

    written = [out / "objhal_summary.json", out / "objhal_answers.jsonl"] if out is not None else []
    with errors():
        refuse_over_limit("--bootstrap", bootstrap, MAX_RESAMPLES)
        names: tuple[str, ...] = ()
        if families != "none":
            names, _ = counting_options(families, tokenizer, allow_both=True)
        elif tokenizer not in ("punkt", "line"):
            raise InputError(f"--tokenizer must be punkt or line, not {tokenizer!r}")
        if out is not None:
            refuse_non_folder(out, "--out")
            for path in written:
                refuse_existing(path, overwrite=overwrite)
        digest = sha256_of_file(synonyms) if synonyms.is_file() else None
        if digest != SYNONYMS.sha256:
            raise InputError(f"not the pinned synonyms_refine.txt (sha256 {digest}, pinned {SYNONYMS.sha256} at RLAIF-V {RLAIFV_COMMIT[:12]})", synonyms)
        vocab = read_synonyms(synonyms)
        responses, dropped = read_responses(answers)
        tools = (NltkTools if tokenizer == "punkt" else NltkLineTools)(need_tagger=False)
        extractor = RuleExtractor(vocab, tools)
        instances, captions = coco_annotation_files(coco, "2014")
        truth, coco_files = objhal_ground_truth(extractor, vocab, instances, captions, {r.image_id for r in responses})
        identity = extractor.identity
        if judgments is None:
            if judge_spec is not None or compare is not None:
                raise InputError("--judge-model and --compare need --judgments (the extractions' dir)")
            compared = []
            scores = score_responses(responses, truth, extractor)
        else:
            if compare is not None and as_json:
                raise InputError("--compare prints a table: leave out --json")
            scores, identity, compared = _judged(answers, responses, truth, vocab, judgments, images, unparseable, prompt_script,
                                                 spacy_model, max_new_tokens, overwrite, judge_spec, compare, bootstrap, seed)  # fmt: skip
        chair = None
        if names:
            caps = [Caption(image_id=r.image_id, text=r.caption, source=f"{answers}:{k}") for k, r in enumerate(responses, start=1)]
            ids = {r.image_id for r in responses}  # the answered images' captions alone are read
            gts = {name: ground_truth_from_coco(instances, captions, family_named(name, tokenizer=tokenizer), year="2014", only=ids)
                   for name in names}  # fmt: skip
            chair, _ = chair_results(caps, ChairSettings(captions=str(answers)), names, gts.__getitem__,
                                     n_resamples=bootstrap, seed=seed, tokenizer=tokenizer)  # fmt: skip
        result = objhal_result(
            scores, identity, chair, errors=dropped, answers=str(answers), synonyms_sha256=str(digest), ground_truth=coco_files,
            rlaifv_commit=RLAIFV_COMMIT, n_resamples=bootstrap, seed=seed,
        )  # fmt: skip
        if out is not None:
            write_atomic(written[0], json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
            write_atomic(written[1], "".join(s.model_dump_json() + "\n" for s in scores))
    if result.n_images != N_IMAGES or result.errors:  # on stderr: --json's stdout stays one JSON document
        typer.echo(f"note: {result.n_images} images answered (Object HalBench has {N_IMAGES}), {result.errors} errored samples left out", err=True)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))
        return
    s = result.summary

    def pct(v: float | None, ci: tuple[float, float] | None) -> str:
        shown = "n/a" if v is None else f"{100 * v:.2f}"
        return shown + (f" [{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]" if ci else "")

    typer.echo(f"Object HalBench ({s.extractor['extractor']}, RLAIF-V {RLAIFV_COMMIT[:12]}): {s.n_responses} answers, "
               f"{s.n_responses_with_objects} name a COCO object")  # fmt: skip
    if s.extractor["extractor"] == "judge":
        x = s.extractor
        typer.echo(f"  judge {x['judge']} (reported {x['judge_reported']}), prompt sha256 {x['template_sha256'][:12]}; unparseable {x['unparseable']}, "
                   f"errors {x['errors']} of {x['extractions']} ({x['short']} short, not asked; --unparseable {x['unparseable_policy']}: {x['dropped']} dropped)")  # fmt: skip
    typer.echo(f"  response hallucination (CHAIRs_refine): {pct(s.response_hallucination, s.ci.response_hallucination)}")
    typer.echo(f"  mention hallucination (CHAIRi):         {pct(s.mention_hallucination, s.ci.mention_hallucination)}")
    typer.echo(f"  CHAIRs (over all answers):              {pct(s.chair_s, s.ci.chair_s)}")
    typer.echo(f"  object recall:                          {pct(s.object_recall, s.ci.object_recall)}")
    typer.echo(f"  average length (words):                 {s.avg_length:.2f}")
    for g in result.length_groups:
        typer.echo(f"  length {g.lengths[0]}-{g.lengths[1]} (n={g.n}): responses {100 * g.chair_s:.1f}, mentions {pct(g.chair_i, None)}")
    for name, fam in (result.chair.families.items() if result.chair else []):
        typer.echo(f"  {name}: CHAIR_s {pct(fam.summary.chair_s, None)}, CHAIR_i {pct(fam.summary.chair_i, None)}")
    if result.training_overlap is not None:  # COCO images: how many are train2017, the rates over val2017's alone
        for line in objhal_overlap_lines(result.training_overlap):
            typer.echo(f"  {line}")
    for line in compared:
        typer.echo(line)


def _judged(answers: Path, responses: list[ObjhalResponse], truth: dict[int, frozenset[str]], vocab: ObjhalVocabulary, judgments: Path,
            images: Optional[Path], policy: Literal["drop", "empty"], prompt_script: Optional[Path], spacy_model: str, max_new_tokens: int,
            overwrite: bool, spec: Optional[BackendSpec], compare: Optional[Path], bootstrap: int, seed: int,
            ) -> tuple[list[ObjhalScore], dict[str, str], list[str]]:  # fmt: skip
    """The judge pass (with --judge-model) into ``judgments``, then the scores on its words (and
    the lines comparing them with ``compare``'s)."""
    from halluprobe.captions.objhal.extract import (
        SpacyTagger,
        extraction_prompt_template,
    )
    from halluprobe.judging.judge import judge_generation
    from halluprobe.judging.ledger import judge_header
    from halluprobe.judging.objhal_compare import compare_extractions
    from halluprobe.judging.objhal_judge import (
        OBJHAL_TEMPLATE_NAME,
        answers_sha256,
        judge_objhal,
        objhal_judge_items,
        score_judged,
    )
    from halluprobe.judging.store import JudgmentDir

    store = JudgmentDir(judgments)
    if spec is not None:
        if images is None:
            raise InputError("--judge-model needs --images (the folder `data objhal` wrote)")
        template = extraction_prompt_template(prompt_script)
        backend = spec.load()
        header = judge_header(benchmark="objhal", template_name=OBJHAL_TEMPLATE_NAME, backend=spec.backend, model=spec.model, info=backend.info(), generation=judge_generation(max_new_tokens),
                               answers=answers, answers_sha256=answers_sha256(answers), template=template)  # fmt: skip
        done = judge_objhal(backend, responses, objhal_judge_items(responses, images, template), store=store, header=header, overwrite=overwrite)
        typer.echo(f"{judgments}: extracted {done.asked} (errors {done.errors}), {done.short} short, {done.skipped} extracted before", err=True)
    digest, tagger = answers_sha256(answers), SpacyTagger(spacy_model)
    stored = []
    for d in [store] + ([JudgmentDir(compare)] if compare is not None else []):
        header = d.read_header()
        if header.benchmark != "objhal":
            raise InputError(f"a judgment dir of {header.benchmark!r}, not of Object HalBench's extractions", d.header_path)
        if header.answers_sha256 != digest:
            raise InputError("extractions of other answers (answers_sha256 differs)", d.header_path)
        stored.append((header, d.read_judgments(), str(d.judgments_path)))
    scores, ledger = score_judged(responses, truth, vocab, tagger, stored[0][0], stored[0][1], policy=policy, where=stored[0][2])
    if compare is None:
        return scores, ledger.identity(), []
    c = compare_extractions(responses, truth, vocab, tagger, stored[0], stored[1], policy=policy, n_resamples=bootstrap, seed=seed)
    kappa = "n/a" if c.agreement.kappa is None else f"{c.agreement.kappa:.3f}"
    lines = [f"compared with {compare} (judge {stored[1][0].backend}:{stored[1][0].model}, prompt sha256 {stored[1][0].template_sha256[:12]}): "
             f"same COCO objects on {c.agreement.agreed}/{c.agreement.n} answers, Cohen's kappa {kappa}; {c.n_both} answers both kept"]  # fmt: skip
    for name, pd in (("response hallucination", c.response_hallucination), ("mention hallucination", c.mention_hallucination)):
        ci = f" [{pd.ci[0]:+.4f}, {pd.ci[1]:+.4f}]" if pd.ci else ""
        shown = [("n/a" if v is None else f"{v:.4f}") for v in (pd.a, pd.b)]
        lines.append(f"  {name}: this {shown[0]}, compared {shown[1]}, difference " + ("n/a" if pd.difference is None else f"{pd.difference:+.4f}") + ci)
    return scores, ledger.identity(), lines
