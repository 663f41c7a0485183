"""The openai backend's transport: endpoints, retries, and the event loop in a worker thread.

:class:`Sender` posts one request body with the backend's :class:`RetryPolicy` (backoff with
jitter, Retry-After honoured, another endpoint when there is one, the service judged down when
nothing succeeds), counting every attempt in the call's :class:`CallState`. :class:`LoopThread`
runs the call's asyncio work in a thread and :func:`collect` hands its responses to the
runner's thread in batches. See openai/backend.py's module docstring and
docs/design/openai-backend.md.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import datetime as _dt
import hashlib
import io
import logging
import math
import queue
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluprobe.backends.openai.wire import FATAL_STOP, OUTCOMES, RETRIABLE, Attempt, ImageRef, Parse, judge_answer, redact
from halluprobe.backends.response_cache import ResponseCache
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.records import Request, Response

if TYPE_CHECKING:
    import httpx

__all__ = ["CallState", "Endpoint", "LoopThread", "RetryPolicy", "Sender", "ServiceDown", "collect", "image_ref", "session_stats"]

log = logging.getLogger(__name__)


@dataclass
class Endpoint:
    base: str
    url: str
    in_flight: int = 0
    down_until: float = 0.0
    assigned: int = 0


@dataclass
class CallState:
    """Per-answer() state, owned by the event-loop thread."""

    cache: ResponseCache | None
    endpoints: list[Endpoint]
    max_new_tokens: int
    top_k: int
    stop_strings: tuple[str, ...]  # the call's (GenerateConfig.stops); () sends no stop
    parse: Parse  # reads an answer the way this call asks (top-k pieces, exact ids, SGLang)
    stats: collections.Counter[str] = field(default_factory=collections.Counter)
    attempts: collections.Counter[str] = field(default_factory=collections.Counter)
    model_mismatch: collections.Counter[str] = field(default_factory=collections.Counter)  # served name -> answers
    per_endpoint: collections.Counter[str] = field(default_factory=collections.Counter)
    affinity: dict[str, Endpoint] = field(default_factory=dict)
    images: dict[str, ImageRef | str] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)  # requests with a retriable failure since the last success
    last_success: float = -math.inf  # time.monotonic() of the last successful attempt
    successes: int = 0
    fatal: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class ServiceDown(RuntimeFailure):
    """Every endpoint keeps failing: stop the run (what is answered is saved)."""


@dataclass(frozen=True)
class RetryPolicy:
    """The backend's sending settings (constructor options; the same for every call)."""

    max_retries: int
    backoff_base_s: float
    backoff_max_s: float
    max_retry_after_s: float
    timeout_s: float
    concurrency: int
    headers: dict[str, str]
    secrets: tuple[str, ...]  # redacted from every server text


class Sender:
    """Posts request bodies under a :class:`RetryPolicy`; all state is the call's ``CallState``."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    async def post_with_retries(
        self, body: dict[str, Any], request: Request, client: httpx.AsyncClient, state: CallState
    ) -> Attempt:
        me = f"{request.split}/{request.question_id}"
        first_failure = math.inf
        avoid: Endpoint | None = None
        attempt = Attempt("connection", message="not sent")
        for number in range(self.policy.max_retries + 1):
            endpoint = self.pick(request.image_path, state, avoid)
            attempt = await self.attempt(client, endpoint, body, state)
            state.attempts[attempt.outcome] += 1
            state.per_endpoint[endpoint.base] += 1
            if attempt.outcome == "ok":
                state.failing.clear()
                state.last_success = time.monotonic()
                state.successes += 1
                return attempt
            if attempt.outcome not in RETRIABLE:
                state.fatal += 1
                if state.successes == 0 and state.fatal >= FATAL_STOP:
                    raise ServiceDown(
                        f"the first {state.fatal} requests were all rejected, stopping: {attempt.message}"
                    )
                return attempt
            state.failing.add(me)
            first_failure = min(first_failure, time.monotonic())
            if attempt.outcome in ("connection", "timeout"):
                endpoint.down_until = time.monotonic() + min(5.0, self.policy.backoff_max_s)
            avoid = endpoint if len(state.endpoints) > 1 else None
            if number == self.policy.max_retries:
                break
            delay = self._delay(number, attempt.retry_after)
            log.debug("%s/%s: %s, retry %d in %.2fs", request.split, request.question_id, attempt.message, number + 1, delay)
            await asyncio.sleep(delay)
        state.stats["gave_up"] += 1
        tries = self.policy.max_retries + 1
        # nothing succeeded since this request began failing, or others failed too since the last
        # success: the service is down, not this request; its answer is left to --resume
        if state.last_success < first_failure or state.failing - {me}:
            raise ServiceDown(
                f"every endpoint keeps failing ({attempt.message}; {tries} attempts, no success since): "
                "stopping the run; answered samples are saved, rerun with --resume once the server is back"
            )
        log.warning("%s/%s: giving up after %d attempts: %s", request.split, request.question_id, tries, attempt.message)
        attempt.message = f"gave up after {tries} attempts: {attempt.message}"
        return attempt

    def _delay(self, number: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.policy.max_retry_after_s) * random.uniform(1.0, 1.1)
        cap = min(self.policy.backoff_max_s, self.policy.backoff_base_s * 2**number)
        return cap / 2 + random.uniform(0.0, cap / 2)  # "equal jitter": spread, never near zero

    def pick(self, image: str, state: CallState, avoid: Endpoint | None) -> Endpoint:
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
        while len(state.affinity) > 4 * self.policy.concurrency:
            state.affinity.pop(next(iter(state.affinity)))
        return best

    async def attempt(self, client: httpx.AsyncClient, endpoint: Endpoint, body: dict[str, Any], state: CallState) -> Attempt:
        """One POST and its outcome; the message is redacted here, where every server text passes."""
        attempt = await self._attempt_raw(client, endpoint, body, state)
        attempt.message = redact(attempt.message, self.policy.secrets)
        return attempt

    async def _attempt_raw(self, client: httpx.AsyncClient, endpoint: Endpoint, body: dict[str, Any], state: CallState) -> Attempt:
        import httpx

        endpoint.in_flight += 1
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            response = await asyncio.wait_for(
                client.post(endpoint.url, json=body, headers=self.policy.headers), timeout=self.policy.timeout_s
            )
        except (asyncio.TimeoutError, httpx.TimeoutException):
            return Attempt("timeout", message=f"no answer from {endpoint.base} within {self.policy.timeout_s:g}s")
        except httpx.RequestError as err:
            return Attempt("connection", message=f"{endpoint.base}: {type(err).__name__}: {err}".rstrip(": "))
        finally:
            endpoint.in_flight -= 1
            state.in_flight -= 1
        return judge_answer(
            response.status_code, response.text, response.headers.get("retry-after"), f"HTTP {response.status_code} from {endpoint.base}",
            state.parse,
        )


class LoopThread(threading.Thread):
    """Runs the backend's event loop; results and a final error go through ``out``."""

    def __init__(self, work: Callable[[], Awaitable[None]], out: queue.Queue[tuple[str, Any]]) -> None:
        super().__init__(name="halluprobe-openai", daemon=True)
        self._work, self._out = work, out
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
        await self._work()

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


def collect(out: queue.Queue[tuple[str, Any]], flush_size: int, flush_s: float) -> Iterator[list[Response]]:
    """The loop thread's responses in batches: every ``flush_size`` responses or ``flush_s``
    seconds; its error is raised here, in the consumer's thread."""
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
                deadline = time.monotonic() + flush_s
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



def session_stats(state: CallState, endpoints: Sequence[str], n: int, delivered: int, started: _dt.datetime, wall: float) -> dict[str, Any]:
    """One answer() call's counts, as requests.json writes them (``wall``: its perf_counter start)."""
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
        "endpoints": {base: state.per_endpoint.get(base, 0) for base in endpoints},
        "max_in_flight": state.max_in_flight,
        # served model name -> answers that named it, when it is not the model asked for
        "model_mismatch": dict(state.model_mismatch),
    }


def image_ref(path: str, state: CallState, mode: str) -> ImageRef | str:
    """The image's sha256 and URL (``mode``: data or file), or an error message; a few kept (requests come by image)."""
    known = state.images.get(path)
    if known is not None:
        return known
    try:
        data = Path(path).read_bytes()
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            mime = Image.MIME.get(img.format or "", "image/png")
    except Exception as err:  # noqa: BLE001 - unreadable or not an image: that sample's error
        value: ImageRef | str = f"cannot read image {path}: {type(err).__name__}: {err}"
    else:
        digest = hashlib.sha256(data).hexdigest()
        if mode == "data":
            url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        else:
            url = Path(path).resolve().as_uri()
        value = ImageRef(sha256=digest, url=url)
    state.images[path] = value
    while len(state.images) > 8:
        state.images.pop(next(iter(state.images)))
    return value
