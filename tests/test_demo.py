"""The README's main command: `halluprobe demo`, offline, end to end, deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.captions.comparison.records import ComparisonResult

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

pytest.importorskip("torch")


@pytest.mark.slow
def test_demo_runs_offline_end_to_end(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    out = tmp_path / "demo"
    # the scenes and the POPE files built from their COCO annotations
    assert (out / "scenes" / "instances.json").exists() and (out / "benchmark" / "manifest.json").exists()
    samples = [json.loads(line) for line in (out / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 120 * 18 and not any(s["error"] for s in samples)
    header = json.loads((out / "run" / "run.json").read_text())
    # the Mistral v1 vocabulary: the legacy LLaMA ids are other words, and the demo says so
    assert header["token_sets"]["legacy_valid"] is False
    assert "legacy LLaMA-2 ids on this vocabulary: INVALID" in result.output
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    assert metrics["readout"] == "dynamic"
    f1 = {split: m["f1"] for split, m in metrics["splits"].items()}
    # the point of the demo: negatives that go with the scene fool the model more
    assert f1["adversarial"] < f1["random"] - 0.05, f1
    assert f"F1 by split (dynamic readout): random {f1['random']:.3f}" in result.output
    assert (out / "run" / "audit.json").exists() and (out / "report.html").stat().st_size > 10_000
    assert f"report: {out / 'report.html'}" in result.output
    assert "halluprobe-demo" not in result.output  # every path printed is the one asked for
    _captions_are_what_decoding_prints(out, result.output)
    _report_shows_the_caption_table(out)


def _report_shows_the_caption_table(out: Path) -> None:
    """report.html: the POPE run's sections and the caption runs' Decoding section (the caption
    runs are not scored as POPE runs); every table of report.md under a provenance comment checks."""
    page = (out / "report.html").read_text(encoding="utf-8")
    twin = (out / "report.md").read_text(encoding="utf-8")
    assert '<section id="headline">' in page and '<a href="#decoding">Decoding</a>' in page
    section = page.split('<section id="decoding" class="run">', 1)[1].split("</section>", 1)[0]
    assert "<h2>Decoding methods on free-form answers</h2>" in section and section.count("<table") == 3
    for role in ("greedy baseline", "method", "sampled baseline"):  # the three caption runs, 120 captions each
        assert f"</td><td>{role}</td><td>120</td>" in section, role
    assert "<td>vcd:alpha=1,beta=0.1 (sampled, temperature=1.0, seed=0)</td><td>method</td>" in section
    assert "captions-greedy" not in page.split('<section id="decoding"', 1)[0].split("</nav>", 1)[1]  # no POPE section of it
    assert f"halluprobe report {out / 'run'} {out / 'captions-greedy'} " in page  # the footer's command names the caption runs
    assert twin.count("halluprobe-decoding-provenance") == 1 and '"tokenizer": "line"' in twin
    checked = CliRunner().invoke(app, ["check", str(out / "report.md"), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["tables"] == 2  # the headline table and the decoding comparison


def _captions_are_what_decoding_prints(out: Path, output: str) -> None:
    """The caption lines: three real open-ended runs, and numbers that `halluprobe decoding`
    prints from those run dirs, which also equal a count by hand of the greedy captions."""
    from halluprobe.demo_captions import CAPTION_METHOD, CaptionDemo, caption_lines

    demo = CaptionDemo(greedy=out / "captions-greedy", method=out / "captions-vcd", sampled=out / "captions-sampled",
                       ground_truth=out / "captions" / "ground_truth.jsonl", n_resamples=300)  # fmt: skip
    for path in (demo.greedy, demo.method, demo.sampled):
        samples = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
        assert len(samples) == 120 and not any(s["error"] for s in samples) and all(s["text"] for s in samples)
    generate = json.loads((demo.method / "run.json").read_text())["generate"]
    assert generate["decode"] == CAPTION_METHOD and generate["sample"] is True and generate["seed"] == 0
    assert json.loads((demo.greedy / "run.json").read_text())["open_ended"] is True
    # what the printed command gives, rendered as the demo renders it
    args = demo.command.split()[2:] + ["--json"]
    verb = CliRunner().invoke(app, ["decoding", *args])
    assert verb.exit_code == 0, verb.output
    demo.table = ComparisonResult.model_validate_json(verb.output)  # the --json output reads back as the record
    lines = caption_lines(demo)
    assert all(line in output for line in lines), (lines, output)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert all(line.replace(str(out), "halluprobe-demo") in readme for line in lines), lines  # README quotes them
    assert demo.table.chair is not None and "no punkt" in demo.table.chair.identity["tools"]
    # a Markdown table of the printed command names its tokenizer, and check recomputes it with that one
    table = CliRunner().invoke(app, ["decoding", *demo.command.split()[2:], "--markdown"])
    assert table.exit_code == 0 and '"tokenizer": "line"' in table.output, table.output
    paper = out / "captions" / "paper.md"
    paper.write_text(table.output)
    checked = CliRunner().invoke(app, ["check", str(paper), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["tables"] == 1
    # by hand: the classes each greedy caption names, against the scenes' COCO objects
    import re

    truth = {json.loads(line)["image"]: set(json.loads(line)["objects"]) for line in demo.ground_truth.read_text().splitlines()}
    coco = {"sports ball" if name == "ball" else name for objects in truth.values() for name in objects}
    countable = {n for n in coco if n != "bus"} | {"ball"}  # singularize reads "bus" as "bu"
    with_wrong = named = wrong = present = hit = 0
    for line in (demo.greedy / "samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        # every mention counts (CHAIR_i), each present object once (recall)
        said = {n: len(re.findall(rf"\b{n}s?\b", sample["text"].lower())) for n in countable}
        said = {("sports ball" if n == "ball" else n): k for n, k in said.items() if k}
        there = {"sports ball" if n == "ball" else n for n in truth[sample["image"]]}
        with_wrong += bool(set(said) - there)
        named, wrong = named + sum(said.values()), wrong + sum(k for n, k in said.items() if n not in there)
        present, hit = present + len(there), hit + len(set(said) & there)
    assert demo.table is not None and demo.table.chair is not None
    greedy = demo.table.chair.per_run[0]
    assert greedy.chair_s == pytest.approx(with_wrong / 120) and greedy.recall == pytest.approx(hit / present)
    assert greedy.chair_i == pytest.approx(wrong / named)
    # the model names objects that are not there, and most of those that are
    assert greedy.chair_s is not None and 0 < greedy.chair_s and greedy.recall is not None and greedy.recall > 0.5


@pytest.mark.slow
def test_demo_is_deterministic(tmp_path: Path) -> None:
    from halluprobe.demo import run_demo

    runs = [run_demo(tmp_path / name, n_images=6, n_resamples=20) for name in ("a", "b")]
    a, b = (
        [{k: v for k, v in json.loads(line).items() if k != "latency_s"} for line in (r.out / "run" / "samples.jsonl").read_text().splitlines()]
        for r in runs
    )
    assert len(a) == 6 * 18 and a == b
    for name in ("synthetic_pope_random.json", "synthetic_pope_adversarial.json"):
        assert (runs[0].out / "benchmark" / name).read_bytes() == (runs[1].out / "benchmark" / name).read_bytes()
    assert runs[0].f1 == runs[1].f1
    for name in ("captions-greedy", "captions-vcd", "captions-sampled"):
        texts = [[json.loads(line)["text"] for line in (r.out / name / "samples.jsonl").read_text().splitlines()] for r in runs]
        assert len(texts[0]) == 6 and texts[0] == texts[1]
    lines = [[line.replace(str(r.out), "OUT") for line in r.summary.split("\n") if line.startswith(("captions of", "vcd:", "compare:"))] for r in runs]
    assert len(lines[0]) == 3 and lines[0] == lines[1]
