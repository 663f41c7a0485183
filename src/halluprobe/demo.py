"""The offline demo: real photos from scikit-image, POPE built from them, a tiny random-weight
LLaVA (real transformers classes, the real Mistral v1 vocabulary), every readout, scored.

Random weights show the plumbing and the token-set check, not a model's hallucinations: a
trained tiny model replaces this in a later version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from halluprobe.records import ScoreReport

__all__ = ["DemoResult", "run_demo"]


@dataclass
class DemoResult:
    out: Path
    reports: list[tuple[str, ScoreReport]] = field(default_factory=list)
    summary: str = ""


def run_demo(out: str | Path, *, progress: Callable[[int, int], None] | None = None) -> DemoResult:
    from halluprobe.backends.hf import HFBackend
    from halluprobe.benchmarks.objects import read_objects
    from halluprobe.benchmarks.pope import build_pope, read_questions, split_name, write_pope
    from halluprobe.readouts.tokensets import describe_token_sets
    from halluprobe.rundir import RunDir, sha256_file
    from halluprobe.runner import RunConfig, make_header, run_questions
    from halluprobe.scoring import score_rundir
    from halluprobe.tiny import build_tiny_llava, demo_photos, mistral_tokenizer_dir

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images_dir, objects_file = demo_photos(out / "photos")
    index = read_objects(objects_file)
    build = build_pope(index, name="demo", n_images=len(index.images), per_image=1, seed=0)
    paths = write_pope(build, out / "benchmark", overwrite=True)
    split_files = [p for p in paths if "_pope_" in p.name]

    model_dir = out / "model"
    if not (model_dir / "config.json").exists():
        build_tiny_llava(model_dir, mistral_tokenizer_dir(out / "tokenizer"), seed=0)

    questions, fingerprints = [], {}
    for path in split_files:
        split = split_name(path)
        questions.extend(read_questions(path, split=split))
        fingerprints[split] = (path.resolve(), sha256_file(path))
    config = RunConfig(model=str(model_dir), backend="hf", template="llava", overwrite=True)
    backend = HFBackend(str(model_dir), batch_size=8, dtype="float32", device="cpu")
    header = make_header(config, backend, fingerprints, images_dir)
    rundir = RunDir(out / "run")
    summary = run_questions(backend, questions, images_dir, rundir, config, header, progress=progress)

    result = DemoResult(out=out)
    by_readout: dict[str, ScoreReport] = {}
    for readout in ("dynamic", "text:strict", "text:pope"):
        report = score_rundir(rundir.path, readout=readout, n_resamples=200, write=readout == "dynamic")
        by_readout[readout] = report
        result.reports.append((f"demo, readout {readout} (random weights: plumbing, not a real model)", report))
    offset = sum(1 for s in rundir.read_samples() if s.offset_argmax is not None)
    from halluprobe.audit import audit_run, write_audit
    from halluprobe.report import render_report

    audit = audit_run(rundir.path, n_resamples=200)
    write_audit(rundir.path, audit)
    html, _ = render_report([rundir.path], out / "report.html", audits=[audit])
    pope, strict = by_readout["text:pope"].macro, by_readout["text:strict"].macro
    sets = describe_token_sets(backend.token_sets())
    legacy = "valid" if sets["legacy_valid"] else "INVALID: " + ", ".join(
        f"{i}={p!r}" for i, p in sets["legacy_pieces"].items()
    )
    result.summary = "\n".join(
        [
            f"{summary.total} questions on {len(index.images)} photos, {summary.errors} errors; run dir {rundir.path}",
            f"derived yes set {sets['yes_pieces']} / no set {sets['no_pieces']} (Mistral v1 vocabulary)",
            f"legacy LLaMA-2 ids on this vocabulary: {legacy}",
            f"first-token argmax outside both sets: {offset} of {summary.total} (random weights answer gibberish)",
            f"on that gibberish POPE's text rule says yes {_pct(pope.yes_ratio)} of the time (F1 {_num(pope.f1)}); "
            f"strict calls {_pct(strict.unknown_rate)} unknown (F1 {_num(strict.f1)})",
            f"rescore any readout: halluprobe score {rundir.path} --readout text:pope",
            f"audit: {rundir.path / 'audit.json'}; report: {html} (and {html.with_suffix('.md')})",
        ]
    )
    return result


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
