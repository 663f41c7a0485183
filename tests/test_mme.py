"""MME: the release and eval-tool layouts, text:mme against a transcription of calculation.py,
the scores of every readout from one scripted run, lmms-eval's grouping, and bad inputs.

The reference functions below were written from reading MME's ``eval_tool/calculation.py``
(BradyFU/Awesome-Multimodal-Large-Language-Models, ``tools/eval_tool.zip``) and lmms-eval's
``lmms_eval/tasks/mme/utils.py``, quirks kept: calculation.py's parser sees the line's trailing
newline and four characters only; its pairs are consecutive lines, whatever their images.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.benchmarks.mme import mme_questions, read_eval_tool_file, read_release_folder
from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.metrics.mme import mme_scores
from halluprobe.metrics.score import ScoreRow
from halluprobe.readouts.text import parse_text
from halluprobe.rundir import RunDir

runner = CliRunner()


# -- reference transcriptions ----------------------------------------------------------------


def calc_parse(pred: str) -> str:
    """calculation.py's parse_pred_ans on an already lower-cased answer."""
    if pred in ("yes", "no"):
        return pred
    head = pred[:4]
    if "yes" in head:
        return "yes"
    if "no" in head:
        return "no"
    return "other"


def calc_subtask(path: Path) -> dict[str, float]:
    """calculation.py's numbers for one results file: acc, acc_plus, score, other count."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()  # the trailing newline stays on the response, as in the tool
    assert len(lines) % 2 == 0
    gts, preds, plus, other = [], [], 0, 0
    for k in range(0, len(lines), 2):
        right = 0
        for line in lines[k : k + 2]:
            _, _, gt, pred = line.split("\t")
            gt, pred = gt.lower(), calc_parse(pred.lower())
            gts.append(gt)
            preds.append(pred)
            right += gt == pred
            other += pred not in ("yes", "no")
        plus += right == 2
    acc = sum(g == p for g, p in zip(gts, preds)) / len(gts)  # accuracy_score: "other" is never a label
    acc_plus = plus / (len(lines) // 2)
    return {"acc": acc, "acc_plus": acc_plus, "score": acc * 100 + acc_plus * 100, "other": other}


def lmms_parse(pred: str) -> str:
    """lmms-eval's parse_pred_ans."""
    pred = pred.lower().strip().replace(".", "")
    if pred in ("yes", "no"):
        return pred
    if len(pred) == 1:
        return {"y": "yes", "n": "no"}.get(pred, "other")
    head = pred[:4]
    if "yes" in head:
        return "yes"
    if "no" in head:
        return "no"
    return "other"


def lmms_category_score(docs: list[tuple[str, str, str]]) -> float:
    """mme_aggregate_results for one category: docs are (question_id = image, answer, prediction)."""
    by_image: dict[str, list[float]] = {}
    for image, answer, pred in docs:
        by_image.setdefault(image, []).append(1.0 if lmms_parse(pred) == answer.lower() else 0.0)
    total = 0.0
    for scores in by_image.values():
        assert len(scores) == 2
        total += sum(scores) / len(scores) * 100 + (sum(scores) == 2) * 100
    return total / len(by_image)


# -- fixture: a small release folder ------------------------------------------------------------

# subtask -> [(image, present objects, [(question object, answer)] x 2)]
_OBJECTS = {
    "existence": [("000000000001.jpg", ["cat"], [("cat", "Yes"), ("dog", "No")]), ("000000000002.jpg", ["bus"], [("bus", "Yes"), ("kite", "No")]), ("000000000003.jpg", ["cup"], [("cup", "Yes"), ("fork", "No")])],
    "count": [("000000000001.jpg", ["cat"], [("cat", "Yes"), ("horse", "No")]), ("000000000004.jpg", [], [("sheep", "Yes"), ("tie", "No")])],
    "position": [("000000000005.jpg", ["bench"], [("bench", "Yes"), ("clock", "No")]), ("000000000006.jpg", ["vase"], [("vase", "Yes"), ("bed", "No")])],
    "color": [("000000000007.jpg", ["car"], [("car", "Yes"), ("boat", "No")]), ("000000000008.jpg", ["sink"], [("sink", "Yes"), ("oven", "No")])],
    "artwork": [("10002.jpg", ["painting"], [("painting", "Yes"), ("statue", "No")]), ("10003.jpg", ["vase"], [("statue", "Yes"), ("vase", "No")])],
}
_QUESTION = "Is there a {} in the image? Please answer yes or no."


def _release(tmp: Path) -> Path:
    root = tmp / "MME_Benchmark_release_version"
    for subtask, images in _OBJECTS.items():
        folder = root / subtask
        img_dir, qa_dir = (folder / "images", folder / "questions_answers_YN") if subtask == "artwork" else (folder, folder)
        img_dir.mkdir(parents=True, exist_ok=True)
        qa_dir.mkdir(parents=True, exist_ok=True)
        for i, (name, _, qas) in enumerate(images):
            Image.new("RGB", (8, 8), (i * 30, 10, 0)).save(img_dir / name)
            (qa_dir / f"{Path(name).stem}.txt").write_text("".join(f"{_QUESTION.format(o)}\t{a}\n" for o, a in qas))
    return root


def _script(tmp: Path) -> Path:
    present: dict[str, list[str]] = {}
    for images in _OBJECTS.values():
        for name, objs, _ in images:
            present.setdefault(name, []).extend(objs)
    script = tmp / "script.json"
    script.write_text(json.dumps({"present": present, "seed": 3}))
    return script


# answers with calculation.py's quirks: cycled over the run's questions in order
_ANSWERS = ["Yes", "No", "Not sure", "  yes", "None", "The answer is yes", "yes, but no", "y", "No.", "Yes\nthere is", "", "know"]


def _mme_run(tmp: Path) -> tuple[Path, Path]:
    """Build the questions, run the scripted backend with text, then give the samples varied
    answers (the scripted backend only says "Yes."/"No."; logits are kept as it stored them)."""
    root = _release(tmp)
    qdir = tmp / "questions"
    result = runner.invoke(app, ["build", "mme", "--release", str(root), "--out", str(qdir)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in qdir.glob("*.jsonl")) == sorted(f"{s}.jsonl" for s in _OBJECTS)
    benches = [a for s in _OBJECTS for a in ("--benchmark", str(qdir / f"{s}.jsonl"))]
    run = tmp / "run"
    args = ["run", "--backend", "scripted", "--model", str(_script(tmp)), *benches, "--images", str(root), "--out", str(run), "--text"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rundir = RunDir(run)
    samples = rundir.read_samples()
    varied = [s.model_copy(update={"text": _ANSWERS[i % len(_ANSWERS)]}) for i, s in enumerate(samples)]
    rundir.samples_path.write_text("".join(s.model_dump_json() + "\n" for s in varied))
    return run, root


# -- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [*_ANSWERS, "YES", "no", "nope", " no", "  no", "Yes.", "N", "noyes", "ye s", "\nyes", "Yes\tno"])
def test_text_mme_is_calculation_py_parser(answer: str) -> None:
    line_answer = answer.replace("\r", "").replace("\n", "").replace("\t", " ")  # as the results file holds it
    expected = calc_parse((line_answer + "\n").lower())  # the line keeps its newline in the tool
    assert parse_text("mme", answer) == {"other": "unknown"}.get(expected, expected)
    lmms = lmms_parse(answer)
    assert parse_text("mme@lmms-eval", answer) == {"other": "unknown"}.get(lmms, lmms)


def test_release_layout_reads_both_subtask_shapes(tmp_path: Path) -> None:
    found = read_release_folder(_release(tmp_path))
    assert list(found) == ["existence", "count", "position", "color", "artwork"]
    assert found["artwork"][0].image == "artwork/images/10002.jpg"
    questions = mme_questions(found["existence"])
    assert [q.question_id for q in questions] == list(range(6))
    assert questions[1].image == questions[0].image == "existence/000000000001.jpg"
    assert [q.label for q in questions[:2]] == ["yes", "no"]


def test_every_readout_scores_one_run_as_calculation_py(tmp_path: Path) -> None:
    run, _ = _mme_run(tmp_path)
    out = tmp_path / "results"
    result = runner.invoke(app, ["mme", str(run), "--readout", "text:mme", "--readout", "dynamic", "--results-out", str(out), "--json", "--resamples", "50"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    # the results files are what calculation.py reads; its numbers equal text:mme's
    for t in got["text:mme"]["subtasks"]:
        ref = calc_subtask(out / f"{t['subtask']}.txt")
        assert t["accuracy"] == pytest.approx(ref["acc"])
        assert t["accuracy_plus"] == pytest.approx(ref["acc_plus"])
        assert t["score"] == pytest.approx(ref["score"])
        assert t["other"] == ref["other"]
        assert t["score_ci"] is not None and t["score_ci"][0] <= t["score"] + 1e-9 <= t["score_ci"][1] + 2e-9
    totals = {t["name"]: t for t in got["text:mme"]["totals"]}
    hall = sum(calc_subtask(out / f"{s}.txt")["score"] for s in ("existence", "count", "position", "color"))
    assert totals["hallucination"]["score"] == pytest.approx(hall)
    assert totals["perception"]["missing"] == ["posters", "celebrity", "scene", "landmark", "OCR"]
    # the logit readout of the same run: calculation.py's arithmetic on its decisions
    samples = RunDir(run).read_samples()
    from halluprobe.readouts.apply import apply_run
    from halluprobe.scoring import read_run_samples

    _, header, _ = read_run_samples(run)
    decisions = {s.key: r.decision for s, r in zip(samples, apply_run("dynamic", header, samples))}
    for t in got["dynamic"]["subtasks"]:
        logit_file = tmp_path / f"logit_{t['subtask']}.txt"
        rows = sorted((s for s in samples if s.split == t["subtask"]), key=lambda s: s.question_id)
        logit_file.write_text("".join(f"x\tq\t{s.label.capitalize()}\t{decisions[s.key]}\n" for s in rows))
        assert t["score"] == pytest.approx(calc_subtask(logit_file)["score"])


def test_lmms_eval_grouping_and_parser(tmp_path: Path) -> None:
    run, _ = _mme_run(tmp_path)
    result = runner.invoke(app, ["mme", str(run), "--readout", "text:mme@lmms-eval", "--compat", "lmms-eval", "--json", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["text:mme@lmms-eval"]
    samples = RunDir(run).read_samples()
    for t in got["subtasks"]:
        docs = [(s.image, s.label, s.text or "") for s in samples if s.split == t["subtask"]]
        assert t["score"] == pytest.approx(lmms_category_score(docs))
        assert t["score_ci"] is None


def test_groupings_differ_where_lines_pair_other_images() -> None:
    # a file whose pairs are not images: calculation.py pairs lines 0-1 and 2-3; lmms-eval groups by image
    rows = [
        ScoreRow("existence", 0, "existence/a.jpg", "yes", "yes"),
        ScoreRow("existence", 1, "existence/b.jpg", "no", "no"),
        ScoreRow("existence", 2, "existence/a.jpg", "no", "yes"),
        ScoreRow("existence", 3, "existence/b.jpg", "yes", "yes"),
    ]
    official = mme_scores(rows, n_resamples=0).subtasks[0]
    lmms = mme_scores(rows, grouping="lmms-eval", n_resamples=0).subtasks[0]
    assert official.accuracy == lmms.accuracy == 0.75
    assert official.accuracy_plus == 0.5 and lmms.accuracy_plus == 0.5
    rows[3] = ScoreRow("existence", 3, "existence/b.jpg", "yes", "no")
    assert mme_scores(rows, n_resamples=0).subtasks[0].accuracy_plus == 0.5  # pair (0, 1) right
    assert mme_scores(rows, grouping="lmms-eval", n_resamples=0).subtasks[0].accuracy_plus == 0.0


def test_eval_tool_results_file_reads_four_columns(tmp_path: Path) -> None:
    f = tmp_path / "existence.txt"
    f.write_text("000000006040.jpg\tIs there a train in this image? Please answer yes or no.\tYes\tyes, there is\n"
                 "000000006040.jpg\tIs there a bed in this image? Please answer yes or no.\tNo\tno\n")  # fmt: skip
    lines = read_eval_tool_file(f, results=True)
    assert [(x.image, x.answer, x.response) for x in lines] == [
        ("existence/000000006040.jpg", "yes", "yes, there is"),
        ("existence/000000006040.jpg", "no", "no"),
    ]


def _fails(args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_bad_inputs_are_one_line_exit_2(tmp_path: Path) -> None:
    root = _release(tmp_path)
    out = str(tmp_path / "q")
    _fails(["build", "mme", "--release", str(tmp_path / "nowhere"), "--out", out], "not a directory")
    _fails(["build", "mme", "--release", str(root), "--hallucination", "--subtask", "count", "--out", out], "--hallucination")
    hall = runner.invoke(app, ["build", "mme", "--release", str(root), "--hallucination", "--out", str(tmp_path / "h")])
    assert hall.exit_code == 0 and sorted(p.name for p in (tmp_path / "h").glob("*")) == ["color.jsonl", "count.jsonl", "existence.jsonl", "position.jsonl"]
    tool = tmp_path / "tool"
    tool.mkdir()
    (tool / "existence.txt").write_text("000000000001.jpg\tIs there a cat?\tYes\n000000000001.jpg\tIs there a dog?\n")
    _fails(["build", "mme", "--eval-tool", str(tool), "--out", out], "existence.txt:2:")  # truncated line
    (tool / "existence.txt").write_text("000000000001.jpg\tIs there a cat?\tYes\n000000000009.jpg\tIs there a dog?\tNo\n")
    _fails(["build", "mme", "--eval-tool", str(tool), "--release", str(root), "--out", out], "existence.txt:2:")  # image missing
    (tool / "existence.txt").write_text("000000000001.jpg\tIs there a cat?\tYes\n000000000001.jpg\tIs there a dog?\tNo\n" * 2)
    _fails(["build", "mme", "--eval-tool", str(tool), "--out", out], "duplicate image")
    (tool / "existence.txt").write_text("000000000001.jpg\tIs there a cat?\tMaybe\n")
    _fails(["build", "mme", "--eval-tool", str(tool), "--out", out], "existence.txt:1:")
    (root / "count" / "000000000004.txt").unlink()
    _fails(["build", "mme", "--release", str(root), "--out", out], "has no question file")
    with pytest.raises(InputError, match="no folder for subtask"):
        read_release_folder(root, ("OCR",))


# -- imports --------------------------------------------------------------------------------------


def test_eval_tool_results_import_and_score_as_calculation_py(tmp_path: Path) -> None:
    run, _ = _mme_run(tmp_path)
    files = tmp_path / "results"
    assert runner.invoke(app, ["mme", str(run), "--readout", "text:mme", "--results-out", str(files), "--resamples", "0"]).exit_code == 0
    imported = tmp_path / "imported"
    result = runner.invoke(app, ["import", "mme", *sorted(str(p) for p in files.glob("*.txt")), "--out", str(imported)])
    assert result.exit_code == 0, result.output
    _fails(["mme", str(imported), "--results-out", str(tmp_path / "again")], "an imported run")
    result = runner.invoke(app, ["mme", str(imported), "--readout", "text:mme", "--json", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    for t in json.loads(result.stdout)["text:mme"]["subtasks"]:
        ref = calc_subtask(files / f"{t['subtask']}.txt")
        assert (t["accuracy"], t["accuracy_plus"], t["other"]) == (pytest.approx(ref["acc"]), pytest.approx(ref["acc_plus"]), ref["other"])
        assert t["score"] == pytest.approx(ref["score"])


def test_lmms_eval_mme_logs_import_and_score_as_lmms_eval(tmp_path: Path) -> None:
    answers = ["Yes", "no.", "Y", "  no", "Not sure", "yes", "Yes", "The answer is no"]
    logs = []
    for i, answer in enumerate(answers):
        category = "existence" if i < 4 else "color"
        image = f"{category}/{i // 2:012d}.jpg"
        metric = {"question_id": image, "category": category, "score": 0.0}
        log = {"doc_id": i, "target": "Yes" if i % 2 == 0 else "No", "filtered_resps": [answer], "mme_perception_score": metric}
        if i % 3:  # v0.3 kept the document; v0.4+ only the prompt
            log["doc"] = {"question_id": image, "question": f"Is there a thing {i}?", "answer": log["target"], "category": category}
        else:
            log["input"] = f"Is there a thing {i}?\nAnswer the question using a single word or phrase."
        logs.append(log)
    path = tmp_path / "20250101_samples_mme.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in logs))
    imported = tmp_path / "imported"
    result = runner.invoke(app, ["import", "lmms-eval-mme", str(path), "--out", str(imported)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["mme", str(imported), "--readout", "text:mme@lmms-eval", "--compat", "lmms-eval", "--json", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    got = {t["subtask"]: t["score"] for t in json.loads(result.stdout)["text:mme@lmms-eval"]["subtasks"]}
    for category in ("existence", "color"):
        docs = [(x["mme_perception_score"]["question_id"], x["target"], x["filtered_resps"][0]) for x in logs if x["mme_perception_score"]["category"] == category]
        assert got[category] == pytest.approx(lmms_category_score(docs))
    bad = tmp_path / "bad_samples_mme.jsonl"
    bad.write_text(json.dumps({"doc_id": 0, "target": "Yes", "filtered_resps": ["yes"]}) + "\n")
    _fails(["import", "lmms-eval-mme", str(bad), "--out", str(tmp_path / "x")], "bad_samples_mme.jsonl:1:")


def vlmevalkit_mme_rating(rows: list[dict[str, object]]) -> dict[str, float]:
    """VLMEvalKit's MME_rating: per category, scores grouped by image_path; acc over every score,
    acc+ the mean of the first two scores' product per image; both x 100, summed."""
    stats: dict[str, dict[str, list[int]]] = {}
    for r in rows:
        stats.setdefault(str(r["category"]), {}).setdefault(str(r["image_path"]), []).append(int(bool(r["score"])))
    out = {}
    for cat, images in stats.items():
        flat = [v for vals in images.values() for v in vals]
        plus = [vals[0] * vals[1] for vals in images.values()]
        out[cat] = 100 * sum(flat) / len(flat) + 100 * sum(plus) / len(plus)
    return out


def test_vlmevalkit_mme_sheet_imports_and_scores_as_mme_rating(tmp_path: Path) -> None:
    from halluprobe.readouts.text import yorn

    preds = ["Yes", "No", "yes and no", "No", "Yes, it is", "I think so", "no", "No"]
    rows: list[dict[str, object]] = []
    for i, pred in enumerate(preds):
        cat = "count" if i < 4 else "OCR"
        answer = "Yes" if i % 2 == 0 else "No"
        extracted = {"yes": "Yes", "no": "No"}.get(yorn(pred), "Unknown")
        rows.append({"index": 100 + i, "category": cat, "image_path": f"{cat}/{i // 2}.jpg", "question": f"Q{i}?", "answer": answer,
                     "prediction": pred, "extracted": extracted, "score": extracted == answer})  # fmt: skip
    sheet = tmp_path / "M_MME_auxmatch.json"
    sheet.write_text(json.dumps(rows))
    imported = tmp_path / "imported"
    result = runner.invoke(app, ["import", "vlmevalkit", str(sheet), "--out", str(imported)])
    assert result.exit_code == 0, result.output
    ref = vlmevalkit_mme_rating(rows)
    for readout in ("vlmevalkit:auxmatch", "text:yorn"):
        result = runner.invoke(app, ["mme", str(imported), "--readout", readout, "--compat", "vlmevalkit", "--json", "--resamples", "0"])
        assert result.exit_code == 0, result.output
        got = {t["subtask"]: t["score"] for t in json.loads(result.stdout)[readout]["subtasks"]}
        assert got == {k: pytest.approx(v) for k, v in ref.items()}


def test_mme_verb_refuses_other_runs_and_unknown_groupings(tmp_path: Path) -> None:
    run, _ = _mme_run(tmp_path)
    _fails(["mme", str(run), "--compat", "bogus"], "unknown --compat")
    _fails(["mme", str(run), "--readout", "text:nope"], "unknown text rule")
    header = json.loads((run / "run.json").read_text())
    header["benchmarks"] = {"random": "0" * 64}
    (run / "run.json").write_text(json.dumps(header))
    _fails(["mme", str(run)], "not an MME run")


def test_a_logits_only_run_gets_the_logit_readouts(tmp_path: Path) -> None:
    root = _release(tmp_path)
    qdir = tmp_path / "questions"
    assert runner.invoke(app, ["build", "mme", "--release", str(root), "--out", str(qdir), "--subtask", "existence"]).exit_code == 0
    run = tmp_path / "run"
    args = ["run", "--backend", "scripted", "--model", str(_script(tmp_path)), "--benchmark", str(qdir / "existence.jsonl"), "--images", str(root), "--out", str(run), "--no-text"]
    assert runner.invoke(app, args).exit_code == 0
    result = runner.invoke(app, ["mme", str(run), "--json", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout)) == ["dynamic"]
    _fails(["mme", str(run), "--results-out", str(tmp_path / "r")], "stored no text")


def test_the_text_rule_comparison_keeps_its_columns(tmp_path: Path) -> None:
    from halluprobe.readouts.text import ALL_TEXT_RULES, BENCHMARK_TEXT_RULES
    from halluprobe.rule_changes import render_rule_changes, rule_changes_of_run

    run, _ = _mme_run(tmp_path)
    assert rule_changes_of_run(run).rules == [r for r in ALL_TEXT_RULES if r not in BENCHMARK_TEXT_RULES]
    asked = render_rule_changes(rule_changes_of_run(run, ["mme", "hallusionbench@evalscope"]), "t")
    assert "text:hallusionbench@evalscope (label-dependent)" in asked and "text:mme |" in asked
