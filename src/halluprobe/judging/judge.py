"""One judging pass: ask a judge backend about every item not yet judged, store each verdict
with its ledger as the batch comes back.

Resumption is by item id, never by position: a killed pass leaves whole lines for the batches it
finished, and the next pass asks only the ids without a final line. A backend error is stored as
status ``error`` and asked again by the next pass (a verdict was never given).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from halluprobe.ask import ask
from halluprobe.backends.base import Backend
from halluprobe.errors import InputError
from halluprobe.judging.ledger import JudgeHeader, Judgment, Verdict
from halluprobe.judging.store import JudgmentDir
from halluprobe.records import GenerateConfig, Request

__all__ = ["JudgeItem", "JudgePass", "Parser", "judge_generation", "judge_items"]

# reply text -> (verdict, None) or (None, why it is unparseable)
Parser = Callable[[str], "tuple[Verdict | None, str | None]"]


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge: its stable id, the image the judge request carries (a backend reads
    it; a text-only judge is told not to send it), and the filled-in judge prompt."""

    item_id: str
    image_path: str
    prompt: str


@dataclass(frozen=True)
class JudgePass:
    """What a pass did: items asked now, skipped (judged by an earlier pass), and errors."""

    asked: int
    skipped: int
    errors: int


def judge_generation(max_new_tokens: int) -> GenerateConfig:
    """A judge's settings: greedy (the official scripts ask for temperature 0), a free-form reply
    ended only by EOS or ``max_new_tokens`` (a verdict follows its explanation)."""
    return GenerateConfig(max_new_tokens=max_new_tokens, stop_strings=())


def judge_items(
    backend: Backend,
    items: Sequence[JudgeItem],
    *,
    store: JudgmentDir,
    header: JudgeHeader,
    parse: Parser,
    overwrite: bool = False,
) -> JudgePass:
    """Judge every item of ``items`` that ``store`` has no final verdict for; append as batches come."""
    ids = [item.item_id for item in items]
    if len(set(ids)) != len(ids):
        raise InputError("two judged items share an id: each must be judged once")
    store.start(header, overwrite=overwrite)
    done = store.done_ids()
    todo = [item for item in items if item.item_id not in done]
    config: GenerateConfig = header.generation
    # a Request's key is (split, int): the position in this pass's list, mapped back to the item id
    requests = [
        Request(split="judge", question_id=i, image_path=item.image_path,
                prompt=backend.render_prompt(item.prompt, None, image=False))  # fmt: skip
        for i, item in enumerate(todo)
    ]
    errors = 0
    for batch in ask(backend, requests, config):
        lines = []
        for response in batch:
            item = todo[response.question_id]
            common: dict[str, Any] = {
                "item_id": item.item_id, "judge_model": header.model, "judge_model_reported": response.served_model,
                "template_sha256": header.template_sha256, "generation": config,
                "prompt_sha256": hashlib.sha256(item.prompt.encode("utf-8")).hexdigest(),
            }  # fmt: skip
            if response.error is not None:
                errors += 1
                lines.append(Judgment(**common, status="error", reason=response.error))
                continue
            reply = response.text or ""
            verdict, why = parse(reply)
            if verdict is None:
                lines.append(Judgment(**common, reply=reply, status="unparseable", reason=why or "no verdict"))
            else:
                lines.append(Judgment(**common, reply=reply, status="parsed", verdict=verdict))
        store.append(lines)
    return JudgePass(asked=len(todo), skipped=len(items) - len(todo), errors=errors)
