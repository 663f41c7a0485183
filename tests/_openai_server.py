"""A loopback OpenAI-compatible chat-completions server that the tests control.

Stdlib only (``http.server`` in a daemon thread, HTTP/1.1 keep-alive), bound to 127.0.0.1 on a
free port, stopping itself after ``lifetime_s``. Answers look like llama.cpp's / vLLM's:
``choices[0].logprobs.content[i].top_logprobs[*].{token, logprob, bytes}`` with token strings
(leading space kept), the stop string removed from ``message.content``.

The answer is a deterministic function of (image bytes, object asked about), so any order,
concurrency, shard or retry gives the same run. ``fault(key, attempt, body)`` injects failures:
``key`` names the question (image sha256 + prompt), ``attempt`` counts that key's requests
from 1. Fault strings: ``"429:SECONDS"`` (Retry-After), ``"500"``, ``"503"``, ``"400"``,
``"timeout"`` (sleeps ``stall_s`` before answering), ``"malformed"`` (a cut JSON body),
``"reset"`` (TCP reset, no answer), ``"nologprobs"``, ``"die"`` (the server stops: the
listening socket closes and every open connection is reset). Answers that are well-formed JSON
but wrong: ``"logprob:VALUE"`` (the top alternative's logprob is VALUE: ``nan``, ``inf``,
``-inf``, a number such as ``0.5``, or ``true``; NaN and infinities go out as the bare
``NaN`` / ``Infinity`` tokens Python's json writes), ``"content:list"`` (``message.content`` as a
list of text parts), ``"content:number"`` (``message.content`` is ``1``), ``"model:NAME"`` (the
answer names another model), ``"echo_key"`` (HTTP 401 whose error body repeats the bearer key,
as hosted APIs do).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeChatServer", "expected_answer"]

FaultFn = Callable[[str, int, dict[str, Any]], "str | None"]
_OBJECT = re.compile(r"is there an? (.+?) in the (?:image|picture|photo)", re.IGNORECASE)
# first-token alternatives the way a LLaMA-vocabulary server reports them
_OTHERS = ("There", " The", "I", "no", "yes", " No", " Yes", "\n", "The", "It", "A", " There")


def expected_answer(image_sha: str, obj: str) -> tuple[bool, float]:
    """(says yes, probability of its top piece): a pure function of the image bytes' sha256 and the object."""
    digest = hashlib.sha256(f"{image_sha}|{obj.lower()}".encode()).digest()
    return digest[0] < 128, 0.55 + 0.4 * digest[1] / 255


def _top_logprobs(says_yes: bool, p_top: float, k: int, offset: bool) -> list[dict[str, Any]]:
    main, other = ("Yes", "No") if says_yes else ("No", "Yes")
    probs = {main: p_top, other: (1 - p_top) * 0.5}
    rest = (1 - p_top) * 0.5
    for i, piece in enumerate(_OTHERS):  # a geometric tail
        probs[piece] = probs.get(piece, 0.0) + rest * 0.5 ** (i + 1)
    if offset:  # the argmax is outside both sets
        probs["There"] = p_top + 0.01
    ranked = sorted(probs.items(), key=lambda kv: -kv[1])[:k]
    return [{"token": t, "logprob": math.log(p), "bytes": list(t.encode())} for t, p in ranked]


class FakeChatServer:
    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        fault: FaultFn | None = None,
        stall_s: float = 2.0,
        offset_objects: tuple[str, ...] = (),
        lifetime_s: float = 120.0,
        model: str = "tiny-vlm",
    ) -> None:
        self.latency_s = latency_s
        self.fault = fault
        self.stall_s = stall_s
        self.offset_objects = set(offset_objects)
        self.model = model
        self.lock = threading.Lock()
        self.requests = 0  # chat-completion requests received
        self.in_flight = 0
        self.max_in_flight = 0
        self.attempts: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.seen: list[dict[str, Any]] = []  # per request: key, image sha, fault, time
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.dead = False
        self._sockets: set[socket.socket] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                with server.lock:
                    server._sockets.add(self.connection)

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:
                    pass
                with server.lock:
                    server._sockets.discard(self.connection)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if server.dead:
                    self._reset()
                    return
                if not self.path.partition("?")[0].endswith("/chat/completions"):  # a query (?api-key=) is ignored
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with server.lock:
                    server.requests += 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    server._handle(self, json.loads(raw), dict(self.headers))
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
                except OSError:
                    pass

            def _reset(self) -> None:
                _reset_socket(self.connection)
                self.close_connection = True

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()

    # -- answering ----------------------------------------------------------------------

    def _handle(self, handler: Any, body: dict[str, Any], headers: dict[str, str]) -> None:
        content = body["messages"][0]["content"]
        url = next(part["image_url"]["url"] for part in content if part["type"] == "image_url")
        prompt = next(part["text"] for part in content if part["type"] == "text")
        if url.startswith("data:"):
            image_bytes = base64.b64decode(url.split(",", 1)[1])
        else:
            from urllib.parse import unquote, urlparse

            image_bytes = open(unquote(urlparse(url).path), "rb").read()
        image_sha = hashlib.sha256(image_bytes).hexdigest()
        key = f"{image_sha[:16]}|{prompt}"
        with self.lock:
            self.attempts[key] += 1
            attempt = self.attempts[key]
            self.bodies.append(body)
            self.headers.append(headers)
        fault = self.fault(key, attempt, body) if self.fault else None
        with self.lock:
            self.outcomes[fault or "ok"] += 1
            self.seen.append({"key": key, "image": image_sha, "fault": fault, "t": time.monotonic(), "port": self.port})
        if self.latency_s:
            time.sleep(self.latency_s)
        if fault is None or fault == "nologprobs" or fault.startswith(("logprob:", "content:", "model:")):
            match = _OBJECT.search(prompt)
            obj = match.group(1) if match else ""
            answer = self._completion(body, image_sha, obj, logprobs=fault != "nologprobs")
            if fault is not None and fault != "nologprobs":  # nologprobs: _completion left them out
                _corrupt(answer, fault)
            handler._send(200, answer)
        elif fault == "echo_key":
            key = headers.get("Authorization", "").removeprefix("Bearer ")
            handler._send(401, {"error": {"message": f"Incorrect API key provided: {key}", "type": "invalid_request_error"}})
        elif fault.startswith("429"):
            retry_after = fault.partition(":")[2]
            handler._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": retry_after} if retry_after else None)
        elif fault in ("500", "503", "400"):
            handler._send(int(fault), {"error": {"message": f"injected {fault}"}})
        elif fault == "timeout":
            time.sleep(self.stall_s)
            handler._send(200, self._completion(body, image_sha, "", logprobs=True))
        elif fault == "malformed":
            whole = json.dumps(self._completion(body, image_sha, "", logprobs=True)).encode()
            handler._send(200, whole[: len(whole) // 2])
        elif fault == "reset":
            handler._reset()
        elif fault == "die":
            self.kill()
            handler._reset()
        else:
            raise ValueError(f"unknown fault {fault!r}")

    def _completion(self, body: dict[str, Any], image_sha: str, obj: str, *, logprobs: bool) -> dict[str, Any]:
        says_yes, p_top = expected_answer(image_sha, obj)
        k = int(body.get("top_logprobs") or 0)
        tops = _top_logprobs(says_yes, p_top, max(k, 1), offset=obj.lower() in self.offset_objects)
        first = tops[0]
        tokens = [{**first, "top_logprobs": tops if body.get("logprobs") and k else []}]
        # the stop string "." ends the answer and is not returned (OpenAI semantics)
        text = first["token"] if first["token"] != "There" else f"There is a {obj} in the image"
        if int(body.get("max_tokens", 16)) <= 1:
            text = first["token"]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": {"content": tokens} if logprobs and body.get("logprobs") else None,
            "finish_reason": "stop",
        }
        return {
            "id": f"chatcmpl-{hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [choice],
            "usage": {"prompt_tokens": 600, "completion_tokens": len(tokens), "total_tokens": 600 + len(tokens)},
        }

    # -- lifecycle ----------------------------------------------------------------------

    def kill(self) -> None:
        """Die like a crashed server: refuse new connections, reset the open ones."""
        self.dead = True
        threading.Thread(target=self.stop, daemon=True).start()
        with self.lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _reset_socket(sock)

    def stop(self) -> None:
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeChatServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dead = True
        self.stop()


def _corrupt(answer: dict[str, Any], fault: str) -> None:
    """Make a well-formed answer wrong the way ``fault`` says (see the module docstring)."""
    kind, _, value = fault.partition(":")
    choice = answer["choices"][0]
    if kind == "logprob":
        number: Any = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "true": True}.get(value)
        number = float(value) if number is None else number
        first = choice["logprobs"]["content"][0]
        first["logprob"] = number
        if first["top_logprobs"]:
            first["top_logprobs"][0]["logprob"] = number
    elif kind == "content":
        text = choice["message"]["content"]
        choice["message"]["content"] = [{"type": "text", "text": text[:1]}, {"type": "text", "text": text[1:]}] if value == "list" else 1
    elif kind == "model":
        answer["model"] = value
    else:
        raise ValueError(f"unknown fault {fault!r}")


class _QuietServer(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 drops connection bursts (SYN retried after 1 s)
    def handle_error(self, request: Any, client_address: Any) -> None:  # a reset connection is expected here
        pass


def _reset_socket(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass
