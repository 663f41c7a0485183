"""OpenAI-compatible chat-completions backend: vLLM, SGLang, llama.cpp server, hosted APIs.

Each request is one chat message (the image, then the rendered question) sent with
``temperature=0, logprobs=true, top_logprobs=K``. The first content token's top alternatives
are token STRINGS (the servers report no ids), so the run's token sets are keyed by piece
(:func:`halluprobe.readouts.tokensets.piece_token_sets`): ``dynamic`` derives the yes / no sets
from the returned pieces with the project's one rule, and the legacy id readouts are invalid.

Concurrency lives inside the backend (it receives the whole request list): an asyncio loop in a worker thread runs
``concurrency`` workers over the requests, ordered by image (so a server's prefix cache sees
one image's questions together); several endpoints are balanced by in-flight count, with an
image sticking to the endpoint its first question went to. The runner's thread receives
responses in batches and persists them as they come.

Retries: 429 (``Retry-After`` honoured), 5xx, timeouts, dropped connections and unparseable
JSON are retried with exponential backoff and jitter, at most ``max_retries`` times, on
another endpoint when there is one; other 4xx and well-formed answers without logprobs are
final and recorded in ``Response.error``. When a request exhausts its retries and nothing has
succeeded since its first failure (or other requests have failed since the last success), the
service is down: the run stops with RuntimeFailure (the
answered samples are already saved, ``--resume`` finishes the run) instead of recording
thousands of errors. Every attempt's outcome is counted: :meth:`OpenAIBackend.request_stats`,
written by the runner to ``RUNDIR/requests.json``.

Temperature-0 answers are cached (:mod:`halluprobe.backends.response_cache`); identical
requests within a run (POPE's splits repeat questions) are sent once. An answer is checked
before it is used or cached: every log-probability finite and not positive, ``message.content``
a string (or a list of parts, whose text parts are joined); anything else is that sample's
error, not cached. A ``model`` in the answer other than the one asked for is counted
(``model_mismatch`` in requests.json) and warned about, not refused (hosted APIs answer with a
dated snapshot name).

Secrets: the API key is read from the environment variable named by ``api_key_env`` and never
stored; it, and the password and query values of an endpoint URL, are replaced by
``[redacted]`` in every server text the backend stores or prints (a server may echo the key in
its error body), and endpoints are stored (run.json, requests.json) without userinfo or query.
See docs/design/openai-backend.md.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import datetime as _dt
import email.utils
import hashlib
import io
import itertools
import logging
import math
import os
import queue
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from halluprobe.backends.response_cache import ResponseCache, cache_dir, cache_key
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.jsonl import loads, replace_lone_surrogates
from halluprobe.readouts.tokensets import piece_token_sets
from halluprobe.records import YES_NO_STOP_STRINGS, GenerateConfig, Request, Response, TokenLogprob, TokenSets

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIBackend", "ImageUrlMode", "OUTCOMES"]

log = logging.getLogger(__name__)

ImageUrlMode = Literal["data", "file"]

# Outcome of one HTTP attempt (counted in request_stats()["attempts"]).
OUTCOMES: tuple[str, ...] = (
    "ok",
    "http_429",  # retried, after Retry-After when given
    "http_5xx",  # retried
    "timeout",  # retried: no complete answer within timeout_s
    "connection",  # retried: refused, reset, dropped mid-answer
    "malformed",  # retried: status 200 but the body is not JSON (a cut answer)
    "fatal_4xx",  # final: other 4xx (bad request, unknown model, auth)
    "bad_response",  # final: JSON without choices or logprobs
)
_RETRIABLE = frozenset({"http_429", "http_5xx", "timeout", "connection", "malformed"})
# with no success at all in the run, this many final rejections stop it (wrong model name, auth)
_FATAL_STOP = 8
# a logprob this far above 0 is float rounding of log(1) (stored as 0.0); beyond it the server is wrong
_LOGPROB_ROUNDING = 1e-6
# a secret shorter than this is not redacted (replacing every "a" would garble every message)
_MIN_SECRET = 4
REDACTED = "[redacted]"


@dataclass(frozen=True)
class _Image:
    sha256: str
    url: str


@dataclass(frozen=True)
class _Result:
    """What one distinct request body produced: shared by identical requests."""

    first_token: tuple[TokenLogprob, ...] = ()
    candidates: tuple[tuple[str, float], ...] = ()
    text: str | None = None
    error: str | None = None
    served_model: str | None = None  # the answer's "model" (None when it names none)


@dataclass
class _Attempt:
    outcome: str
    raw: str | None = None
    result: _Result | None = None
    retry_after: float | None = None
    message: str = ""


@dataclass
class _Endpoint:
    base: str
    url: str
    in_flight: int = 0
    down_until: float = 0.0
    assigned: int = 0


@dataclass
class _State:
    """Per-answer() state, owned by the event-loop thread."""

    cache: ResponseCache | None
    endpoints: list[_Endpoint]
    max_new_tokens: int
    top_k: int
    stats: collections.Counter[str] = field(default_factory=collections.Counter)
    attempts: collections.Counter[str] = field(default_factory=collections.Counter)
    model_mismatch: collections.Counter[str] = field(default_factory=collections.Counter)  # served name -> answers
    per_endpoint: collections.Counter[str] = field(default_factory=collections.Counter)
    affinity: dict[str, _Endpoint] = field(default_factory=dict)
    images: dict[str, _Image | str] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)  # requests with a retriable failure since the last success
    last_success: float = -math.inf  # time.monotonic() of the last successful attempt
    successes: int = 0
    fatal: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class _ServiceDown(RuntimeFailure):
    """Every endpoint keeps failing: stop the run (what is answered is saved)."""


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header: delta-seconds (decimals accepted) or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())


def _chat_url(endpoint: str) -> tuple[str, str]:
    """(base, chat-completions URL) of an endpoint: ``http://h:p/v1``, ``http://h:p`` (gets /v1),
    or a full ``.../chat/completions`` URL. The base is what is stored and printed: without
    userinfo, query or fragment (they may hold credentials); the URL keeps userinfo and query."""
    url = endpoint.strip()
    if not url.startswith(("http://", "https://")):
        raise InputError("--endpoint must be an http(s) URL such as http://127.0.0.1:8000/v1")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here, not later
    except ValueError:
        raise InputError("--endpoint is not a valid URL (such as http://127.0.0.1:8000/v1)") from None
    path = parts.path.rstrip("/").removesuffix("/chat/completions") or "/v1"  # bare host:port gets /v1
    host = parts.netloc.rpartition("@")[2]
    base = urllib.parse.urlunsplit((parts.scheme, host, path, "", ""))
    return base, urllib.parse.urlunsplit((parts.scheme, parts.netloc, path + "/chat/completions", parts.query, ""))


def _url_secrets(url: str) -> list[str]:
    """The parts of an endpoint URL that may be credentials: its password and its query values."""
    parts = urllib.parse.urlsplit(url)
    found = [parts.password] if parts.password else []
    return found + [value for _, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=False)]


def _redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret (longest first, so a secret inside another goes too) replaced."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def _tls_context() -> ssl.SSLContext:
    """What httpx verifies against by default: $SSL_CERT_FILE / $SSL_CERT_DIR, else certifi's bundle."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if not cafile and not capath:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:
            pass
    return ssl.create_default_context(cafile=cafile or None, capath=capath or None)


def _logaddexp(a: float, b: float) -> float:
    top = max(a, b)
    if top == -math.inf:
        return -math.inf
    return top + math.log(math.exp(a - top) + math.exp(b - top))


def _logprob(value: Any, piece: Any) -> float:
    """A returned log-probability, checked: a finite number, not above 0 (a probability <= 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"logprob of {piece!r} is not a number: {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"logprob of {piece!r} is not finite: {value!r}")
    if value > _LOGPROB_ROUNDING:
        raise ValueError(f"logprob of {piece!r} is positive ({value!r}): a probability above 1")
    return min(float(value), 0.0)


def _message_text(content: Any) -> str:
    """``message.content`` as text: a string, or a list of parts whose text parts are joined."""
    if isinstance(content, str):
        return replace_lone_surrogates(content)
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif not isinstance(part, dict):
                raise ValueError(f"message.content holds a {type(part).__name__}, not a text part")
        if not texts and content:
            raise ValueError("message.content has no text part")
        return replace_lone_surrogates("".join(texts))
    raise ValueError(f"message.content is {'null' if content is None else type(content).__name__}, not text")


def _parse(data: Any, max_new_tokens: int, top_k: int) -> _Result:
    """A chat-completion JSON -> first-token alternatives (by piece) and text. ValueError if unusable."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        error = data.get("error") if isinstance(data, dict) else None
        raise ValueError(f"no choices in the answer{f': {error}' if error else ''}")
    choice = data["choices"][0]
    message = choice.get("message") or {}
    content = (choice.get("logprobs") or {}).get("content") or []
    if not content:
        raise ValueError(
            "the answer has no logprobs.content: the server must support logprobs=true with top_logprobs "
            "(vLLM: --max-logprobs >= top_logprobs)"
        )
    first = content[0]
    tops = first.get("top_logprobs") or [{"token": first.get("token"), "logprob": first.get("logprob")}]
    entries: list[tuple[str, float]] = []
    for top in tops:
        if not isinstance(top, dict) or not isinstance(top.get("token"), str):
            raise ValueError(f"bad top_logprobs entry {top!r}")
        # a piece may be half of an emoji ("\ud83d"): U+FFFD, or no record holding it could be written
        entries.append((replace_lone_surrogates(top["token"]), _logprob(top.get("logprob"), top["token"])))
    entries.sort(key=lambda e: -e[1])
    candidates: dict[str, float] = {}
    for piece, logprob in entries:  # ids that decode to one string: their probabilities add up
        candidates[piece] = _logaddexp(candidates[piece], logprob) if piece in candidates else logprob
    served = data.get("model")
    return _Result(
        first_token=tuple(TokenLogprob(id=None, piece=p, logprob=lp) for p, lp in entries[: max(1, top_k)]),
        candidates=tuple(candidates.items()),
        text=_message_text(message.get("content")) if max_new_tokens > 0 else None,
        served_model=served if isinstance(served, str) else None,
    )


class OpenAIBackend:
    """Any OpenAI-compatible ``/v1/chat/completions`` endpoint; ``model`` is the served model name."""

    def __init__(
        self,
        model: str,
        *,
        endpoints: Sequence[str] | str | None = None,
        concurrency: int = 32,
        api_key_env: str | None = None,
        image_url_mode: str = "data",
        no_cache: bool = False,
        top_logprobs: int = 20,
        timeout_s: float = 120.0,
        max_retries: int = 6,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        max_retry_after_s: float = 300.0,
        flush_s: float = 1.0,
        cache_dir: str | Path | None = None,
    ) -> None:
        try:
            import httpx  # noqa: F401 - lazy: checked here so a missing extra is one clear line
        except ImportError:
            raise RuntimeFailure("the openai backend needs httpx: pip install 'halluprobe[serve]'") from None
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not endpoints:
            raise InputError("the openai backend needs --endpoint URL (e.g. http://127.0.0.1:8000/v1)")
        if image_url_mode not in ("data", "file"):
            raise InputError(f"--image-url-mode must be 'data' or 'file', not {image_url_mode!r}")
        if int(concurrency) < 1:
            raise InputError(f"--concurrency must be at least 1, not {concurrency}")
        if int(top_logprobs) < 1 or int(max_retries) < 0 or float(timeout_s) <= 0:
            raise InputError("top_logprobs >= 1, max_retries >= 0 and timeout_s > 0 are needed")
        self._model = model
        self._endpoints = [_chat_url(e) for e in endpoints]
        # what may be a credential: redacted from every server text stored or printed
        self._secrets = [secret for e in endpoints for secret in _url_secrets(e.strip())]
        self._concurrency = int(concurrency)
        self._image_url_mode: ImageUrlMode = image_url_mode  # type: ignore[assignment]
        self._no_cache = bool(no_cache)
        self._top_logprobs = int(top_logprobs)
        self._timeout_s = float(timeout_s)
        self._max_retries = int(max_retries)
        self._backoff_base_s = float(backoff_base_s)
        self._backoff_max_s = float(backoff_max_s)
        self._max_retry_after_s = float(max_retry_after_s)
        self._flush_s = float(flush_s)
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._api_key_env = api_key_env
        self._stop_strings: tuple[str, ...] = YES_NO_STOP_STRINGS  # the current call's (GenerateConfig)
        self._headers = {"Content-Type": "application/json"}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise InputError(f"environment variable {api_key_env} (named by --api-key-env) is not set")
            self._headers["Authorization"] = f"Bearer {key}"
            self._secrets.append(key)
        self._secrets = [secret for secret in self._secrets if len(secret) >= _MIN_SECRET]
        self._sessions: list[dict[str, Any]] = []

    # -- Backend protocol ----------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return {
            "model": self._model,
            "endpoints": [base for base, _ in self._endpoints],
            "dtype": "server",
            "device": "server",
            "concurrency": self._concurrency,
            "image_url_mode": self._image_url_mode,
            "top_logprobs": self._top_logprobs,
            "timeout_s": self._timeout_s,
            "max_retries": self._max_retries,
            "cache": None if self._no_cache else str((self._cache_dir or cache_dir()) / "responses.sqlite"),
            "api_key_env": self._api_key_env,  # the variable's name, never its value
        }

    def token_sets(self) -> TokenSets:
        # top_logprobs decides which pieces the dynamic readout sees: part of the run's fingerprint
        return piece_token_sets(f"openai:{self._model}:top_logprobs={self._top_logprobs}")

    def render_prompt(self, question: str, template: str | None, *, image: bool = True) -> str:
        """The user message's text; the server applies the model's chat template around it (the
        image goes as a separate message part; this backend records no correction signal)."""
        if template in (None, "chat"):
            return question
        if "{question}" in template:
            return template.format(question=question)
        raise InputError(
            f"template {template!r}: the openai backend sends the question as the chat message; "
            "use 'chat' or a format with {question}"
        )

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        max_new_tokens, top_k = config.max_new_tokens, config.top_k
        self._stop_strings = config.stops  # () sends no stop (descriptions, open-ended answers)
        # one image's questions together (prefix caches), identical requests side by side (sent once)
        pending = sorted(requests, key=lambda r: (r.image_path, r.prompt))
        if not pending:
            return
        out: queue.Queue[tuple[str, Any]] = queue.Queue()
        worker = _LoopThread(self, pending, max_new_tokens, top_k, out)
        worker.start()
        try:
            yield from self._collect(out)
        finally:
            worker.stop()

    def request_stats(self) -> dict[str, Any]:
        """Counts of every answer() call since the last call of this method (then reset)."""
        from halluprobe.rundir import sum_counts

        sessions, self._sessions = self._sessions, []
        if not sessions:
            return {}
        merged = sum_counts(sessions)
        merged["max_in_flight"] = max(s.get("max_in_flight", 0) for s in sessions)
        merged["started_at"] = sessions[0]["started_at"]
        merged["model"] = self._model
        return merged

    # -- runner side ------------------------------------------------------------------------

    def _collect(self, out: queue.Queue[tuple[str, Any]]) -> Iterator[list[Response]]:
        """Responses in batches: every ``concurrency`` responses or ``flush_s`` seconds."""
        flush_size = max(1, self._concurrency)
        buffer: list[Response] = []
        deadline = 0.0
        while True:
            timeout = max(0.0, deadline - time.monotonic()) if buffer else None
            try:
                kind, item = out.get(timeout=timeout)
            except queue.Empty:
                yield buffer
                buffer = []
                continue
            if kind == "response":
                if not buffer:
                    deadline = time.monotonic() + self._flush_s
                buffer.append(item)
                if len(buffer) >= flush_size:
                    yield buffer
                    buffer = []
            elif kind == "error":
                if buffer:
                    yield buffer
                    buffer = []
                if isinstance(item, (RuntimeFailure, InputError)):
                    raise item
                raise RuntimeFailure(f"openai backend failed: {type(item).__name__}: {item}") from item
            else:
                break
        if buffer:
            yield buffer

    # -- event-loop side ----------------------------------------------------------------------

    async def _run(self, pending: Sequence[Request], max_new_tokens: int, top_k: int, out: queue.Queue[tuple[str, Any]]) -> None:
        import httpx  # lazy: only this backend needs it

        started, wall = _dt.datetime.now(_dt.timezone.utc), time.perf_counter()
        cache = None if self._no_cache else ResponseCache(self._cache_dir)
        delivered = 0
        state = _State(
            cache=cache,
            endpoints=[_Endpoint(base=b, url=u) for b, u in self._endpoints],
            max_new_tokens=max_new_tokens,
            top_k=top_k,
        )
        # identical requests (same image and prompt: POPE's splits repeat questions) are one unit
        # of work, sent once; a worker never waits on another worker's request
        todo = collections.deque(
            list(group) for _, group in itertools.groupby(pending, key=lambda r: (r.image_path, r.prompt))
        )
        # One client per worker, one keep-alive connection per endpoint each: httpcore's shared
        # pool scans every connection for every request (quadratic: 64 in flight ran 3x slower
        # than 16 through one client; see docs/design/openai-backend.md).
        n_endpoints = len(self._endpoints)
        limits = httpx.Limits(max_connections=n_endpoints, max_keepalive_connections=n_endpoints)
        tls = _tls_context()  # built once: each client would build its own (about 25 ms each)

        async def work() -> None:
            nonlocal delivered
            async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(self._timeout_s), verify=tls) as client:
                while todo:
                    group = todo.popleft()
                    for response in await self._answer_group(group, client, state):
                        out.put(("response", response))
                        delivered += 1

        workers = [asyncio.create_task(work()) for _ in range(min(self._concurrency, len(todo)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if cache is not None:
                cache.close()
            self._sessions.append(self._session_stats(state, len(pending), delivered, started, wall))

    def _session_stats(self, state: _State, n: int, delivered: int, started: _dt.datetime, wall: float) -> dict[str, Any]:
        attempts = {name: state.attempts.get(name, 0) for name in OUTCOMES}
        sent = state.stats.get("sent", 0)
        return {
            "started_at": started.isoformat(timespec="seconds"),
            "wall_s": round(time.perf_counter() - wall, 3),
            "requests": n,
            "answered": delivered,
            "not_answered": n - delivered,  # stopped before an answer (service down, interrupted)
            "ok": state.stats.get("ok", 0),
            "errors": state.stats.get("errors", 0),
            "cache_hits": state.stats.get("cache_hits", 0),
            "deduplicated": state.stats.get("deduplicated", 0),
            "sent": sent,
            "gave_up": state.stats.get("gave_up", 0),
            "retries": sum(attempts.values()) - sent if sent else 0,
            "attempts": attempts,
            "endpoints": {base: state.per_endpoint.get(base, 0) for base, _ in self._endpoints},
            "max_in_flight": state.max_in_flight,
            # served model name -> answers that named it, when it is not the model asked for
            "model_mismatch": dict(state.model_mismatch),
        }

    async def _answer_group(self, group: Sequence[Request], client: httpx.AsyncClient, state: _State) -> list[Response]:
        """Identical requests (same image and prompt): one fetch, one response each."""
        started = time.perf_counter()
        request = group[0]
        try:
            image = self._image(request.image_path, state)
            if isinstance(image, str):
                result = _Result(error=image)
            else:
                body = self._body(request.prompt, image.url, state.max_new_tokens)
                key = cache_key(self._model, self._body(request.prompt, f"sha256:{image.sha256}", state.max_new_tokens))
                result = await self._fetch(key, body, request, client, state)
        except (_ServiceDown, asyncio.CancelledError):
            raise
        except Exception as err:  # noqa: BLE001 - one request's surprise is that sample's error
            log.error("request %s/%s failed: %s", request.split, request.question_id, _redact(f"{type(err).__name__}: {err}", self._secrets))
            result = _Result(error=_redact(f"{type(err).__name__}: {err}", self._secrets))
        state.stats["deduplicated"] += len(group) - 1
        state.stats["errors" if result.error else "ok"] += len(group)
        latency = time.perf_counter() - started
        return [
            Response(
                split=r.split,
                question_id=r.question_id,
                first_token=list(result.first_token),
                candidates=dict(result.candidates),
                text=result.text,
                latency_s=latency,
                error=result.error,
            )
            for r in group
        ]

    def _image(self, path: str, state: _State) -> _Image | str:
        """The image's sha256 and URL (data or file), or an error message; a few kept (requests come by image)."""
        known = state.images.get(path)
        if known is not None:
            return known
        try:
            data = Path(path).read_bytes()
            from PIL import Image

            with Image.open(io.BytesIO(data)) as img:
                mime = Image.MIME.get(img.format or "", "image/png")
        except Exception as err:  # noqa: BLE001 - unreadable or not an image: that sample's error
            value: _Image | str = f"cannot read image {path}: {type(err).__name__}: {err}"
        else:
            digest = hashlib.sha256(data).hexdigest()
            if self._image_url_mode == "data":
                url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
            else:
                url = Path(path).resolve().as_uri()
            value = _Image(sha256=digest, url=url)
        state.images[path] = value
        while len(state.images) > 8:
            state.images.pop(next(iter(state.images)))
        return value

    def _body(self, prompt: str, url: str, max_new_tokens: int) -> dict[str, Any]:
        return {
            "model": self._model,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": prompt}],
                }
            ],
            "temperature": 0,
            "max_tokens": max(1, max_new_tokens),
            "logprobs": True,
            "top_logprobs": self._top_logprobs,
            **({"stop": list(self._stop_strings)} if self._stop_strings else {}),
        }

    async def _fetch(
        self, key: str, body: dict[str, Any], request: Request, client: httpx.AsyncClient, state: _State
    ) -> _Result:
        if state.cache is not None:
            raw = state.cache.get(key)
            if raw is not None:
                try:
                    result = _parse(loads(raw), state.max_new_tokens, state.top_k)
                except (ValueError, AttributeError, TypeError):  # what _judge refuses too: asked again
                    log.warning("ignoring an unusable cache entry %s", key[:12])
                else:
                    state.stats["cache_hits"] += 1
                    state.successes += 1
                    self._note_model(result, state)
                    return result
        state.stats["sent"] += 1
        attempt = await self._post_with_retries(body, request, client, state)
        if attempt.outcome == "ok" and attempt.result is not None:
            # only a checked, usable answer is cached: a refused one is asked again next run
            if state.cache is not None and attempt.raw is not None:
                state.cache.put(key, self._model, attempt.raw)
            self._note_model(attempt.result, state)
            return attempt.result
        return _Result(error=attempt.message)

    def _note_model(self, result: _Result, state: _State) -> None:
        """Count (and warn once about) answers from a model other than the one asked for."""
        served = result.served_model
        if served is None or served == self._model:
            return
        if not state.model_mismatch:
            log.warning("the server answered as model %r, not the %r asked for (counted in requests.json: model_mismatch)", served, self._model)
        state.model_mismatch[served] += 1

    async def _post_with_retries(
        self, body: dict[str, Any], request: Request, client: httpx.AsyncClient, state: _State
    ) -> _Attempt:
        me = f"{request.split}/{request.question_id}"
        first_failure = math.inf
        avoid: _Endpoint | None = None
        attempt = _Attempt("connection", message="not sent")
        for number in range(self._max_retries + 1):
            endpoint = self._pick(request.image_path, state, avoid)
            attempt = await self._attempt(client, endpoint, body, state)
            state.attempts[attempt.outcome] += 1
            state.per_endpoint[endpoint.base] += 1
            if attempt.outcome == "ok":
                state.failing.clear()
                state.last_success = time.monotonic()
                state.successes += 1
                return attempt
            if attempt.outcome not in _RETRIABLE:
                state.fatal += 1
                if state.successes == 0 and state.fatal >= _FATAL_STOP:
                    raise _ServiceDown(
                        f"the first {state.fatal} requests were all rejected, stopping: {attempt.message}"
                    )
                return attempt
            state.failing.add(me)
            first_failure = min(first_failure, time.monotonic())
            if attempt.outcome in ("connection", "timeout"):
                endpoint.down_until = time.monotonic() + min(5.0, self._backoff_max_s)
            avoid = endpoint if len(state.endpoints) > 1 else None
            if number == self._max_retries:
                break
            delay = self._delay(number, attempt.retry_after)
            log.debug("%s/%s: %s, retry %d in %.2fs", request.split, request.question_id, attempt.message, number + 1, delay)
            await asyncio.sleep(delay)
        state.stats["gave_up"] += 1
        tries = self._max_retries + 1
        # nothing succeeded since this request began failing, or others failed too since the last
        # success: the service is down, not this request; its answer is left to --resume
        if state.last_success < first_failure or state.failing - {me}:
            raise _ServiceDown(
                f"every endpoint keeps failing ({attempt.message}; {tries} attempts, no success since): "
                "stopping the run; answered samples are saved, rerun with --resume once the server is back"
            )
        log.warning("%s/%s: giving up after %d attempts: %s", request.split, request.question_id, tries, attempt.message)
        attempt.message = f"gave up after {tries} attempts: {attempt.message}"
        return attempt

    def _delay(self, number: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._max_retry_after_s) * random.uniform(1.0, 1.1)
        cap = min(self._backoff_max_s, self._backoff_base_s * 2**number)
        return cap / 2 + random.uniform(0.0, cap / 2)  # "equal jitter": spread, never near zero

    def _pick(self, image: str, state: _State, avoid: _Endpoint | None) -> _Endpoint:
        """The endpoint for a request: the image's own (prefix cache) unless failing, else the least busy."""
        now = time.monotonic()
        others = [e for e in state.endpoints if e is not avoid] or state.endpoints
        usable = [e for e in others if e.down_until <= now] or others
        sticky = state.affinity.get(image)
        if sticky is not None and sticky in usable:
            return sticky
        best = min(usable, key=lambda e: (e.in_flight, e.assigned))
        best.assigned += 1
        state.affinity[image] = best
        while len(state.affinity) > 4 * self._concurrency:
            state.affinity.pop(next(iter(state.affinity)))
        return best

    async def _attempt(self, client: httpx.AsyncClient, endpoint: _Endpoint, body: dict[str, Any], state: _State) -> _Attempt:
        """One POST and its outcome; the message is redacted here, where every server text passes."""
        attempt = await self._attempt_raw(client, endpoint, body, state)
        attempt.message = _redact(attempt.message, self._secrets)
        return attempt

    async def _attempt_raw(self, client: httpx.AsyncClient, endpoint: _Endpoint, body: dict[str, Any], state: _State) -> _Attempt:
        import httpx

        endpoint.in_flight += 1
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            response = await asyncio.wait_for(
                client.post(endpoint.url, json=body, headers=self._headers), timeout=self._timeout_s
            )
        except (asyncio.TimeoutError, httpx.TimeoutException):
            return _Attempt("timeout", message=f"no answer from {endpoint.base} within {self._timeout_s:g}s")
        except httpx.RequestError as err:
            return _Attempt("connection", message=f"{endpoint.base}: {type(err).__name__}: {err}".rstrip(": "))
        finally:
            endpoint.in_flight -= 1
            state.in_flight -= 1
        return self._judge(endpoint, response, state)

    def _judge(self, endpoint: _Endpoint, response: httpx.Response, state: _State) -> _Attempt:
        status = response.status_code
        snippet = " ".join(response.text[:300].split())
        where = f"HTTP {status} from {endpoint.base}"
        if status == 429:
            return _Attempt("http_429", retry_after=_retry_after(response.headers.get("retry-after")), message=f"{where}: {snippet}")
        if status >= 500:
            return _Attempt("http_5xx", message=f"{where}: {snippet}")
        if status >= 400:
            return _Attempt("fatal_4xx", message=f"{where}: {snippet}")
        if status != 200:
            return _Attempt("bad_response", message=f"{where}: unexpected status")
        try:
            data = loads(response.text)
        except ValueError as err:
            return _Attempt("malformed", message=f"{where}: the body is not JSON ({err})")
        try:
            result = _parse(data, state.max_new_tokens, state.top_k)
        except (ValueError, AttributeError, TypeError) as err:
            return _Attempt("bad_response", message=f"{where}: {err}")
        return _Attempt("ok", raw=response.text, result=result)


class _LoopThread(threading.Thread):
    """Runs the backend's event loop; results and a final error go through ``out``."""

    def __init__(
        self, backend: OpenAIBackend, pending: Sequence[Request], max_new_tokens: int, top_k: int, out: queue.Queue[tuple[str, Any]]
    ) -> None:
        super().__init__(name="halluprobe-openai", daemon=True)
        self._backend, self._pending, self._max_new, self._top_k, self._out = backend, pending, max_new_tokens, top_k, out
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError:
            pass
        except BaseException as err:  # noqa: BLE001 - handed to the runner's thread
            self._out.put(("error", err))
        finally:
            self._ready.set()
            self._out.put(("done", None))

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()  # type: ignore[assignment]
        self._ready.set()
        await self._backend._run(self._pending, self._max_new, self._top_k, self._out)

    def stop(self) -> None:
        """Cancel what is in flight (the consumer stopped early) and wait for the loop to end."""
        if self.is_alive():
            self._ready.wait(timeout=10)
            if self._loop is not None and self._task is not None:
                try:
                    self._loop.call_soon_threadsafe(self._task.cancel)
                except RuntimeError:  # the loop has just closed
                    pass
        self.join(timeout=60)
