"""`halluprobe report` on runs of open answers to CHAIR questions: the CHAIR section (both
families side by side, objects most often hallucinated, CHAIR against caption length) in the
HTML page and its Markdown twin, and `check` recomputing the CHAIR table from its provenance."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _chair import FixtureTools, wordnet_or_skip
from typer.testing import CliRunner

from halluprobe.captions.chair import families as chair_families
from halluprobe.captions.chair.groundtruth import shipped_ground_truth
from halluprobe.cli import app

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

runner = CliRunner()

# four captions written with the fixture's tags; each image's ground truth decides what is hallucinated
CAPTIONS = (
    "a dog and a person sitting on a bench",
    "a cat on a couch",
    "two ties and a bus with a man",
    "a pizza on a dining table with a fork and a knife and a wine glass next to a laptop and a cell phone and a teddy bear",
)


@pytest.fixture(autouse=True, scope="module")
def _wordnet() -> None:
    wordnet_or_skip()


@pytest.fixture(autouse=True)
def fixture_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real tokenizer and tagger need NLTK data no test can download: the fixture's stand in."""
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())


def _caption_run(root: Path, name: str, n: int = 24, shift: int = 0) -> Path:
    """An OPERA caption file on images of the shipped ground truth, imported as a run dir."""
    ids = sorted(shipped_ground_truth("chair@lemmatizer").objects)[:n]
    source = root / f"{name}.jsonl"
    source.write_text("".join(json.dumps({"image_id": i, "caption": CAPTIONS[(k + shift) % 4]}) + "\n" for k, i in enumerate(ids)))
    result = runner.invoke(app, ["import", "opera", str(source), "--out", str(root / name)])
    assert result.exit_code == 0, result.output
    return root / name


def _chair_numbers(run: Path, tmp_path: Path) -> dict[str, dict[str, float]]:
    """The same run scored by the `chair` verb (shipped ground truth, same bootstrap)."""
    result = runner.invoke(app, ["chair", str(run), "--json", "--bootstrap", "50", "--seed", "3"])
    assert result.exit_code == 0, result.output
    return {family: entry["summary"] for family, entry in json.loads(result.stdout).items()}


class _Sections(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.svgs = 0
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "section":
            self.sections.append(values.get("id") or "")
        if tag == "svg":
            self.svgs += 1
        for key in ("src", "href"):
            value = values.get(key)
            if value and not value.startswith("#"):
                self.external.append(value)
        if tag == "script":
            self.external.append("script")


@pytest.fixture(scope="module")
def chair_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, Path]:
    monkey = pytest.MonkeyPatch()
    monkey.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())
    root = tmp_path_factory.mktemp("chair_report")
    run = _caption_run(root, "captions")
    out = root / "report.html"
    result = runner.invoke(app, ["report", str(run), "--out", str(out), "--resamples", "50", "--seed", "3"])
    monkey.undo()
    assert result.exit_code == 0, result.output
    return run, out.read_text(encoding="utf-8"), out.with_suffix(".md").read_text(encoding="utf-8"), out


def test_html_has_the_chair_section_with_both_families(chair_report: tuple[Path, str, str, Path], tmp_path: Path) -> None:
    run, html, _, _ = chair_report
    parsed = _Sections()
    parsed.feed(html)
    assert parsed.sections == ["run", "chair", "training-images"] and parsed.external == []  # COCO images: their train2017 count
    assert parsed.svgs == 1  # CHAIR against caption length
    numbers = _chair_numbers(run, tmp_path)
    chair = html[html.index('<section id="chair">') :]
    for family, summary in numbers.items():
        row = re.search(rf"<tr><td class=\"l\"><code>{re.escape(family)}</code></td>(.*?)</tr>", chair)
        assert row is not None, family
        cells = re.findall(r'<td class="num">(.*?)</td>', row.group(1))
        assert cells[0] == str(summary["n"]) == "24"
        lo, hi = summary["ci"]["chair_s"]
        assert cells[1] == f"{100 * summary['chair_s']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
    assert "Objects most often hallucinated" in chair and "CHAIR against caption length" in chair


def test_markdown_twin_matches_the_chair_verb(chair_report: tuple[Path, str, str, Path], tmp_path: Path) -> None:
    run, _, md, _ = chair_report
    assert md.startswith("# halluprobe report: CHAIR of ")
    assert "<!-- halluprobe-chair-provenance " in md and '"bootstrap": {"resamples": 50, "seed": 3}' in md
    numbers = _chair_numbers(run, tmp_path)
    table = [line for line in md.splitlines() if line.startswith("| chair@")]
    assert [line.split(" | ")[0] for line in table[:2]] == ["| chair@lemmatizer", "| chair@singularize"]
    for line, (family, summary) in zip(table, numbers.items()):
        assert f" | {100 * summary['chair_i']:.1f} [" in line, (family, line)
    # the most hallucinated objects, counted here from the per-caption scores the verb writes
    out = tmp_path / "scores"
    assert runner.invoke(app, ["chair", str(run), "--out", str(out), "--bootstrap", "0"]).exit_code == 0
    per_caption = [json.loads(x) for x in (out / "chair_lemmatizer.jsonl").read_text().splitlines()]
    counts: dict[str, int] = {}
    for caption in per_caption:
        for name in set(caption["hallucinated"]):
            counts[name] = counts.get(name, 0) + 1
    top = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    assert f"| 1 | {top[0]} ({top[1]} captions) |" in md


def test_two_runs_get_a_section_each_and_mixing_with_yes_no_runs_is_refused(tmp_path: Path) -> None:
    a, b = _caption_run(tmp_path, "a"), _caption_run(tmp_path, "b", shift=1)
    out = tmp_path / "board.html"
    result = runner.invoke(app, ["report", str(a), str(b), "--out", str(out), "--resamples", "0"])
    assert result.exit_code == 0, result.output
    parsed = _Sections()
    parsed.feed(out.read_text(encoding="utf-8"))
    assert parsed.sections == ["run", "chair-1", "chair-2", "training-images"] and parsed.svgs == 2
    assert out.with_suffix(".md").read_text(encoding="utf-8").count("halluprobe-chair-provenance") == 2
    refused = runner.invoke(app, ["report", str(a), "--out", str(tmp_path / "x.html"), "--headline", "dynamic"])
    assert refused.exit_code == 2 and "--headline applies to yes/no runs" in refused.output
    assert not (tmp_path / "x.html").exists()


def test_a_run_on_other_images_names_the_verbs_that_score_it(tmp_path: Path) -> None:
    source = tmp_path / "other.jsonl"
    source.write_text('{"image_id": 1, "caption": "a dog"}\n')
    assert runner.invoke(app, ["import", "opera", str(source), "--out", str(tmp_path / "run")]).exit_code == 0
    result = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "samples.jsonl:1" in line
    assert "halluprobe chair" in line and "halluprobe prove score" in line and "halluprobe amber generative" in line


def test_score_of_an_open_ended_run_names_chair_amber_and_prove(tmp_path: Path) -> None:
    run = _caption_run(tmp_path, "captions", n=4)
    result = runner.invoke(app, ["score", str(run)])
    assert result.exit_code == 2
    for verb in ("halluprobe chair", "halluprobe amber generative", "halluprobe prove score"):
        assert verb in result.output


def test_check_recomputes_the_chair_table_and_names_an_edited_digit(chair_report: tuple[Path, str, str, Path], tmp_path: Path) -> None:
    run, _, md, _ = chair_report
    written = tmp_path / "paper.md"
    written.write_text(md, encoding="utf-8")
    ok = runner.invoke(app, ["check", str(written), "--runs", str(run)])
    assert ok.exit_code == 0, ok.output
    assert "checked 1 table (12 cells)" in ok.output
    lines = md.split("\n")
    index = next(k for k, line in enumerate(lines) if line.startswith("| chair@singularize"))
    cells = lines[index].split(" | ")
    value = cells[2].split(" ")[0]  # CHAIR_s, e.g. 41.7
    last = value[-1]
    cells[2] = cells[2].replace(value, value[:-1] + ("1" if last != "1" else "2"), 1)
    lines[index] = " | ".join(cells)
    written.write_text("\n".join(lines), encoding="utf-8")
    bad = runner.invoke(app, ["check", str(written), "--runs", str(run)])
    assert bad.exit_code == 1, bad.output
    assert f"{written}:{index + 1}: differs: chair@singularize / CHAIR_s" in bad.output


def test_check_of_the_latex_table_the_chair_verb_writes(tmp_path: Path) -> None:
    run = _caption_run(tmp_path, "captions", n=12)
    out = tmp_path / "scores"
    assert runner.invoke(app, ["chair", str(run), "--out", str(out), "--bootstrap", "30"]).exit_code == 0
    ok = runner.invoke(app, ["check", str(out / "chair_table.tex"), str(out / "chair_report.md"), "--runs", str(run)])
    assert ok.exit_code == 0, ok.output
    samples = run / "samples.jsonl"
    samples.write_text(samples.read_text().replace("a cat on a couch", "a cat on a bed"))
    changed = runner.invoke(app, ["check", str(out / "chair_table.tex"), "--runs", str(run)])
    assert changed.exit_code == 1 and "run-changed" in changed.output


@pytest.mark.slow
def test_chair_page_renders_in_headless_chromium(chair_report: tuple[Path, str, str, Path], tmp_path: Path) -> None:
    binary = next((found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None)
    if binary is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install -y chromium)")
    _, _, _, page = chair_report
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
             "--virtual-time-budget=2000", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    assert '<section id="run">' in rendered and '<section id="chair">' in rendered
    assert rendered.count("<svg") == 1 and "chair@lemmatizer" in rendered and "chair@singularize" in rendered


def test_a_malformed_chair_comment_is_one_line_naming_its_line(chair_report: tuple[Path, str, str, Path], tmp_path: Path) -> None:
    run, _, md, _ = chair_report
    lines = md.split("\n")
    index = next(k for k, line in enumerate(lines) if "halluprobe-chair-provenance" in line)
    for old, new, expected in (
        ('"resamples": 50', '"resamples": 1000000000', "bootstrap resamples 1000000000 is out of bounds"),
        ('"families": ["chair@lemmatizer", "chair@singularize"]', '"families": ["chair@other"]', "'families' must list"),
        ('{"table": "chair"', '{"table": "chair", "x": [1', "is not JSON"),
    ):
        edited = lines.copy()
        edited[index] = edited[index].replace(old, new)
        assert edited[index] != lines[index]
        paper = tmp_path / "paper.md"
        paper.write_text("\n".join(edited), encoding="utf-8")
        result = runner.invoke(app, ["check", str(paper), "--runs", str(run)])
        assert result.exit_code == 2, result.output
        assert result.output.strip().count("\n") == 0 and f"{paper}:{index + 1}" in result.output and expected in result.output


def test_check_of_a_caption_file_table_scored_on_object_lines(tmp_path: Path) -> None:
    """The source a caption file (sha256 and format recorded), the ground truth object lines
    (located and checked by sha256): recomputed; an edited ground truth is named."""
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(json.dumps({"image_id": i, "caption": c}) + "\n" for i, c in ((1, "a dog and a cat"), (2, "a bus"), (3, "two ties"))))
    objects = tmp_path / "objects.jsonl"
    objects.write_text("".join(json.dumps({"image_id": i, "objects": o}) + "\n" for i, o in ((1, ["dog"]), (2, ["bus"]), (3, ["tie"]))))
    out = tmp_path / "scores"
    made = runner.invoke(app, ["chair", str(captions), "--format", "opera", "--ground-truth", str(objects), "--out", str(out), "--bootstrap", "40"])
    assert made.exit_code == 0, made.output
    md = (out / "chair_report.md").read_text()
    assert '"format": "opera"' in md and '"source": "objects"' in md
    ok = runner.invoke(app, ["check", str(out / "chair_report.md"), str(out / "chair_table.tex")])
    assert ok.exit_code == 0, ok.output
    assert "checked 2 tables (24 cells)" in ok.output
    objects.write_text(objects.read_text().replace('["tie"]', '["person"]'))
    changed = runner.invoke(app, ["check", str(out / "chair_table.tex")])
    assert changed.exit_code == 1 and "file-changed" in changed.output and str(objects) in changed.output
