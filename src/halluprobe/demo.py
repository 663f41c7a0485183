"""The offline demo: synthetic scenes, POPE built from them, a tiny trained VLM, every readout.

``run_demo`` generates held-out scenes (:mod:`halluprobe.benchmarks.synthetic`, a seed the demo
model never saw), builds the three POPE splits from their COCO annotations, runs the demo model
shipped in the package (``halluprobe/demo_model``: a LLaVA trained on such scenes by
``tools/train_demo_model.py``) with every readout, then scores and audits. Then the same model
captions the same scenes, greedy, sampled and with one decoding method, and CHAIR compares them
as ``halluprobe decoding`` does (:mod:`halluprobe.demo_captions`); the report shows the POPE run
and, in its Decoding section, that caption comparison.

The model really answers: it looks at the image, and when unsure it leans on what usually goes
with the scene, so POPE's adversarial negatives fool it more than random ones. Its vocabulary is
Mistral v1, where the legacy LLaMA-2 ids are other words: the run marks them invalid, and the
audit shows what a forced legacy readout would have scored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluprobe.audit import audit_run
from halluprobe.backends.hf.backend import HFBackend
from halluprobe.benchmarks.objects import read_objects
from halluprobe.benchmarks.pope import build_pope, write_pope
from halluprobe.benchmarks.question_file import read_questions, split_name
from halluprobe.benchmarks.synthetic import write_synthetic
from halluprobe.corrections_table import corrections_table
from halluprobe.demo_captions import CAPTION_FAMILY, CAPTION_TOKENIZER, caption_lines, run_caption_demo
from halluprobe.errors import RuntimeFailure
from halluprobe.formatting import fmt_pct, format_ci, format_ratio, format_signed
from halluprobe.readouts.tokensets import describe_token_sets
from halluprobe.records_audit import AuditReport
from halluprobe.records_scores import ScoreReport
from halluprobe.report.decoding_section import ChairCounting
from halluprobe.report.page import render_report
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.runner import run_questions
from halluprobe.scoring import score_rundir

__all__ = ["DEMO_IMAGES", "DEMO_MODEL_DIR", "DEMO_SEED", "DemoResult", "run_demo"]

# The model shipped with the package (weights, tokenizer, processor, training record).
DEMO_MODEL_DIR = Path(__file__).resolve().parent / "demo_model"
# Scenes of this seed were never used in training (training.json: data_seed 1, eval_seed 2).
DEMO_SEED = 7
DEMO_IMAGES = 120
_N_RESAMPLES = 300  # bootstrap resamples: enough for a demo's CIs, and fast
# signals cheap on the demo model, and the corrections read from them for the summary line
DEMO_SIGNALS = ("noised", "layers")
DEMO_CORRECTIONS = ("vcd:alpha=1,beta=0.1", "dola:relative_top=0.1")


@dataclass
class DemoResult:
    out: Path
    reports: list[tuple[str, ScoreReport]] = field(default_factory=list)
    summary: str = ""
    run_dir: Path | None = None
    report_html: Path | None = None
    # readout -> split -> F1 (macro under "macro"); legacy readouts forced, for the summary
    f1: dict[str, dict[str, float | None]] = field(default_factory=dict)
    corrections: Any = None  # the corrections table of the run (corrections_table.CorrectionsReport)
    captions: Any = None  # the caption runs and their decoding table (demo_captions.CaptionDemo)
    seconds: float = 0.0


def run_demo(
    out: str | Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    n_images: int = DEMO_IMAGES,
    seed: int = DEMO_SEED,
    model_dir: str | Path | None = None,
    n_resamples: int = _N_RESAMPLES,
) -> DemoResult:
    """Generate scenes, build POPE, run the demo model, score, audit and report into ``out``."""
    import time


    started = time.perf_counter()
    out = Path(out)
    model = Path(model_dir) if model_dir is not None else DEMO_MODEL_DIR
    if not (model / "model.safetensors").is_file():
        raise RuntimeFailure(f"the demo model is missing from {model} (reinstall halluprobe, or run tools/train_demo_model.py)")
    out.mkdir(parents=True, exist_ok=True)

    scenes = write_synthetic(out / "scenes", n_images=n_images, seed=seed, overwrite=True)
    index = read_objects(scenes.annotations)
    build = build_pope(index, name="synthetic", n_images=n_images, per_image=3, seed=0)
    split_files = [p for p in write_pope(build, out / "benchmark", overwrite=True) if "_pope_" in p.name]

    questions, fingerprints = [], {}
    for path in split_files:
        split = split_name(path)
        questions.extend(read_questions(path, split=split))
        fingerprints[split] = (path.resolve(), sha256_file(path))
    # the signals that are cheap on this model, for the corrections line (VCD's noised image, DoLa's layers)
    config = RunConfig(model=str(model), backend="hf", template="llava", overwrite=True, signals=DEMO_SIGNALS)
    backend = HFBackend(str(model), batch_size=16, dtype="float32", device="cpu")
    header = make_header(config, backend, fingerprints, scenes.images_dir)
    rundir = RunDir(out / "run")
    summary = run_questions(backend, questions, scenes.images_dir, rundir, config, header, progress=progress)

    result = DemoResult(out=out, run_dir=rundir.path)
    headline = score_rundir(rundir.path, readout="dynamic", n_resamples=n_resamples)
    result.reports.append(("demo model on held-out synthetic scenes, readout dynamic", headline))
    audit = audit_run(rundir.path, n_resamples=n_resamples)
    rundir.write_audit(audit)
    result.corrections = corrections_table(rundir.path, DEMO_CORRECTIONS, n_resamples=n_resamples)
    captions = result.captions = run_caption_demo(out, scenes.annotations, scenes.images_dir, backend, str(model), n_resamples=n_resamples)
    # the page shows the POPE run and, in its Decoding section, the caption runs counted as the demo's caption lines count them
    counting = ChairCounting(CAPTION_FAMILY, CAPTION_TOKENIZER, captions.ground_truth)
    html, md = render_report([rundir.path], out / "report.html", audits=[audit], corrections=[result.corrections],
                             captions=[captions.greedy, captions.method, captions.sampled], chair=counting, n_resamples=n_resamples)  # fmt: skip
    result.report_html = html
    for name, entry in audit.readouts.items():
        row: dict[str, float | None] = {s: m.f1 for s, m in entry.splits.items()}
        row["macro"] = entry.macro.f1
        result.f1[name] = row

    sets = describe_token_sets(backend.token_sets())
    result.seconds = time.perf_counter() - started
    result.summary = "\n".join(
        _summary_lines(result, audit, sets, n_questions=summary.total, n_errors=summary.errors, n_images=n_images, md=md)
    )
    return result


def _summary_lines(
    result: DemoResult, audit: AuditReport, sets: dict[str, Any], *, n_questions: int, n_errors: int, n_images: int, md: Path
) -> list[str]:
    f1 = result.f1
    dyn = audit.readouts["dynamic"].splits
    fp = {s: f"{m.fp}/{m.fp + m.tn}" for s, m in dyn.items()}
    lines = [
        f"{n_questions} questions about {n_images} synthetic scenes the model never saw, {n_errors} errors; "
        f"run dir {result.run_dir}",
        (
            f"F1 by split (dynamic readout): random {_num(f1['dynamic'].get('random'))}, "
            f"popular {_num(f1['dynamic'].get('popular'))}, adversarial {_num(f1['dynamic'].get('adversarial'))}; "
            f"'yes' to absent objects: random {fp.get('random')}, popular {fp.get('popular')}, "
            f"adversarial {fp.get('adversarial')}"
        ),
    ]
    pairs = [p for p in audit.hallucination_profile.adversarial_pairs if p.yes][:3]
    if pairs:
        lines.append(
            "objects that go with the scene fool it: "
            + ", ".join(f"{p.negative} beside a {p.positive} {p.yes}/{p.n}" for p in pairs)
        )
    lines.append(f"token sets from its tokenizer (Mistral v1): yes {sets['yes_pieces']}, no {sets['no_pieces']}")
    if not sets["legacy_valid"]:
        pieces = ", ".join(f"{i}={p!r}" for i, p in list(sets["legacy_pieces"].items())[:4])
        forced = f1.get("legacy_2tok", {}).get("macro")
        lines.append(
            f"legacy LLaMA-2 ids on this vocabulary: INVALID ({pieces}, ...); "
            f"forced, legacy_2tok would report macro F1 {_num(forced)} instead of {_num(f1['dynamic'].get('macro'))}"
        )
    else:
        lines.append("legacy LLaMA-2 ids on this vocabulary: valid")
    text = []
    for name, entry in audit.readouts.items():
        if name.startswith("text:"):
            unknown = entry.macro.unknown_rate
            calls = f" ({fmt_pct(unknown, 0)}% unknown)" if unknown else ""
            text.append(f"{name.removeprefix('text:')} {_num(entry.macro.f1)}{calls}")
    if text:
        lines.append("text rules on its greedy answers, macro F1: " + ", ".join(text))
    rate = audit.offset_rate
    if rate is not None:
        lines.append(f"first-token argmax outside the yes/no sets: {fmt_pct(rate)}% of answers")
    if result.corrections is not None:
        lines.append(_corrections_line(result.corrections, result.run_dir))
    if result.captions is not None:

        lines.extend(caption_lines(result.captions))
    lines.append(f"rescore any readout: halluprobe score {result.run_dir} --readout text:pope")
    lines.append(f"audit: {RunDir(result.run_dir).audit_path}; report: {result.report_html} (and {md})")
    return lines


def _corrections_line(table: Any, run_dir: Path) -> str:
    """The best correction's gain beside the readout confound of the same run."""
    corrections = [r for r in table.rows if r.kind == "correction" and r.delta_f1 is not None]
    confound = next((r for r in table.rows if r.kind == "confound"), None)
    if not corrections:
        return "corrections: none could be read from this run"
    best = max(corrections, key=lambda r: r.delta_f1)
    ci = format_ci(best.delta_f1_ci, 3, plus=True)
    line = f"best correction on the same run: {best.name} macro F1 {format_signed(best.delta_f1)}{ci} vs greedy dynamic"
    if confound is not None and confound.delta_f1 is not None:
        line += f"; reading it with {confound.name} instead moves F1 {format_signed(confound.delta_f1)}"
    return line + f" (halluprobe corrections {run_dir})"


def _num(value: float | None) -> str:
    return format_ratio(value, digits=3)
