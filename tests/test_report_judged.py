"""``report --judgments``: the judged benchmarks' sections (MMHal-Bench) beside a demo-like run:
the numbers equal ``mmhal score --json``'s, the judge ledger is in the HTML and the Markdown,
two judges get their agreement; without --judgments nothing changes (test_frozen_outputs)."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest
from test_mmhal import REPLIES, _fixture, _judge, _judge_script
from test_report import _make_world, _run
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.formatting import format_ratio

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("judged")
    w = _make_world(root)
    run = _run(w, w["scripts"][0], root / "run")
    template, images, _ = _fixture(root)
    _judge(root, template, images, _judge_script(root, "judge_a.json", REPLIES), root / "judged_a")
    other = {**REPLIES, "ANSfour": "Rating: 2", "ANSnone": "Rating: 3"}
    _judge(root, template, images, _judge_script(root, "judge_b.json", other), root / "judged_b")
    return {"root": root, "run": run, "template": template, "a": root / "judged_a", "b": root / "judged_b"}


def _report(world: dict[str, Path], out: Path, *extra: str) -> tuple[str, str]:
    result = CliRunner().invoke(app, ["report", str(world["run"]), "--out", str(out), "--resamples", "200", *extra])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8"), out.with_suffix(".md").read_text(encoding="utf-8")


def _score(world: dict[str, Path], judged: Path, *extra: str) -> dict:
    result = CliRunner().invoke(app, ["mmhal", "score", "--template", str(world["template"]), "--judgments", str(judged),
                                      "--bootstrap", "200", "--json", *extra])  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_mmhal_section_carries_mmhal_scores_numbers_and_its_ledger(world: dict[str, Path], tmp_path: Path) -> None:
    page, md = _report(world, tmp_path / "r.html", "--judgments", str(world["a"]), "--mmhal-template", str(world["template"]))
    score = _score(world, world["a"])
    assert score["unparseable"] > 0
    average = format_ratio(score["average"], tuple(score["average_ci"]), digits=2, ci_digits=2)
    rate = format_ratio(score["hallucination_rate"], tuple(score["hallucination_rate_ci"]), digits=3, ci_digits=3)
    header = json.loads((world["a"] / "judge.json").read_text())
    for text in (page, md):
        assert "MMHal-Bench (judged)" in text
        assert f"average score {average}, hallucination rate {rate}" in text
        assert f"judge as configured: scripted:{header['model']}" in text
        assert "judge as served: not reported by the backend" in text
        assert header["template_sha256"] in text
        assert f"unparseable {score['unparseable']}, errors {score['errors']} of 96 (--unparseable zero)" in text
        for t in score["per_type"]:
            assert format_ratio(t["average"], tuple(t["average_ci"]), digits=2, ci_digits=2) in text
    assert '<a href="#judged-mmhal">' in page and '<section id="judged-mmhal">' in page


def test_the_policy_and_two_judges_agreement(world: dict[str, Path], tmp_path: Path) -> None:
    page, md = _report(world, tmp_path / "r.html", "--judgments", str(world["a"]), "--judgments", str(world["b"]),
                       "--mmhal-template", str(world["template"]), "--unparseable", "drop")  # fmt: skip
    for judged in ("a", "b"):
        score = _score(world, world[judged], "--unparseable", "drop")
        rate = format_ratio(score["hallucination_rate"], tuple(score["hallucination_rate_ci"]), digits=3, ci_digits=3)
        assert rate in page and rate in md
    agree = CliRunner().invoke(app, ["mmhal", "agree", "--template", str(world["template"]), "--a", str(world["a"]), "--b", str(world["b"]),
                                     "--bootstrap", "200", "--unparseable", "drop"])  # fmt: skip
    assert agree.exit_code == 0, agree.output
    line = next(x for x in agree.output.splitlines() if x.startswith("agreement"))
    counts = line.split(" items")[0].removeprefix("agreement ")
    diffs = [x.split("a-b ")[1] for x in agree.output.splitlines() if "a-b " in x]
    assert len(diffs) == 2
    for text in (html.unescape(page), md):
        assert "(--unparseable drop)" in text
        assert f"agreement {counts} items" in text
        assert line.split(", ")[1].split(" (")[0] in text  # Cohen's kappa
        for name, diff in zip(("average score", "hallucination rate"), diffs):
            assert f"{name}: a-b {diff}" in text


def test_without_judgments_the_page_is_unchanged(world: dict[str, Path], tmp_path: Path) -> None:
    page, md = _report(world, tmp_path / "plain.html")
    assert "judged-mmhal" not in page and "MMHal" not in md


def test_bad_judged_input_is_one_line(world: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    no_template = runner.invoke(app, ["report", str(world["run"]), "--out", str(tmp_path / "r.html"), "--judgments", str(world["a"])])
    assert no_template.exit_code == 2 and "--mmhal-template is required" in no_template.output
    assert not (tmp_path / "r.html").exists()
    stray = runner.invoke(app, ["report", str(world["run"]), "--out", str(tmp_path / "r.html"), "--unparseable", "drop"])
    assert stray.exit_code == 2 and "apply to --judgments" in stray.output
    broken = tmp_path / "broken"
    shutil.copytree(world["a"], broken)
    (broken / "judge.json").write_text("{}")
    bad = runner.invoke(app, ["report", str(world["run"]), "--out", str(tmp_path / "r.html"), "--judgments", str(broken),
                              "--mmhal-template", str(world["template"])])  # fmt: skip
    assert bad.exit_code == 2 and "judge.json" in bad.output and "Traceback" not in bad.output


def test_the_hallusionbench_section_carries_hallusion_scores_numbers(tmp_path: Path) -> None:
    import test_hallusion_judge as hj

    from halluprobe.report.hallusion_section import hallusion_cell

    qfile, images, run = hj._fixture(tmp_path)
    hj._judge(tmp_path, qfile, images, run, tmp_path / "j")
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--resamples", "50", "--judgments", str(tmp_path / "j"),
                                      "--judgments", str(tmp_path / "j")])  # fmt: skip
    assert result.exit_code == 0, result.output
    page, md = html.unescape(out.read_text(encoding="utf-8")), out.with_suffix(".md").read_text(encoding="utf-8")
    scored = CliRunner().invoke(app, ["hallusion", "score", str(run), "--judgments", str(tmp_path / "j"), "--json", "--resamples", "50"])
    assert scored.exit_code == 0, scored.output
    got = json.loads(scored.stdout)
    header = json.loads((tmp_path / "j" / "judge.json").read_text())
    for text in (page, md):
        assert "HallusionBench (judged)" in text and f"judge as configured: scripted:{header['model']}" in text
        assert header["template_sha256"] in text
        assert f"unparseable {got['unparseable']}, errors {got['errors']} of {got['n']} (scored as the official script does: unclear)" in text
        for sl in got["judged"]["slices"]:
            for field, ci in (("a_acc", "a_ci"), ("f_acc", "f_ci"), ("q_acc", "q_ci")):
                assert hallusion_cell(sl[field], tuple(sl[ci]) if sl[ci] else None) in text, (sl["name"], field)
        for d in got["disagreements"]:
            assert f"disagreement with {d['readout']}: verdict on {d['verdicts']} of {d['n']} questions, correctness on {d['correctness']}" in text
        assert f"agreement {got['n']}/{got['n']} questions" in text  # one judge twice: full agreement
    other = tmp_path / "other_run"  # other answers: the judgments are of none of the report's runs
    shutil.copytree(run, other)
    samples = other / "samples.jsonl"
    samples.write_text(samples.read_text().replace("ANSright", "ANSwrong", 1))
    refused = CliRunner().invoke(app, ["report", str(other), "--out", str(tmp_path / "o.html"), "--judgments", str(tmp_path / "j")])
    assert refused.exit_code == 2 and "none of this report's runs" in refused.output
