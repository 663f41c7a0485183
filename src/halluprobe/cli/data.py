"""Verbs that make or inspect inputs: build, data, tokens, and the offline demo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from halluprobe.cli._app import app, build_app, console, data_app, errors, fail, progress
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.files import refuse_non_folder, write_atomic

__all__ = ["build_pope_cmd", "data_pope_cmd", "tokens_cmd", "models_cmd", "demo_cmd"]


@build_app.command("pope")
def build_pope_cmd(
    objects: Annotated[Path, typer.Option(help="COCO instances JSON, or JSON Lines of {\"image\", \"objects\"}.")],
    out: Annotated[Path, typer.Option(help="Output directory.")],
    name: Annotated[str, typer.Option(help="Prefix of the output files.")] = "coco",
    images: Annotated[int, typer.Option(help="Number of images to sample.")] = 500,
    per_image: Annotated[int, typer.Option(help="Positive (and negative) questions per image.")] = 3,
    seed: Annotated[int, typer.Option(help="Sampling seed: same inputs and seed, byte-identical files.")] = 0,
    positives: Annotated[str, typer.Option(help="Positives per image: 'first' (as POPE) or 'random'.")] = "first",
    template: Annotated[str, typer.Option(help="Question template; {} is the object.")] = "Is there a {} in the image?",
    overwrite: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
) -> None:
    """Build the random, popular and adversarial POPE splits from object annotations."""
    from halluprobe.benchmarks.created import removed_on_failure
    from halluprobe.benchmarks.objects import read_objects
    from halluprobe.benchmarks.pope import build_pope, pope_file_names, write_pope

    if positives not in ("first", "random"):
        fail(InputError(f"--positives must be 'first' or 'random', not {positives!r}"))
    if "{}" not in template:
        fail(InputError(f"--template must contain '{{}}' for the object: {template!r}"))
    with errors():
        index = read_objects(objects)
        build = build_pope(
            index, name=name, n_images=images, per_image=per_image, seed=seed, positives=positives, template=template  # type: ignore[arg-type]
        )
        with removed_on_failure() as created:  # a failed write (full disk) leaves no partial set
            try:  # write_pope would make the folder too; made here, so that a failure removes it
                created.folder(out)
            except OSError as e:
                raise InputError(f"cannot create output directory: {e.strerror or e}", out) from e
            created.new_files(out / fname for fname in pope_file_names(build.name).values())
            paths = write_pope(build, out, overwrite=overwrite)
    for path in paths:
        typer.echo(str(path))


# -- data --------------------------------------------------------------------------------


@data_app.command("pope")
def data_pope_cmd(
    out: Annotated[Path, typer.Option(help="Directory for the dataset's question files.")],
    dataset: Annotated[str, typer.Option(help="coco (default), aokvqa, gqa, repope, dashb or popev2 (docs/pope-versions.md).")] = "coco",
    images: Annotated[
        Optional[Path],
        typer.Option(
            "--images", "--coco-images",
            help="Images folder: the public images these questions use are fetched into it (COCO), the others checked there.",
        ),
    ] = None,
    version: Annotated[
        Optional[str],
        typer.Option(help="Published version (coco: 2023-08-10 alias 2023-08, LLaVA-1.5's; 2023-08-04; 2023-10-09; 2023-11-16, current)."),
    ] = None,
) -> None:
    """Fetch a POPE dataset's question files at the authors' commit (pinned sha256, cached) and, optionally, its images.

    --version fetches an older published content (see docs/pope-versions.md) by its commit."""
    from halluprobe.benchmarks.created import removed_on_failure
    from halluprobe.benchmarks.dataset_files import fetch_dataset, fetch_dataset_images
    from halluprobe.benchmarks.datasets import dataset_version
    from halluprobe.benchmarks.sources import fetch_coco_images, fetch_pope, image_names

    with errors(), removed_on_failure() as created:  # a failed verb leaves nothing it created
        if images is not None:
            refuse_non_folder(images, "--images")  # a file there: every image "missing", exit 0
        chosen = dataset_version(dataset, version)
        with progress(f"{dataset} question files") as bar:
            if dataset == "coco":  # the POPE repository's own URLs (and $HALLUPROBE_POPE_URL), as before
                paths = fetch_pope(out, progress=bar, version=version, created=created)
            else:
                paths = fetch_dataset(chosen, out, progress=bar, created=created)
        if images is not None:
            _refuse_other_list(out / "missing-images.txt", image_names(list(paths)))  # before any image is fetched
            with progress("images") as bar:
                if dataset == "coco":
                    report = fetch_coco_images(list(paths), images, progress=bar, created=created)
                    line, missing = str(report), sorted(report.failed)
                else:
                    line, missing = fetch_dataset_images(chosen, list(paths), images, progress=bar, created=created)
            listed = out / "missing-images.txt"
            if missing:  # every one named in a file beside the questions, the first few here
                created.new_files([listed])
                write_atomic(listed, "".join(name + "\n" for name in missing))
            elif listed.is_file():  # an earlier list (checked above): every image it named is there now
                listed.unlink()
    # printed once nothing can fail any more: a path printed is a path that stays
    for path in paths:
        typer.echo(str(path))
    if images is not None:
        typer.echo(f"{images}: {line}")
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more (all in {listed})" if len(missing) > 5 else "")
            typer.echo(f"{images}: {len(missing)} images missing: {shown}")


def _refuse_other_list(listed: Path, names: list[str]) -> None:
    """``missing-images.txt`` is replaced only when it is an earlier list of these questions'
    images (a rerun); a user's file of that name, or a link, stays and is one line."""
    if not (listed.exists() or listed.is_symlink()):
        return
    lines: list[str] | None = None
    if listed.is_file() and not listed.is_symlink():
        try:
            lines = listed.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            lines = None
    if lines is None or not set(lines) <= set(names):
        raise InputError("exists and is not an earlier list of these questions' missing images: not replaced (move it, or choose another --out)", listed)


@app.command("tokens")
def tokens_cmd(
    path: Annotated[str, typer.Argument(help="Model or tokenizer folder, or hub id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    trust_remote_code: Annotated[bool, typer.Option(help="Allow the tokenizer's own code from the hub.")] = False,
) -> None:
    """Show the yes/no token sets derived from a tokenizer, and whether the legacy LLaMA ids hold."""
    from halluprobe.readouts.tokensets import derive_token_sets, describe_token_sets, load_tokenizer

    with errors():
        try:
            tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code)
        except (InputError, RuntimeFailure):
            raise
        except (OSError, ValueError) as err:
            raise InputError(f"cannot load a tokenizer: {err}", path) from None
        info = describe_token_sets(derive_token_sets(tokenizer))
    if as_json:
        typer.echo(json.dumps(info, indent=2, ensure_ascii=False))
        return
    typer.echo(f"vocabulary: {info['vocab_size']} pieces, fingerprint {info['tokenizer_fingerprint'][:16]}")
    typer.echo("yes set: " + ", ".join(f"{p!r}={i}" for p, i in zip(info["yes_pieces"], info["yes_ids"])))
    typer.echo("no set:  " + ", ".join(f"{p!r}={i}" for p, i in zip(info["no_pieces"], info["no_ids"])))
    verdict = "valid" if info["legacy_valid"] else "INVALID for this vocabulary"
    typer.echo(f"legacy LLaMA ids (3582/1217 and the 8-token set): {verdict}")
    if not info["legacy_valid"]:
        typer.echo("  " + ", ".join(f"{i}={p!r}" for i, p in info["legacy_pieces"].items()))


@app.command("models")
def models_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """The VLM families the hf backend is tested on: engine path (prefix cache or plain, and why),
    template source, and the families that need remote code (served through --backend openai)."""
    from halluprobe.backends.families import family_rows, family_table_markdown

    typer.echo(json.dumps(family_rows(), indent=2) if as_json else family_table_markdown())


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option(help="Directory for the demo's files.")] = Path("halluprobe-demo"),
) -> None:
    """Offline demo: synthetic scenes, POPE built from them, the tiny trained demo VLM, every readout.

    Generates held-out scenes, builds the random / popular / adversarial splits, runs the demo model shipped with halluprobe (a LLaVA trained by tools/train_demo_model.py), then scores, audits and writes report.html. It also records the signals VCD and DoLa read and prints the best correction beside the readout confound. Then the model captions the same scenes (greedy, sampled, and VCD sampled alike, through `run --open-ended --decode`'s path) and the demo prints CHAIR of each and VCD's paired differences, as `halluprobe decoding` computes them. Deterministic; about 30 s on 2 CPU cores.
    """
    from halluprobe.demo import run_demo
    from halluprobe.tables import score_table

    with errors():
        refuse_non_folder(out)  # a file or a dangling link at --out: one line, not mkdir's traceback
        with progress("demo questions") as bar:
            result = run_demo(out, progress=bar)
    for title, report in result.reports:
        console().print(score_table(report, title))
    typer.echo(result.summary)
    typer.echo(f"demo done in {result.seconds:.0f} s")
