"""The decoding verb: free-form runs of decoding methods judged by CHAIR (and PROVE) against a
greedy and a sampled baseline on the same images, with the length confound beside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from halluprobe.cli._app import (
    MAX_RESAMPLES,
    ResamplesOption,
    SeedOption,
    app,
    errors,
    refuse_over_limit,
)
from halluprobe.errors import InputError

__all__ = ["decoding_cmd"]


@app.command("decoding")
def decoding_cmd(
    runs: Annotated[list[Path], typer.Argument(help="The greedy baseline run, then one run per decoding method (open answers, same questions).")],
    sampled_baseline: Annotated[
        Path | None, typer.Option(help="A run decoded with sampling (plain method, the methods' sampling settings): paired differences against it too.")
    ] = None,
    family: Annotated[str, typer.Option(help="CHAIR family: lemmatizer (OPERA's chair.py) or singularize (the original).")] = "lemmatizer",
    tokenizer: Annotated[
        str, typer.Option(help="How CHAIR splits captions into words: punkt (nltk word_tokenize, as the evaluators) or line (no punkt data).")
    ] = "punkt",
    ground_truth: Annotated[Path | None, typer.Option(help="Object lines {image_id|image, objects} or a saved ground truth (default: shipped).")] = None,
    coco: Annotated[Path | None, typer.Option(help="COCO's annotations zip or folder: build the ground truth from them.")] = None,
    year: Annotated[str, typer.Option(help="COCO annotation year for --coco (2014 or 2017).")] = "2014",
    coco_sha256: Annotated[str | None, typer.Option(help="Pin for --coco given as a zip: its sha256.")] = None,
    truncate_incomplete: Annotated[bool, typer.Option("--truncate-incomplete", help="Drop what follows each caption's last full stop.")] = False,
    prove_scores: Annotated[
        list[Path] | None, typer.Option(help="A `prove score --out` folder of one of the runs (repeatable): hscore and tscore per run, paired.")
    ] = None,
    no_chair: Annotated[bool, typer.Option("--no-chair", help="Leave CHAIR out (runs on PROVE's images, not COCO's).")] = False,
    allow_other_models: Annotated[
        bool, typer.Option("--allow-other-models", help="Compare runs of other models than the greedy baseline's (refused by default: "
                                                         "a decoding table compares methods on one model).")
    ] = False,
    bootstrap: ResamplesOption = 1000,
    seed: SeedOption = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the table's data as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown tables (provenance comment above).")] = False,
    latex: Annotated[bool, typer.Option("--latex", help="Print booktabs LaTeX tables (provenance comment above).")] = False,
) -> None:
    """Decoding methods on free-form runs: CHAIR (and PROVE) per run, paired differences against the greedy and the sampled
    baseline, and CHAIR at matched caption length."""
    from halluprobe.captions.comparison.render import (
        decoding_latex,
        decoding_markdown,
        decoding_provenance,
        decoding_text,
    )
    from halluprobe.captions.comparison.runs import load_comparison
    from halluprobe.captions.comparison.table import decoding_table

    with errors():
        refuse_over_limit("--bootstrap", bootstrap, MAX_RESAMPLES)
        if len(runs) < 2:
            raise InputError("give the greedy baseline run and at least one method run")
        if no_chair and not prove_scores:
            raise InputError("--no-chair leaves nothing to compare: give --prove-scores")
        from halluprobe.captions.chair.families import counting_options

        family = counting_options(family, tokenizer, allow_both=False)[0][0]
        fam: Any = None
        truth: Any = None
        if not no_chair:
            from halluprobe.captions.chair.families import family_named
            from halluprobe.captions.chair.inputs import ground_truth_for

            fam = family_named(family, tokenizer=tokenizer)
            truth = ground_truth_for(fam.name, ground_truth, coco, year, coco_sha256, tokenizer=tokenizer)
        compared = load_comparison(runs[0], runs[1:], sampled_baseline, allow_other_models=allow_other_models)
        result = decoding_table(compared, family=fam, ground_truth=truth, truncate=truncate_incomplete, prove_scores=prove_scores or (),
                                chair=not no_chair, n_resamples=bootstrap, seed=seed)  # fmt: skip
        data = result.model_dump(mode="json")
        provenance = decoding_provenance(result, prove_scores or ()) if (markdown or latex) else None
    if as_json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    elif markdown or latex:
        assert provenance is not None
        typer.echo(decoding_latex(result, provenance) if latex else decoding_markdown(result, provenance), nl=False)
    else:
        typer.echo(decoding_text(result))
