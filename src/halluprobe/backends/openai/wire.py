"""The OpenAI-compatible chat-completions wire format, without the backend's state.

An endpoint's URL (stored without credentials), the attempt outcomes and how an HTTP answer is
judged (:func:`judge_answer`), a chat-completion JSON read into first-token alternatives by
piece and text (:func:`parse_answer`, every log-probability checked), Retry-After, and the
redaction of secrets from server texts. Used by openai/transport.py and openai/backend.py; see
docs/design/openai-backend.md.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import math
import os
import ssl
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from halluprobe.errors import InputError
from halluprobe.jsonl import loads, replace_lone_surrogates
from halluprobe.records import TokenLogprob

__all__ = [
    "FATAL_STOP",
    "MIN_SECRET",
    "OUTCOMES",
    "REDACTED",
    "RETRIABLE",
    "Attempt",
    "ImageRef",
    "Result",
    "Parse",
    "chat_url",
    "checked_logprob",
    "judge_answer",
    "message_text",
    "parse_answer",
    "redact",
    "retry_after",
    "tls_context",
    "url_secrets",
]

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
RETRIABLE = frozenset({"http_429", "http_5xx", "timeout", "connection", "malformed"})
# with no success at all in the run, this many final rejections stop it (wrong model name, auth)
FATAL_STOP = 8
# a logprob this far above 0 is float rounding of log(1) (stored as 0.0); beyond it the server is wrong
_LOGPROB_ROUNDING = 1e-6
# a secret shorter than this is not redacted (replacing every "a" would garble every message)
MIN_SECRET = 4
REDACTED = "[redacted]"


@dataclass(frozen=True)
class ImageRef:
    """An image as sent: its bytes' sha256 (the cache key) and its data or file URL."""

    sha256: str
    url: str


@dataclass(frozen=True)
class Result:
    """What one distinct request body produced: shared by identical requests."""

    first_token: tuple[TokenLogprob, ...] = ()
    candidates: tuple[tuple[str, float], ...] = ()
    text: str | None = None
    error: str | None = None
    served_model: str | None = None  # the answer's "model" (None when it names none)


# reads a server's JSON answer into a Result; ValueError (or AttributeError, TypeError) when unusable
Parse = Callable[[Any], Result]


@dataclass
class Attempt:
    outcome: str
    raw: str | None = None
    result: Result | None = None
    retry_after: float | None = None
    message: str = ""


def retry_after(value: str | None) -> float | None:
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


def chat_url(endpoint: str) -> tuple[str, str]:
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


def url_secrets(url: str) -> list[str]:
    """The parts of an endpoint URL that may be credentials: its password and its query values."""
    parts = urllib.parse.urlsplit(url)
    found = [parts.password] if parts.password else []
    return found + [value for _, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=False)]


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret (longest first, so a secret inside another goes too) replaced."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def tls_context() -> ssl.SSLContext:
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


def checked_logprob(value: Any, piece: Any) -> float:
    """A returned log-probability, checked: a finite number, not above 0 (a probability <= 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"logprob of {piece!r} is not a number: {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"logprob of {piece!r} is not finite: {value!r}")
    if value > _LOGPROB_ROUNDING:
        raise ValueError(f"logprob of {piece!r} is positive ({value!r}): a probability above 1")
    return min(float(value), 0.0)


def message_text(content: Any) -> str:
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


def parse_answer(data: Any, max_new_tokens: int, top_k: int) -> Result:
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
        entries.append((replace_lone_surrogates(top["token"]), checked_logprob(top.get("logprob"), top["token"])))
    entries.sort(key=lambda e: -e[1])
    candidates: dict[str, float] = {}
    for piece, logprob in entries:  # ids that decode to one string: their probabilities add up
        candidates[piece] = _logaddexp(candidates[piece], logprob) if piece in candidates else logprob
    served = data.get("model")
    return Result(
        first_token=tuple(TokenLogprob(id=None, piece=p, logprob=lp) for p, lp in entries[: max(1, top_k)]),
        candidates=tuple(candidates.items()),
        text=message_text(message.get("content")) if max_new_tokens > 0 else None,
        served_model=served if isinstance(served, str) else None,
    )


def judge_answer(status: int, text: str, retry_after_header: str | None, where: str, parse: Parse) -> Attempt:
    """One HTTP answer's outcome (``where``: "HTTP 200 from BASE", for the messages); ``parse``
    reads a JSON answer the way the call asked for it (pieces, exact ids, SGLang's shape)."""
    snippet = " ".join(text[:300].split())
    if status == 429:
        return Attempt("http_429", retry_after=retry_after(retry_after_header), message=f"{where}: {snippet}")
    if status >= 500:
        return Attempt("http_5xx", message=f"{where}: {snippet}")
    if status >= 400:
        return Attempt("fatal_4xx", message=f"{where}: {snippet}")
    if status != 200:
        return Attempt("bad_response", message=f"{where}: unexpected status")
    try:
        data = loads(text)
    except ValueError as err:
        return Attempt("malformed", message=f"{where}: the body is not JSON ({err})")
    try:
        result = parse(data)
    except (ValueError, AttributeError, TypeError) as err:
        return Attempt("bad_response", message=f"{where}: {err}")
    return Attempt("ok", raw=text, result=result)
