"""HallusionBench's official score with a scripted judge: the judged aAcc / fAcc / qAcc equal a
transcription of tianyi-lab/HallusionBench utils.py's computation (evaluate_by_chatgpt's verdict
codes, assign_correctness, get_eval_all / get_eval_fig / get_eval_pair_all, written from reading it)
on the same verdicts; unparseable replies are counted; a pass resumes by item id; the judge prompt
is read from a stand-in script's syntax tree without running it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.benchmarks.datasets import SourceFile
from halluprobe.benchmarks.hallusionbench import hallusion_judge_template, hallusion_key, parse_hallusion_verdict
from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.judging.store import JudgmentDir
from halluprobe.rundir import RunDir
from halluprobe.scoring import read_run_samples, readout_rows

runner = CliRunner()

# answer marker -> the judge's reply (markers never occur in the prompt's own text)
REPLIES = {
    "ANSright": "The prediction is correct.",
    "ANSwrong": "Incorrect: it conflicts with the reference.",
    "ANSunsure": "unclear",
    "ANSnone": "I cannot decide.",  # no verdict word: unparseable (official: 2)
    "ANStricky": "Not incorrect, I think it is correct.",  # official rule: 'incorrect' first
}
CYCLE = ["ANSright", "ANSwrong", "ANSright", "ANSunsure", "ANSright", "ANSnone", "ANStricky", "ANSright", "ANSwrong"]

# a stand-in for HallusionBench's utils.py (its prompt is fetched pinned, never copied here); the
# module-level line must never run
PROMPT_SCRIPT = """import os
open(__file__ + '.ran', 'w').write('executed')

def evaluate_by_chatgpt(data, output_entry, correctness_entry):
    for sample in data:
        prompt = 'Judge {the} answer: correct, incorrect or unclear. Q:'
        prompt += sample['question']
        prompt += ' Ref: '
        prompt += sample['gt_answer_details']
        prompt += ' Pred:'
        prompt += sample[output_entry]
        prompt += ' Out:'
        os.system('echo never')
"""


def _official(records: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    """utils.py on records carrying the judge's code (``gpt_check``: "0", "1", "2"), per category and overall."""
    for r in records:  # assign_correctness
        c = int(r["gpt_check"])
        if r["category"] == "VS" and int(r["figure_id"]) == 0:
            r["correct"] = 1 if c == 1 or c == 2 else 0
        else:
            r["correct"] = 1 if c == 1 else 0

    def scores(data: list[dict[str, str]]) -> dict[str, float]:
        a = sum(r["correct"] for r in data) / len(data)  # type: ignore[misc]
        figs: dict[str, tuple[int, int]] = {}
        for r in data:  # get_eval_fig
            if r["category"] == "VS" and str(r["figure_id"]) == "0":
                continue
            name = "_".join([r["category"], r["subcategory"], str(r["set_id"]), str(r["figure_id"])])
            c, t = figs.get(name, (0, 0))
            figs[name] = (c + r["correct"], t + 1)  # type: ignore[operator]
        f = sum(c == t for c, t in figs.values()) / len(figs)
        pairs: dict[str, tuple[int, int]] = {}
        for r in data:  # get_eval_pair_all
            name = "_".join([r["category"], r["subcategory"], str(r["set_id"]), str(r["question_id"])])
            c, t = pairs.get(name, (0, 0))
            pairs[name] = (c + r["correct"], t + 1)  # type: ignore[operator]
        q = sum(c == t for c, t in pairs.values()) / len(pairs)
        return {"aAcc": a, "fAcc": f, "qAcc": q}

    out = {cat: scores([r for r in records if r["category"] == cat]) for cat in ("VD", "VS")}
    out["Overall"] = scores(records)
    return out


def _fixture(tmp: Path) -> tuple[Path, Path, Path]:
    """Question file, figures and a finished --text run: two VD sets of 3 and 2 figures, a VS set of
    two figures (plus a no-figure question left out of the run), every question asked of every figure."""
    recs = []
    plan = [("VD", "illusion", 0, 3, 2), ("VD", "math", 1, 2, 3), ("VS", "chart", 0, 3, 2)]
    for cat, sub, set_id, figures, questions in plan:
        for fig in range(figures):
            for q in range(questions):
                no_figure = cat == "VS" and fig == 0
                recs.append({"category": cat, "subcategory": sub, "visual_input": "0" if no_figure else ("1" if fig < 2 else "2"),
                             "set_id": str(set_id), "figure_id": str(fig), "sample_note": "x", "question_id": str(q),
                             "question": f"Is there a cat in the image {q}?", "gt_answer_details": f"The reference {fig}.",
                             "gt_answer": str((fig + q) % 2), "filename": None if no_figure else f"./{cat}/{sub}/{set_id}_{fig}.png"})  # fmt: skip
    qfile = tmp / "HallusionBench.json"
    qfile.write_text(json.dumps(recs, indent=2))
    images = tmp / "figs"
    for i, r in enumerate(recs):
        if r["filename"]:
            p = images / str(r["filename"]).removeprefix("./")
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (i * 9 % 255, 0, 0)).save(p)
    qdir = tmp / "q"
    result = runner.invoke(app, ["build", "hallusionbench", "--questions", str(qfile), "--images", str(images), "--out", str(qdir)])
    assert result.exit_code == 0, result.output
    script = tmp / "model.json"
    script.write_text(json.dumps({"present": {}, "seed": 1}))
    run = tmp / "run"
    benches = [a for f in sorted(qdir.glob("*.jsonl")) for a in ("--benchmark", str(f))]
    result = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), *benches, "--images", str(images), "--out", str(run), "--text"])
    assert result.exit_code == 0, result.output
    rundir = RunDir(run)
    answers = [s.model_copy(update={"text": f"{'Yes' if i % 2 else 'No'}, {CYCLE[i % len(CYCLE)]}."}) for i, s in enumerate(rundir.read_samples())]
    rundir.samples_path.write_text("".join(s.model_dump_json() + "\n" for s in answers))
    return qfile, images, run


def _judge(tmp: Path, qfile: Path, images: Path, run: Path, out: Path, *extra: str) -> str:
    judge = tmp / "judge.json"
    judge.write_text(json.dumps({"generate": [{"match": m, "text": t} for m, t in REPLIES.items()]}))
    script = tmp / "utils.py"
    script.write_text(PROMPT_SCRIPT)
    result = runner.invoke(app, ["hallusion", "judge", str(run), "--images", str(images), "--out", str(out), "--questions", str(qfile),
                                 "--prompt-script", str(script), "--judge-model", str(judge), "--judge-backend", "scripted", *extra])  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output


def test_judged_scores_equal_the_official_computation(tmp_path: Path) -> None:
    qfile, images, run = _fixture(tmp_path)
    _judge(tmp_path, qfile, images, run, tmp_path / "j")
    samples = RunDir(run).read_samples()
    records = []
    for s in samples:
        marker = next(m for m in REPLIES if m in (s.text or ""))
        reply = REPLIES[marker].lower()
        code = "0" if "incorrect" in reply else ("1" if "correct" in reply else "2")  # evaluate_by_chatgpt
        k = hallusion_key(s.split, s.question_id)
        records.append({"category": k.category, "subcategory": k.subcategory, "set_id": str(k.set_id), "figure_id": str(k.figure_id),
                        "question_id": str(k.question_id), "gpt_check": code})  # fmt: skip
    ref = _official(records)
    result = runner.invoke(app, ["hallusion", "score", str(run), "--judgments", str(tmp_path / "j"), "--json", "--resamples", "20"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    for sl in got["judged"]["slices"]:
        for metric, field in (("aAcc", "a_acc"), ("fAcc", "f_acc"), ("qAcc", "q_acc")):
            assert sl[field] == pytest.approx(ref[sl["name"]][metric]), (sl["name"], metric)
    markers = [next(m for m in REPLIES if m in (s.text or "")) for s in samples]
    assert got["unparseable"] == markers.count("ANSnone") > 0 and got["errors"] == 0 and got["n"] == len(samples)
    store = JudgmentDir(tmp_path / "j")
    assert got["template_sha256"] == hashlib.sha256(store.read_header().template.encode()).hexdigest()
    # disagreement with text:strict: the rule reads Yes/No, the judge its own verdict
    strict = next(d for d in got["disagreements"] if d["readout"] == "text:strict")
    _, header, _ = read_run_samples(run)
    verdict_of = {"1": "correct", "0": "incorrect", "2": "unclear"}
    reading = ["unclear" if row.decision == "unknown" else ("correct" if row.decision == row.label else "incorrect") for row in readout_rows("text:strict", header, samples)]
    assert strict["n"] == len(samples)
    assert strict["verdicts"] == sum(verdict_of[r["gpt_check"]] != b for r, b in zip(records, reading)) > 0
    rule_correct = [int(b == "correct" or (b == "unclear" and r["category"] == "VS" and r["figure_id"] == "0")) for r, b in zip(records, reading)]
    assert strict["correctness"] == sum(r["correct"] != c for r, c in zip(records, rule_correct))
    text = runner.invoke(app, ["hallusion", "score", str(run), "--judgments", str(tmp_path / "j"), "--resamples", "0"])
    assert text.exit_code == 0, text.output
    assert f"sha256 {got['template_sha256'][:12]}" in text.output and "judge scripted:" in text.output
    assert f"unparseable {got['unparseable']}" in text.output and "disagreement with text:strict" in text.output


def test_every_verdict_is_in_the_ledger(tmp_path: Path) -> None:
    qfile, images, run = _fixture(tmp_path)
    _judge(tmp_path, qfile, images, run, tmp_path / "j")
    judgments = JudgmentDir(tmp_path / "j").read_judgments()
    assert len(judgments) == len(RunDir(run).read_samples())
    for j in judgments:
        assert j.reply in REPLIES.values() and len(j.prompt_sha256) == 64
        assert (j.status == "unparseable") == (j.reply == REPLIES["ANSnone"])
    assert {j.verdict for j in judgments if j.reply == REPLIES["ANStricky"]} == {"incorrect"}
    assert parse_hallusion_verdict("CORRECT") == ("correct", None)


def test_a_cut_pass_resumes_by_id_with_nothing_judged_twice(tmp_path: Path) -> None:
    qfile, images, run = _fixture(tmp_path)
    out = tmp_path / "j"
    _judge(tmp_path, qfile, images, run, out, "--judge-batch-size", "4")
    store = JudgmentDir(out)
    lines = store.judgments_path.read_text().splitlines(keepends=True)
    kept = lines[:8]
    store.judgments_path.write_text("".join(kept))
    again = _judge(tmp_path, qfile, images, run, out, "--judge-batch-size", "4")
    assert f"judged {len(lines) - 8} (errors 0), 8 judged before" in again
    final = store.judgments_path.read_text().splitlines(keepends=True)
    assert final[:8] == kept and sorted(final) == sorted(lines)  # the same ids, each once
    assert "0 judged before" not in _judge(tmp_path, qfile, images, run, out)


def test_the_prompt_is_read_from_the_syntax_tree_never_run(tmp_path: Path) -> None:
    script = tmp_path / "utils.py"
    script.write_text(PROMPT_SCRIPT)
    template = hallusion_judge_template(script)
    assert template == "Judge {{the}} answer: correct, incorrect or unclear. Q:{question} Ref: {gt_answer_details} Pred:{prediction} Out:"
    assert template.format(question="q", gt_answer_details="r", prediction="p").startswith("Judge {the} answer")
    assert not (tmp_path / "utils.py.ran").exists()
    script.write_text("def evaluate_by_chatgpt(data):\n    prompt = 'x'\n    prompt += sample['question']\n")
    with pytest.raises(InputError, match="slot"):
        hallusion_judge_template(script)
    script.write_text("x = 1\n")
    with pytest.raises(InputError, match="evaluate_by_chatgpt"):
        hallusion_judge_template(script)


def test_bad_inputs_are_one_line(tmp_path: Path) -> None:
    qfile, images, run = _fixture(tmp_path)
    _judge(tmp_path, qfile, images, run, tmp_path / "j")
    store = JudgmentDir(tmp_path / "j")
    store.judgments_path.write_text("".join(store.judgments_path.read_text().splitlines(keepends=True)[:-1]))
    result = runner.invoke(app, ["hallusion", "score", str(run), "--judgments", str(tmp_path / "j")])
    assert result.exit_code == 2 and "not judged" in result.output
    result = runner.invoke(app, ["hallusion", "judge", str(run), "--images", str(images), "--out", str(tmp_path / "k")])
    assert result.exit_code == 2 and "--judge-model" in result.output


def test_data_fetches_the_pinned_judge_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import halluprobe.benchmarks.hallusionbench as hb

    qfile, _, _ = _fixture(tmp_path)
    mirror = tmp_path / "mirror"
    for src, body in ((hb.HALLUSIONBENCH_SOURCE, qfile.read_bytes()), (hb.HALLUSIONBENCH_JUDGE_SCRIPT, PROMPT_SCRIPT.encode())):
        (mirror / src.repository / src.commit).mkdir(parents=True, exist_ok=True)
        (mirror / src.repository / src.commit / src.path).write_bytes(body)
        monkeypatch.setattr(hb, "HALLUSIONBENCH_SOURCE" if src.path != "utils.py" else "HALLUSIONBENCH_JUDGE_SCRIPT",
                            SourceFile(src.repository, src.commit, src.path, hashlib.sha256(body).hexdigest(), len(body)))  # fmt: skip
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", str(mirror))
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["data", "hallusionbench", "--out", str(tmp_path / "out"), "--judge-script"])
    assert result.exit_code == 0, result.output
    assert "utils.py: the judge prompt's script (pinned)" in result.output
    assert not list((tmp_path / "cache").rglob("*.ran"))


def test_two_judges_agree_on_the_same_answers(tmp_path: Path) -> None:
    qfile, images, run = _fixture(tmp_path)
    _judge(tmp_path, qfile, images, run, tmp_path / "a")
    other = tmp_path / "other"
    other.mkdir()
    flipped = {**REPLIES, "ANSwrong": "correct", "ANSnone": "incorrect"}
    (other / "judge.json").write_text(json.dumps({"generate": [{"match": m, "text": t} for m, t in flipped.items()]}))
    (other / "utils.py").write_text(PROMPT_SCRIPT)
    result = runner.invoke(app, ["hallusion", "judge", str(run), "--images", str(images), "--out", str(tmp_path / "b"), "--questions", str(qfile),
                                 "--prompt-script", str(other / "utils.py"), "--judge-model", str(other / "judge.json"), "--judge-backend", "scripted"])  # fmt: skip
    assert result.exit_code == 0, result.output
    markers = [next(m for m in REPLIES if m in (s.text or "")) for s in RunDir(run).read_samples()]
    result = runner.invoke(app, ["hallusion", "agree", str(run), "--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"), "--resamples", "50"])
    assert result.exit_code == 0, result.output
    differ = sum(m in ("ANSwrong", "ANSnone") for m in markers)
    assert f"agreement {len(markers) - differ}/{len(markers)} questions" in result.output
    assert "a: judge scripted:" in result.output and "a-b" in result.output
