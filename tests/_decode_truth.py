"""What the first-token agreement tests share (test_decode_truth.py on the tiny LLaVA and the demo
model, test_decode_truth_families.py on every family of tests/_families.py): requests with the
contrast variants, the signals a yes/no run records for them, and the check that the decoding
loop's first-step scores on the yes/no ids are the offline rule's (readouts/corrections.py, same
name and settings) read from those signals (issue 24 item 3).

The loop's batches: the plain engine (DecodeEngine) decodes every request in one batch, images
mixed; the prefix-cache engine (PrefixDecodeEngine) decodes one image's questions per batch after
that image's cached prefix, as it does in a run."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from halluprobe.backends.hf.decode_rules import parse_decode
from halluprobe.backends.hf.decode_rules import parse_decode_spec
from halluprobe.backends.hf.decode_engine import DecodeEngine
from halluprobe.backends.hf.decode_prefix import PrefixDecodeEngine
from halluprobe.readouts.corrections import CORRECTIONS
from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request, Response, Sample

__all__ = ["NEUTRAL", "Agreement", "agreement", "neutral_is_greedy", "record_signals", "truth_requests"]

# neutral settings: plain greedy text (M3ID and PAI need the no-image prompt)
NEUTRAL = ("vcd:alpha=0", "icd:alpha=0,beta=0", "m3id:lambda=0", "pai:gamma=1,alpha=0,start=0")


def truth_requests(backend: Any, items: Sequence[tuple[str, str]], template: str | None, *, no_image: bool = True) -> list[Request]:
    """One request per (image path, question), with the ``instruction`` variant (ICD) and, where
    the family can leave the image out (``no_image``), the ``no-image`` one (M3ID, PAI)."""
    out = []
    for i, (image, question) in enumerate(items):
        variants = {"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {question}", template)}
        if no_image:
            variants["no-image"] = backend.render_prompt(question, template, image=False)
        out.append(Request(split="s", question_id=i, image_path=image, prompt=backend.render_prompt(question, template), variants=variants))
    return out


def record_signals(backend: Any, requests: Sequence[Request], signals: Sequence[str]) -> dict[tuple[str, int], Response]:
    """A yes/no run's responses (first token, candidates, the correction signals)."""
    config = GenerateConfig(max_new_tokens=0, signals=tuple(signals), instruction=ICD_INSTRUCTION)
    recorded = {r.key: r for batch in backend.answer(requests, config) for r in batch}
    assert len(recorded) == len(requests)
    for response in recorded.values():
        assert response.error is None and response.candidates is not None, response.error
    return recorded


def _images(backend: Any, requests: Sequence[Request]) -> list[Any]:
    images, errors = backend.core.load_images(requests)
    assert not errors
    return images


def _decode(engine: DecodeEngine, requests: Sequence[Request], images: list[Any]) -> list[tuple[Request, int, Any]]:
    """(request, its decoded first token, its first-step scores) of every request; the prefix
    engine one image per batch (its way), the plain engine all in one batch."""
    out = []
    order = sorted(range(len(requests)), key=lambda i: requests[i].image_path)
    if isinstance(engine, PrefixDecodeEngine):
        batches = [list(g) for _, g in itertools.groupby(order, key=lambda i: requests[i].image_path)]
    else:
        batches = [order]
    for batch in batches:
        decoded = engine.decode_batch([requests[i] for i in batch], [images[i] for i in batch], keep_steps=True)
        for row, i in enumerate(batch):
            out.append((requests[i], decoded.tokens[row][0], decoded.scores[0][row]))
    return out


class Agreement:
    """Counts of one check: rows compared, rows whose decoded token is a yes/no id, and how far
    the method moved the scores."""

    def __init__(self) -> None:
        self.checked = 0
        self.yes_no = 0
        # the largest change of a kept yes/no id's score from its base log-probability: a
        # non-neutral setting that moves nothing would make the agreement hold trivially
        self.moved = 0.0
        self.largest = 0.0  # the largest |loop - offline| of a kept id


def agreement(
    backend: Any, requests: Sequence[Request], recorded: dict[tuple[str, int], Response], spec: str, *, tolerance: float = 1e-4
) -> Agreement:
    """Decode one new token of ``requests`` with ``spec`` on ``backend``'s engine; assert every
    yes/no id's loop score equals the offline rule's per-id score from ``recorded`` (``-inf``
    where its plausibility cut-off drops the id) and a decoded yes/no token is the rule's best."""
    name, params = parse_decode(spec)
    sets = backend.token_sets()
    ids = [*sets.yes_ids, *sets.no_ids]
    engine = backend.engine(GenerateConfig(max_new_tokens=1, stop_strings=(), decode=spec))
    assert type(engine) is (PrefixDecodeEngine if backend.prefix_cache else DecodeEngine)
    counts = Agreement()
    for request, token, loop in _decode(engine, requests, _images(backend, requests)):
        response = recorded[request.key]
        sample = Sample(split="s", question_id=request.question_id, image="x", object=None, label="yes", prompt=request.prompt,
                        first_token=response.first_token, candidates=response.candidates, signals=response.signals)  # fmt: skip
        assert response.candidates is not None and response.first_token
        base = {i: response.candidates[str(i)] for i in ids}
        offline = CORRECTIONS[name].rule(base, response.first_token[0].logprob, sample, {**params, "t": 0.0}, sets)  # type: ignore[misc]
        assert offline is not None, spec
        for i in ids:
            if offline[i] == float("-inf"):
                assert loop[i].item() == float("-inf"), (spec, request.key, i)
            else:
                assert abs(loop[i].item() - offline[i]) < tolerance, (spec, request.key, i, loop[i].item(), offline[i])
                counts.largest = max(counts.largest, abs(loop[i].item() - offline[i]))
        counts.checked += 1
        counts.moved = max([counts.moved, *(abs(offline[i] - base[i]) for i in ids if offline[i] != float("-inf"))])
        if token in ids:
            counts.yes_no += 1
            assert token == max(ids, key=lambda i: offline[i]), (spec, request.key)
    return counts


def neutral_is_greedy(backend: Any, requests: Sequence[Request], specs: Sequence[str] = NEUTRAL, *, new_tokens: int = 4) -> None:
    """Each neutral spec writes the text of the backend's plain (non-decoding) engine."""
    plain = GenerateConfig(max_new_tokens=new_tokens, stop_strings=())
    want = {r.key: r.text for batch in backend.answer(requests, plain) for r in batch}
    assert None not in want.values()
    for spec in specs:
        got = {r.key: r.text for batch in backend.answer(requests, plain.model_copy(update={"decode": parse_decode_spec(spec)})) for r in batch}
        assert got == want, spec
