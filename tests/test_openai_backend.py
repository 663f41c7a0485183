"""The openai backend against a loopback server the tests control (tests/_openai_server.py).

Every test talks real HTTP over 127.0.0.1: realistic chat-completion JSON with logprobs, and
injected 429s, 5xx, timeouts, cut JSON, connection resets and a server that dies mid-run.
Backoff is shortened with ``--backend-option backoff_base_s=0.01`` so the suite stays fast.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any, Optional

import pytest
from _scored import scored_samples  # noqa: E402
from PIL import Image
from typer.testing import CliRunner

from _openai_server import FakeChatServer, expected_answer
from halluprobe.backends.openai.wire import chat_url, retry_after
from halluprobe.cli import app
from halluprobe.cli._backend import BackendSpec, with_secondary_backend
from halluprobe.errors import InputError
from halluprobe.readouts.logits import read_dynamic
from halluprobe.readouts.tokensets import greedy_answer, piece_token_sets
from halluprobe.records import GenerateConfig, TokenLogprob
from halluprobe.rundir import RunDir
from halluprobe.scoring import score_rundir
from halluprobe.shards import parse_shard, shard_of

runner = CliRunner()

OBJECTS = ["cat", "dog", "umbrella", "cup", "car", "person"]
FAST = ["--backend-option", "backoff_base_s=0.01", "--backend-option", "backoff_max_s=0.05"]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(path))
    return path


def _world(root: Path, n_images: int = 8) -> dict[str, Any]:
    """Images, two POPE splits of 6 questions per image (their positives repeat across splits)."""
    images = root / "images"
    images.mkdir()
    shas: dict[str, str] = {}
    for i in range(n_images):
        name = f"img{i}.png"
        Image.new("RGB", (8, 8), (i * 30 % 255, 90, 200 - i)).save(images / name)
        shas[name] = hashlib.sha256((images / name).read_bytes()).hexdigest()
    bench = root / "bench"
    bench.mkdir()
    paths = {}
    for s, split in enumerate(("random", "adversarial")):
        lines = []
        qid = 1
        for i, name in enumerate(shas):
            for j in range(6):
                obj = OBJECTS[(i + j + 3 * s * (j % 2)) % len(OBJECTS)]
                label = "yes" if j % 2 == 0 else "no"
                article = "an" if obj[0] in "aeiou" else "a"
                lines.append(json.dumps({"question_id": qid, "image": name, "text": f"Is there {article} {obj} in the image?", "label": label}))
                qid += 1
        paths[split] = bench / f"toy_pope_{split}.json"
        paths[split].write_text("\n".join(lines) + "\n")
    return {"images": images, "shas": shas, **paths}


def _args(world: dict[str, Any], out: Path, endpoints: list[str], *extra: str) -> list[str]:
    args = [
        "run", "--backend", "openai", "--model", "tiny-vlm",
        "--benchmark", str(world["random"]), "--benchmark", str(world["adversarial"]),
        "--images", str(world["images"]), "--out", str(out), *FAST,
    ]  # fmt: skip
    for url in endpoints:
        args += ["--endpoint", url]
    return args + list(extra)


def _invoke(args: list[str]) -> Any:
    result = runner.invoke(app, args)
    return result


def _check_answers(world: dict[str, Any], out: Path, *, allow_errors: bool = False) -> list[Any]:
    """Every sample's dynamic decision and p_yes are the server's deterministic answer."""
    samples = scored_samples(out)
    for s in samples:
        if s.error:
            assert allow_errors, s.error
            continue
        says_yes, p_top = expected_answer(world["shas"][s.image], s.object or "")
        dyn = s.readouts["dynamic"]
        assert dyn.decision == ("yes" if says_yes else "no"), (s.key, dyn)
        assert s.first_token[0].id is None and s.first_token[0].piece == ("Yes" if says_yes else "No")
        assert math.isclose(s.first_token[0].logprob, math.log(p_top))
    return samples


def _assert_close(a: Any, b: Any) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (a, b)
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_close(a[k], b[k])
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_close(x, y)
    else:
        assert a == b


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- readouts from returned pieces ----------------------------------------------------------


def test_run_reads_every_readout_from_returned_pieces(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = tmp_path / "run"
    with FakeChatServer(offset_objects=("umbrella",)) as server:
        result = _invoke(_args(world, out, [server.url]))
    assert result.exit_code == 0, result.output
    header = RunDir(out).read_header()
    sets = header.token_sets
    assert sets is not None and sets.keyed_by == "piece" and not sets.legacy_valid
    assert header.backend_info["endpoints"] == [server.url] and header.backend_info["dtype"] == "server"
    samples = scored_samples(out)
    assert len(samples) == 2 * 8 * 6 and not any(s.error for s in samples)
    for s in samples:
        says_yes, _ = expected_answer(world["shas"][s.image], s.object or "")
        dyn = s.readouts["dynamic"]
        assert dyn.decision == ("yes" if says_yes else "no")
        # dynamic = logsumexp over every returned piece that normalises to yes (no)
        yes = [v for k, v in s.candidates.items() if k.strip().casefold() == "yes"]
        assert len(yes) == 3 and math.isclose(dyn.yes_score or 0.0, math.log(sum(math.exp(v) for v in yes)))
        assert s.readouts["legacy_2tok"].decision == "unknown"
        if s.object == "umbrella":  # the argmax piece is outside both sets
            assert s.offset_argmax == "There" and s.text == "There is a umbrella in the image"
        else:
            assert s.offset_argmax is None and s.text in ("Yes", "No")
            assert s.readouts["text:strict"].decision == dyn.decision
    # the request is what a chat server expects
    body = server.bodies[0]
    assert body["model"] == "tiny-vlm" and body["temperature"] == 0 and body["logprobs"] is True
    assert body["top_logprobs"] == 20 and body["stop"] == [".", "\n"] and body["max_tokens"] == 8
    parts = body["messages"][0]["content"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,") and parts[1]["text"].startswith("Is there")
    # POPE's splits repeat questions: identical requests went out once
    distinct = len({(s.image, s.prompt) for s in samples})
    assert server.requests == distinct < len(samples)
    stats = RunDir(out).read_request_stats()["total"]
    assert stats["sent"] == distinct and stats["deduplicated"] == len(samples) - distinct
    assert stats["attempts"]["ok"] == distinct and stats["retries"] == 0
    # legacy readouts are refused by score (ids are not what a server reports)
    refused = _invoke(["score", str(out), "--readout", "legacy_2tok"])
    assert refused.exit_code == 2 and "LLaMA-2 ids" in refused.output


def test_piece_keyed_dynamic_readout_table() -> None:
    sets = piece_token_sets("openai:m")
    both = read_dynamic({"▁Yes": math.log(0.5), " yes": math.log(0.1), "No": math.log(0.2), "There": math.log(0.2)}, sets)
    assert both.decision == "yes" and math.isclose(both.p_yes or 0.0, 0.6 / 0.8)
    only_no = read_dynamic({"No": -0.1, "Maybe": -3.0}, sets)  # no yes piece among the top K
    assert only_no.decision == "no" and only_no.yes_score is None and only_no.p_yes == 0.0
    neither = read_dynamic({"There": -0.1}, sets)
    assert neither.decision == "unknown" and neither.p_yes is None
    assert read_dynamic({"n o": -0.1, "yess": -0.2}, sets).decision == "unknown"  # the rule, not a prefix match
    assert greedy_answer(TokenLogprob(id=None, piece="\u0120No", logprob=0.0), sets) == "no"
    assert greedy_answer(TokenLogprob(id=None, piece="There", logprob=0.0), sets) is None


# -- faults -----------------------------------------------------------------------------------


def test_429_waits_for_retry_after(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=2)
    out = tmp_path / "run"

    def fault(key: str, attempt: int, body: dict[str, Any]) -> str | None:
        return "429:0.4" if "cat" in key and attempt == 1 else None

    with FakeChatServer(fault=fault) as server:
        result = _invoke(_args(world, out, [server.url]))
    assert result.exit_code == 0, result.output
    _check_answers(world, out)
    by_key: dict[str, list[float]] = {}
    for seen in server.seen:
        by_key.setdefault(seen["key"], []).append(seen["t"])
    limited = [times for key, times in by_key.items() if "cat" in key]
    assert limited and all(len(t) == 2 and t[1] - t[0] >= 0.4 for t in limited)
    stats = RunDir(out).read_request_stats()["total"]
    assert stats["attempts"]["http_429"] == len(limited) == server.outcomes["429:0.4"]
    assert stats["retries"] == len(limited)


def test_transient_faults_are_retried_and_nothing_is_lost(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = tmp_path / "run"
    faults = {"cat": "500", "dog": "timeout", "cup": "malformed", "car": "reset", "person": "503"}

    def fault(key: str, attempt: int, body: dict[str, Any]) -> str | None:
        obj = key.split("Is there ", 1)[1].split(" ", 2)[1]
        return faults.get(obj) if attempt <= (2 if obj == "person" else 1) else None

    with FakeChatServer(fault=fault, stall_s=4.0) as server:
        result = _invoke(_args(world, out, [server.url], "--backend-option", "timeout_s=2"))
    assert result.exit_code == 0, result.output
    samples = _check_answers(world, out)
    assert len(samples) == 96
    stats = RunDir(out).read_request_stats()["total"]["attempts"]
    assert stats["http_5xx"] == server.outcomes["500"] + server.outcomes["503"] > 0
    assert stats["timeout"] == server.outcomes["timeout"] > 0
    assert stats["malformed"] == server.outcomes["malformed"] > 0
    assert stats["connection"] == server.outcomes["reset"] > 0
    assert stats["ok"] == server.outcomes["ok"]


def test_a_failing_request_is_bounded_and_recorded_while_the_run_goes_on(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = tmp_path / "run"
    poison, rejected, bare = "img0.png", "img1.png", "img2.png"

    def fault(key: str, attempt: int, body: dict[str, Any]) -> str | None:
        sha = key.split("|")[0]
        if sha == world["shas"][poison][:16] and "cat" in key:
            return "503"  # always
        if sha == world["shas"][rejected][:16] and "dog" in key:
            return "400"
        if sha == world["shas"][bare][:16] and "cup" in key:
            return "nologprobs"
        return None

    with FakeChatServer(fault=fault) as server:
        result = _invoke(_args(world, out, [server.url], "--backend-option", "max_retries=3"))
    assert result.exit_code == 0, result.output
    samples = _check_answers(world, out, allow_errors=True)
    errors = {s.key: s.error for s in samples if s.error}
    poisoned = [s for s in samples if s.image == poison and s.object == "cat"]
    assert poisoned and all("gave up after 4 attempts" in (s.error or "") and "HTTP 503" in (s.error or "") for s in poisoned)
    assert all(n == 4 for key, n in server.attempts.items() if key.startswith(world["shas"][poison][:16]) and "cat" in key)
    refused = [s for s in samples if s.image == rejected and s.object == "dog"]
    assert refused and all("HTTP 400" in (s.error or "") for s in refused)
    assert all(n == 1 for key, n in server.attempts.items() if key.startswith(world["shas"][rejected][:16]) and "dog" in key)
    bare_samples = [s for s in samples if s.image == bare and s.object == "cup"]
    assert bare_samples and all("logprobs" in (s.error or "") for s in bare_samples)
    assert len(errors) == len(poisoned) + len(refused) + len(bare_samples)
    score = _invoke(["score", str(out), "--json"])
    assert json.loads(score.stdout)["pooled"]["errors"] == len(errors)


def test_server_dying_mid_run_stops_it_and_resume_completes(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = tmp_path / "run"
    count = {"n": 0}
    lock = threading.Lock()

    def fault(key: str, attempt: int, body: dict[str, Any]) -> str | None:
        with lock:
            count["n"] += 1
            return "die" if count["n"] == 20 else None

    with FakeChatServer(fault=fault, latency_s=0.01) as first:
        died = _invoke(_args(world, out, [first.url], "--concurrency", "4", "--backend-option", "max_retries=3"))
    assert died.exit_code == 1
    assert "every endpoint keeps failing" in died.output and "--resume" in died.output
    partial = RunDir(out).read_samples()
    assert 0 < len(partial) < 96 and not any(s.error for s in partial)
    session = RunDir(out).read_request_stats()["sessions"][0]
    assert session["not_answered"] == 96 - len(partial) and session["attempts"]["connection"] > 0
    with FakeChatServer() as second:  # back, on another port: endpoints are not in the fingerprint
        resumed = _invoke(_args(world, out, [second.url], "--resume"))
    assert resumed.exit_code == 0, resumed.output
    assert f"{96 - len(partial)} answered, {len(partial)} already done, 0 errors" in resumed.output
    samples = _check_answers(world, out)
    assert len(samples) == 96 and RunDir(out).complete_path.exists()
    assert len(RunDir(out).read_request_stats()["sessions"]) == 2


def test_every_request_rejected_stops_the_run(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=4)
    with FakeChatServer(fault=lambda key, attempt, body: "400") as server:
        result = _invoke(_args(world, tmp_path / "run", [server.url], "--concurrency", "2"))
    assert result.exit_code == 1 and "rejected" in result.output
    assert server.requests < 16  # stopped early, not one error per question


def test_requests_rejected_before_the_stop_are_asked_again_on_resume(tmp_path: Path) -> None:
    """A server that rejects some requests (a misconfiguration), then is fixed: the errored
    samples are asked again by --resume, and the run is complete only when none is left."""
    world = _world(tmp_path, n_images=4)
    out = tmp_path / "run"
    rejected = world["shas"]["img1.png"][:16]
    with FakeChatServer(fault=lambda key, attempt, body: "400" if key.startswith(rejected) else None) as server:
        first = _invoke(_args(world, out, [server.url], "--concurrency", "2"))
    assert first.exit_code == 0, first.output
    errored = [s for s in RunDir(out).read_samples() if s.error]
    assert errored and all("HTTP 400" in (s.error or "") for s in errored) and not RunDir(out).complete_path.exists()
    with FakeChatServer() as fixed:  # the server works now
        second = _invoke(_args(world, out, [fixed.url], "--resume"))
    assert second.exit_code == 0, second.output
    assert f"{len(errored)} answered" in second.output and fixed.requests == len({(s.image, s.object) for s in errored})
    samples = RunDir(out).read_samples()
    assert not any(s.error for s in samples) and len(samples) == 4 * 12 and RunDir(out).complete_path.exists()


# -- concurrency, endpoints --------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_is_bounded(tmp_path: Path, concurrency: int) -> None:
    world = _world(tmp_path, n_images=3)
    out = tmp_path / "run"
    with FakeChatServer(latency_s=0.04) as server:
        result = _invoke(_args(world, out, [server.url], "--concurrency", str(concurrency)))
    assert result.exit_code == 0, result.output
    assert server.max_in_flight == concurrency
    assert RunDir(out).read_request_stats()["total"]["max_in_flight"] == concurrency


def test_endpoints_share_the_load_and_an_image_sticks_to_one(tmp_path: Path) -> None:
    world = _world(tmp_path)
    out = tmp_path / "run"
    with FakeChatServer(latency_s=0.01) as a, FakeChatServer(latency_s=0.01) as b:
        result = _invoke(_args(world, out, [a.url, b.url], "--concurrency", "4"))
    assert result.exit_code == 0, result.output
    _check_answers(world, out)
    assert a.requests > 0 and b.requests > 0
    port_of: dict[str, set[int]] = {}
    for seen in a.seen + b.seen:
        port_of.setdefault(seen["image"], set()).add(seen["port"])
    assert all(len(ports) == 1 for ports in port_of.values())  # the server's prefix cache sees each image once


def test_a_dead_endpoint_fails_over_to_a_live_one(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=4)
    out = tmp_path / "run"
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    with FakeChatServer() as live:
        result = _invoke(_args(world, out, [dead, live.url], "--concurrency", "4"))
    assert result.exit_code == 0, result.output
    samples = _check_answers(world, out)
    assert len(samples) == 48
    stats = RunDir(out).read_request_stats()["total"]
    assert stats["attempts"]["connection"] > 0 and stats["errors"] == 0


# -- cache, API key ----------------------------------------------------------------------------


def test_cache_makes_a_repeated_run_send_nothing(tmp_path: Path, _cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = _world(tmp_path, n_images=4)
    monkeypatch.setenv("HP_TEST_KEY", "sk-test-secret-4711")
    with FakeChatServer() as server:
        first = _invoke(_args(world, tmp_path / "one", [server.url], "--api-key-env", "HP_TEST_KEY"))
        sent = server.requests
        second = _invoke(_args(world, tmp_path / "two", [server.url], "--api-key-env", "HP_TEST_KEY"))
        after_second = server.requests
        third = _invoke(_args(world, tmp_path / "three", [server.url], "--no-cache"))
        after_third = server.requests
    assert first.exit_code == second.exit_code == third.exit_code == 0
    assert sent > 0 and after_second == sent and after_third == 2 * sent
    stats = RunDir(tmp_path / "two").read_request_stats()["total"]
    assert stats["cache_hits"] == sent and stats["sent"] == 0
    one, two = scored_samples(tmp_path / "one"), scored_samples(tmp_path / "two")
    assert {s.key: s.readouts for s in one} == {s.key: s.readouts for s in two}
    # the key went to the server, and nowhere on disk
    assert server.headers[0].get("Authorization") == "Bearer sk-test-secret-4711"
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not any(b"sk-test-secret-4711" in p.read_bytes() for p in files)
    assert RunDir(tmp_path / "one").read_header().backend_info["api_key_env"] == "HP_TEST_KEY"
    db = sqlite3.connect(_cache_dir / "responses.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == sent
    # no image bytes in the cache keys' source: a file:// URL of the same bytes hits the same entries
    fourth = _invoke(_args(world, tmp_path / "four", [f"http://127.0.0.1:{_free_port()}/v1"], "--image-url-mode", "file"))
    assert fourth.exit_code == 0, fourth.output  # the endpoint is dead: every answer came from the cache


def test_missing_api_key_variable_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = _world(tmp_path, n_images=1)
    monkeypatch.delenv("HP_NOT_SET", raising=False)
    result = _invoke(_args(world, tmp_path / "run", ["http://127.0.0.1:9/v1"], "--api-key-env", "HP_NOT_SET"))
    assert result.exit_code == 2 and "HP_NOT_SET" in result.output


# -- shards and merge ----------------------------------------------------------------------------


def test_shards_merge_into_the_one_piece_run(tmp_path: Path) -> None:
    world = _world(tmp_path)
    with FakeChatServer() as server:
        whole = _invoke(_args(world, tmp_path / "whole", [server.url], "--no-cache"))
        assert whole.exit_code == 0, whole.output
        parts = []
        for i in range(3):
            part = tmp_path / f"shard{i}"
            result = _invoke(_args(world, part, [server.url], "--shard", f"{i}/3", "--no-cache"))
            assert result.exit_code == 0, result.output
            parts.append(part)
    images = [{s.image for s in RunDir(p).read_samples()} for p in parts]
    assert all(images) and sum(len(i) for i in images) == len(set().union(*images)) == 8  # by image, disjoint
    assert RunDir(parts[1]).read_header().shard == "1/3"
    merged = tmp_path / "merged"
    result = _invoke(["merge", *map(str, parts), "--out", str(merged)])
    assert result.exit_code == 0, result.output
    assert "96 questions from 3 run dirs" in result.output
    assert RunDir(merged).read_header().shard is None and RunDir(merged).complete_path.exists()
    assert len(RunDir(merged).read_request_stats()["sessions"]) == 3
    for readout in ("dynamic", "text:pope"):
        a = score_rundir(tmp_path / "whole", readout=readout, n_resamples=200, write=False)
        b = score_rundir(merged, readout=readout, n_resamples=200, write=False)
        _assert_close(a.model_dump(), b.model_dump())  # rows come in another order: float sums may differ in the last bit
    audit = _invoke(["audit", str(merged), "--resamples", "50"])
    assert audit.exit_code == 0, audit.output
    report = _invoke(["report", str(merged), "--out", str(tmp_path / "report.html"), "--resamples", "50"])
    assert report.exit_code == 0, report.output
    assert "derived per sample from the pieces the server returned" in (tmp_path / "report.md").read_text()

    # refusals: each one line, exit 2, nothing written
    missing = _invoke(["merge", str(parts[0]), str(parts[1]), "--out", str(tmp_path / "m2")])
    assert missing.exit_code == 2 and "answered by no shard" in missing.output and not (tmp_path / "m2").exists()
    twice = _invoke(["merge", *map(str, parts), str(parts[0]), "--out", str(tmp_path / "m3")])
    assert twice.exit_code == 2 and "answered in both" in twice.output
    exists = _invoke(["merge", *map(str, parts), "--out", str(merged)])
    assert exists.exit_code == 2
    with FakeChatServer() as server:
        other = tmp_path / "other"
        result = _invoke(_args(world, other, [server.url], "--shard", "0/3", "--template", "Q: {question}"))
        assert result.exit_code == 0, result.output
        wrong_shard = _invoke(_args(world, parts[0], [server.url], "--shard", "1/3", "--resume"))
    differs = _invoke(["merge", str(other), str(parts[1]), str(parts[2]), "--out", str(tmp_path / "m4")])
    assert differs.exit_code == 2 and "fingerprints differ" in differs.output
    assert wrong_shard.exit_code == 2 and "shard 0/3" in wrong_shard.output


@pytest.mark.parametrize("spec", ["3/2", "2/2", "-1/2", "1", "a/b", "0/0"])
def test_bad_shard_is_one_line_and_exit_2(tmp_path: Path, spec: str) -> None:
    world = _world(tmp_path, n_images=1)
    result = _invoke(_args(world, tmp_path / "run", ["http://127.0.0.1:9/v1"], "--shard", spec))
    assert result.exit_code == 2 and "--shard must be I/N" in result.output
    assert not (tmp_path / "run").exists()


def test_shard_partition_is_stable_and_complete() -> None:
    assert parse_shard("0/1").count == 1 and str(parse_shard(" 2/5 ")) == "2/5"
    with pytest.raises(InputError):
        parse_shard("5/5")
    names = [f"COCO_val2014_{i:012d}.jpg" for i in range(2000)]
    counts = [0] * 4
    for name in names:
        counts[shard_of(name, 4)] += 1
    assert sum(counts) == 2000 and min(counts) > 400  # balanced
    # a pinned value: the partition must not change between releases (or machines)
    assert [shard_of(n, 7) for n in names[:6]] == [0, 5, 1, 5, 4, 6]
    assert shard_of("img0.png", 3) == int.from_bytes(hashlib.sha256(b"img0.png").digest()[:8], "big") % 3


# -- small pure helpers --------------------------------------------------------------------------


def test_retry_after_and_endpoint_urls() -> None:
    assert retry_after("3") == 3.0 and retry_after("0.25") == 0.25 and retry_after(None) is None
    assert retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now
    assert chat_url("http://h:8000") == ("http://h:8000/v1", "http://h:8000/v1/chat/completions")
    assert chat_url("http://h:8000/v1/") == ("http://h:8000/v1", "http://h:8000/v1/chat/completions")
    assert chat_url("https://api.x/v1/chat/completions")[1] == "https://api.x/v1/chat/completions"
    with pytest.raises(InputError):
        chat_url("h:8000")


# -- lifecycle: a consumer that stops early, a writer killed mid-way --------------------------------


def test_closing_the_answer_stream_cancels_what_is_in_flight(tmp_path: Path) -> None:
    from halluprobe.backends.openai.backend import OpenAIBackend
    from halluprobe.records import Request

    world = _world(tmp_path, n_images=4)
    requests = [
        Request(split="random", question_id=i * 10 + j, image_path=str(world["images"] / f"img{i}.png"), prompt=f"Is there a thing{j} in the image?")
        for i in range(4)
        for j in range(10)
    ]
    with FakeChatServer(latency_s=0.2) as server:
        backend = OpenAIBackend("tiny-vlm", endpoints=[server.url], concurrency=4, no_cache=True, flush_s=0.05)
        stream = backend.answer(requests, GenerateConfig(max_new_tokens=8, top_k=5))
        first = next(stream)
        stream.close()
        assert first and not any(r.error for r in first)
        assert not any(t.name == "halluprobe-openai" and t.is_alive() for t in threading.enumerate())
        assert server.requests < len(requests)
    stats = backend.request_stats()
    assert stats["requests"] == 40 and stats["not_answered"] > 0 and stats["max_in_flight"] == 4


def test_cache_survives_a_killed_writer(tmp_path: Path) -> None:
    import subprocess
    import sys

    from halluprobe.backends.response_cache import ResponseCache

    code = (
        "import os, sys; sys.path.insert(0, 'src');"
        "from pathlib import Path; from halluprobe.backends.response_cache import ResponseCache;"
        f"c = ResponseCache(Path({str(tmp_path)!r}));"
        "[c.put(f'k{i}', 'm', '{\"i\": %d}' % i) for i in range(50)];"
        "os.kill(os.getpid(), 9)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == -9
    cache = ResponseCache(tmp_path)
    try:
        assert [cache.get(f"k{i}") for i in (0, 49)] == ['{"i": 0}', '{"i": 49}'] and cache.get("k50") is None
    finally:
        cache.close()


def test_file_urls_name_the_image_on_a_shared_file_system(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=2)
    out = tmp_path / "run"
    with FakeChatServer() as server:
        result = _invoke(_args(world, out, [server.url], "--image-url-mode", "file", "--no-cache"))
    assert result.exit_code == 0, result.output
    _check_answers(world, out)
    urls = {b["messages"][0]["content"][0]["image_url"]["url"] for b in server.bodies}
    assert urls == {(world["images"] / f"img{i}.png").resolve().as_uri() for i in range(2)}
    bad = _invoke(_args(world, tmp_path / "bad", [server.url], "--image-url-mode", "ftp"))
    assert bad.exit_code == 2 and "--image-url-mode" in bad.output


def test_open_ended_run_sends_no_stop_strings_and_keeps_the_text(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=2)
    out = tmp_path / "open"
    with FakeChatServer() as server:
        result = _invoke(_args(world, out, [server.url], "--open-ended"))
        assert result.exit_code == 0, result.output
        assert server.bodies and all("stop" not in body for body in server.bodies)
    header = RunDir(out).read_header()
    assert header.open_ended and header.readouts == [] and header.generate is not None and header.generate.stops == ()
    samples = scored_samples(out)
    assert len(samples) == 2 * 2 * 6 and all(s.readouts == {} and s.text and s.error is None for s in samples)


def test_diagnose_reads_a_server_and_fails_above_max_offset(tmp_path: Path) -> None:
    """halluprobe diagnose drives a server too: off-set argmax pieces from the returned strings."""
    world = _world(tmp_path, n_images=4)
    common = [
        "diagnose", "--backend", "openai", "--model", "tiny-vlm", "--benchmark", str(world["random"]),
        "--images", str(world["images"]), "--sample", "24", "--json",
    ]  # fmt: skip
    with FakeChatServer() as clean, FakeChatServer(offset_objects=("umbrella",)) as offset:
        ok = _invoke([*common, "--endpoint", clean.url])
        # the same served name and messages: without --no-cache the clean server's answers come back
        bad = _invoke([*common, "--endpoint", offset.url, "--no-cache"])
        assert clean.bodies and all(body["max_tokens"] == 1 for body in clean.bodies)  # first token only
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["ok"] and report["offset_rate"] == 0.0 and report["n"] == 24 and report["legacy_valid"] is False
    assert bad.exit_code == 1, bad.output
    report = json.loads(bad.stdout)
    assert "the first token's argmax lies outside the yes/no sets" in bad.stderr
    umbrellas = [count for piece, count in report["first_pieces"] if piece == "There"]
    assert umbrellas and report["offset_pieces"] == [["There", umbrellas[0]]]
    assert report["offset_rate"] == pytest.approx(umbrellas[0] / 24) and not report["ok"]


# -- answers that are well-formed but wrong; secrets in server text ---------------------------------


def _object_of(key: str) -> str:
    return key.split("Is there ", 1)[1].split(" ", 2)[1]


@pytest.mark.parametrize(("value", "reason"), [("nan", "not finite"), ("inf", "not finite"), ("-inf", "not finite"), ("0.5", "positive"), ("true", "not a number")])
def test_a_bad_logprob_is_that_samples_error_and_is_not_cached(tmp_path: Path, value: str, reason: str) -> None:
    world = _world(tmp_path, n_images=3)
    out = tmp_path / "run"

    def fault(key: str, attempt: int, body: dict[str, Any]) -> str | None:
        return f"logprob:{value}" if _object_of(key) == "cat" else None

    with FakeChatServer(fault=fault) as server:
        result = _invoke(_args(world, out, [server.url]))
    assert result.exit_code == 0, result.output
    samples = _check_answers(world, out, allow_errors=True)  # the run dir reads back: no NaN in it
    bad = [s for s in samples if s.object == "cat"]
    assert bad and all(s.error and reason in s.error and s.readouts == {} for s in bad)
    assert not any(s.error for s in samples if s.object != "cat")
    assert RunDir(out).read_request_stats()["total"]["attempts"]["bad_response"] == len({(s.image, s.prompt) for s in bad})
    score = _invoke(["score", str(out), "--json"])
    assert score.exit_code == 0, score.output
    assert json.loads(score.stdout)["pooled"]["errors"] == len(bad)
    # the refused answers were not cached: a second run asks for exactly those again, and gets them
    with FakeChatServer() as fixed:
        again = _invoke(_args(world, tmp_path / "again", [fixed.url]))
    assert again.exit_code == 0, again.output
    assert fixed.requests == len({(s.image, s.prompt) for s in bad})
    assert len(_check_answers(world, tmp_path / "again")) == len(samples)


def test_message_content_as_parts_is_joined_and_as_a_number_is_an_error(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=3)
    out = tmp_path / "run"

    def fault(key: str, attempt: int, body: dict[str, Any]) -> str | None:
        return {"cat": "content:list", "dog": "content:number"}.get(_object_of(key))

    with FakeChatServer(fault=fault) as server:
        result = _invoke(_args(world, out, [server.url], "--no-cache"))
    assert result.exit_code == 0, result.output
    samples = _check_answers(world, out, allow_errors=True)
    parts = [s for s in samples if s.object == "cat"]
    assert parts and all(s.error is None and s.text in ("Yes", "No") for s in parts)
    assert all(s.readouts["text:pope"].decision == s.readouts["dynamic"].decision for s in parts)
    numbers = [s for s in samples if s.object == "dog"]
    assert numbers and all("message.content is int" in (s.error or "") and s.text is None for s in numbers)
    assert not any(s.error for s in samples if s.object not in ("cat", "dog"))


def test_an_answer_from_another_model_is_counted_in_request_stats(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=2)
    out = tmp_path / "run"
    with FakeChatServer(fault=lambda key, attempt, body: "model:tiny-vlm-2024-06" if _object_of(key) == "cup" else None) as server:
        result = _invoke(_args(world, out, [server.url]))
        assert result.exit_code == 0, result.output
        cups = sum(1 for seen in server.seen if _object_of(seen["key"]) == "cup")
        again = _invoke(_args(world, tmp_path / "again", [server.url]))  # from the cache: counted again
    assert cups > 0 and "tiny-vlm-2024-06" in result.output
    assert RunDir(out).read_request_stats()["total"]["model_mismatch"] == {"tiny-vlm-2024-06": cups}
    assert again.exit_code == 0 and RunDir(tmp_path / "again").read_request_stats()["total"]["model_mismatch"] == {"tiny-vlm-2024-06": cups}
    _check_answers(world, out)  # the answers themselves are used


def test_a_key_echoed_by_the_server_and_url_credentials_are_stored_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = _world(tmp_path, n_images=3)
    out = tmp_path / "run"
    key, query_secret = "sk-echo-secret-0815", "query-secret-4242"
    monkeypatch.setenv("HP_TEST_KEY", key)
    with FakeChatServer(fault=lambda k, attempt, body: "echo_key" if _object_of(k) == "cat" else None) as server:
        endpoint = f"{server.url}?api-key={query_secret}"
        result = _invoke(_args(world, out, [endpoint], "--api-key-env", "HP_TEST_KEY"))
    assert result.exit_code == 0, result.output
    assert server.headers[0]["Authorization"] == f"Bearer {key}"  # the credentials did go to the server
    samples = RunDir(out).read_samples()
    echoed = [s for s in samples if s.object == "cat"]
    assert echoed and all("HTTP 401" in (s.error or "") and "Incorrect API key provided: [redacted]" in (s.error or "") for s in echoed)
    for secret in (key, query_secret):
        assert secret not in result.output
        assert not [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert RunDir(out).read_header().backend_info["endpoints"] == [server.url]
    assert list(RunDir(out).read_request_stats()["total"]["endpoints"]) == [server.url]


def test_userinfo_in_an_endpoint_is_not_stored(tmp_path: Path) -> None:
    world = _world(tmp_path, n_images=1)
    out = tmp_path / "run"
    with FakeChatServer() as server:
        endpoint = server.url.replace("http://", "http://alice:pw-secret-9931@")
        result = _invoke(_args(world, out, [endpoint]))
    assert result.exit_code == 0, result.output
    assert server.headers[0]["Authorization"].startswith("Basic ")  # httpx sent the userinfo as basic auth
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and b"pw-secret-9931" in p.read_bytes()]
    assert RunDir(out).read_header().backend_info["endpoints"] == [server.url]


def test_a_cached_answer_with_a_nan_is_asked_again(tmp_path: Path, _cache_dir: Path) -> None:
    """A cache written before answers were checked may hold NaN logprobs: never served from there."""
    world = _world(tmp_path, n_images=2)
    with FakeChatServer() as server:
        assert _invoke(_args(world, tmp_path / "one", [server.url])).exit_code == 0
        sent = server.requests
        db = sqlite3.connect(_cache_dir / "responses.sqlite")
        with db:
            poisoned = db.execute("""UPDATE responses SET response = replace(response, '"logprob": -', '"logprob": NaN, "was": -')""").rowcount
        db.close()
        result = _invoke(_args(world, tmp_path / "two", [server.url]))
    assert poisoned == sent > 0
    assert result.exit_code == 0, result.output
    assert server.requests == 2 * sent  # every poisoned entry asked again
    assert RunDir(tmp_path / "two").read_request_stats()["total"]["cache_hits"] == 0
    _check_answers(world, tmp_path / "two")


# -- secondary models through the same option group -------------------------------------------------


def _secondary_command() -> Any:
    """A one-verb app whose command takes a secondary model through ``with_secondary_backend``."""
    import typer

    got: dict[str, Any] = {}
    verb = typer.Typer()

    @verb.command()
    @with_secondary_backend("judge", dest="judge", label="judge")
    def judge_cmd(name: str = "x", judge: Optional[BackendSpec] = None) -> None:
        got["judge"] = judge

    @verb.command()
    def other() -> None:  # two commands: typer then wants the command's name
        pass

    return verb, got


def test_a_secondary_model_takes_the_groups_server_options_and_answers_from_its_endpoint(tmp_path: Path) -> None:
    from halluprobe.ask import ask
    from halluprobe.records import Request

    verb, got = _secondary_command()
    image = tmp_path / "one.png"
    Image.new("RGB", (8, 8), "white").save(image)
    with FakeChatServer() as server:
        args = ["judge-cmd", "--judge-model", "tiny-vlm", "--judge-backend", "openai", "--judge-endpoint", server.url,
                "--judge-concurrency", "2", "--judge-backend-option", "max_retries=1"]  # fmt: skip
        result = runner.invoke(verb, args)
        assert result.exit_code == 0, result.output
        spec = got["judge"]
        assert spec.backend == "openai" and spec.model == "tiny-vlm"
        assert spec.options["endpoints"] == [server.url] and spec.options["concurrency"] == 2 and spec.options["max_retries"] == 1
        backend = spec.load()
        request = Request(split="s", question_id=0, image_path=str(image), prompt="Is there a cat in the image?")
        [[response]] = list(ask(backend, [request], GenerateConfig(max_new_tokens=1, top_k=5)))
    says_yes, _ = expected_answer(hashlib.sha256(image.read_bytes()).hexdigest(), "cat")
    assert response.error is None and response.first_token[0].piece == ("Yes" if says_yes else "No")
    assert len(server.bodies) == 1 and server.bodies[0]["model"] == "tiny-vlm"


def test_a_secondary_groups_bad_flags_are_one_line_exit_2() -> None:
    verb, got = _secondary_command()
    off = runner.invoke(verb, ["judge-cmd"])
    assert off.exit_code == 0 and got["judge"] is None  # no --judge-model: no secondary model
    alone = runner.invoke(verb, ["judge-cmd", "--judge-backend", "openai"])
    assert alone.exit_code == 2 and "--judge-backend needs --judge-model" in alone.output
    wrong = runner.invoke(verb, ["judge-cmd", "--judge-model", "m", "--judge-endpoint", "http://127.0.0.1:9/v1"])
    assert wrong.exit_code == 2 and "--judge-endpoint is an option of the openai backend, not of 'hf'" in wrong.output
    stray = runner.invoke(verb, ["judge-cmd", "--judge-device", "cpu"])  # a flag of the group without its model
    assert stray.exit_code == 0 and got["judge"] is None


def test_the_backend_capabilities_are_declared_not_probed(tmp_path: Path) -> None:
    from halluprobe.backends.base import Backend, CountsRequests, RecordsSignals
    from halluprobe.backends.openai.backend import OpenAIBackend
    from halluprobe.backends.scripted import ScriptedBackend

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}}))
    scripted = ScriptedBackend(str(script))
    server = OpenAIBackend("tiny-vlm", endpoints=["http://127.0.0.1:9/v1"])
    assert isinstance(scripted, Backend) and isinstance(server, Backend)
    assert isinstance(scripted, RecordsSignals) and not isinstance(scripted, CountsRequests)
    assert isinstance(server, CountsRequests) and not isinstance(server, RecordsSignals)
