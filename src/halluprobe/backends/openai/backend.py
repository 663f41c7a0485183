"""OpenAI-compatible chat-completions backend: vLLM, SGLang, llama.cpp server, hosted APIs.

Each request is one chat message (the image, then the rendered question) sent with
``temperature=0, logprobs=true, top_logprobs=K``. The first content token's top alternatives
are token STRINGS, so the run's token sets are keyed by piece (:func:`piece_token_sets`):
``dynamic`` derives the yes / no sets from the returned pieces. Exact mode (``exact_logprobs``
with a ``tokenizer``; openai/exact.py, detect.py, sglang.py) asks vLLM or SGLang for the hf
backend's candidate ids instead and stores them by id, as the hf backend does.

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
import collections
import datetime as _dt
import functools
import itertools
import logging
import os
import queue
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from halluprobe.backends.openai.detect import Detection, ServerTarget, resolve_mode
from halluprobe.backends.openai.exact import EXACT_SETTINGS, SERVER_APIS, exact_chat_fields, parse_exact_chat
from halluprobe.backends.openai.sglang import generate_url, parse_sglang, sglang_body
from halluprobe.backends.openai.transport import CallState, Endpoint, LoopThread, RetryPolicy, Sender, ServiceDown, collect, image_ref, session_stats
from halluprobe.backends.openai.wire import MIN_SECRET, Parse, Result, chat_url, parse_answer, redact, tls_context, url_secrets
from halluprobe.backends.response_cache import ResponseCache, cache_dir, cache_key
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.jsonl import loads
from halluprobe.readouts.tokensets import piece_token_sets
from halluprobe.records import GenerateConfig, Request, Response, TokenSets
from halluprobe.rundir import sum_counts

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIBackend", "ImageUrlMode"]

log = logging.getLogger(__name__)

ImageUrlMode = Literal["data", "file"]


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
        exact_logprobs: str = "auto",
        tokenizer: str | None = None,
        server_api: str = "chat",
        send_images: bool = True,
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
        if exact_logprobs not in EXACT_SETTINGS:
            raise InputError(f"--exact-logprobs must be one of {', '.join(EXACT_SETTINGS)}, not {exact_logprobs!r}")
        if server_api not in SERVER_APIS:
            raise InputError(f"--server-api must be one of {', '.join(SERVER_APIS)}, not {server_api!r}")
        if int(concurrency) < 1:
            raise InputError(f"--concurrency must be at least 1, not {concurrency}")
        if int(top_logprobs) < 1 or int(max_retries) < 0 or float(timeout_s) <= 0:
            raise InputError("top_logprobs >= 1, max_retries >= 0 and timeout_s > 0 are needed")
        self._model = model
        self._server_api = server_api
        # SGLang's native /generate sits beside its chat route: same base, another URL
        self._endpoints = [(b, generate_url(u) if server_api == "sglang" else u) for b, u in (chat_url(e) for e in endpoints)]
        self._exact_setting = exact_logprobs
        self._tokenizer_source = tokenizer
        self._send_images = bool(send_images)
        self._detection: Detection | None = None  # decided once, on first need (see _mode)
        # what may be a credential: redacted from every server text stored or printed
        self._secrets = [secret for e in endpoints for secret in url_secrets(e.strip())]
        self._concurrency = int(concurrency)
        self._image_url_mode: ImageUrlMode = image_url_mode  # type: ignore[assignment]
        self._no_cache = bool(no_cache)
        self._top_logprobs = int(top_logprobs)
        self._timeout_s = float(timeout_s)
        self._max_retries = int(max_retries)
        self._flush_s = float(flush_s)
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._api_key_env = api_key_env
        headers = {"Content-Type": "application/json"}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise InputError(f"environment variable {api_key_env} (named by --api-key-env) is not set")
            headers["Authorization"] = f"Bearer {key}"
            self._secrets.append(key)
        self._secrets = [secret for secret in self._secrets if len(secret) >= MIN_SECRET]
        self._sender = Sender(
            RetryPolicy(
                max_retries=self._max_retries, backoff_base_s=float(backoff_base_s), backoff_max_s=float(backoff_max_s),
                max_retry_after_s=float(max_retry_after_s), timeout_s=self._timeout_s, concurrency=self._concurrency,
                headers=headers, secrets=tuple(self._secrets),
            )
        )  # fmt: skip
        self._sessions: list[dict[str, Any]] = []

    # -- Backend protocol ----------------------------------------------------------------

    def _mode(self) -> Detection:
        """The run's reading (exact ids or top-K pieces), asked of the first endpoint once."""
        if self._detection is None:
            base, url = self._endpoints[0]
            target = ServerTarget(
                model=self._model, base=base, url=url, server_api=self._server_api, headers=self._sender.policy.headers,
                timeout_s=self._timeout_s, secrets=self._sender.policy.secrets,
            )  # fmt: skip
            self._detection = resolve_mode(self._exact_setting, self._tokenizer_source, target)
        return self._detection

    def info(self) -> dict[str, Any]:
        detection = self._mode()
        extra: dict[str, Any] = {"logprob_mode": detection.mode, "exact_logprobs": self._exact_setting}
        if detection.reason:
            extra["logprob_mode_reason"] = detection.reason
        if detection.tokenizer is not None:
            extra["tokenizer"] = detection.tokenizer.source
        if self._server_api != "chat":
            extra["server_api"] = self._server_api
        if not self._send_images:
            extra["send_images"] = False
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
            **extra,
        }

    def token_sets(self) -> TokenSets:
        detection = self._mode()
        if detection.mode == "exact" and detection.tokenizer is not None:
            return detection.tokenizer.token_sets  # keyed by id: the hf backend's sets and readouts
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
        # one image's questions together (prefix caches), identical requests side by side (sent once)
        pending = sorted(requests, key=lambda r: (r.image_path, r.prompt))
        if not pending:
            return
        out: queue.Queue[tuple[str, Any]] = queue.Queue()
        worker = LoopThread(lambda: self._run(pending, config, out), out)
        worker.start()
        try:
            yield from collect(out, max(1, self._concurrency), self._flush_s)
        finally:
            worker.stop()

    def request_stats(self) -> dict[str, Any]:
        """Counts of every answer() call since the last call of this method (then reset)."""

        sessions, self._sessions = self._sessions, []
        if not sessions:
            return {}
        merged = sum_counts(sessions)
        merged["max_in_flight"] = max(s.get("max_in_flight", 0) for s in sessions)
        merged["started_at"] = sessions[0]["started_at"]
        merged["model"] = self._model
        return merged

    # -- runner side ------------------------------------------------------------------------

    # -- event-loop side ----------------------------------------------------------------------

    async def _run(self, pending: Sequence[Request], config: GenerateConfig, out: queue.Queue[tuple[str, Any]]) -> None:
        """The call's work on the loop thread: ``concurrency`` workers over the requests."""
        import httpx  # lazy: only this backend needs it

        started, wall = _dt.datetime.now(_dt.timezone.utc), time.perf_counter()
        cache = None if self._no_cache else ResponseCache(self._cache_dir)
        delivered = 0
        state = CallState(
            cache=cache,
            endpoints=[Endpoint(base=b, url=u) for b, u in self._endpoints],
            max_new_tokens=config.max_new_tokens,
            top_k=config.top_k,
            stop_strings=config.stops,
            parse=self._parser(config),
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
        tls = tls_context()  # built once: each client would build its own (about 25 ms each)

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
            self._sessions.append(session_stats(state, [b for b, _ in self._endpoints], len(pending), delivered, started, wall))

    async def _answer_group(self, group: Sequence[Request], client: httpx.AsyncClient, state: CallState) -> list[Response]:
        """Identical requests (same image and prompt): one fetch, one response each."""
        started = time.perf_counter()
        request = group[0]
        try:
            image = image_ref(request.image_path, state, self._image_url_mode)
            if isinstance(image, str):
                result = Result(error=image)
            else:
                body = self._body(request.prompt, image.url, state)
                key = cache_key(self._model, self._body(request.prompt, f"sha256:{image.sha256}", state))
                result = await self._fetch(key, body, request, client, state)
        except (ServiceDown, asyncio.CancelledError):
            raise
        except Exception as err:  # noqa: BLE001 - one request's surprise is that sample's error
            log.error("request %s/%s failed: %s", request.split, request.question_id, redact(f"{type(err).__name__}: {err}", self._secrets))
            result = Result(error=redact(f"{type(err).__name__}: {err}", self._secrets))
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
                served_model=result.served_model,
            )
            for r in group
        ]

    def _parser(self, config: GenerateConfig) -> Parse:
        """How this call's answers are read: by id in exact mode, else by piece; SGLang's shape or the chat one."""
        detection = self._mode()
        exact = detection.mode == "exact"
        if self._server_api == "sglang" and detection.tokenizer is not None:
            return functools.partial(parse_sglang, tokenizer=detection.tokenizer, exact=exact, max_new_tokens=config.max_new_tokens, top_k=config.top_k)
        if exact and detection.tokenizer is not None:
            return functools.partial(parse_exact_chat, tokenizer=detection.tokenizer, max_new_tokens=config.max_new_tokens)
        return functools.partial(parse_answer, max_new_tokens=config.max_new_tokens, top_k=config.top_k)

    def _body(self, prompt: str, url: str, state: CallState) -> dict[str, Any]:
        detection = self._mode()
        ids = detection.tokenizer.ids if detection.mode == "exact" and detection.tokenizer is not None else None
        if self._server_api == "sglang" and detection.tokenizer is not None:
            text = detection.tokenizer.render(prompt, image=self._send_images)
            return sglang_body(
                text, url if self._send_images else None, max_new_tokens=state.max_new_tokens, stops=state.stop_strings,
                top_k=self._top_logprobs, ids=ids,
            )  # fmt: skip
        image = [{"type": "image_url", "image_url": {"url": url}}] if self._send_images else []
        return {
            "model": self._model,
            "messages": [{"role": "user", "content": [*image, {"type": "text", "text": prompt}]}],
            "temperature": 0,
            "max_tokens": max(1, state.max_new_tokens),
            "logprobs": True,
            "top_logprobs": self._top_logprobs,
            **({"stop": list(state.stop_strings)} if state.stop_strings else {}),
            # exact: the candidate ids by id (top_logprobs becomes their number, as vLLM needs)
            **(exact_chat_fields(ids) if ids is not None else {}),
        }

    async def _fetch(
        self, key: str, body: dict[str, Any], request: Request, client: httpx.AsyncClient, state: CallState
    ) -> Result:
        if state.cache is not None:
            raw = state.cache.get(key)
            if raw is not None:
                try:
                    result = state.parse(loads(raw))
                except (ValueError, AttributeError, TypeError):  # what _judge refuses too: asked again
                    log.warning("ignoring an unusable cache entry %s", key[:12])
                else:
                    state.stats["cache_hits"] += 1
                    state.successes += 1
                    self._note_model(result, state)
                    return result
        state.stats["sent"] += 1
        attempt = await self._sender.post_with_retries(body, request, client, state)
        if attempt.outcome == "ok" and attempt.result is not None:
            # only a checked, usable answer is cached: a refused one is asked again next run
            if state.cache is not None and attempt.raw is not None:
                state.cache.put(key, self._model, attempt.raw)
            self._note_model(attempt.result, state)
            return attempt.result
        return Result(error=attempt.message)

    def _note_model(self, result: Result, state: CallState) -> None:
        """Count (and warn once about) answers from a model other than the one asked for."""
        served = result.served_model
        if served is None or served == self._model:
            return
        if not state.model_mismatch:
            log.warning("the server answered as model %r, not the %r asked for (counted in requests.json: model_mismatch)", served, self._model)
        state.model_mismatch[served] += 1
