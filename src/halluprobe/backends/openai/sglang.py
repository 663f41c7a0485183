"""SGLang's native ``/generate`` API for the openai backend (``server_api="sglang"``).

The OpenAI-compatible routes of SGLang cannot return chosen ids' log-probabilities; its native
``/generate`` can (``token_ids_logprob`` with ``return_logprob``: output in
``meta_info.output_token_ids_logprobs``, one ``[logprob, id, text]`` list per generated token).
It takes the prompt as text, so the model's chat template is applied here with the local
tokenizer (:meth:`LocalTokenizer.render`). Exact mode stores the candidates by id as the hf
backend does; otherwise the first token's ``output_top_logprobs`` are stored by piece. Tested
against a loopback stub of that JSON shape only (no SGLang build runs here).
"""

from __future__ import annotations

import math
import urllib.parse
from typing import Any

from halluprobe.backends.openai.exact import LocalTokenizer
from halluprobe.backends.openai.wire import Result, checked_logprob
from halluprobe.jsonl import replace_lone_surrogates
from halluprobe.records import TokenLogprob

__all__ = ["generate_url", "generated_ids_sglang", "parse_sglang", "sglang_body"]


def generate_url(chat: str) -> str:
    """The ``/generate`` URL beside a chat-completions URL (``http://h:p/v1/chat/completions`` ->
    ``http://h:p/generate``), userinfo and query kept."""
    parts = urllib.parse.urlsplit(chat)
    path = parts.path.removesuffix("/chat/completions").removesuffix("/v1").rstrip("/") + "/generate"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def sglang_body(
    text: str, image_url: str | None, *, max_new_tokens: int, stops: tuple[str, ...], top_k: int, ids: tuple[int, ...] | None
) -> dict[str, Any]:
    """A /generate body: greedy, the first tokens' log-probabilities (``ids``: exact mode)."""
    body: dict[str, Any] = {
        "text": text,
        "sampling_params": {"temperature": 0, "max_new_tokens": max(1, max_new_tokens), **({"stop": list(stops)} if stops else {})},
        "return_logprob": True,
        "logprob_start_len": -1,  # no prompt log-probabilities
        "top_logprobs_num": top_k,
        "return_text_in_logprobs": True,
    }
    if ids is not None:
        body["token_ids_logprob"] = list(ids)
    if image_url is not None:
        body["image_data"] = image_url
    return body


def _triples(rows: Any, what: str) -> list[tuple[float, int, str]]:
    """``[[logprob, id, text], ...]`` checked."""
    if not isinstance(rows, list):
        raise ValueError(f"meta_info.{what} is not a list")
    out = []
    for row in rows:
        if not isinstance(row, (list, tuple)) or len(row) < 2 or isinstance(row[1], bool) or not isinstance(row[1], int):
            raise ValueError(f"bad meta_info.{what} entry {str(row)[:60]}")
        text = row[2] if len(row) > 2 and isinstance(row[2], str) else ""
        out.append((checked_logprob(row[0], row[1]), int(row[1]), replace_lone_surrogates(text)))
    return out


def _meta(data: Any) -> dict[str, Any]:
    if isinstance(data, list) and data:  # a batch of one
        data = data[0]
    if not isinstance(data, dict) or not isinstance(data.get("meta_info"), dict):
        raise ValueError("the answer has no meta_info (is this SGLang's /generate?)")
    return data


def generated_ids_sglang(data: Any) -> list[int]:
    """The ids SGLang generated (``meta_info.output_token_logprobs``)."""
    return [i for _, i, _ in _triples(_meta(data)["meta_info"].get("output_token_logprobs"), "output_token_logprobs")]


def parse_sglang(data: Any, tokenizer: LocalTokenizer, *, exact: bool, max_new_tokens: int, top_k: int) -> Result:
    """A /generate answer -> first token, candidates (by id when ``exact``, else by piece) and text."""
    data = _meta(data)
    meta = data["meta_info"]
    sampled = _triples(meta.get("output_token_logprobs"), "output_token_logprobs")
    if not sampled:
        raise ValueError("meta_info.output_token_logprobs is empty: ask with return_logprob")
    logprob, token_id, _ = sampled[0]
    first = TokenLogprob(id=token_id, piece=tokenizer.piece(token_id), logprob=logprob)
    text = data.get("text") if max_new_tokens > 0 else None
    if max_new_tokens > 0 and not isinstance(text, str):
        raise ValueError("the answer's text is not a string")
    if exact:
        per_token = meta.get("output_token_ids_logprobs")
        if not isinstance(per_token, list) or not per_token:
            raise ValueError("the answer has no meta_info.output_token_ids_logprobs: the server ignored token_ids_logprob")
        found = {i: lp for lp, i, _ in _triples(per_token[0], "output_token_ids_logprobs")}
        missing = [i for i in tokenizer.ids if i not in found]
        if missing:
            raise ValueError(f"the answer has no log-probability for candidate ids {missing[:3]}: the server ignored token_ids_logprob")
        return Result(first_token=(first,), candidates=tuple((str(i), found[i]) for i in tokenizer.ids), text=replace_lone_surrogates(text) if isinstance(text, str) else None)
    tops = meta.get("output_top_logprobs")
    if not isinstance(tops, list) or not tops:
        raise ValueError("the answer has no meta_info.output_top_logprobs: ask with top_logprobs_num")
    entries = sorted(_triples(tops[0], "output_top_logprobs"), key=lambda e: -e[0])
    pieces: dict[str, float] = {}
    for lp, _, piece in entries:
        # ids that read as one string are added up in probability, as the chat parser does
        pieces[piece] = lp if piece not in pieces else max(pieces[piece], lp) + _log1p_exp(-abs(pieces[piece] - lp))
    return Result(
        first_token=tuple(TokenLogprob(id=i, piece=p, logprob=lp) for lp, i, p in entries[: max(1, top_k)]),
        candidates=tuple(pieces.items()),
        text=replace_lone_surrogates(text) if isinstance(text, str) else None,
    )


def _log1p_exp(x: float) -> float:
    return math.log1p(math.exp(x))
