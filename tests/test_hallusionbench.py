"""HallusionBench: the question file, aAcc / fAcc / qAcc against a transcription of the official
grouping (tianyi-lab/HallusionBench ``utils.py``: ``assign_correctness``, ``get_eval_all``,
``get_eval_fig``, ``get_eval_pair_all``; written from reading it, quirks kept: a VS question
without a figure is correct when uncertain, and is in no figure), every rule on one scripted run,
the pinned fetch served from a local folder, and bad inputs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.benchmarks.datasets import SourceFile
from halluprobe.benchmarks.hallusionbench import hallusion_key, hallusion_questions, pack_id
from halluprobe.cli import app
from halluprobe.metrics.hallusionbench import hallusion_scores
from halluprobe.metrics.score import ScoreRow
from halluprobe.readouts.apply import apply_run
from halluprobe.rundir import RunDir
from halluprobe.scoring import read_run_samples

runner = CliRunner()


# -- reference transcription ------------------------------------------------------------------


def hb_scores(records: list[dict[str, str]]) -> dict[str, float]:
    """HallusionBench's aAcc / fAcc / qAcc (in percent) over records carrying ``correct`` (0/1/2 judged)."""
    for r in records:  # assign_correctness
        c = int(r["correct_raw"])
        if r["category"] == "VS" and int(r["figure_id"]) == 0:
            r["correct"] = 1 if c in (1, 2) else 0
        else:
            r["correct"] = 1 if c == 1 else 0
    a = sum(r["correct"] for r in records) / len(records)
    figs: dict[str, list[int]] = {}
    for r in records:  # get_eval_fig
        if r["category"] == "VS" and str(r["figure_id"]) == "0":
            continue
        figs.setdefault("_".join([r["category"], r["subcategory"], r["set_id"], r["figure_id"]]), []).append(r["correct"])
    f = sum(all(v) for v in figs.values()) / len(figs) if figs else float("nan")
    pairs: dict[str, list[int]] = {}
    for r in records:  # get_eval_pair_all
        pairs.setdefault("_".join([r["category"], r["subcategory"], r["set_id"], r["question_id"]]), []).append(r["correct"])
    q = sum(all(v) for v in pairs.values()) / len(pairs)
    return {"aAcc": 100 * a, "fAcc": 100 * f, "qAcc": 100 * q}


def tool_scores(records: list[dict[str, str]]) -> dict[str, float]:
    """VLMEvalKit's Hallusion_rating (and EvalScope's aggregate_scores, which groups alike):
    keys without the category, every question in some figure, ``score`` right or not."""
    a = sum(r["score"] for r in records) / len(records)
    figs: dict[str, list[int]] = {}
    qs: dict[str, list[int]] = {}
    for r in records:
        figs.setdefault(f"{r['subcategory']}_{r['set_id']}_{r['figure_id']}", []).append(r["score"])
        qs.setdefault(f"{r['subcategory']}_{r['set_id']}_{r['question_id']}", []).append(r["score"])
    return {"aAcc": 100 * a, "fAcc": 100 * sum(all(v) for v in figs.values()) / len(figs), "qAcc": 100 * sum(all(v) for v in qs.values()) / len(qs)}


# -- fixture ---------------------------------------------------------------------------------------

_OBJ = ["cat", "dog", "cup", "bus", "kite", "fork"]


def _records() -> list[dict[str, str | None]]:
    """Two VD sets (figures 0-2, two questions each, asked of every figure), one VS set with a
    no-figure question and two figures, one VS set of one figure."""
    recs: list[dict[str, str | None]] = []
    plan = [("VD", "illusion", 0, 3, 2), ("VD", "math", 1, 2, 2), ("VS", "chart", 0, 3, 2), ("VS", "table", 4, 2, 3)]
    for n, (cat, sub, set_id, figures, questions) in enumerate(plan):
        for fig in range(figures):
            if cat == "VS" and sub == "table" and fig == 0:
                continue  # a VS set whose figures start at 1
            for q in range(questions):
                obj = _OBJ[(n + q) % len(_OBJ)]
                no_figure = cat == "VS" and fig == 0
                recs.append({
                    "category": cat, "subcategory": sub, "visual_input": "0" if no_figure else ("1" if fig < 2 else "2"),
                    "set_id": str(set_id), "figure_id": str(fig), "sample_note": "x", "question_id": str(q),
                    "question": f"Is there a {obj} in the image?", "gt_answer_details": "", "gt_answer": str((fig + q) % 2),
                    "filename": None if no_figure else f"./{cat}/{sub}/{set_id}_{fig}.png",
                })  # fmt: skip
    return recs


def _write(tmp: Path, recs: list[dict[str, str | None]]) -> Path:
    path = tmp / "HallusionBench.json"
    path.write_text(json.dumps(recs, indent=4))
    return path


def _images(tmp: Path, recs: list[dict[str, str | None]]) -> Path:
    root = tmp / "hallusion_bench"
    for i, r in enumerate(recs):
        if r["filename"]:
            p = root / str(r["filename"]).removeprefix("./")
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (i * 7 % 255, 0, 0)).save(p)
    return root


_ANSWERS = ["Yes", "No", "I don't know", "Not sure", "yes, there is no cat", "There is none", "No.", "cannot tell"]


def _correct_raw(decision: str, label: str) -> str:
    return "2" if decision == "unknown" else ("1" if decision == label else "0")


def _reference(rows: list[ScoreRow]) -> dict[str, dict[str, float]]:
    recs = []
    for r in rows:
        k = hallusion_key(r.split, r.question_id)
        recs.append({"category": k.category, "subcategory": k.subcategory, "set_id": str(k.set_id), "figure_id": str(k.figure_id),
                     "question_id": str(k.question_id), "correct_raw": _correct_raw("unknown" if r.error else r.decision, r.label)})  # fmt: skip
    out = {"Overall": hb_scores([dict(x) for x in recs])}
    for cat in ("VD", "VS"):
        these = [dict(x) for x in recs if x["category"] == cat]
        if these:
            out[cat] = hb_scores(these)
    return out


def _check(scores, rows: list[ScoreRow]) -> None:  # type: ignore[no-untyped-def]
    ref = _reference(rows)
    for s in scores.slices:
        assert 100 * s.a_acc == pytest.approx(ref[s.name]["aAcc"])
        assert 100 * s.f_acc == pytest.approx(ref[s.name]["fAcc"])
        assert 100 * s.q_acc == pytest.approx(ref[s.name]["qAcc"])


# -- tests -------------------------------------------------------------------------------------


def test_grouping_equals_the_official_one_no_figure_questions_included() -> None:
    rows = []
    for i, r in enumerate(_records()):
        key = pack_id(int(r["set_id"]), int(r["figure_id"]), int(r["question_id"]))  # type: ignore[arg-type]
        label = "yes" if r["gt_answer"] == "1" else "no"
        decision = ["yes", "no", "unknown"][(i * 5) % 3]
        rows.append(ScoreRow(f"{r['category']}_{r['subcategory']}", key, str(r["filename"]), label, decision))  # type: ignore[arg-type]
    scores = hallusion_scores(rows, n_resamples=100)
    assert [s.name for s in scores.slices] == ["VD", "VS", "Overall"]
    _check(scores, rows)
    overall = scores.slices[-1]
    assert overall.without_figure == 2 and overall.a_ci is not None
    # the quirk: an uncertain answer without the figure is correct; with it, it is not
    vs0 = [r for r in rows if r.split == "VS_chart" and hallusion_key(r.split, r.question_id).figure_id == 0]
    unsure = [ScoreRow(r.split, r.question_id, r.image, r.label, "unknown") for r in vs0]
    assert hallusion_scores(unsure, n_resamples=0).slices[-1].a_acc == 1.0
    assert hallusion_scores(unsure, n_resamples=0).slices[-1].f_acc is None  # in no figure


def test_tool_groupings_merge_vd_and_vs_ocr_sets() -> None:
    rows = []
    for cat, fig_start in (("VD", 0), ("VS", 1)):
        for fig in range(fig_start, fig_start + 2):
            for q in range(2):
                label = "yes" if (fig + q) % 2 else "no"
                decision = "no" if (cat, fig, q) == ("VS", 2, 1) else label  # one wrong answer, in VS
                rows.append(ScoreRow(f"{cat}_ocr", pack_id(0, fig, q), f"{cat}/ocr/0_{fig}.png", label, decision))  # type: ignore[arg-type]
    rows.append(ScoreRow("VS_ocr", pack_id(0, 0, 0), "VS/ocr/0_0.png", "no", "unknown"))  # no figure, uncertain
    recs = []
    for r in rows:
        k = hallusion_key(r.split, r.question_id)
        recs.append({"subcategory": k.subcategory, "set_id": str(k.set_id), "figure_id": str(k.figure_id), "question_id": str(k.question_id),
                     "category": k.category, "score": int(r.decision == r.label)})  # fmt: skip
    for grouping in ("vlmevalkit", "evalscope"):
        got = hallusion_scores(rows, grouping=grouping, n_resamples=20)
        for s in got.slices:
            these = [x for x in recs if s.name == "Overall" or x["category"] == s.name]
            ref = tool_scores(these)
            assert (100 * s.a_acc, 100 * s.f_acc, 100 * s.q_acc) == (pytest.approx(ref["aAcc"]), pytest.approx(ref["fAcc"]), pytest.approx(ref["qAcc"]))
    official = hallusion_scores(rows, n_resamples=0).slices[-1]
    tools = hallusion_scores(rows, grouping="vlmevalkit", n_resamples=0).slices[-1]
    assert official.q_acc != tools.q_acc  # VD's and VS's question 1 of set 0 are one group for the tools
    _check(hallusion_scores(rows, n_resamples=0), rows)


def test_every_rule_scores_one_run(tmp_path: Path) -> None:
    recs = _records()
    qfile, images = _write(tmp_path, recs), _images(tmp_path, recs)
    qdir = tmp_path / "q"
    result = runner.invoke(app, ["build", "hallusionbench", "--questions", str(qfile), "--images", str(images), "--out", str(qdir)])
    assert result.exit_code == 0, result.output
    assert "2 question(s) without a figure left out" in result.output
    files = sorted(qdir.glob("*.jsonl"))
    assert [f.name for f in files] == ["VD_illusion.jsonl", "VD_math.jsonl", "VS_chart.jsonl", "VS_table.jsonl"]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {f"{r['set_id']}_{r['figure_id']}.png": ["cat", "cup"] for r in recs}, "seed": 2}))
    run = tmp_path / "run"
    benches = [a for f in files for a in ("--benchmark", str(f))]
    result = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), *benches, "--images", str(images), "--out", str(run), "--text"])
    assert result.exit_code == 0, result.output
    rundir = RunDir(run)
    samples = rundir.read_samples()
    varied = [s.model_copy(update={"text": _ANSWERS[i % len(_ANSWERS)]}) for i, s in enumerate(samples)]
    rundir.samples_path.write_text("".join(s.model_dump_json() + "\n" for s in varied))
    result = runner.invoke(app, ["hallusionbench", str(run), "--json", "--resamples", "30"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout[result.stdout.index("{"):])
    assert list(got) == ["dynamic", "text:strict", "text:hallusionbench@vlmevalkit", "text:hallusionbench@evalscope"]
    _, header, samples = read_run_samples(run)
    for name, value in got.items():
        decisions = apply_run(name, header, samples)
        rows = [ScoreRow(s.split, s.question_id, s.image, s.label, d.decision) for s, d in zip(samples, decisions)]
        ref = _reference(rows)
        for sl in value["slices"]:
            assert 100 * sl["a_acc"] == pytest.approx(ref[sl["name"]]["aAcc"])
            assert 100 * sl["f_acc"] == pytest.approx(ref[sl["name"]]["fAcc"])
            assert 100 * sl["q_acc"] == pytest.approx(ref[sl["name"]]["qAcc"])
    # EvalScope's rule: "I don't know" is right on every no question
    text = runner.invoke(app, ["hallusionbench", str(run), "--readout", "text:hallusionbench@evalscope", "--resamples", "0"])
    assert "label-dependent" in text.output and "rule-based" in text.output


def test_data_hallusionbench_fetches_the_pinned_file_from_a_local_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import halluprobe.benchmarks.hallusionbench as hb

    recs = _records()
    body = json.dumps(recs, indent=4).encode()
    mirror = tmp_path / "mirror"
    src = hb.HALLUSIONBENCH_SOURCE
    (mirror / src.repository / src.commit).mkdir(parents=True)
    (mirror / src.repository / src.commit / src.path).write_bytes(body)
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", str(mirror))
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    # the real pin: this file is not it -> bad input, nothing written
    result = runner.invoke(app, ["data", "hallusionbench", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "out").exists()
    pinned = SourceFile(src.repository, src.commit, src.path, hashlib.sha256(body).hexdigest(), len(body))
    monkeypatch.setattr(hb, "HALLUSIONBENCH_SOURCE", pinned)
    result = runner.invoke(app, ["data", "hallusionbench", "--out", str(tmp_path / "out"), "--images", str(_images(tmp_path, recs))])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 4


def _fails(args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert needle in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_bad_inputs_are_one_line_exit_2(tmp_path: Path) -> None:
    recs = _records()
    qfile = _write(tmp_path, recs)
    out = str(tmp_path / "q")
    _fails(["build", "hallusionbench", "--questions", str(qfile), "--images", str(tmp_path / "none"), "--out", out], "not a directory")
    images = _images(tmp_path, recs)
    (images / "VD" / "math" / "1_1.png").unlink()
    _fails(["build", "hallusionbench", "--questions", str(qfile), "--images", str(images), "--out", out], "VD/math/1_1.png")
    qfile.write_text(json.dumps(recs, indent=4)[:-300])
    _fails(["build", "hallusionbench", "--questions", str(qfile), "--out", out], "HallusionBench.json:")
    dup = [*recs, recs[3]]
    qfile.write_text(json.dumps(dup, indent=4))
    line = len(json.dumps(recs, indent=4).splitlines())  # the duplicate's '{' opens on this line
    _fails(["build", "hallusionbench", "--questions", str(qfile), "--out", out], f"HallusionBench.json:{line}: duplicate question")
    bad = [dict(recs[0], gt_answer="yes")]
    qfile.write_text(json.dumps(bad, indent=4))
    _fails(["build", "hallusionbench", "--questions", str(qfile), "--out", out], "HallusionBench.json:2: gt_answer")
    assert hallusion_questions(_write(tmp_path, recs)).without_figure == 2


def test_a_judged_result_file_imports_and_scores_as_evaluation_py(tmp_path: Path) -> None:
    recs = _records()
    qfile = _write(tmp_path, recs)
    results = []
    for i, r in enumerate(recs):
        out = {k: v for k, v in r.items() if k not in ("gt_answer", "filename")}  # the repository's sample lacks both
        out["model_prediction"] = _ANSWERS[i % len(_ANSWERS)]
        out["gpt4v_output_gpt_check"] = str((i * 7) % 3)
        results.append(out)
    rfile = tmp_path / "HallusionBench_result.json"
    rfile.write_text(json.dumps(results, indent=2))
    run = tmp_path / "imported"
    result = runner.invoke(app, ["import", "hallusionbench", str(rfile), "--labels", str(qfile), "--out", str(run)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["hallusionbench", str(run), "--readout", "hallusionbench:judge", "--readout", "text:strict", "--json", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    judged = [dict(r, correct_raw=res["gpt4v_output_gpt_check"]) for r, res in zip(recs, results)]
    ref = {"Overall": hb_scores([dict(x) for x in judged])}
    for cat in ("VD", "VS"):
        ref[cat] = hb_scores([dict(x) for x in judged if x["category"] == cat])
    for sl in got["hallusionbench:judge"]["slices"]:
        assert (100 * sl["a_acc"], 100 * sl["f_acc"], 100 * sl["q_acc"]) == (
            pytest.approx(ref[sl["name"]]["aAcc"]), pytest.approx(ref[sl["name"]]["fAcc"]), pytest.approx(ref[sl["name"]]["qAcc"]))  # fmt: skip
    assert got["text:strict"]["slices"][-1]["without_figure"] == 2  # the no-figure questions came with the answers
    # without the labels the sample layout cannot be scored: one line, exit 2
    _fails(["import", "hallusionbench", str(rfile), "--out", str(tmp_path / "x")], "no gt_answer")
