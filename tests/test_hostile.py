"""The verbs that write the user's files under hostile input (issue 25): nothing of the user's
replaced without --overwrite (and a run dir's own files never), nothing written outside --out, no
export of a run that does not pair, options that do not combine refused, and one line (exit 2)
for every bad input: never a traceback, never exit 0 with a wrong number. The readers' side is
test_hostile_inputs.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from _hostile import copy_run, imported, make_sheet, ok, refused, runner, scripted, snapshot  # noqa: F401 (imported, scripted: fixtures)
from halluprobe.cli import app
from test_imports import OFFSET, make_labels, make_llava
from test_pipeline import _make_world, _run_args


@pytest.fixture()
def sheet(tmp_path: Path) -> Path:
    return make_sheet(tmp_path)


def test_per_question_refuses_an_existing_file_and_never_a_run_file(imported: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text("my notes\n")
    score = ["score", str(imported), "--readout", "text:pope", "--resamples", "0"]
    refused([*score, "--per-question", str(mine)], "mine.jsonl", "--per-question exists", "--overwrite")
    assert mine.read_text() == "my notes\n"
    before = snapshot(imported)
    for name in ("samples.jsonl", "run.json", "manifest.json", "metrics.json"):
        refused([*score, "--per-question", str(imported / name), "--overwrite"], "would replace a file of the run dir")
    link = tmp_path / "link.jsonl"
    link.symlink_to(imported / "samples.jsonl")
    refused([*score, "--per-question", str(link), "--overwrite"], "would replace a file of the run dir")
    assert snapshot(imported) == before  # not even metrics.json was written: refused before scoring
    ok([*score, "--per-question", str(mine), "--overwrite"])
    assert len(mine.read_text().splitlines()) == len((imported / "samples.jsonl").read_text().splitlines())
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere" / "x.jsonl")
    refused([*score, "--per-question", str(dangling)], "symbolic link to nothing")
    refused([*score, "--per-question", str(tmp_path)], "must be a file, not a folder")


def test_import_out_must_be_new_or_empty_and_overwrite_clears_only_its_files(sheet: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "samples.jsonl").write_text('{"left": "over"}\n' * 3)
    (out / "manifest.json").write_text('{"mine": true}\n')
    (out / "notes.txt").write_text("keep me\n")
    before = snapshot(out)
    refused(["import", str(sheet), "--out", str(out)], "--out is not empty", "--overwrite")
    assert snapshot(out) == before
    ok(["import", str(sheet), "--out", str(out), "--overwrite"])
    rows = json.loads(sheet.read_text())
    samples = (out / "samples.jsonl").read_text().splitlines()
    assert len(samples) == sum(len(r["category"].split(",")) for r in rows)  # nothing appended to the leftover
    assert json.loads((out / "manifest.json").read_text())["format"] == "vlmevalkit"
    assert (out / "notes.txt").read_text() == "keep me\n"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    refused(["import", str(sheet), "--out", str(a_file)], "must be a folder, not a file")
    assert a_file.read_text() == "x"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    refused(["import", str(sheet), "--out", str(dangling), "--overwrite"], "symbolic link to nothing")
    assert not (tmp_path / "gone").exists()


def test_bad_input_leaves_an_existing_run_whole_even_with_overwrite(imported: Path, tmp_path: Path) -> None:
    before = snapshot(imported)
    bad = tmp_path / "bad_POPE.json"
    bad.write_text(json.dumps([{"index": 1, "question": "Is there a cat?", "answer": "Maybe", "category": "random", "prediction": "yes"}]))
    refused(["import", str(bad), "--out", str(imported), "--overwrite"], "'answer' must be Yes or No")
    assert snapshot(imported) == before


def test_export_out_must_be_new_or_empty_and_overwrite_replaces_only_its_files(imported: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    out.mkdir()
    (out / "random_answers.json").write_text("the user's own POPE answers\n")
    (out / "keep.txt").write_text("keep\n")
    refused(["export", str(imported), "--format", "pope", "--out", str(out)], "--out is not empty")
    assert (out / "random_answers.json").read_text() == "the user's own POPE answers\n"
    printed = ok(["export", str(imported), "--format", "pope", "--out", str(out), "--overwrite"])
    assert "question texts: the samples' prompts" in printed
    assert (out / "random_answers.json").read_text() != "the user's own POPE answers\n"
    assert (out / "keep.txt").read_text() == "keep\n"
    a_file = tmp_path / "f"
    a_file.write_text("x")
    refused(["export", str(imported), "--format", "pope", "--out", str(a_file)], "must be a folder, not a file")


def test_report_replaces_its_own_report_but_not_the_users_file(imported: Path, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text("<html>the user's page</html>")
    args = ["report", str(imported), "--headline", "text:pope", "--resamples", "0"]
    refused([*args, "--out", str(page)], "page.html", "--overwrite")
    assert page.read_text() == "<html>the user's page</html>"
    twin = tmp_path / "new.md"
    twin.write_text("my markdown\n")
    refused([*args, "--out", str(tmp_path / "new.html")], "new.md")
    assert not (tmp_path / "new.html").exists() and twin.read_text() == "my markdown\n"
    ours = tmp_path / "ours.html"
    ok([*args, "--out", str(ours)])
    ok([*args, "--out", str(ours)])  # a report halluprobe wrote is replaced without a word
    before = snapshot(imported)
    refused([*args, "--out", str(imported / "run.json"), "--overwrite"], "would replace a file of the run dir")
    assert snapshot(imported) == before


@pytest.mark.parametrize("split", ["../../escape", "/tmp/halluprobe-absolute-split", "..", "a\\b", "tab\there"])
def test_a_split_that_is_no_plain_name_is_refused_at_import(tmp_path: Path, split: str) -> None:
    rows = [{"index": 1, "question": "Is there a cat in the image?", "answer": "Yes", "category": split, "prediction": "yes"}]
    path = tmp_path / "m_POPE.json"
    path.write_text(json.dumps(rows))
    refused(["import", str(path), "--out", str(tmp_path / "run")], "split", "cannot name a file", "m_POPE.json")
    assert not (tmp_path / "run").exists()
    assert not Path("/tmp/halluprobe-absolute-split_answers.json").exists()


def test_a_hand_edited_split_is_refused_again_at_export(imported: Path, tmp_path: Path) -> None:
    samples = imported / "samples.jsonl"
    samples.write_text(samples.read_text().replace('"split":"random"', '"split":"../../outside"'))
    refused(["export", str(imported), "--format", "pope", "--out", str(tmp_path / "a" / "b" / "exp")], "cannot name a file")
    assert not (tmp_path / "outside_answers.json").exists() and not (tmp_path / "a").exists()


def test_export_refuses_a_run_missing_one_question_in_the_middle(scripted: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    run = copy_run(scripted[0], tmp_path / "run")
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    gone = json.loads(lines[10])
    (run / "samples.jsonl").write_text("".join(lines[:10] + lines[11:]))
    line = refused(["export", str(run), "--format", "pope", "--out", str(tmp_path / "exp")], "have no answer")
    assert f"question {gone['question_id']}" in line and f"{gone['split']} questions" in line
    assert not (tmp_path / "exp").exists()


def test_export_takes_question_texts_only_from_the_benchmark_run_json_names(scripted: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    run, world = scripted
    printed = ok(["export", str(run), "--format", "pope", "--out", str(tmp_path / "exp")])
    assert "random question texts: " + str(world["random"]) + " (sha256 as recorded in run.json)" in printed
    exported = [json.loads(l) for l in (tmp_path / "exp" / "random_answers.json").read_text().splitlines()]
    asked = [json.loads(l) for l in world["random"].read_text().splitlines()]
    assert [e["question"] for e in exported] == [q["text"] for q in asked]
    # the benchmark edited after the run: its texts are not used (they were never asked)
    copy = copy_run(run, tmp_path / "copy")
    original = world["random"].read_text()
    try:
        world["random"].write_text(original.replace("Is there", "Was there ever"))
        # its samples hold rendered prompts ("USER: <image>..."), never written as questions (issue 32)
        refused(["export", str(copy), "--format", "pope", "--out", str(tmp_path / "exp2")], "changed since the run", "rendered prompts")
        assert not (tmp_path / "exp2").exists()
        world["random"].rename(tmp_path / "moved.json")  # moved away: said, not exported from the prompts
        try:
            refused(["export", str(copy), "--format", "pope", "--out", str(tmp_path / "exp3")], "cannot be read", "rendered prompts")
        finally:
            (tmp_path / "moved.json").rename(world["random"])
        assert not (tmp_path / "exp3").exists()
    finally:
        world["random"].write_text(original)


def test_export_refuses_an_import_with_unanswered_labelled_questions(tmp_path: Path) -> None:
    """LLaVA-1.5's answers to 2,910 of the 3,000 random questions import (listed as unanswered),
    but their export would pair every later answer with another label."""
    splits = make_labels(tmp_path / "labels")
    answers, questions = make_llava(tmp_path, splits)
    kept = [l for l in answers.read_text().splitlines() if json.loads(l)["question_id"] != OFFSET["random"] + 3]
    answers.write_text("\n".join(kept) + "\n")
    labels = [a for s in splits for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    ok(["import", "llava", str(answers), "--questions", str(questions), *labels, "--out", str(tmp_path / "run")])
    refused(["export", str(tmp_path / "run"), "--format", "pope", "--out", str(tmp_path / "exp")], "1 of the 8 random questions have no answer")


def test_options_that_do_not_combine_are_refused(imported: Path, tmp_path: Path) -> None:
    per_question = tmp_path / "pq.jsonl"
    refused(["score", str(imported), "--readout", "text:pope", "--compat", "lmms-eval", "--per-question", str(per_question)], "--compat")
    assert not per_question.exists()
    labels = tmp_path / "alt.json"
    labels.write_text("{}\n")
    refused(["audit", str(imported), "--table", "--labels", str(labels)], "--table", "--labels")
    refused(["score", str(imported), "--readout", "text:pope", "--overwrite"], "--overwrite is for --per-question")
    result = runner.invoke(app, ["score", str(imported), "--seed", "-1"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_no_verb_wrote_outside_its_out(tmp_path: Path, sheet: Path) -> None:
    """A whole import, score, export, report round: every file written is under the folders named."""
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        before = set(tmp_path.rglob("*"))
        ok(["import", str(sheet), "--out", "run"])
        ok(["score", "run", "--readout", "text:pope", "--resamples", "0", "--per-question", "pq.jsonl"])
        ok(["export", "run", "--format", "lmms-eval", "--out", "exp"])
        ok(["report", "run", "--headline", "text:pope", "--resamples", "0", "--out", "rep.html"])
        new = {p.relative_to(tmp_path).parts[0] for p in set(tmp_path.rglob("*")) - before}
        assert new == {"run", "pq.jsonl", "exp", "rep.html", "rep.md"}
    finally:
        os.chdir(cwd)


def _out_verbs(run: Path, world: dict[str, Path]) -> dict[str, list[str]]:
    return {
        "run": _run_args(world, Path("OUT"))[:-2] + ["--out"],
        "merge": ["merge", str(run), "--out"],
        "demo": ["demo", "--out"],
        "import": ["import", "vlmevalkit", "no-such-sheet.tsv", "--out"],
        "export": ["export", str(run), "--format", "pope", "--out"],
        "prove score": ["prove", "score", "--data", "x", "--responses", str(run), "--out"],
        "prove build": ["prove", "build", "--model", "m", "--captions", "c", "--images", "i", "--out"],
        "probe build": ["probe", "build", "--model", "m", "--images", "i", "--detector", "d", "--out"],
        "probe induce": ["probe", "induce", "--model", "m", "--images", "i", "--prompts", "p", "--out"],
        "report": ["report", str(run), "--resamples", "0", "--out"],
    }


FILE_VERBS = ("report", "probe induce")  # their --out is a file: the wrong thing there is a folder


@pytest.mark.parametrize("verb", ["run", "merge", "demo", "import", "export", "prove score", "prove build", "probe build", *FILE_VERBS])
@pytest.mark.parametrize("what", ["the wrong kind", "dangling link"])
def test_the_wrong_kind_or_a_dangling_link_at_out_is_one_line(scripted: tuple[Path, dict[str, Path]], tmp_path: Path, verb: str, what: str) -> None:
    run, world = scripted
    target = tmp_path / "target"
    if what == "dangling link":
        target.symlink_to(tmp_path / "missing" / "place")
    elif verb in FILE_VERBS:
        target.mkdir()
        (target / "mine.txt").write_text("the user's file\n")
    else:
        target.write_text("the user's file\n")
    before = snapshot(run)
    line = refused([*_out_verbs(run, world)[verb], str(target)])
    assert "target" in line or "no-such-sheet" in line
    assert snapshot(run) == before
    if what == "dangling link":
        assert not (tmp_path / "missing").exists()
    else:
        kept = target / "mine.txt" if target.is_dir() else target
        assert kept.read_text() == "the user's file\n"


def test_run_into_a_folder_with_a_leftover_samples_file_is_refused_not_appended_to(scripted: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    run, world = scripted
    out = tmp_path / "out"
    out.mkdir()
    leftover = (run / "samples.jsonl").read_text().splitlines(keepends=True)[:5]
    (out / "samples.jsonl").write_text("".join(leftover))
    refused(_run_args(world, out), "samples.jsonl", "without its run.json", "--overwrite")
    assert (out / "samples.jsonl").read_text() == "".join(leftover) and not (out / "run.json").exists()
    ok(_run_args(world, out, "--overwrite"))
    assert len((out / "samples.jsonl").read_text().splitlines()) == 72  # the new run's own, nothing appended


def test_export_follows_the_labels_file_line_order_not_the_id_order(tmp_path: Path) -> None:
    """The tools pair answers with the labels file by line: a file whose ids are not ascending
    must be exported in its own order."""
    world = _make_world(tmp_path)
    lines = world["random"].read_text().splitlines()
    world["random"].write_text("\n".join(reversed(lines)) + "\n")
    ok(_run_args(world, tmp_path / "run"))
    ok(["export", str(tmp_path / "run"), "--format", "lmms-eval", "--out", str(tmp_path / "exp")])
    exported = [json.loads(l) for l in (tmp_path / "exp" / "samples_pope_random.jsonl").read_text().splitlines()]
    asked = [json.loads(l) for l in reversed(lines)]
    assert [e["input"].split("\n")[0] for e in exported] == [q["text"] for q in asked]
    assert [e["target"] for e in exported] == [q["label"] for q in asked]

