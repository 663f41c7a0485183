"""Pipeline logic with the scripted backend: run dir, resume after a kill, errors, CLI exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _scored import with_readouts  # noqa: E402
from PIL import Image
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.rundir import RunDir

runner = CliRunner()

OBJECTS = ["cat", "dog", "umbrella", "cup", "car", "person"]


def _make_world(root: Path, n_images: int = 6) -> dict[str, Path]:
    """Images on disk, two POPE split files (6 questions per image), and a scripted-backend script."""
    images = root / "images"
    images.mkdir()
    present: dict[str, list[str]] = {}
    for i in range(n_images):
        name = f"img{i}.png"
        Image.new("RGB", (8, 8), (i * 30 % 255, 10, 10)).save(images / name)
        present[name] = OBJECTS[i % 3 : i % 3 + 2]
    bench = root / "bench"
    bench.mkdir()
    for split in ("random", "adversarial"):
        lines = []
        qid = 1
        for name, objs in present.items():
            absent = [o for o in OBJECTS if o not in objs]
            for obj, label in [(objs[0], "yes"), (absent[0], "no"), (objs[1], "yes"), (absent[1], "no"), (absent[2], "no"), (absent[3], "no")]:
                article = "an" if obj[0] in "aeiou" else "a"
                lines.append(json.dumps({"question_id": qid, "image": name, "text": f"Is there {article} {obj} in the image?", "label": label}))
                qid += 1
        (bench / f"toy_pope_{split}.json").write_text("\n".join(lines) + "\n")
    script = root / "script.json"
    script.write_text(json.dumps({"present": present, "hallucinate": {"dog": 0.5, "car": 0.3}, "seed": 1}))
    return {"images": images, "random": bench / "toy_pope_random.json", "adversarial": bench / "toy_pope_adversarial.json", "script": script}


def _run_args(world: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "run", "--backend", "scripted", "--model", str(world["script"]),
        "--benchmark", str(world["random"]), "--benchmark", str(world["adversarial"]),
        "--images", str(world["images"]), "--out", str(out), *extra,
    ]  # fmt: skip


def test_run_writes_header_then_every_question_once(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    result = runner.invoke(app, _run_args(world, out, "--batch-size", "5"))
    assert result.exit_code == 0, result.output
    rundir = RunDir(out)
    header = rundir.read_header()
    assert header.backend == "scripted"
    assert set(header.benchmarks) == {"random", "adversarial"}
    samples = with_readouts(rundir.read_samples(), header)
    assert len(samples) == 72 and len({s.key for s in samples}) == 72
    assert rundir.complete_path.exists()
    # every readout from the one response
    assert set(samples[0].readouts) == {"legacy_2tok", "legacy_8tok", "dynamic", "text:pope", "text:exact", "text:yorn", "text:strict"}
    # what is stored is the raw outputs: readouts are applied at score time
    assert all(not s.readouts and s.candidates and s.text for s in rundir.read_samples())
    # a present object is answered yes by every readout the script can express
    first = next(s for s in samples if s.label == "yes")
    assert first.readouts["dynamic"].decision == "yes" and first.readouts["text:strict"].decision == "yes"
    assert first.prompt == f"USER: <image>\n{first.prompt.split(chr(10))[1]}\nASSISTANT:"


def test_existing_run_is_not_overwritten_and_resume_refuses_changed_fingerprint(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--limit", "3")).exit_code == 0
    before = (out / "samples.jsonl").read_bytes()
    again = runner.invoke(app, _run_args(world, out))
    assert again.exit_code == 2 and "run.json" in again.output and "--resume" in again.output
    changed = runner.invoke(app, _run_args(world, out, "--resume", "--template", "Q: {question} A:"))
    assert changed.exit_code == 2 and "refusing to resume" in changed.output
    assert (out / "samples.jsonl").read_bytes() == before
    # the same settings resume and complete; --limit grows the run without repeating
    resumed = runner.invoke(app, _run_args(world, out, "--resume"))
    assert resumed.exit_code == 0, resumed.output
    samples = RunDir(out).read_samples()
    assert len(samples) == 72 and len({s.key for s in samples}) == 72


def test_killed_run_resumes_with_every_question_exactly_once(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    script = json.loads(world["script"].read_text())
    script["delay_s"] = 0.15
    world["script"].write_text(json.dumps(script))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "halluprobe.cli", *_run_args(world, out, "--batch-size", "4")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    samples_file = out / "samples.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if samples_file.exists() and samples_file.read_text().count("\n") >= 12:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = RunDir(out).read_samples()
    assert 12 <= len(partial) < 72
    # a crash in the middle of a write leaves half a line: resume must cut it, not keep it
    with open(samples_file, "a") as fh:
        fh.write('{"split": "random", "question_id": 9')
    assert not RunDir(out).complete_path.exists()
    script["delay_s"] = 0.0
    world["script"].write_text(json.dumps(script))  # same path: the fingerprint does not read the script
    result = runner.invoke(app, _run_args(world, out, "--resume", "--batch-size", "4"))
    assert result.exit_code == 0, result.output
    samples = RunDir(out).read_samples()
    keys = [s.key for s in samples]
    assert len(keys) == 72 and len(set(keys)) == 72
    assert samples_file.read_text().endswith("\n")
    assert RunDir(out).complete_path.exists()


def test_missing_image_is_a_sample_error_and_never_counted_as_answered(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    (world["images"] / "img0.png").unlink()
    out = tmp_path / "run"
    result = runner.invoke(app, _run_args(world, out))
    assert result.exit_code == 0, result.output
    assert "12 errors" in result.output
    samples = RunDir(out).read_samples()
    errored = [s for s in samples if s.error]
    assert len(errored) == 12 and all(s.image == "img0.png" and not s.readouts for s in errored)
    scored = runner.invoke(app, ["score", str(out), "--json", "--resamples", "50"])
    assert scored.exit_code == 0, scored.output
    report = json.loads(scored.stdout)
    assert report["pooled"]["errors"] == 12 and report["pooled"]["n"] == 72
    assert json.loads((out / "metrics.json").read_text())["readout"] == "dynamic"


def test_score_refuses_invalid_legacy_readout_unless_forced(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out)).exit_code == 0
    refused = runner.invoke(app, ["score", str(out), "--readout", "legacy_2tok"])
    assert refused.exit_code == 2 and "--force-invalid" in refused.output
    unknown = runner.invoke(app, ["score", str(out), "--readout", "nonsense"])
    assert unknown.exit_code == 2 and "nonsense" in unknown.output


def test_compat_honours_force_invalid_like_the_plain_score(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out)).exit_code == 0
    compat = ["score", str(out), "--readout", "legacy_2tok", "--compat", "lmms-eval"]
    refused = runner.invoke(app, compat)
    assert refused.exit_code == 2 and "--force-invalid" in refused.output
    forced = runner.invoke(app, [*compat, "--force-invalid"])
    assert forced.exit_code == 0, forced.output
    printed = json.loads(forced.stdout)
    # the same decisions as the plain score: lmms-eval's accuracy is `--unknown wrong`'s
    plain = runner.invoke(app, ["score", str(out), "--readout", "legacy_2tok", "--force-invalid", "--json", "--resamples", "0"])
    assert plain.exit_code == 0, plain.output
    report = json.loads(plain.stdout)
    for split in ("random", "adversarial"):
        assert printed[split]["n"] == report["splits"][split]["n"] == 36
        assert printed[split]["pope_accuracy"] == pytest.approx(report["splits"][split]["accuracy"])


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ('{"question_id": 1, "image": "img0.png", "text": "Is there a cat in the image?", "label": "yes"}\n{"question_id": 2,', 2, "JSON"),
        ('{"question_id": 1, "image": "img0.png", "text": "Is there a cat in the image?", "label": "maybe"}\n', 1, "label"),
        ('{"question_id": 1, "image": "img0.png", "label": "yes"}\n', 1, "text"),
        (
            '{"question_id": 1, "image": "img0.png", "text": "Is there a cat in the image?", "label": "yes"}\n'
            '{"question_id": 1, "image": "img1.png", "text": "Is there a dog in the image?", "label": "no"}\n',
            2,
            "duplicate",
        ),
    ],
)
def test_bad_benchmark_gives_exit_2_with_file_and_line(tmp_path: Path, content: str, line: int, problem: str) -> None:
    world = _make_world(tmp_path)
    world["random"].write_text(content)
    result = runner.invoke(app, _run_args(world, tmp_path / "run"))
    assert result.exit_code == 2
    assert f"{world['random']}:{line}:" in result.output
    assert problem.lower() in result.output.lower()
    assert not (tmp_path / "run" / "run.json").exists()


def test_empty_benchmark_file_gives_exit_2(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    world["random"].write_text("")
    result = runner.invoke(app, _run_args(world, tmp_path / "run"))
    assert result.exit_code == 2 and str(world["random"]) in result.output


def test_third_party_answers_scored_by_order_and_by_id(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    labels = [json.loads(x) for x in world["random"].read_text().splitlines()]
    # perfect answers except two: "Not sure" (yes for POPE's script, unknown for strict)
    answers = [{"question": q["text"], "answer": "Yes" if q["label"] == "yes" else "No"} for q in labels]
    answers[1]["answer"] = "Not sure"  # label no
    answers[0]["answer"] = "Not sure"  # label yes
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(json.dumps(a) for a in answers) + "\n")
    pope = json.loads(runner.invoke(app, ["score", "--answers", str(path), "--labels", str(world["random"]), "--rule", "pope", "--json"]).output)
    strict = json.loads(runner.invoke(app, ["score", "--answers", str(path), "--labels", str(world["random"]), "--rule", "strict", "--json"]).output)
    m = pope["splits"]["random"]
    assert (m["tp"], m["fp"], m["tn"], m["fn"], m["unknown"]) == (12, 1, 23, 0, 0)
    m = strict["splits"]["random"]
    assert (m["tp"], m["fp"], m["tn"], m["fn"], m["unknown"]) == (11, 0, 23, 0, 2)
    # with question ids, shuffled order pairs the same way
    with_ids = [dict(a, question_id=q["question_id"]) for a, q in zip(answers, labels)][::-1]
    path.write_text("\n".join(json.dumps(a) for a in with_ids) + "\n")
    by_id = json.loads(runner.invoke(app, ["score", "--answers", str(path), "--labels", str(world["random"]), "--rule", "pope", "--json"]).output)
    assert by_id["splits"] == pope["splits"]


def test_third_party_answers_mismatch_gives_exit_2_with_line(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    labels = [json.loads(x) for x in world["random"].read_text().splitlines()]
    answers = [{"question": q["text"], "answer": "Yes"} for q in labels]
    answers[4]["question"] = "Is there a giraffe in the image?"
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(json.dumps(a) for a in answers) + "\n")
    result = runner.invoke(app, ["score", "--answers", str(path), "--labels", str(world["random"])])
    assert result.exit_code == 2 and f"{path}:5:" in result.output
    path.write_text('{"question": "x"}\n')
    result = runner.invoke(app, ["score", "--answers", str(path), "--labels", str(world["random"])])
    assert result.exit_code == 2 and f"{path}:1:" in result.output
    # a text rule reads the answers: there is no legacy id to force, so the flag is refused, not ignored
    forced = runner.invoke(app, ["score", "--answers", str(path), "--labels", str(world["random"]), "--force-invalid"])
    assert forced.exit_code == 2 and "--force-invalid is for a run dir" in forced.output


def test_config_file_and_environment_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = _make_world(tmp_path)
    config = tmp_path / "run.toml"
    config.write_text('[run]\nbackend = "hf"\nlimit = 2\ntext = false\n')
    monkeypatch.setenv("HALLUPROBE_BACKEND", "scripted")  # environment beats the file
    out = tmp_path / "run"
    args = ["run", "--config", str(config), "--model", str(world["script"]), "--benchmark", str(world["random"]),
            "--images", str(world["images"]), "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    header = RunDir(out).read_header()
    assert header.backend == "scripted" and header.limit == 2 and header.text_rules == []
    # a flag beats both
    result = runner.invoke(app, [*args, "--overwrite", "--limit", "4"])
    assert result.exit_code == 0, result.output
    assert len(RunDir(out).read_samples()) == 4


def test_help_explains_every_verb() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in ("build", "data", "run", "score", "tokens", "demo"):
        assert verb in result.output


def test_score_markdown_table_carries_counts_splits_and_ci(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out)).exit_code == 0
    report = json.loads(runner.invoke(app, ["score", str(out), "--json", "--resamples", "100"]).output)
    md = runner.invoke(app, ["score", str(out), "--markdown", "--resamples", "100"]).output
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ") and "split" not in line}
    assert set(rows) == {"random", "adversarial", "pooled", "macro"}
    m = report["splits"]["adversarial"]
    cells = [c.strip() for c in rows["adversarial"].split("|")[2:-1]]
    assert cells[:5] == [str(m["n"]), str(m["tp"]), str(m["fp"]), str(m["tn"]), str(m["fn"])]
    lo, hi = m["ci"]["f1"]
    assert cells[10] == f"{m['f1']:.4f} [{lo:.4f}, {hi:.4f}]"
    assert "unknown=wrong" in md and "100 resamples" in md


def test_scripted_backend_refuses_unknown_script_keys(tmp_path: Path) -> None:
    """A misspelt key would otherwise script nothing, silently."""
    from halluprobe.backends.scripted import ScriptedBackend
    from halluprobe.errors import InputError

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}, "texts": {"a": "b"}}))
    with pytest.raises(InputError, match=r"unknown scripted backend keys \['texts'\]"):
        ScriptedBackend(str(script))
