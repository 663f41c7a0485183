"""Exact mode of the openai backend against a loopback stub of vLLM's JSON (tests/_vllm_server.py):
a yes piece lies outside the top 20, so the top-20 pieces miss it and the exact ids find it;
detection, fallback, ``--exact-logprobs require``, a wrong tokenizer, the run header, the
fingerprint (no resume across modes), ``score`` / ``audit`` saying the mode, and the
prefix-cache check of ``diagnose`` flagging a server that answers from the wrong image."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

import _assets
from halluprobe.cli import app
from halluprobe.readouts.logits import candidate_ids, read_dynamic
from halluprobe.readouts.tokensets import derive_token_sets, load_tokenizer
from halluprobe.records import RunHeader
from halluprobe.rundir import RunDir

runner = CliRunner()


# -- a loopback stub of vLLM's chat-completions JSON ------------------------------------------

_JUNK = tuple(range(1000, 1020))  # 20 pieces that are neither yes nor no: the top 20 of every answer


class VllmStub:
    """Answers ``/v1/chat/completions`` in vLLM 0.32's JSON over a real vocabulary (the Mistral v1
    tokenizer's), from a made-up first-token distribution in which a yes piece lies OUTSIDE the
    top 20: twenty other pieces at 0.04 each, ``▁No`` at 0.045 (the argmax), ``▁Yes`` at a
    probability in [0.02, 0.039] set by the image and the question, the rest spread evenly.

    ``exact``: ``logprob_token_ids`` with ``return_tokens_as_token_ids`` is honoured (else ignored,
    as by a server without the feature, which answers with its natural top pieces).
    ``text_tokenizer_dir``: the tokenizer the stub writes its text with (another one: a served
    model that is not the tokenizer's). ``wrong_image_when_concurrent``: a request that arrives
    while another is in flight is answered from another image (a broken prefix cache).
    """

    def __init__(
        self, tokenizer_dir: Path, *, exact: bool = True, text_tokenizer_dir: Path | None = None,
        wrong_image_when_concurrent: bool = False, latency_s: float = 0.0, model: str = "stub-vlm",
    ) -> None:  # fmt: skip
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
        self.text_tokenizer = AutoTokenizer.from_pretrained(str(text_tokenizer_dir or tokenizer_dir), local_files_only=True)
        self.yes_id, self.no_id = self.tokenizer.convert_tokens_to_ids(["▁Yes", "▁No"])
        self.exact, self.wrong_image, self.latency_s, self.model = exact, wrong_image_when_concurrent, latency_s, model
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.images_seen: list[str] = []
        self.wrong_answers = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                import json

                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with stub.lock:
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                    concurrent = stub.in_flight > 1
                try:
                    if stub.latency_s:
                        time.sleep(stub.latency_s)
                    answer = stub.answer_sglang(body) if self.path.endswith("/generate") else stub.answer(body, concurrent)
                    data = json.dumps(answer).encode()
                finally:
                    with stub.lock:
                        stub.in_flight -= 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def probabilities(self, image: str, prompt: str) -> dict[int, float]:
        """The first token's distribution over the ids it names; every other id has ``rest``."""
        import hashlib

        digest = hashlib.sha256(f"{image}|{prompt}".encode()).digest()
        probs = {i: 0.04 for i in _JUNK}
        probs[self.no_id] = 0.045
        probs[self.yes_id] = 0.02 + 0.019 * digest[0] / 255
        return probs

    def rest(self, probs: dict[int, float]) -> float:
        return (1.0 - sum(probs.values())) / (len(self.tokenizer) - len(probs))

    def logprob(self, image: str, prompt: str, token_id: int) -> float:
        import math

        probs = self.probabilities(image, prompt)
        return math.log(probs.get(token_id, self.rest(probs)))

    def _image_of(self, body: dict[str, Any], concurrent: bool) -> str:
        import hashlib

        parts = body["messages"][0]["content"]
        url = next((p["image_url"]["url"] for p in parts if p["type"] == "image_url"), "")
        image = hashlib.sha256(url.encode()).hexdigest()
        with self.lock:
            others = [seen for seen in self.images_seen if seen != image]
            if image not in self.images_seen:
                self.images_seen.append(image)
            if self.wrong_image and concurrent and others:
                self.wrong_answers += 1
                return others[-1]  # the cached prefix of another image
        return image

    def answer(self, body: dict[str, Any], concurrent: bool) -> dict[str, Any]:
        import math

        with self.lock:
            self.bodies.append(body)
        parts = body["messages"][0]["content"]
        prompt = next(p["text"] for p in parts if p["type"] == "text")
        image = self._image_of(body, concurrent)
        probs = self.probabilities(image, prompt)
        ranked = sorted(probs, key=lambda i: -probs[i])
        greedy = ranked[0]
        exact = self.exact and bool(body.get("logprob_token_ids")) and body.get("return_tokens_as_token_ids")

        def entry(token_id: int) -> dict[str, Any]:
            token = f"token_id:{token_id}" if exact else self.tokenizer.convert_ids_to_tokens(token_id).replace("▁", " ")
            return {"token": token, "logprob": math.log(probs.get(token_id, self.rest(probs))), "bytes": list(token.encode())}

        if exact:
            tops = [entry(greedy)] + [entry(int(i)) for i in body["logprob_token_ids"] if int(i) != greedy]
        else:
            tops = [entry(i) for i in ranked[: int(body.get("top_logprobs") or 0)]]
        text = self.text_tokenizer.decode([greedy], skip_special_tokens=True)
        return {
            "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()), "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": {"content": [{**entry(greedy), "top_logprobs": tops}]}, "finish_reason": "stop"}],
        }  # fmt: skip

    def answer_sglang(self, body: dict[str, Any]) -> dict[str, Any]:
        """SGLang's native /generate: ``meta_info`` lists of ``[logprob, id, text]``."""
        import hashlib
        import math

        with self.lock:
            self.bodies.append(body)
        image = hashlib.sha256(str(body.get("image_data", "")).encode()).hexdigest()
        probs = self.probabilities(image, body["text"])
        ranked = sorted(probs, key=lambda i: -probs[i])

        def row(token_id: int) -> list[Any]:
            return [math.log(probs.get(token_id, self.rest(probs))), token_id, self.tokenizer.decode([token_id])]

        meta: dict[str, Any] = {"output_token_logprobs": [row(ranked[0])], "output_top_logprobs": [[row(i) for i in ranked[: body.get("top_logprobs_num") or 0]]]}
        if self.exact and body.get("token_ids_logprob"):
            meta["output_token_ids_logprobs"] = [[row(int(i)) for i in body["token_ids_logprob"]]]
        return {"text": self.text_tokenizer.decode([ranked[0]], skip_special_tokens=True), "meta_info": meta}

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> VllmStub:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()



@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tok() -> Path:
    return _assets.mistral_tokenizer_dir("v1")


def _world(root: Path, n_images: int = 3, per_image: int = 4) -> dict[str, Path]:
    images = root / "images"
    images.mkdir()
    lines = []
    for i in range(n_images):
        Image.new("RGB", (8, 8), (40 * i, 90, 200 - i)).save(images / f"img{i}.png")
        for j in range(per_image):
            obj = ("cat", "dog", "cup", "car")[j % 4]
            lines.append(json.dumps({"question_id": i * per_image + j + 1, "image": f"img{i}.png", "text": f"Is there a {obj} in the image?", "label": "yes" if j % 2 else "no"}))
    bench = root / "toy_pope_random.json"
    bench.write_text("\n".join(lines) + "\n")
    return {"images": images, "bench": bench}


def _run(world: dict[str, Path], url: str, out: Path, *extra: str) -> Any:
    return runner.invoke(app, [
        "run", "--backend", "openai", "--model", "stub-vlm", "--endpoint", url, "--benchmark", str(world["bench"]),
        "--images", str(world["images"]), "--out", str(out), "--backend-option", "backoff_base_s=0.01", *extra,
    ])  # fmt: skip


def _header(out: Path) -> RunHeader:
    return RunDir(out).read_header()


def test_exact_mode_finds_the_yes_piece_that_the_top_20_miss(tmp_path: Path, tok: Path) -> None:
    world = _world(tmp_path)
    with VllmStub(tok) as stub:
        exact = _run(world, stub.url, tmp_path / "exact", "--tokenizer", str(tok), "--exact-logprobs", "require")
        pieces = _run(world, stub.url, tmp_path / "pieces")
        assert exact.exit_code == 0 and pieces.exit_code == 0, exact.output + pieces.output
        sent = [b for b in stub.bodies if b.get("logprob_token_ids")]
    sets = derive_token_sets(load_tokenizer(str(tok)))
    ids = candidate_ids(sets)
    # the request: every candidate id, by id, with logprobs equal to their number (vLLM needs it)
    assert sent and all(b["logprob_token_ids"] == ids and b["top_logprobs"] == len(ids) and b["return_tokens_as_token_ids"] for b in sent)
    head_exact, head_pieces = _header(tmp_path / "exact"), _header(tmp_path / "pieces")
    assert head_exact.logprob_mode == "exact" and head_exact.logprob_label == "exact"
    assert head_exact.token_sets is not None and head_exact.token_sets.keyed_by == "id" and head_exact.token_sets.yes_ids == sets.yes_ids
    assert head_pieces.logprob_mode == "pieces" and head_pieces.logprob_label == "top-20 pieces"
    assert head_exact.fingerprint != head_pieces.fingerprint
    yes_id = "5592"  # ▁Yes in Mistral v1
    for s_exact, s_pieces in zip(RunDir(tmp_path / "exact").read_samples(), RunDir(tmp_path / "pieces").read_samples()):
        assert s_exact.error is None and s_pieces.error is None
        # stored as the hf backend stores them: every candidate id, keyed by str(id)
        assert list(s_exact.candidates) == [str(i) for i in ids]
        assert s_exact.first_token[0].id == 1770 and s_exact.first_token[0].piece == "▁No" and s_exact.text == "No"
        found, missing = read_dynamic(s_exact.candidates, head_exact.token_sets), read_dynamic(s_pieces.candidates, head_pieces.token_sets)  # type: ignore[arg-type]
        assert math.log(0.02) <= s_exact.candidates[yes_id] <= math.log(0.039)
        assert found.yes_score is not None and found.yes_score >= s_exact.candidates[yes_id]
        assert 0.3 < (found.p_yes or 0) < 0.5  # yes 0.02-0.039 against no 0.045
        # the top 20 hold no yes piece: the yes set is missing, p(yes) is 0
        assert not any(p.strip().lower() == "yes" for p in s_pieces.candidates) and len(s_pieces.candidates) == 20
        assert missing.yes_score is None and missing.p_yes == 0.0


def test_auto_falls_back_to_pieces_on_a_server_without_the_feature_and_says_so(tmp_path: Path, tok: Path) -> None:
    world = _world(tmp_path)
    with VllmStub(tok, exact=False) as stub:
        auto = _run(world, stub.url, tmp_path / "auto", "--tokenizer", str(tok))
        refused = _run(world, stub.url, tmp_path / "req", "--tokenizer", str(tok), "--exact-logprobs", "require")
    assert auto.exit_code == 0, auto.output
    header = _header(tmp_path / "auto")
    assert header.logprob_mode == "pieces" and header.logprob_label == "top-20 pieces"
    assert "not a token id" in header.backend_info["logprob_mode_reason"]
    assert refused.exit_code == 2 and "--exact-logprobs require" in refused.output and "cannot return" in refused.output
    assert not (tmp_path / "req").exists()


def test_a_tokenizer_that_is_not_the_served_models_is_refused_in_one_line(tmp_path: Path, tok: Path) -> None:
    world = _world(tmp_path)
    with VllmStub(tok, text_tokenizer_dir=_assets.llama_tokenizer_dir()) as stub:
        result = _run(world, stub.url, tmp_path / "run", "--tokenizer", str(tok))
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert "does not match the model served" in line and str(tok) in line


def test_score_and_audit_say_the_mode_and_resume_refuses_the_other(tmp_path: Path, tok: Path) -> None:
    world = _world(tmp_path)
    with VllmStub(tok) as stub:
        assert _run(world, stub.url, tmp_path / "run", "--tokenizer", str(tok)).exit_code == 0
        other = _run(world, stub.url, tmp_path / "run", "--exact-logprobs", "off", "--resume")
    assert other.exit_code == 2 and "log-probability reading" in other.output
    score = runner.invoke(app, ["score", str(tmp_path / "run"), "--resamples", "10"])
    assert score.exit_code == 0 and "log-probabilities: exact" in score.output
    audit = runner.invoke(app, ["audit", str(tmp_path / "run"), "--resamples", "10"])
    assert audit.exit_code == 0 and "log-probabilities read: exact" in audit.output
    assert json.loads((tmp_path / "run" / "audit.json").read_text())["run"]["logprobs"] == "exact"
    report = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "report.html"), "--resamples", "10"])
    assert report.exit_code == 0, report.output
    assert "| Log-probabilities | exact |" in (tmp_path / "report.md").read_text()
    assert "<th>Log-probabilities</th><td>exact" in (tmp_path / "report.html").read_text()


def test_prefix_cache_check_flags_a_server_answering_from_the_wrong_image(tmp_path: Path, tok: Path) -> None:
    world = _world(tmp_path, n_images=4, per_image=4)
    base = ["diagnose", "--backend", "openai", "--model", "stub-vlm", "--benchmark", str(world["bench"]), "--images",
            str(world["images"]), "--tokenizer", str(tok), "--sample", "8", "--max-offset", "1", "--json", "--prefix-cache-check"]  # fmt: skip
    with VllmStub(tok, wrong_image_when_concurrent=True, latency_s=0.05) as bad:
        flagged = runner.invoke(app, [*base, "--endpoint", bad.url])
        assert bad.wrong_answers > 0
    assert flagged.exit_code == 1, flagged.output
    check = json.loads(flagged.stdout)["prefix_cache"]
    assert not check["ok"] and check["disagreements"] and "FAILED" in check["verdict"] and "#20261" in flagged.stderr
    with VllmStub(tok, latency_s=0.05) as good:
        passed = runner.invoke(app, [*base, "--endpoint", good.url])
        assert good.max_in_flight > 1  # the grouped pass was concurrent
    assert passed.exit_code == 0, passed.output
    payload = json.loads(passed.stdout)
    assert payload["prefix_cache"]["ok"] and payload["prefix_cache"]["compared"] == 16 and payload["logprobs"] == "exact"


def test_sglang_generate_reads_the_ids_too(tmp_path: Path, tok: Path) -> None:
    from transformers import AutoTokenizer

    world = _world(tmp_path)
    templated = tmp_path / "tokenizer"  # SGLang's /generate takes the chat template applied here
    tokenizer = AutoTokenizer.from_pretrained(str(tok), local_files_only=True)
    tokenizer.chat_template = "{% for m in messages %}[INST] {% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %} [/INST]{% endfor %}"
    tokenizer.save_pretrained(str(templated))
    with VllmStub(tok) as stub:
        exact = _run(world, stub.url, tmp_path / "exact", "--server-api", "sglang", "--tokenizer", str(templated), "--exact-logprobs", "require")
        pieces = _run(world, stub.url, tmp_path / "pieces", "--server-api", "sglang", "--tokenizer", str(templated), "--exact-logprobs", "off")
        assert exact.exit_code == 0 and pieces.exit_code == 0, exact.output + pieces.output
        asked = [b for b in stub.bodies if "Is there a cat" in b.get("text", "")]
    assert asked and asked[0]["text"].startswith("[INST] <image>Is there a cat") and asked[0]["image_data"].startswith("data:image/png")
    head = _header(tmp_path / "exact")
    assert head.logprob_mode == "exact" and head.backend_info["server_api"] == "sglang"
    for s_exact, s_pieces in zip(RunDir(tmp_path / "exact").read_samples(), RunDir(tmp_path / "pieces").read_samples()):
        assert s_exact.error is None and math.log(0.02) <= s_exact.candidates["5592"] <= math.log(0.039)
        assert read_dynamic(s_exact.candidates, head.token_sets).yes_score is not None  # type: ignore[arg-type]
        assert s_exact.text == "No" and s_exact.first_token[0].id == 1770
        assert s_pieces.error is None and not any(p.strip().lower() == "yes" for p in s_pieces.candidates)
    assert _run(world, stub.url, tmp_path / "x", "--server-api", "sglang").exit_code == 2  # no tokenizer: no template
