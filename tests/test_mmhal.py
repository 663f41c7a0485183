"""MMHal-Bench with a scripted judge that sometimes answers out of format: the compat score equals a
transcription of the official summarizer (quirks included); halluprobe's score counts the
unparseable; re-judging stored answers needs no model under test; two judges are compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.benchmarks.mmhal import parse_rating, read_mmhal
from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.judging.mmhal_score import score_mmhal
from halluprobe.judging.store import JudgmentDir

TYPES = ["attribute", "adversarial", "comparison", "counting", "relation", "environment", "holistic", "other"]
# answer marker -> the judge's reply (the markers never occur in the judge prompt)
REPLIES = {
    "ANSsix": "Very good analysis. Rating: 6, very informative",
    "ANSfour": "Fine. rating: 4",
    "ANSone": "A false claim. Rating: 1",
    "ANSnone": "I would give it four out of six.",  # zero ratings: unparseable
    "ANStwice": "Rating: 2 at first, but Rating: 5 on reflection.",  # several: unparseable
    "ANSzero": "RATING: 0",
}
CYCLE = ["ANSsix", "ANSfour", "ANSone", "ANSnone", "ANSfour", "ANStwice", "ANSzero", "ANSsix", "ANSone", "ANSfour", "ANSsix"]


# a stand-in for RLAIF-V's eval_gpt_mmhal.py (its prompt is fetched pinned, never copied here):
# a module-level `template` string with the official four slots; the rest must never run
PROMPT_SCRIPT = (
    "import sys\n"
    "open(__file__ + '.ran', 'w').write('executed')\n"
    "template = '''Rate the response 0-6 as \"Rating: N\".\n"
    "### Image Contents\n{}\n### Question\n{}\n### Standard Human-Generated Answer\n{}\n"
    "### LMM Response to Evaluate\n{}'''\n"
)


def _prompt_script(tmp_path: Path) -> Path:
    path = tmp_path / "eval_gpt_mmhal.py"
    path.write_text(PROMPT_SCRIPT, encoding="utf-8")
    return path


def _official_summarizer(replies: list[str]) -> None:
    """A transcription of RLAIF-V eval/summarize_gpt_mmhal_review.py's cal_mmhalscore, on the replies."""
    scores = []
    for i, response in enumerate(replies):
        scores_found = []
        for s in range(7):
            if f"rating: {s}" in response.lower():
                scores_found.append(s)
        if len(scores_found) == 1:
            scores.append(scores_found[0])
        else:
            print("Warning: multiple or zero scores found")
            print(i, response)
            scores.append(0)
    hallucination = []
    for s in scores:
        if s >= 3:
            hallucination.append(0)
        else:
            hallucination.append(1)
    scores_each: list[list[int]] = [[] for _ in range(8)]
    for i in range(96):
        scores_each[i % 8].append(scores[i])
    print("Average score: {:.2f}".format(sum(scores) / len(scores)))
    print("Hallucination rate: {:.2f}".format(sum(hallucination) / len(hallucination)))
    print("Average score for each question type:", ",".join([str(round(sum(scores_each[i]) / len(scores_each[i]), 2)) for i in range(8)]), flush=True)


def _fixture(tmp: Path, markers: list[str] | None = None) -> tuple[Path, Path, list[str]]:
    """A 96-item template of our own, filled with answers, and one tiny image per item."""
    images = tmp / "images"
    images.mkdir(exist_ok=True)
    markers = markers or [CYCLE[i % len(CYCLE)] for i in range(96)]
    records = []
    for i in range(96):
        Image.new("RGB", (4, 4), (i, 0, 0)).save(images / f"img{i}.jpg")
        records.append({"question_type": TYPES[i % 8], "question_topic": "indoor", "image_id": f"id{i // 2}",
                        "image_src": f"https://example.org/x/img{i}.jpg", "image_content": ["Cat", "Cup"],
                        "question": f"What is in picture {i}?", "gt_answer": "A cat.", "model_answer": f"It is {markers[i]} here."})  # fmt: skip
    template = tmp / "answers.json"
    template.write_text(json.dumps(records))
    return template, images, markers


def _judge_script(tmp: Path, name: str, replies: dict[str, str]) -> Path:
    path = tmp / name
    path.write_text(json.dumps({"generate": [{"match": m, "text": t} for m, t in replies.items()]}))
    return path


def _judge(tmp: Path, template: Path, images: Path, script: Path, out: Path) -> None:
    result = CliRunner().invoke(app, ["mmhal", "judge", "--prompt-script", str(_prompt_script(tmp)), "--template", str(template), "--answers", str(template), "--images", str(images),
                                      "--out", str(out), "--judge-model", str(script), "--judge-backend", "scripted"])  # fmt: skip
    assert result.exit_code == 0, result.output


def test_compat_equals_the_official_summarizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template, images, markers = _fixture(tmp_path)
    _judge(tmp_path, template, images, _judge_script(tmp_path, "judge.json", REPLIES), tmp_path / "j")
    replies = [REPLIES[m] for m in markers]
    capsys.readouterr()
    _official_summarizer(replies)
    official = capsys.readouterr().out
    result = CliRunner().invoke(app, ["mmhal", "score", "--template", str(template), "--judgments", str(tmp_path / "j"), "--compat"])
    assert result.exit_code == 0, result.output
    assert result.output == official
    assert official.count("Warning: multiple or zero scores found") == sum(m in ("ANSnone", "ANStwice") for m in markers)


def test_halluprobe_score_counts_the_unparseable(tmp_path: Path) -> None:
    template, images, markers = _fixture(tmp_path)
    _judge(tmp_path, template, images, _judge_script(tmp_path, "judge.json", REPLIES), tmp_path / "j")
    store = JudgmentDir(tmp_path / "j")
    mmhal = read_mmhal(template)
    bad = sum(m in ("ANSnone", "ANStwice") for m in markers)
    ratings = [parse_rating(REPLIES[m])[0] for m in markers]
    good = [r for r in ratings if r is not None]
    by_policy = {p: score_mmhal(mmhal, store.read_header(), store.read_judgments(), policy=p, where="x", n_resamples=200) for p in ("zero", "wrong", "drop")}
    for score in by_policy.values():
        assert score.unparseable == bad and score.errors == 0 and score.n == 96
        assert not score.template_pinned and len(score.template_sha256) == 64
    assert by_policy["zero"].average == pytest.approx(by_policy["zero"].compat.average)
    assert by_policy["drop"].average == pytest.approx(sum(good) / len(good))
    assert by_policy["wrong"].average == pytest.approx(sum(good) / len(good))
    assert by_policy["wrong"].hallucination_rate == pytest.approx((sum(r < 3 for r in good) + bad) / 96)
    assert by_policy["drop"].hallucination_rate == pytest.approx(sum(r < 3 for r in good) / len(good))
    ci = by_policy["zero"].average_ci
    assert ci is not None and ci[0] <= by_policy["zero"].average <= ci[1]
    attribute = next(t for t in by_policy["drop"].per_type if t.question_type == "attribute")
    kept = [ratings[i] for i in range(0, 96, 8) if ratings[i] is not None]
    assert attribute.average == pytest.approx(sum(kept) / len(kept))  # type: ignore[arg-type]
    out = CliRunner().invoke(app, ["mmhal", "score", "--template", str(template), "--judgments", str(tmp_path / "j"), "--unparseable", "drop", "--bootstrap", "50"]).output
    assert f"unparseable {bad}, errors 0 of 96 (--unparseable drop)" in out and store.read_header().template_sha256[:12] in out


def test_rejudging_needs_no_model_and_two_judges_agree(tmp_path: Path) -> None:
    template, images, markers = _fixture(tmp_path)
    _judge(tmp_path, template, images, _judge_script(tmp_path, "a.json", REPLIES), tmp_path / "a")
    # the second judge rates "ANSone" answers 4 instead of 1: it disagrees on those items only
    other = {**REPLIES, "ANSone": "Rating: 4"}
    _judge(tmp_path, template, images, _judge_script(tmp_path, "b.json", other), tmp_path / "b")
    result = CliRunner().invoke(app, ["mmhal", "agree", "--template", str(template), "--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"), "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    n_one = markers.count("ANSone")
    assert f"agreement {96 - n_one}/96 items" in result.output
    assert "Cohen's kappa 0." in result.output
    # the difference of the average score: (1 - 4) per disagreeing item
    assert f"a-b {-3 * n_one / 96:.3f} [" in result.output
    assert "judge scripted:" in result.output


def test_bad_template_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"question": "x"}]))
    with pytest.raises(InputError, match="missing field"):
        read_mmhal(path)
    result = CliRunner().invoke(app, ["mmhal", "questions", "--template", str(path), "--out", str(tmp_path / "q.jsonl")])
    assert result.exit_code == 2


def test_questions_for_a_run(tmp_path: Path) -> None:
    template, _, _ = _fixture(tmp_path)
    result = CliRunner().invoke(app, ["mmhal", "questions", "--template", str(template), "--out", str(tmp_path / "q.jsonl")])
    assert result.exit_code == 0, result.output
    first = json.loads((tmp_path / "q.jsonl").read_text().splitlines()[0])
    assert first["image"] == "img0.jpg" and first["kind"] == "open" and first["question_id"] == 0


def test_a_stored_run_is_rejudged_without_the_model_under_test(tmp_path: Path) -> None:
    template, images, _ = _fixture(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["mmhal", "questions", "--template", str(template), "--out", str(tmp_path / "q.jsonl")]).exit_code == 0
    model = _judge_script(tmp_path, "model.json", {r"picture \d*[05]\?": "It is ANSone here.", "picture": "It is ANSsix here."})
    run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(model), "--benchmark", str(tmp_path / "q.jsonl"),
                              "--images", str(images), "--open-ended", "--max-new-tokens", "64", "--out", str(tmp_path / "run")])  # fmt: skip
    assert run.exit_code == 0, run.output
    model.unlink()  # the model under test is gone: judging reads the stored answers only
    for name, replies in (("a", REPLIES), ("b", {**REPLIES, "ANSone": "Rating: 3"})):
        script = _judge_script(tmp_path, f"{name}.json", replies)
        result = runner.invoke(app, ["mmhal", "judge", "--prompt-script", str(_prompt_script(tmp_path)), "--template", str(template), "--answers", str(tmp_path / "run"), "--images", str(images),
                                     "--out", str(tmp_path / name), "--judge-model", str(script), "--judge-backend", "scripted"])  # fmt: skip
        assert result.exit_code == 0, result.output
    verdicts = {name: {j.item_id: j.verdict for j in JudgmentDir(tmp_path / name).read_judgments()} for name in "ab"}
    assert verdicts["a"]["5"] == 1 and verdicts["b"]["5"] == 3 and verdicts["a"]["1"] == verdicts["b"]["1"] == 6
    assert JudgmentDir(tmp_path / "a").read_header().answers_sha256 == JudgmentDir(tmp_path / "b").read_header().answers_sha256
    again = runner.invoke(app, ["mmhal", "judge", "--prompt-script", str(_prompt_script(tmp_path)), "--template", str(template), "--answers", str(tmp_path / "run"), "--images", str(images),
                                "--out", str(tmp_path / "a"), "--judge-model", str(tmp_path / "a.json"), "--judge-backend", "scripted"])  # fmt: skip
    assert again.exit_code == 0 and "judged 0 (errors 0), 96 judged before" in again.output


def test_fetch_checks_the_pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    import halluprobe.benchmarks.mmhal as mmhal_module

    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    template, _, _ = _fixture(tmp_path)
    url = template.resolve().as_uri()  # a local mirror: no network
    result = CliRunner().invoke(app, ["data", "mmhal", "--out", str(tmp_path / "t.json"), "--url", url])
    assert result.exit_code == 2 and "sha256" in result.output and not (tmp_path / "t.json").exists()  # not the pinned file
    monkeypatch.setattr(mmhal_module, "MMHAL_TEMPLATE_SHA256", hashlib.sha256(template.read_bytes()).hexdigest())
    script = _prompt_script(tmp_path)
    monkeypatch.setattr(mmhal_module, "MMHAL_JUDGE_SCRIPT_SHA256", hashlib.sha256(script.read_bytes()).hexdigest())
    result = CliRunner().invoke(app, ["data", "mmhal", "--out", str(tmp_path / "t.json"), "--url", url, "--script-url", script.resolve().as_uri()])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.json").read_bytes() == template.read_bytes() and read_mmhal(tmp_path / "t.json").pinned


def test_per_type_cis(tmp_path: Path) -> None:
    template, images, _ = _fixture(tmp_path)
    _judge(tmp_path, template, images, _judge_script(tmp_path, "judge.json", REPLIES), tmp_path / "j")
    store = JudgmentDir(tmp_path / "j")
    score = score_mmhal(read_mmhal(template), store.read_header(), store.read_judgments(), policy="drop", where="x", n_resamples=200)
    for t in score.per_type:
        assert t.average is not None and t.average_ci is not None and t.average_ci[0] <= t.average <= t.average_ci[1]
    none = score_mmhal(read_mmhal(template), store.read_header(), store.read_judgments(), policy="drop", where="x", n_resamples=0)
    assert none.average_ci is None and all(t.average_ci is None for t in none.per_type)


def test_a_killed_judge_resumes_by_id_with_nothing_judged_twice(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    template, images, _ = _fixture(tmp_path)
    script = tmp_path / "judge.json"
    script.write_text(json.dumps({"delay_s": 0.1, "generate": [{"match": m, "text": t} for m, t in REPLIES.items()]}))
    out = tmp_path / "j"
    args = ["mmhal", "judge", "--prompt-script", str(_prompt_script(tmp_path)), "--template", str(template), "--answers", str(template), "--images", str(images), "--out", str(out),
            "--judge-model", str(script), "--judge-backend", "scripted", "--judge-batch-size", "4"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "halluprobe.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    lines_file = out / "judgments.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if lines_file.exists() and lines_file.read_text().count("\n") >= 8:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = {j.item_id for j in JudgmentDir(out).read_judgments()}
    assert 8 <= len(first) < 96
    with open(lines_file, "a") as fh:  # a write cut short by the kill
        fh.write('{"item_id": "9')
    script.write_text(json.dumps({"generate": [{"match": m, "text": t} for m, t in REPLIES.items()]}))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"judged {96 - len(first)} (errors 0), {len(first)} judged before" in result.output
    ids = [json.loads(line)["item_id"] for line in lines_file.read_text().splitlines()]
    assert len(ids) == 96 and sorted(ids, key=int) == [str(i) for i in range(96)]


def test_the_judge_prompt_is_read_from_the_scripts_syntax_tree_never_run(tmp_path: Path) -> None:
    from halluprobe.benchmarks.mmhal import judge_prompt_template

    script = _prompt_script(tmp_path)
    prompt = judge_prompt_template(script)
    assert prompt.startswith("Rate the response") and prompt.count("{}") == 4
    assert not list(tmp_path.glob("*.ran"))  # its other statements did not run
    bad = tmp_path / "other.py"
    bad.write_text("prompt = 'no template here'\n", encoding="utf-8")
    with pytest.raises(InputError, match="no module-level `template"):
        judge_prompt_template(bad)
    bad.write_text("x = 1\ntemplate = 'one slot {}'\n", encoding="utf-8")
    with pytest.raises(InputError, match="four"):
        judge_prompt_template(bad)


def test_a_bootstrap_beyond_the_limit_is_one_line(tmp_path: Path) -> None:
    template, _, _ = _fixture(tmp_path)
    for verb in (["score", "--judgments", str(tmp_path)], ["agree", "--a", str(tmp_path), "--b", str(tmp_path)]):
        result = CliRunner().invoke(app, ["mmhal", *verb, "--template", str(template), "--bootstrap", "100000000"])
        assert result.exit_code == 2 and "--bootstrap" in result.output and len(result.output.strip().splitlines()) == 1, result.output
