"""Run directories that were cut, hand-edited or replaced: every float round-trips, and every
bad input is one line naming the file and the line (never a traceback, never a wrong number)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.jsonl import read_records
from halluprobe.readouts.logits import decide, logsumexp, read_dynamic
from halluprobe.readouts.tokensets import piece_token_sets
from halluprobe.records import ReadoutResult, Response, Sample, TokenLogprob
from halluprobe.rundir import RunDir
from test_pipeline import _make_world, _run_args

runner = CliRunner()
DEEP = "[" * 200_000


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete scripted run (72 samples) whose files each test copies and damages."""
    root = tmp_path_factory.mktemp("finished")
    world = _make_world(root)
    out = root / "run"
    result = runner.invoke(app, _run_args(world, out, "--template", "Frage: {question} — Antwort?"))
    assert result.exit_code == 0, result.output
    return out


def _copy(run: Path, to: Path) -> Path:
    to.mkdir()
    for f in run.iterdir():
        (to / f.name).write_bytes(f.read_bytes())
    return to


def _lines(run: Path) -> list[bytes]:
    return (run / "samples.jsonl").read_bytes().split(b"\n")[:-1]


def _refused(run: Path, match: str) -> InputError:
    """Reading the samples is refused with one line; so is `score`, with exit code 2."""
    with pytest.raises(InputError, match=match) as caught:
        RunDir(run).read_samples()
    result = runner.invoke(app, ["score", str(run)])
    assert result.exit_code == 2 and result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1, result.output
    return caught.value


# -- floats ----------------------------------------------------------------------------------


def test_records_refuse_non_finite_floats_and_round_trip_the_rest() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValidationError):
            TokenLogprob(id=1, piece="Yes", logprob=bad)
        with pytest.raises(ValidationError):
            Response(split="s", question_id=1, candidates={"1": bad})
    with pytest.raises(ValidationError):
        ReadoutResult(decision="yes", p_yes=1.5)
    with pytest.raises(ValidationError):
        ReadoutResult(decision="yes", yes_score=math.nan)
    # -inf (no mass) is a legitimate score: null in memory as on disk
    no_mass = decide(-0.1, -math.inf)
    assert no_mass.decision == "yes" and no_mass.no_score is None and no_mass.p_yes == 1.0
    sample = Sample(
        split="s", question_id=1, image="a.png", object="cat", label="yes", prompt="p",
        first_token=[TokenLogprob(id=1, piece="Yes", logprob=-1e-300)], candidates={"1": -745.0, "2": -0.0},
        readouts={"dynamic": no_mass}, latency_s=5e-324,
    )  # fmt: skip
    assert Sample.model_validate_json(sample.model_dump_json()) == sample


def test_dynamic_reads_no_decision_from_a_nan() -> None:
    sets = piece_token_sets("openai:m")
    for candidates in ({"Yes": math.nan, "No": -1.0}, {"No": -1.0, "Yes": math.nan}, {"Yes": -0.1, "yes": math.nan, "No": -3.0}):
        result = read_dynamic(candidates, sets)
        assert result.decision == "unknown" and result.p_yes is None, candidates
    assert math.isnan(logsumexp([-1.0, math.nan])) and math.isnan(logsumexp([math.nan, -1.0]))
    assert decide(math.inf, -1.0).decision == "unknown"


@pytest.mark.parametrize("where", ["middle", "last with newline", "last without newline"])
def test_a_hand_written_nan_is_refused_with_its_line(finished: Path, tmp_path: Path, where: str) -> None:
    run = _copy(finished, tmp_path / "run")
    lines = _lines(run)
    index = 5 if where == "middle" else len(lines) - 1
    record = json.loads(lines[index])
    record["candidates"][next(iter(record["candidates"]))] = "NaN"
    lines[index] = json.dumps(record).replace('"NaN"', "NaN").encode()
    (run / "samples.jsonl").write_bytes(b"\n".join(lines) + (b"" if where == "last without newline" else b"\n"))
    err = _refused(run, "finite number")
    assert err.path == str(run / "samples.jsonl") and err.line == index + 1


def test_a_stored_p_yes_outside_0_1_is_refused(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path / "run")
    lines = _lines(run)
    record = json.loads(lines[3])
    record["readouts"] = {"dynamic": {"decision": "yes", "p_yes": 1.25}}  # as a run dir of halluprobe 0.1 stored it
    lines[3] = json.dumps(record).encode()
    (run / "samples.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    assert _refused(run, "p_yes").line == 4


# -- bytes, nesting, directories ------------------------------------------------------------------


def test_non_utf8_bytes_are_refused_with_their_line(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path / "samples")
    lines = _lines(run)
    lines[7] = lines[7].replace("—".encode(), b"\xe9")  # latin-1, not UTF-8
    (run / "samples.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    assert _refused(run, "not UTF-8").line == 8
    header = _copy(finished, tmp_path / "header")
    text = (header / "run.json").read_bytes()
    (header / "run.json").write_bytes(text.replace("—".encode(), b"\xe9"))
    with pytest.raises(InputError, match="not UTF-8") as caught:
        RunDir(header).read_header()
    assert caught.value.line == text[: text.index("—".encode())].count(b"\n") + 1
    assert runner.invoke(app, ["score", str(header)]).exit_code == 2


def test_json_nested_too_deeply_is_refused_by_every_reader(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path / "samples")
    lines = _lines(run)
    (run / "samples.jsonl").write_bytes(b"\n".join([*lines[:2], DEEP.encode(), *lines[2:]]) + b"\n")
    assert _refused(run, "recursion limit").line == 3
    header = _copy(finished, tmp_path / "header")
    (header / "run.json").write_text(DEEP)
    with pytest.raises(InputError, match="invalid run header"):
        RunDir(header).read_header()
    (header / "requests.json").write_text(DEEP)
    with pytest.raises(InputError, match="nested too deeply"):
        RunDir(header).read_request_stats()
    for content in (DEEP, f'{{"question_id": 1, "image": {DEEP}'):
        bench = tmp_path / "bench.jsonl"
        bench.write_text('{"a": 1}\n' + content + "\n")
        with pytest.raises(InputError, match=r"bench.jsonl:2: malformed JSON: nested too deeply"):
            read_records(bench, "benchmark")
    whole = tmp_path / "bench.json"
    whole.write_text(DEEP)
    with pytest.raises(InputError, match="nested too deeply"):
        read_records(whole, "benchmark")


@pytest.mark.parametrize("name", ["run.json", "samples.jsonl"])
def test_a_directory_where_a_file_belongs_is_one_line(finished: Path, tmp_path: Path, name: str) -> None:
    run = _copy(finished, tmp_path / "run")
    (run / name).unlink()
    (run / name).mkdir()
    with pytest.raises(InputError, match="cannot read"):
        RunDir(run).read_header() if name == "run.json" else RunDir(run).read_samples()
    result = runner.invoke(app, ["score", str(run)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output


# -- a cut inside a multi-byte character ------------------------------------------------------------


def test_a_kill_cutting_inside_a_multibyte_character_is_a_truncated_line(tmp_path: Path) -> None:
    """kill -9 a real run, then cut its last line inside the 3-byte '—' of the prompt, as a kill
    mid-write does: score ignores that line (documented), resume drops it and completes."""
    world = _make_world(tmp_path)
    script = json.loads(world["script"].read_text())
    script["delay_s"] = 0.15
    world["script"].write_text(json.dumps(script))
    out = tmp_path / "run"
    args = _run_args(world, out, "--batch-size", "4", "--template", "Frage: {question} — Antwort?")
    proc = subprocess.Popen([sys.executable, "-m", "halluprobe.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    samples_file = out / "samples.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (samples_file.exists() and samples_file.read_bytes().count(b"\n") >= 12):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    data = samples_file.read_bytes()
    complete = data.count(b"\n")
    assert 12 <= complete < 72
    last = data[: -1].rsplit(b"\n", 1)[-1]
    cut = last.index("—".encode()) + 1  # one byte of three: not decodable
    samples_file.write_bytes(data + last[:cut])
    assert len(RunDir(out).read_samples()) == complete
    scored = runner.invoke(app, ["score", str(out), "--json"])
    assert scored.exit_code == 0, scored.output
    script["delay_s"] = 0.0
    world["script"].write_text(json.dumps(script))
    resumed = runner.invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    keys = [s.key for s in RunDir(out).read_samples()]
    assert len(keys) == len(set(keys)) == 72 and samples_file.read_bytes().endswith(b"\n")


# -- overwrite ------------------------------------------------------------------------------------


def test_overwrite_removes_every_file_of_the_previous_run(tmp_path: Path) -> None:
    world = _make_world(tmp_path, n_images=2)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out)).exit_code == 0
    assert runner.invoke(app, ["score", str(out)]).exit_code == 0
    assert runner.invoke(app, ["audit", str(out), "--resamples", "20"]).exit_code == 0
    assert {"metrics.json", "audit.json"} <= {p.name for p in out.iterdir()}
    again = runner.invoke(app, _run_args(world, out, "--overwrite", "--limit", "2"))
    assert again.exit_code == 0, again.output
    left = {p.name for p in out.iterdir()}
    assert "audit.json" not in left and "metrics.json" not in left
