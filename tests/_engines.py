"""Helpers shared by the hf engines' tests (prefix cache, model families): a prefix-pass
counter, a counter of the decoding loop's packed branches, and every readout's decision of a
batch of responses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from halluprobe.readouts.apply import apply
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.text import TEXT_RULES
from halluprobe.readouts.value import Readout
from halluprobe.records import Question, Request, Response
from halluprobe.runner import make_sample

__all__ = ["OBJECTS", "PHOTOS", "PackedSpy", "tiny_pair", "PrefixSpy", "assert_same_responses", "decisions", "yes_no_requests"]


# the demo photos several engine tests ask about, and objects whose names tokenize to different
# lengths (padded suffixes, padded slots)
PHOTOS = ["astronaut.jpg", "coffee.jpg", "chelsea.jpg", "motorcycle.jpg"]
OBJECTS = ["cup", "dining table", "dog", "traffic light", "person"]


def tiny_pair(factory: pytest.TempPathFactory, llama_tokenizer_dir: Path, qwen2_tokenizer_dir: Path) -> dict[str, Path]:
    """The tiny LLaVA (1-D positions) and Qwen2-VL (3-D rotary positions) builds the engine
    tests hold to each other, by name."""
    from halluprobe.tiny import build_tiny_llava
    from halluprobe.tiny_qwen2vl import build_tiny_qwen2vl

    return {
        "llava": build_tiny_llava(factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112),
        "qwen2vl": build_tiny_qwen2vl(factory.mktemp("qwen2vl"), qwen2_tokenizer_dir, seed=0),
    }


class PackedSpy:
    """Counts the packed branches the decoding loop opens (hf_decode's ``PackedBranch``), each
    entry its number of rows (``rows``) and of packed rows, one per image and branch
    (``images``): proves which layout really ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from halluprobe.backends.hf import decode as hf_decode
        from halluprobe.backends.hf.packed import PackedBranch

        self.rows: list[int] = []
        self.images: list[int] = []
        built, images = self.rows, self.images

        class Counted(PackedBranch):
            def __init__(self, model: Any, packed: Any, *args: Any, **kwargs: Any) -> None:
                built.append(packed.rows)
                images.append(len(packed.groups))
                super().__init__(model, packed, *args, **kwargs)

        monkeypatch.setattr(hf_decode, "PackedBranch", Counted)


class PrefixSpy:
    """Counts a backend's image prefixes computed (one by one, or several images in one batched
    pass): proves which engine really ran (and did not fall back)."""

    def __init__(self, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.prefixes = 0
        self.batched = 0  # images whose prefix ran in a pass with other images'
        inside = [False]
        real_one, real_many = backend.core.run_prefix, backend.core.run_prefixes

        def one(*args: Any, **kwargs: Any) -> Any:
            if not inside[0]:
                self.prefixes += 1
            return real_one(*args, **kwargs)

        def many(prefixes: Any) -> Any:
            self.prefixes += len(prefixes)
            inside[0] = True
            singles = self.prefixes
            try:
                calls = [0]

                def counted(*args: Any, **kwargs: Any) -> Any:
                    calls[0] += 1
                    return real_one(*args, **kwargs)

                monkeypatch.setattr(backend.core, "run_prefix", counted)
                out = real_many(prefixes)
            finally:
                monkeypatch.setattr(backend.core, "run_prefix", one)
                inside[0] = False
            self.batched += len(prefixes) - calls[0]
            assert self.prefixes == singles
            return out

        monkeypatch.setattr(backend.core, "run_prefix", one)
        monkeypatch.setattr(backend.core, "run_prefixes", many)


def decisions(backend: Any, requests: list[Request], responses: dict[Any, Response]) -> dict[Any, dict[str, str]]:
    """Every logit readout's and text rule's decision of each request's response."""
    sets = backend.token_sets()
    out = {}
    for r in requests:
        q = Question(split=r.split, question_id=r.question_id, image="x.jpg", text="t", label="yes")
        sample = make_sample(q, r.prompt, responses[r.key], sets)
        results = {name: apply(Readout.parse(name), sample, sets) for name in [*LOGIT_READOUTS, *(f"text:{rule}" for rule in TEXT_RULES)]}
        out[r.key] = {name: res.decision for name, res in results.items() if res is not None}
    return out


def yes_no_requests(backend: Any, photos: Path, photo_names: list[str], objects: list[str]) -> list[Request]:
    """"Is there a ... in the image?" about every photo in two splits, the second repeating the
    first three objects' questions (identical prompts: computed once)."""
    out = []
    for split in ("random", "popular"):
        qid = 0
        for image in photo_names:
            for name in objects[: 3 if split == "popular" else None]:
                qid += 1
                prompt = backend.render_prompt(f"Is there a {name} in the image?", None)
                out.append(Request(split=split, question_id=qid, image_path=str(photos / image), prompt=prompt))
    return out


def assert_same_responses(want: dict[Any, Response], got: dict[Any, Response], *, texts: bool) -> None:
    """The same keys, no errors, every candidate's first-token log-probability within 1e-4, the
    same two top tokens and, with ``texts``, the same greedy text."""
    assert want.keys() == got.keys()
    for key, a in want.items():
        b = got[key]
        assert a.error is None and b.error is None, (key, a.error, b.error)
        for token_id, value in a.candidates.items():
            assert b.candidates[token_id] == pytest.approx(value, abs=1e-4), (key, token_id)
        assert [t.id for t in a.first_token[:2]] == [t.id for t in b.first_token[:2]], key
        if texts:
            assert a.text == b.text, key
