"""Which reading a server allows, decided once per backend before the run header is written.

``exact_logprobs``: ``off`` reads the top-K pieces; ``auto`` reads exactly when a tokenizer is
given (``--tokenizer``) and the server answers a probe with every candidate id's
log-probability, else the top-K pieces (the reason logged); ``require`` refuses a server that
cannot (one line, exit 2). The probe is one short text-only question; the ids the server
generated for it must decode with the local tokenizer to the text it wrote, or the tokenizer is
refused as not the served model's. The mode goes into the run header and its fingerprint, so a
run (and a resume, and a merge) is read one way only. See docs/design/openai-backend.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from halluprobe.backends.openai.exact import MAX_IDS, LocalTokenizer, exact_chat_fields, generated_ids_chat, parse_exact_chat
from halluprobe.backends.openai.sglang import generated_ids_sglang, parse_sglang, sglang_body
from halluprobe.backends.openai.wire import message_text, redact, tls_context
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.jsonl import loads
from halluprobe.records import LogprobMode

__all__ = ["PROBE_PROMPT", "Detection", "ServerTarget", "resolve_mode"]

log = logging.getLogger(__name__)

PROBE_PROMPT = "Answer with one word, yes or no: is the sky blue?"
_PROBE_TOKENS = 8


@dataclass(frozen=True)
class ServerTarget:
    """Where and how the probe is sent: the first endpoint, as the run will send."""

    model: str
    base: str  # as stored and printed (no credentials)
    url: str  # chat completions, or SGLang's /generate
    server_api: str
    headers: dict[str, str]
    timeout_s: float
    secrets: tuple[str, ...]


@dataclass(frozen=True)
class Detection:
    mode: LogprobMode
    tokenizer: LocalTokenizer | None  # the served model's (exact mode, or SGLang's chat template)
    reason: str = ""  # why the pieces are read (empty when exact)


def resolve_mode(setting: str, tokenizer_source: str | None, target: ServerTarget) -> Detection:
    """The run's reading: exact when ``setting`` and the server allow it (see the module docstring)."""
    if target.server_api == "sglang" and tokenizer_source is None:
        raise InputError("--server-api sglang needs --tokenizer (SGLang's /generate takes the chat template applied)")
    if setting == "auto" and tokenizer_source is None:
        return Detection("pieces", None, "no --tokenizer given")
    tokenizer = LocalTokenizer.load(tokenizer_source or target.model) if tokenizer_source or setting == "require" else None
    if setting == "off" or tokenizer is None:
        return Detection("pieces", tokenizer, "--exact-logprobs off")
    if len(tokenizer.ids) > MAX_IDS:
        reason = f"the tokenizer has {len(tokenizer.ids)} candidate ids, more than the {MAX_IDS} a server reads"
        return _fallback(setting, target, tokenizer, reason)
    reason = _probe(target, tokenizer)
    if reason is None:
        log.info("%s reads the %d candidate ids exactly", target.base, len(tokenizer.ids))
        return Detection("exact", tokenizer)
    return _fallback(setting, target, tokenizer, reason)


def _fallback(setting: str, target: ServerTarget, tokenizer: LocalTokenizer, reason: str) -> Detection:
    if setting == "require":
        raise InputError(f"--exact-logprobs require: {target.base} cannot return the candidate ids' log-probabilities: {reason}")
    log.warning("%s: exact log-probabilities unavailable (%s); reading the top-K pieces", target.base, reason)
    return Detection("pieces", tokenizer, reason)


def _probe_body(target: ServerTarget, tokenizer: LocalTokenizer) -> dict[str, Any]:
    if target.server_api == "sglang":
        text = tokenizer.render(PROBE_PROMPT, image=False)
        return sglang_body(text, None, max_new_tokens=_PROBE_TOKENS, stops=(), top_k=1, ids=tokenizer.ids)
    return {
        "model": target.model,
        "messages": [{"role": "user", "content": [{"type": "text", "text": PROBE_PROMPT}]}],
        "temperature": 0,
        "max_tokens": _PROBE_TOKENS,
        "logprobs": True,
        **exact_chat_fields(tokenizer.ids),
    }


def _probe(target: ServerTarget, tokenizer: LocalTokenizer) -> str | None:
    """None when the server read every candidate id; else why not. InputError: a wrong tokenizer."""
    import httpx  # lazy: only this backend needs it

    try:
        with httpx.Client(timeout=target.timeout_s, verify=tls_context()) as client:
            response = client.post(target.url, json=_probe_body(target, tokenizer), headers=target.headers)
    except httpx.HTTPError as err:
        message = redact(f"{type(err).__name__}: {err}", target.secrets)
        raise RuntimeFailure(f"cannot reach {target.base} to ask whether it reads token ids exactly: {message}") from None
    snippet = redact(" ".join(response.text[:200].split()), target.secrets)
    if response.status_code != 200:  # a 4xx for the unknown fields, or a server that fails on them (5xx)
        return f"HTTP {response.status_code}: {snippet}"
    try:
        data = loads(response.text)
        if target.server_api == "sglang":
            parse_sglang(data, tokenizer, exact=True, max_new_tokens=_PROBE_TOKENS, top_k=1)
            ids, text = generated_ids_sglang(data), data.get("text") if isinstance(data, dict) else None
        else:
            parse_exact_chat(data, tokenizer, _PROBE_TOKENS)
            ids, text = generated_ids_chat(data), message_text(data["choices"][0].get("message", {}).get("content"))
    except (ValueError, AttributeError, TypeError, KeyError) as err:
        return redact(str(err), target.secrets)
    tokenizer.check_served(ids, text if isinstance(text, str) else None, target.base)
    return None
