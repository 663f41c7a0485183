"""`halluprobe literature`: the packaged registry, list and audit offline on a LLaVA-shaped mirror,
bad input, and the report's Published figures section (tests/_literature.py builds the files)."""

from __future__ import annotations

# ruff: noqa: F811  (toy_coco is a fixture imported from _literature, then requested by name)

import json
import re
from pathlib import Path

import pytest
from _literature import (
    COMMIT,
    POPE_COMMIT,
    POPE_REPO,
    REPO,
    literature_cache,  # noqa: F401 - fixture, used by every test below
    llava_entry,
    toy_coco,  # noqa: F401 - fixture
    write_registry,
)
from typer.testing import CliRunner

from halluprobe.benchmarks.datasets import DATASETS
from halluprobe.cli import app
from halluprobe.literature.registry import load_registry

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("literature_cache")  # every test: its own cache, no mirror
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def test_the_packaged_registry_is_pinned_data() -> None:
    registry = load_registry()
    names = {e.name for e in registry.entries}
    assert {"llava-1.5-13b", "cd-rethink-llava-1.5-7b-greedy", "cd-rethink-llava-1.5-7b-sample", "dashb-paligemma-3b"} <= names
    assert sum(n.startswith("marine-") for n in names) == 2
    for e in registry.entries:
        assert re.match(r"^[0-9a-f]{40}$", e.commit)
        assert all(HEX64.match(f.sha256) for _, f in e.files())
        # a dataset version halluprobe pins, or the fingerprint of the authors' own draw
        assert (e.dataset in DATASETS and e.version in DATASETS[e.dataset]) or e.fingerprint is not None
    from halluprobe.literature.audit import missing_capability

    assert [e.name for e in registry.entries if missing_capability(e) is not None] == []  # every entry auditable here
    assert {e.split for e in registry.entries if e.format == "marine"} == {"adversarial"}
    dashb = next(e for e in registry.entries if e.name == "dashb-paligemma-3b")
    assert any("NOT reproduced" in n for n in dashb.notes)  # the leaderboard row the file does not give
    board = [f for f in dashb.published if f.path == "benchmark.md"]
    assert {f.metric: f.value for f in board} == {"dashb_mean": 62.0, "dashb_tnr": 26.4, "dashb_tpr": 97.7}


def test_literature_list_runs_offline() -> None:
    result = runner.invoke(app, ["literature", "list"])
    assert result.exit_code == 0, result.output
    for name in ("llava-1.5-13b", "cd-rethink-llava-1.5-7b-sample", "marine-llava-1.5-7b-guidance-0.7", "dashb-paligemma-3b"):
        assert f"| {name} |" in result.output
    assert "| llava-1.5-13b |" in result.output and "auditable" in result.output
    as_json = runner.invoke(app, ["literature", "list", "--json"])
    assert json.loads(as_json.output)["schema_version"] == 1


def test_audit_all_recomputes_the_published_figure(tmp_path: Path, toy_coco: Path) -> None:
    entry, mean_f1 = llava_entry(toy_coco)
    published = round(100 * mean_f1, 1)
    entry["published"] = [
        {"metric": "f1_macro", "value": published, "scale": 100, "decimals": 1, "where": "MODEL_ZOO row | POPE", "path": "docs/MODEL_ZOO.md"},
        {"metric": "f1_macro", "value": published + 2.0, "scale": 100, "decimals": 1, "where": "a misquote", "path": "README.md"},
    ]
    other_rule = {**entry, "name": "other-rule", "parser": {"rule": "nosuchrule", "source": "elsewhere"}, "published": []}
    reg = write_registry(tmp_path, [entry, other_rule])
    out = tmp_path / "audit"
    result = runner.invoke(app, ["literature", "audit", "--all", "--out", str(out), "--registry", str(reg), "--resamples", "200"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "literature.json").read_text())
    llava = data["entries"][0]
    assert llava["status"] == "audited" and llava["answers"] == 24
    first, second = llava["figures"]
    assert first["authors"] == pytest.approx(100 * mean_f1) and first["equal"] is True
    assert second["equal"] is False and second["difference"] == pytest.approx(100 * mean_f1 - published - 2.0)
    lo, hi = first["ci"]
    assert lo <= first["authors"] <= hi
    # strict reads "I don't know" / "Not sure" as unknown (wrong here); LLaVA's rule as yes / no
    assert first["strict"] != first["authors"] and llava["rule_changes"] > 0
    # the labels are the pinned dataset the entry names, told by content fingerprint
    assert llava["questions_are"] == {s: [f"coco-toy@toy:coco_pope_{s}.json"] for s in ("random", "popular", "adversarial")}
    md = (out / "literature.md").read_text()
    assert md.startswith("<!-- halluprobe literature audit: halluprobe=")
    assert "| equal |" in md and "differs by" in md and "MODEL_ZOO row \\| POPE" in md
    assert "parser confound: text:pope and text:strict classify" in md
    # an entry this build cannot parse is listed with why, not given a number
    assert data["entries"][1]["status"] == "not audited: needs the text rule text:nosuchrule, not in this build"
    assert "| other-rule | - | - | not audited: needs the text rule text:nosuchrule" in md
    # the files were fetched into OUT, pinned; a second audit refuses to replace the first
    assert (out / "llava-toy" / "files" / "questions" / "llava_pope_test.jsonl").is_file()
    again = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(out), "--registry", str(reg)])
    assert again.exit_code == 2 and "--overwrite" in again.output
    forced = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(out), "--registry", str(reg), "--overwrite", "--resamples", "50"])
    assert forced.exit_code == 0, forced.output


def test_audit_bad_input_is_exit_2_one_line(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    # labels that are not the dataset version the entry names: refused, naming the file
    other = write_registry(tmp_path, [{**entry, "dataset": "coco", "version": "2023-08-10"}])
    wrong = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "w"), "--registry", str(other)])
    assert wrong.exit_code == 2 and wrong.output.count("\n") == 1
    assert "labels match no fingerprint of coco@2023-08-10 (they are: coco-toy@toy:coco_pope_" in wrong.output
    # an own draw pinned by fingerprint: questions with another fingerprint are refused
    own = write_registry(tmp_path, [{**entry, "dataset": "coco", "version": None, "fingerprint": "0" * 64}])
    drift = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "d"), "--registry", str(own)])
    assert drift.exit_code == 2 and drift.output.count("\n") == 1 and "match no fingerprint the registry pins" in drift.output
    from halluprobe.benchmarks.fingerprint import content_fingerprint
    from halluprobe.benchmarks.question_file import read_questions

    fp = content_fingerprint(read_questions(toy_coco / POPE_REPO / POPE_COMMIT / "output/coco/coco_pope_random.json"))
    pinned = write_registry(tmp_path, [{**entry, "dataset": "coco", "version": None, "fingerprint": fp}])
    fits = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "f"), "--registry", str(pinned), "--resamples", "20"])
    assert fits.exit_code == 0, fits.output
    entry["answers"][0]["sha256"] = "a" * 64  # the registry and the file disagree
    reg = write_registry(tmp_path, [entry])
    one = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "a"), "--registry", str(reg)])
    assert one.exit_code == 2
    assert one.output.count("\n") == 1 and "sha256 mismatch" in one.output and "llava-v1.5-13b.jsonl" in one.output
    # --all goes on past a failed entry, but when no entry could be audited it is a failure, no table (issue 32)
    every = runner.invoke(app, ["literature", "audit", "--all", "--out", str(tmp_path / "b"), "--registry", str(reg)])
    assert every.exit_code == 2 and "no entry could be audited" in every.output and "sha256 mismatch" in every.output
    assert not (tmp_path / "b").exists()
    unknown = runner.invoke(app, ["literature", "audit", "nope", "--out", str(tmp_path / "c"), "--registry", str(reg)])
    assert unknown.exit_code == 2 and "no registry entry 'nope'" in unknown.output
    neither = runner.invoke(app, ["literature", "audit", "--out", str(tmp_path / "c")])
    assert neither.exit_code == 2 and "NAME or --all" in neither.output
    broken = write_registry(tmp_path, [{**entry, "published": [{"metric": "auc", "value": 1, "scale": 1, "decimals": 1, "where": "x", "path": "y"}]}])
    bad = runner.invoke(app, ["literature", "list", "--registry", str(broken)])
    assert bad.exit_code == 2 and "unknown metric 'auc'" in bad.output and str(broken) in bad.output


def test_report_of_a_registered_answers_file_has_its_published_figures(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`report` on a run imported from a pinned answers file (matched by the answers' sha256)
    adds the section: the figure, the authors' rule it needs, this run's value; others get none."""
    import halluprobe.literature.registry as registry_module

    entry, mean_f1 = llava_entry(toy_coco)
    published = round(100 * mean_f1, 1) + 0.4  # a misquote: the section must say by how much
    entry["published"] = [{"metric": "f1_macro", "value": published, "scale": 100, "decimals": 1, "where": "MODEL_ZOO row", "path": "docs/MODEL_ZOO.md"}]
    reg = write_registry(tmp_path, [entry])
    out = tmp_path / "audit"
    assert runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(out), "--registry", str(reg), "--resamples", "50"]).exit_code == 0
    loaded = registry_module.load_registry(reg)
    from halluprobe.report import literature as report_literature, parsers as report_parsers

    for where in (report_parsers, report_literature):  # the modules that call it
        monkeypatch.setattr(where, "load_registry", lambda path=None: loaded)
    page = tmp_path / "report" / "r.html"
    result = runner.invoke(app, ["report", str(out / "llava-toy" / "run"), "--out", str(page), "--resamples", "50"])
    assert result.exit_code == 0, result.output
    md, html = page.with_suffix(".md").read_text(), page.read_text()
    assert "## Published figures" in md and "is the released answers file of `llava-toy`" in md
    assert "need the authors' parser `text:pope` with unreadable answers counted `wrong`" in md
    assert f"| f1_macro | MODEL_ZOO row | {published:.1f} | {100 * mean_f1:.2f} | differs by {100 * mean_f1 - published:+.2f} |" in md
    assert '<section id="literature">' in html and '<a href="#literature">Published figures</a>' in html
    assert html.index('<section id="literature">') < html.index("<footer>")
    # a run that is no registered file: no section
    other = tmp_path / "other"
    answers = toy_coco / REPO / COMMIT / entry["answers"][0]["path"]
    edited = answers.read_text().replace('"text": "Yes"', '"text": "yes"', 1)
    (tmp_path / "edited.jsonl").write_text(edited)
    labels = [str(toy_coco / POPE_REPO / POPE_COMMIT / f["path"]) for f in entry["labels"]]
    imported = runner.invoke(app, ["import", "llava", str(tmp_path / "edited.jsonl"), "--questions", str(toy_coco / REPO / COMMIT / entry["questions"]["path"]),
                                   *[a for p in labels for a in ("--labels", p)], "--out", str(other)])  # fmt: skip
    assert imported.exit_code == 0, imported.output
    plain = tmp_path / "report" / "plain.html"
    assert runner.invoke(app, ["report", str(other), "--out", str(plain), "--resamples", "50"]).exit_code == 0
    assert "Published figures" not in plain.read_text() and "Published figures" not in plain.with_suffix(".md").read_text()
