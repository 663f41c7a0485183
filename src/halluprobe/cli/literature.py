"""``halluprobe literature``: the registry of published answers files, and their audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from halluprobe.cli._app import MAX_RESAMPLES, ResamplesOption, SeedOption, app, errors, refuse_over_limit
from halluprobe.errors import InputError

__all__ = ["literature_app", "literature_list_cmd", "literature_audit_cmd"]

literature_app = typer.Typer(help="Published POPE numbers recomputed from the authors' own answers files.", no_args_is_help=True)
app.add_typer(literature_app, name="literature")

RegistryOption = Annotated[
    Optional[Path], typer.Option(help="Another registry file (JSON, the packaged one's schema); default: the packaged registry.")
]


@literature_app.command("list")
def literature_list_cmd(
    registry: RegistryOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the registry as JSON.")] = False,
) -> None:
    """Every registered answers file: model, decoding, dataset, parser, published figures, and whether this build can audit it."""
    from halluprobe.literature.registry import load_registry
    from halluprobe.literature.table import list_markdown

    with errors():
        loaded = load_registry(registry)
    typer.echo(json.dumps(loaded.model_dump(mode="json"), indent=2) if as_json else list_markdown(loaded))


@literature_app.command("audit")
def literature_audit_cmd(
    name: Annotated[Optional[str], typer.Argument(help="The entry to audit (see `literature list`).")] = None,
    all_entries: Annotated[bool, typer.Option("--all", help="Audit every entry (one that cannot be audited is listed with why).")] = False,
    out: Annotated[Path, typer.Option(help="Folder for the downloaded files, the imported runs and literature.md.")] = Path("literature-audit"),
    registry: RegistryOption = None,
    overwrite: Annotated[bool, typer.Option(help="Audit again into a folder that holds an earlier audit: its tables and the audited entries' runs are replaced, nothing else.")] = False,
    resamples: ResamplesOption = 1000,
    seed: SeedOption = 0,
) -> None:
    """Download each pinned file (sha256 checked, cached), import it, score it with the authors' rule and with
    text:strict, and write OUT/literature.md: published, recomputed, equal or not, CI, version and parser confounds."""
    from halluprobe.literature.registry import load_registry, registry_entries
    from halluprobe.literature.table import LITERATURE_MD, audit_literature

    with errors():
        if (name is None) == (not all_entries):
            raise InputError("give one entry NAME or --all")
        refuse_over_limit("--resamples", resamples, MAX_RESAMPLES)  # as score caps it: 10^9 would exhaust memory
        loaded = load_registry(registry)
        entries = registry_entries(loaded, None if all_entries else name)
        audits = audit_literature(loaded, entries, out, n_resamples=resamples, seed=seed, overwrite=overwrite, keep_going=all_entries)
    for a in audits:
        reproduced = [f for f in a.figures if f.equal]
        typer.echo(f"{a.name}: {a.status}" + (f"; {len(reproduced)} of {len(a.figures)} published figures reproduced" if a.figures else ""))
    typer.echo(str(out / LITERATURE_MD))
