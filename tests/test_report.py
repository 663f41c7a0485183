"""The report: one self-contained HTML page plus a Markdown twin, from real scripted-backend runs.

The runs are small but real (the runner, the readouts, the audit): 3 POPE-style splits over 24
images, a missed object, hallucinated objects, an unreadable image and two images whose
first-token argmax is neither yes nor no. The slow test opens the page in headless chromium.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.audit import audit_run, compare_runs
from halluprobe.records_audit import AuditReport
from halluprobe.rundir import RunDir
from halluprobe.cli import app
from halluprobe.report.page import render_report
from halluprobe.report.view import SECTIONS
from halluprobe.formatting import fmt_count, fmt_pct

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

OBJECTS = ["person", "chair", "car", "cup", "bottle", "dog", "cat", "umbrella", "bench", "bird"]
SPLITS = ("random", "popular", "adversarial")
SECTION_IDS = [sid for sid, _ in SECTIONS]
# sections that carry one figure per run
FIGURE_SECTIONS = ("readouts", "confusion", "convergence", "p-yes", "calibration", "profile", "tokens")
SVG_NS = "{http://www.w3.org/2000/svg}"


def _make_world(root: Path, n_images: int = 24) -> dict[str, Any]:
    """Images, three POPE split files (positive then negative, 6 questions per image), two scripts."""
    rng = random.Random(0)
    images = root / "images"
    images.mkdir()
    present: dict[str, list[str]] = {}
    for i in range(n_images):
        name = f"img{i}.png"
        Image.new("RGB", (8, 8), (i * 10 % 255, 40, 90)).save(images / name)
        present[name] = rng.sample(OBJECTS, 3)
    bench = root / "bench"
    bench.mkdir()
    files = []
    for split in SPLITS:
        lines, qid = [], 1
        for name, objs in present.items():
            absent = rng.sample([o for o in OBJECTS if o not in objs], 3)
            for pos, neg in zip(objs, absent):  # POPE's order: a positive, then a negative
                for obj, label in ((pos, "yes"), (neg, "no")):
                    text = f"Is there a{'n' if obj[0] in 'aeiou' else ''} {obj} in the image?"
                    lines.append(json.dumps({"question_id": qid, "image": name, "text": text, "label": label}))
                    qid += 1
        path = bench / f"toy_pope_{split}.json"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    scripts = []
    for k, scale in enumerate((1.0, 0.4)):
        seen = {name: objs[:2] if i % 4 == 0 else objs for i, (name, objs) in enumerate(present.items())}  # some misses
        script = {
            "present": seen,
            "hallucinate": {"person": 0.6 * scale, "chair": 0.4 * scale, "car": 0.3 * scale, "cup": 0.2 * scale},
            "errors": ["img3.png"],
            "offset": {"img5.png": "▁Maybe", "img7.png": "."},
            "seed": k,
        }
        path = root / f"model_{'ab'[k]}.json"
        path.write_text(json.dumps(script))
        scripts.append(path)
    return {"images": images, "files": files, "scripts": scripts}


def _run(world: dict[str, Any], script: Path, out: Path) -> Path:
    args = ["run", "--backend", "scripted", "--model", str(script), "--images", str(world["images"]), "--out", str(out)]
    for f in world["files"]:
        args += ["--benchmark", str(f)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("report_world")
    world = _make_world(root)
    return [_run(world, script, root / f"run_{script.stem}") for script in world["scripts"]]


@pytest.fixture(scope="module")
def audits(runs: list[Path]) -> list[dict[str, Any]]:
    return [audit_run(r, n_resamples=100, seed=0) for r in runs]


@pytest.fixture(scope="module")
def single(runs: list[Path], audits: list[AuditReport], tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    out = tmp_path_factory.mktemp("single") / "report.html"
    html, md = render_report(runs[:1], out, audits=audits[:1])
    assert (html, md) == (out, out.with_suffix(".md"))
    return html.read_text(encoding="utf-8"), md.read_text(encoding="utf-8"), html


@pytest.fixture(scope="module")
def board(runs: list[Path], audits: list[AuditReport], tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    out = tmp_path_factory.mktemp("board") / "board.html"
    comparison = compare_runs(runs, n_resamples=100, seed=0)
    html, md = render_report(runs, out, audits=audits, comparison=comparison)
    return html.read_text(encoding="utf-8"), md.read_text(encoding="utf-8"), html


class _Collect(HTMLParser):
    """Attributes that could make the browser fetch something, every id, and section ids."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []
        self.ids: list[str] = []
        self.sections: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if value is None:
                continue
            if name in ("src", "href", "xlink:href", "srcset", "action", "poster", "data") or name.endswith(":href"):
                self.links.append((tag, name, value))
            if name == "id":
                self.ids.append(value)
                if tag == "section":
                    self.sections.append(value)


def _parse(html: str) -> _Collect:
    parser = _Collect()
    parser.feed(html)
    return parser


def _section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}">')
    return html[start : html.index("</section>", start)]


# -- the page ----------------------------------------------------------------------------


def test_page_is_self_contained(single: tuple[str, str, Path]) -> None:
    html, _, _ = single
    parsed = _parse(html)
    external = [link for link in parsed.links if not link[2].startswith(("#", "data:"))]
    assert external == [], f"the page references something outside itself: {external[:5]}"
    assert not {"script", "link", "iframe", "img", "object", "embed"} & parsed.tags
    for needle in ("@import", "@font-face", "url(http", "url(//"):
        assert needle not in html
    # matplotlib's metadata (with its URLs) is stripped; namespaces are not fetched, but any other
    # http(s) URL outside text would be
    no_ns = re.sub(r'xmlns(:\w+)?="[^"]*"', "", html)
    assert not re.search(r'=\s*"(https?:)?//', no_ns)


def test_every_section_and_figure_is_present(single: tuple[str, str, Path], audits: list[AuditReport]) -> None:
    html, _, _ = single
    parsed = _parse(html)
    assert parsed.sections[: len(SECTION_IDS)] == SECTION_IDS  # in page order
    for sid in FIGURE_SECTIONS:
        body = _section(html, sid)
        assert body.count("<svg") == 1, sid
        assert f'data-figure="{sid}"' in body
    assert html.count("<svg") == len(FIGURE_SECTIONS)
    # ids unique across the page: several inline SVGs must not share clip-path or glyph ids
    assert len(parsed.ids) == len(set(parsed.ids))
    # the run header: model, token pieces with ids, the exact prompt, versions
    run = _section(html, "run")
    audit = audits[0]
    assert audit.run.model in run and audit.run.token_sets is not None
    for piece_id, piece in zip(audit.run.token_sets.yes_ids, audit.run.token_sets.yes_pieces):
        assert f"<code>{piece!r}</code><sub>{piece_id}</sub>".replace("'", "&#39;") in run
    assert "USER: &lt;image&gt;" in run and "halluprobe" in run
    assert audit.run.errors == 18 and "18 errors" in run  # img3.png: 6 questions in each of 3 splits


def test_headline_table_carries_counts_and_cis(single: tuple[str, str, Path], audits: list[AuditReport]) -> None:
    html, _, _ = single
    table = _section(html, "headline")
    head = audits[0].readouts["dynamic"]
    for split in SPLITS:
        m = head.splits[split]
        row = table[table.index(f"<td class=\"l\">{split}</td>") :]
        row = row[: row.index("</tr>")]
        for count in (m.n, m.tp, m.fp, m.tn, m.fn):
            assert f">{fmt_count(count)}<" in row, split
        ci = m.ci["f1"]
        assert ci is not None and fmt_pct(m.f1) in row and f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" in row
    assert f"{fmt_pct(head.macro.f1)}</span>" in table[table.index('class="macro"') :]
    # numbers are right-aligned tabular figures
    assert "tabular-nums" in html and 'class="num"' in table


def test_readout_comparison_shows_deltas_and_p_values(single: tuple[str, str, Path], audits: list[AuditReport]) -> None:
    html, markdown, _ = single
    table = _section(html, "readouts")
    audit = audits[0]
    for name in audit.readouts:
        assert f"<code>{name}</code>" in table
    exact = audit.paired["text:exact"]  # "Yes." is no exact match: every answer unknown
    assert exact.c > 0 and exact.mcnemar_p < 0.001
    # c counts questions only the headline got right: both captions must say so
    assert "b / c = questions only this readout / only the headline got right" in table
    assert "b / c = questions only this readout / only the headline got right" in markdown
    assert f"{fmt_count(exact.b)} / {fmt_count(exact.c)}" in table and "&lt;0.001" in table
    assert "\u2212" in table  # a negative delta, with a real minus sign
    # invalid legacy ids on this vocabulary: shown, flagged, never the headline
    assert "<sup>†</sup>" in table and 'class=" forced"' in table


def test_plots_are_valid_svg(single: tuple[str, str, Path]) -> None:
    html, _, _ = single
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.DOTALL)
    assert len(svgs) == len(FIGURE_SECTIONS)
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed XML
        assert root.tag == f"{SVG_NS}svg"
        assert root.get("viewBox") and root.get("role") == "img" and root.get("aria-label")
        paths = root.findall(f".//{SVG_NS}path")
        assert len(paths) > 20  # axes, data and (text as glyph paths)
        assert root.find(f".//{SVG_NS}metadata") is None


def test_markdown_twin_has_headline_table_and_readout_comparison(single: tuple[str, str, Path], audits: list[AuditReport]) -> None:
    _, md, html_path = single
    audit = audits[0]
    assert md.startswith("# halluprobe report: ")
    assert f"]({html_path.name})" in md  # points at its HTML for the figures
    headline = md[md.index("## 2. Headline metrics") : md.index("## 3.")]
    assert "| split | n | TP | FP | TN | FN | unk | err | acc | prec | rec | F1 | yes | HTR | AUROC | ECE |" in headline
    for split in (*SPLITS, "pooled", "**macro**"):
        assert re.search(rf"^\| {re.escape(split)} \| ", headline, flags=re.MULTILINE), split
    macro = audit.readouts["dynamic"].macro
    ci = macro.ci["f1"]
    assert ci is not None and f"{fmt_pct(macro.f1)} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" in headline
    readouts = md[md.index("## 3. Readout comparison") : md.index("## 4.")]
    for name, entry in audit.paired.items():
        line = next(line for line in readouts.splitlines() if line.startswith(f"| `{name}`"))
        assert f"{fmt_count(entry.b)} / {fmt_count(entry.c)}" in line
    assert "| `dynamic` (headline) |" in readouts
    for title in ("Confusion matrices", "Convergence", "Calibration", "Hallucination profile", "Token diagnostic"):
        assert f". {title}\n" in md


def test_leaderboard_puts_runs_side_by_side(board: tuple[str, str, Path], runs: list[Path]) -> None:
    html, md, _ = board
    parsed = _parse(html)
    assert parsed.sections[: len(SECTION_IDS) + 1] == ["leaderboard", *SECTION_IDS]
    assert len(parsed.ids) == len(set(parsed.ids))
    assert html.count("<svg") == 1 + len(runs) * len(FIGURE_SECTIONS)
    for sid in FIGURE_SECTIONS:
        body = _section(html, sid)
        assert body.count("<svg") == len(runs) and 'style="--n: 2"' in body, sid
    body = _section(html, "leaderboard").split("<tbody>")[1]
    # ranked by macro F1: model_b hallucinates less and comes first; model_a is the reference
    assert body.index("model_b") < body.index("model_a") and "reference" in body
    assert "## 1. Leaderboard" in md and "| 1 | 2. model_b" in md


def test_report_renders_without_p_yes_or_first_tokens(runs: list[Path], audits: list[AuditReport], tmp_path: Path) -> None:
    """A text-only audit (no logit readout) still renders every section, saying what is missing."""
    audit = audits[0].model_copy(update={"p_yes": {}, "calibration": {}, "greedy": {}, "first_pieces": [], "offset_pieces": []})
    html_path, md_path = render_report([], tmp_path / "r.html", audits=[audit])
    html = html_path.read_text()
    assert _parse(html).sections[: len(SECTION_IDS)] == SECTION_IDS
    assert "No figure: no logit readout stored p(yes)" in _section(html, "p-yes")
    assert "No figure: no first tokens stored" in _section(html, "tokens")
    assert "No logit readout stored p(yes)." in md_path.read_text()


def test_relabel_section_shows_the_shift(runs: list[Path], tmp_path: Path) -> None:
    """Scored against a relabelled split (RePOPE-style: some labels flipped, one question gone)."""
    header = json.loads((runs[0] / "run.json").read_text())
    lines = Path(header["benchmark_paths"]["random"]).read_text().splitlines()
    relabelled = []
    for i, line in enumerate(lines[1:]):  # question 1 removed
        q = json.loads(line)
        if i % 9 == 0:
            q["label"] = "no" if q["label"] == "yes" else "yes"
        relabelled.append(json.dumps(q))
    labels = tmp_path / "toy_repope_random.json"
    labels.write_text("\n".join(relabelled) + "\n")
    audit = audit_run(runs[0], labels=[labels], n_resamples=20)
    entry = audit.relabel[str(labels)]
    assert entry.removed == 1 and entry.flipped == 16
    html_path, md_path = render_report(runs[:1], tmp_path / "r.html", audits=[audit])
    html = html_path.read_text()
    body = _section(html, "relabel")
    assert f"<code>{labels}</code>" in body and ">16<" in body
    shift = entry.shift["dynamic"].macro["f1"]
    assert shift is not None and shift < 0 and f"\u2212{abs(100 * shift):.1f}" in body
    md = md_path.read_text()
    assert ". Labels\n" in md and f"| `{labels}` | " in md


def test_render_report_audits_when_not_given(runs: list[Path], tmp_path: Path) -> None:
    html_path, md_path = render_report(runs[:1], tmp_path / "sub" / "auto.html", n_resamples=20)
    assert html_path.exists() and md_path.name == "auto.md"
    assert "20 resamples" in html_path.read_text()
    with pytest.raises(ValueError):
        render_report(runs, tmp_path / "x.html", audits=[{}])


def _same_ids(html: str) -> str:
    return re.sub(r"\bhp\d+-", "hp-", html)


def test_report_from_a_stored_audit_json_equals_the_fresh_one(
    runs: list[Path], audits: list[AuditReport], single: tuple[str, str, Path], tmp_path: Path
) -> None:
    """The typed record read back from RUNDIR/audit.json (or its plain JSON object) renders the
    same page as the audit it was written from."""
    html, md, _ = single
    rundir = RunDir(runs[0])
    rundir.write_audit(audits[0])
    html_path, md_path = render_report(runs[:1], tmp_path / "report.html", audits=[rundir.read_audit()])
    # figure ids are numbered per process (unique in a page), the rest is the same bytes
    assert _same_ids(html_path.read_text(encoding="utf-8")) == _same_ids(html) and md_path.read_text(encoding="utf-8") == md
    plain = json.loads(rundir.audit_path.read_text(encoding="utf-8"))
    _, md_path = render_report(runs[:1], tmp_path / "again" / "report.html", audits=[plain])
    assert md_path.read_text(encoding="utf-8") == md
    with pytest.raises(ValueError, match="run"):  # a JSON object that is no audit
        render_report(runs[:1], tmp_path / "x.html", audits=[{"headline": "dynamic"}])


def test_importing_the_report_package_imports_neither_matplotlib_nor_jinja2() -> None:
    code = "import sys, halluprobe.report, halluprobe.report.plots, halluprobe.report.markdown; " \
        "print(sorted(m for m in ('matplotlib', 'jinja2') if m in sys.modules))"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- in a real browser ----------------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _browser(binary: str, page: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:  # a fresh profile: nothing cached, nothing synced
        return subprocess.run(
            [
                binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", f"--user-data-dir={profile}", *args, page.resolve().as_uri(),
            ],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("which", ["single", "board"])
def test_report_renders_in_headless_chromium(which: str, request: pytest.FixtureRequest, runs: list[Path], tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install -y chromium)")
    _, _, page = request.getfixturevalue(which)
    n_runs = 1 if which == "single" else len(runs)

    dom = _browser(binary, page, "--dump-dom", "--virtual-time-budget=2000")
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    for sid in SECTION_IDS:
        assert f'<section id="{sid}">' in rendered, sid
    assert rendered.count("<svg") == len(FIGURE_SECTIONS) * n_runs + (n_runs > 1)
    assert rendered.count('class="fig') >= len(FIGURE_SECTIONS)

    shot = tmp_path / "shot.png"
    result = _browser(binary, page, f"--screenshot={shot}", "--window-size=1280,4000")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a page of tables and figures, not an empty frame
    with Image.open(shot) as image:
        gray = np.asarray(image.convert("L"), dtype=np.float64)
    assert gray.shape == (4000, 1280)
    dark = float((gray < 128).mean())
    assert gray.var() > 300, "screenshot is (nearly) blank"
    assert 0.005 < dark < 0.5, f"share of dark pixels {dark:.3f}: no text, or a black page"
    # the top of the page (title, run header) and further down (tables, figures) both have ink
    assert gray[:600].min() < 80 and gray[2000:3200].min() < 80


# -- a run imported from LLaVA's released answers (text only) ---------------------------------

LLAVA_SUFFIX = "\nAnswer the question using a single word or phrase."
LLAVA_ID_OFFSET = {"adversarial": 0, "random": 10_000_000, "popular": 20_000_000}
# POPE's three splits over the same images: present objects first, then absent ones
LLAVA_OBJECTS = {"random": ["person", "cup", "car", "zebra", "kite", "oven"],
                 "popular": ["person", "cup", "car", "chair", "dining table", "bottle"],
                 "adversarial": ["person", "cup", "car", "fork", "knife", "spoon"]}  # fmt: skip
LLAVA_ANSWERS = ["Yes", "No", "yes", "No, there is not.", "Yes.", "no", "There is a fork.", "I cannot tell"]
FORBIDDEN = ("invalid on this vocabulary", "none found", "same forward pass", "(unknown object)")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def imported_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``halluprobe import llava`` of a small LLaVA-format answers file with its question file
    and POPE labels files (which, like the published ones, have no object field)."""
    root = tmp_path_factory.mktemp("llava_import")
    labels_dir = root / "labels"
    labels_dir.mkdir()
    questions, answers = [], []
    for split, objects in LLAVA_OBJECTS.items():
        rows = []
        for img in range(8):
            for k, obj in enumerate(objects):
                qid = len(rows) + 1
                text = f"Is there a {obj} in the image?"
                rows.append({"question_id": qid, "image": f"COCO_val2014_{img:012d}.jpg", "text": text, "label": "yes" if k < 3 else "no"})
                llava_id = LLAVA_ID_OFFSET[split] + qid
                questions.append({"question_id": llava_id, "image": rows[-1]["image"], "text": text + LLAVA_SUFFIX, "category": split})
                answer = LLAVA_ANSWERS[(img * 7 + k * 3 + len(split)) % len(LLAVA_ANSWERS)]
                answers.append({"question_id": llava_id, "prompt": text + LLAVA_SUFFIX, "text": answer,
                                "answer_id": f"a{len(answers)}", "model_id": "llava-v1.5-13b", "metadata": {}})  # fmt: skip
        _write_jsonl(labels_dir / f"coco_pope_{split}.json", rows)
    answers_file = _write_jsonl(root / "llava-v1.5-13b.jsonl", answers)
    questions_file = _write_jsonl(root / "llava_pope_test.jsonl", questions)
    args = ["import", "llava", str(answers_file), "--questions", str(questions_file), "--out", str(root / "run")]
    for split in LLAVA_OBJECTS:
        args += ["--labels", str(labels_dir / f"coco_pope_{split}.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return root / "run"


@pytest.fixture(scope="module")
def imported_report(imported_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    out = tmp_path_factory.mktemp("imported_report") / "report.html"
    result = CliRunner().invoke(app, ["report", str(imported_run), "--resamples", "50", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "headline text:pope: the run's first text rule" in result.output  # said in one line
    return out.read_text(encoding="utf-8"), out.with_suffix(".md").read_text(encoding="utf-8"), out


def test_audit_of_an_imported_run_needs_no_headline(imported_run: Path) -> None:
    result = CliRunner().invoke(app, ["audit", str(imported_run), "--resamples", "20"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "the run's first text rule" in line]
    assert len(notes) == 1 and "headline text:pope" in notes[0]
    audit = RunDir(imported_run).read_audit()
    assert audit.headline == "text:pope" and "text:pope" not in audit.paired
    imported = audit.run.imported
    assert imported is not None and imported.format == "llava" and imported.tool == "LLaVA"
    assert [f.name for f in imported.files] == ["llava-v1.5-13b.jsonl", "llava_pope_test.jsonl"]
    assert all(len(f.sha256) == 64 for f in imported.files)
    # the objects come from the question text: every label-no question is profiled by its object
    absent = {o for objects in LLAVA_OBJECTS.values() for o in objects[3:]}
    profiled = {o.object for o in audit.hallucination_profile.objects}
    assert profiled <= absent and len(profiled) == min(len(absent), 20)
    assert all(p.positive in {"person", "cup", "car"} and p.negative in absent for p in audit.hallucination_profile.adversarial_pairs)
    # --headline still overrides; a model run's audit is unchanged (no note, no import record)
    other = CliRunner().invoke(app, ["audit", str(imported_run), "--resamples", "0", "--headline", "text:yorn", "--json"])
    assert other.exit_code == 0 and json.loads(other.stdout)["headline"] == "text:yorn"
    assert "headline_note" not in json.loads(other.stdout)


def test_a_model_run_audit_has_no_import_record(audits: list[AuditReport]) -> None:
    data = audits[0].to_json_dict()
    assert "imported" not in data["run"] and "headline_note" not in data and audits[0].headline == "dynamic"


def _section_texts(html: str) -> dict[str, str]:
    """Each section's visible text, without its heading."""
    out = {}
    for sid in _parse(html).sections:
        body = re.sub(r"<h2>.*?</h2>", "", _section(html, sid), flags=re.S)
        out[sid] = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)).strip()
    return out


def test_report_of_an_imported_run_says_what_it_is(imported_report: tuple[str, str, Path]) -> None:
    html, md, _ = imported_report
    for text in (html, md):
        for phrase in FORBIDDEN:
            assert phrase not in text, phrase
    parsed = _parse(html)
    # the sections that read logits are left out of the contents and the page; COCO-named images get "Training images"
    assert parsed.sections == ["run", "headline", "readouts", "confusion", "convergence", "profile", "parsers", "training-images"]
    nav = html[html.index('<nav class="toc"') : html.index("</nav>")]
    assert re.findall(r'href="#([\w-]+)"', nav) == parsed.sections
    for sid, text in _section_texts(html).items():  # no empty section, no "No figure"
        assert len(text) > 40 and "No figure" not in text, sid
    run = _section(html, "run")
    assert "llava-v1.5-13b.jsonl" in run and "format llava" in run and "written by LLaVA" in run
    assert "text only" in run and "Scored by" in run
    for absent in ("Tokenizer", "Yes set", "No set", "Legacy ids", "Software"):
        assert f"<th>{absent}</th>" not in run, absent
    assert "headline text:pope" in html.split("</header>")[0]
    assert "stored answer text" in _section(html, "readouts") and "Agreement between readouts" in _section(html, "readouts")
    # the Markdown twin: the same sections, numbered without gaps
    assert re.findall(r"^## \d+\. (.+)$", md, flags=re.M) == [
        "Run", "Headline metrics", "Readout comparison", "Confusion matrices", "Convergence", "Hallucination profile", "Parsers",
    ]
    assert "| Imported from | `llava-v1.5-13b.jsonl` (sha256 `" in md and "| Tokenizer |" not in md
    assert "p(yes)" not in md.split("## 3.")[1]  # no sentence that needs logits after the headline table


def _rule_counts(run: Path, rule: str) -> tuple[int, int, int]:
    """(yes, no, unknown) of ``rule`` on the run's stored text, from score's own per-split counts."""
    data = json.loads(CliRunner().invoke(app, ["score", str(run), "--readout", f"text:{rule}", "--resamples", "0", "--json"]).stdout)
    splits = data["splits"].values()
    yes = sum(m["tp"] + m["fp"] for m in splits)
    unknown = sum(m["unknown"] for m in splits)
    return yes, sum(m["n"] for m in splits) - yes - unknown, unknown


def test_parsers_section_counts_every_rule_and_names_no_registry_entry(imported_report: tuple[str, str, Path], imported_run: Path) -> None:
    html, md, _ = imported_report
    section = md[md.index(". Parsers\n") :]
    assert "in no literature registry entry" in section and "in no literature registry entry" in _section(html, "parsers")
    for rule in ("pope", "vcd", "exact"):
        yes, no, unknown = _rule_counts(imported_run, rule)
        assert f"| `text:{rule}` | {yes} | {no} | {unknown} |" in section, rule


def test_parsers_section_names_the_rule_a_published_number_needs(
    imported_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An imported file that is a registry entry's answers file: the entry's parser is named."""
    from halluprobe.literature import registry

    audit = audit_run(imported_run, n_resamples=0)
    answers = audit.run.imported.files[0]  # type: ignore[union-attr]
    entry = {
        "name": "llava-v1.5-13b-fixture", "model": "LLaVA-1.5-13B", "decoding": "greedy", "repository": "haotian-liu/LLaVA",
        "commit": "32cebc3809441cc40d8ac7b2855d148308741f2a", "format": "llava",
        "answers": [{"path": "playground/data/eval/pope/answers/llava-v1.5-13b.jsonl", "sha256": answers.sha256}],
        "dataset": "coco", "parser": {"rule": "text:pope", "source": "LLaVA eval_pope.py"},
        "published": [{"metric": "f1", "value": 85.9, "scale": 100, "decimals": 1, "where": "README.md", "path": "README.md"}],
    }  # fmt: skip
    fixture = tmp_path / "registry.json"
    fixture.write_text(json.dumps({"schema_version": 1, "entries": [entry]}))
    real = registry.load_registry
    from halluprobe.report import literature as report_literature, parsers as report_parsers

    for where in (report_parsers, report_literature):  # the modules that call it
        monkeypatch.setattr(where, "load_registry", lambda path=None: real(fixture))
    html, md = render_report([imported_run], tmp_path / "report.html", n_resamples=0)
    text = md.read_text()
    assert "the registry entry `llava-v1.5-13b-fixture`: its published numbers (f1 85.9 (README.md)) need `text:pope`" in text
    assert "<code>llava-v1.5-13b-fixture</code>" in html.read_text()


@pytest.mark.slow
def test_imported_report_renders_in_headless_chromium(imported_report: tuple[str, str, Path], tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install -y chromium)")
    _, _, page = imported_report
    dom = _browser(binary, page, "--dump-dom", "--virtual-time-budget=2000")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for sid in ("run", "headline", "readouts", "confusion", "convergence", "profile"):
        assert f'<section id="{sid}">' in dom.stdout, sid
    assert '<section id="tokens">' not in dom.stdout and "llava-v1.5-13b.jsonl" in dom.stdout
    shot = tmp_path / "shot.png"
    result = _browser(binary, page, f"--screenshot={shot}", "--window-size=1280,3000")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    with Image.open(shot) as image:
        gray = np.asarray(image.convert("L"), dtype=np.float64)
    assert gray.shape == (3000, 1280) and gray.var() > 300, "screenshot is (nearly) blank"
    assert 0.005 < float((gray < 128).mean()) < 0.5
    assert gray[:600].min() < 80 and gray[1200:2400].min() < 80  # the run table and the figures below both have ink
