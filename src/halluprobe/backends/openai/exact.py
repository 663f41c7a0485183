"""Exact mode of the openai backend: the yes/no candidates' log-probabilities read by token id.

A vLLM server (``logprob_token_ids`` with ``return_tokens_as_token_ids``) or SGLang's native
``/generate`` (``token_ids_logprob``) returns the log-probability of chosen ids, normalised over
the whole vocabulary. The ids are the ones the hf backend stores (:func:`candidate_ids` of the
tokenizer's :func:`derive_token_sets`), so ``Response.candidates`` is keyed by ``str(id)`` exactly
as there and every readout is the same computation. :class:`LocalTokenizer` holds the tokenizer
(a local folder or a hub id, loaded as ``halluprobe tokens`` does); :func:`parse_exact_chat`
reads a chat completion asked that way. See docs/design/openai-backend.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from halluprobe.backends.openai.wire import Result, checked_logprob, message_text
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.readouts.logits import candidate_ids
from halluprobe.readouts.tokensets import derive_token_sets, load_tokenizer
from halluprobe.records import TokenLogprob, TokenSets

__all__ = [
    "EXACT_SETTINGS",
    "MAX_IDS",
    "SERVER_APIS",
    "ExactSetting",
    "LocalTokenizer",
    "ServerApi",
    "exact_chat_fields",
    "generated_ids_chat",
    "parse_exact_chat",
    "token_id_of",
]

ExactSetting = Literal["require", "auto", "off"]
EXACT_SETTINGS: tuple[str, ...] = ("require", "auto", "off")
ServerApi = Literal["chat", "sglang"]
SERVER_APIS: tuple[str, ...] = ("chat", "sglang")
# vLLM's bound on logprob_token_ids (SamplingParams.MAX_LOGPROB_TOKEN_IDS)
MAX_IDS = 128
_ID_PREFIX = "token_id:"


@dataclass(frozen=True)
class LocalTokenizer:
    """The served model's tokenizer, loaded beside the server: its token sets and candidate ids."""

    source: str
    tokenizer: Any = field(repr=False, compare=False)
    token_sets: TokenSets
    ids: tuple[int, ...]

    @classmethod
    def load(cls, source: str) -> LocalTokenizer:
        """``source``: a tokenizer or model folder, or a hub id (as ``halluprobe tokens`` takes)."""
        try:
            tokenizer = load_tokenizer(source)
        except (InputError, RuntimeFailure):
            raise
        except (OSError, ValueError) as err:
            raise InputError(f"cannot load a tokenizer: {str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}", source) from None
        sets = derive_token_sets(tokenizer)
        return cls(source=source, tokenizer=tokenizer, token_sets=sets, ids=tuple(candidate_ids(sets)))

    def piece(self, token_id: int) -> str:
        """The vocabulary piece at ``token_id`` (as the hf backend stores a first token's piece)."""
        if not 0 <= token_id < self.token_sets.vocab_size:
            return ""
        return str(self.tokenizer.convert_ids_to_tokens(token_id))

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def render(self, prompt: str, *, image: bool) -> str:
        """The model's chat template around one user turn (SGLang's /generate takes the text as is)."""
        content: Any = [{"type": "image"}, {"type": "text", "text": prompt}] if image else prompt
        try:
            return str(self.tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True))
        except (ValueError, TypeError, AttributeError) as err:  # no template, or one that takes no parts
            raise InputError(f"the tokenizer's chat template cannot render a question: {err}", self.source) from None

    def check_served(self, ids: list[int], served_text: str | None, where: str) -> None:
        """Refuse a tokenizer that is not the served model's: the ids the server generated must
        lie in this vocabulary and decode here to the text the server wrote."""
        outside = [i for i in ids if not 0 <= i < self.token_sets.vocab_size]
        if outside:
            raise InputError(
                f"the tokenizer does not match the model served at {where}: the server generated ids {outside[:3]} "
                f"outside this vocabulary of {self.token_sets.vocab_size}",
                self.source,
            )
        if served_text is None or not ids:
            return
        ours = " ".join(self.decode(ids).split())
        theirs = " ".join(served_text.split())
        if ours != theirs:
            raise InputError(
                f"the tokenizer does not match the model served at {where}: the server's ids {ids[:6]} read "
                f"{ours[:40]!r} here, the server wrote {theirs[:40]!r}",
                self.source,
            )


def token_id_of(token: Any) -> int:
    """``"token_id:123"`` (vLLM's return_tokens_as_token_ids) -> 123; ValueError for anything else."""
    if isinstance(token, str) and token.startswith(_ID_PREFIX):
        number = token[len(_ID_PREFIX) :]
        if number.isdigit():
            return int(number)
    raise ValueError(f"the server returned the token {str(token)[:40]!r}, not a token id (is return_tokens_as_token_ids supported?)")


def exact_chat_fields(ids: tuple[int, ...]) -> dict[str, Any]:
    """What a chat-completions body adds in exact mode (vLLM: ``top_logprobs`` must equal the number of ids)."""
    return {"top_logprobs": len(ids), "logprob_token_ids": list(ids), "return_tokens_as_token_ids": True}


def _content(data: Any) -> tuple[dict[str, Any], list[Any]]:
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        error = data.get("error") if isinstance(data, dict) else None
        raise ValueError(f"no choices in the answer{f': {error}' if error else ''}")
    choice = data["choices"][0]
    content = (choice.get("logprobs") or {}).get("content") or []
    if not content:
        raise ValueError("the answer has no logprobs.content (exact mode asks logprobs=true with logprob_token_ids)")
    return choice, content


def generated_ids_chat(data: Any) -> list[int]:
    """The ids of every generated token of a chat completion asked with return_tokens_as_token_ids."""
    _, content = _content(data)
    return [token_id_of(step.get("token")) for step in content if isinstance(step, dict)]


def parse_exact_chat(data: Any, tokenizer: LocalTokenizer, max_new_tokens: int) -> Result:
    """A chat completion asked in exact mode -> every candidate id's log-probability, by id.

    ValueError when an id is missing: a server or proxy that dropped ``logprob_token_ids``
    answers with its natural top-k instead, and a run never mixes the two readings."""
    choice, content = _content(data)
    first = content[0]
    sampled = token_id_of(first.get("token"))
    sampled_logprob = checked_logprob(first.get("logprob"), first.get("token"))
    found: dict[int, float] = {sampled: sampled_logprob}
    for top in first.get("top_logprobs") or []:
        if not isinstance(top, dict):
            raise ValueError(f"bad top_logprobs entry {top!r}")
        found[token_id_of(top.get("token"))] = checked_logprob(top.get("logprob"), top.get("token"))
    missing = [i for i in tokenizer.ids if i not in found]
    if missing:
        raise ValueError(
            f"the answer has no log-probability for {len(missing)} of the {len(tokenizer.ids)} candidate ids "
            f"(first {missing[:3]}): the server ignored logprob_token_ids"
        )
    served = data.get("model")
    message = choice.get("message") or {}
    return Result(
        first_token=(TokenLogprob(id=sampled, piece=tokenizer.piece(sampled), logprob=sampled_logprob),),
        candidates=tuple((str(i), found[i]) for i in tokenizer.ids),
        text=message_text(message.get("content")) if max_new_tokens > 0 else None,
        served_model=served if isinstance(served, str) else None,
    )
