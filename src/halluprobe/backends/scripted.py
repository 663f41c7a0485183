"""A deterministic scripted backend for pipeline tests (never a model).

The script is a JSON file::

    {"present": {"photo.png": ["cat", "cup"]},   # answered yes
     "hallucinate": {"dog": 0.5},               # absent object -> yes with this probability
     "errors": ["broken.png"],                  # these images fail like an unreadable file
     "offset": {"odd.png": "▁Maybe"},           # first-token argmax outside the yes/no sets
     "delay_s": 0.0,                            # sleep per batch (kill-and-resume tests)
     "seed": 0,
     "generate": [{"match": "Describe", "image": "photo.png", "text": "A cat on a sofa."}]}

``generate`` scripts free-text generation (Auto-Probe's descriptions and JSON extraction): the
first rule whose ``match`` regex is found in the prompt (and whose optional ``image`` is the
request's image name) gives the response text, cut to ``max_new_tokens`` words. Prompts no rule
matches are answered as yes/no questions.

The object is read from the prompt ("Is there a/an X in the image?"). Answers come with
first-token log-probabilities over a small SentencePiece-like vocabulary, so every readout
runs; the yes/no decision is a seeded hash of (seed, image, object), hence reproducible in
any order and batch size. Asked for correction signals (``GenerateConfig.signals``: ``noised``,
``layers``, ``instruction``, ``no-image``, ``attention``), it returns scripted contrast passes whose evidence is weaker than the plain one's
(see :meth:`ScriptedBackend._signal`), so corrections can be tested without a model.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.records import GenerateConfig, Request, Response, SignalLogprobs, TokenLogprob, TokenSets

__all__ = ["ScriptedBackend", "SCRIPTED_VOCAB"]

SCRIPTED_VOCAB: tuple[str, ...] = ("<unk>", "▁Yes", "▁No", "Yes", "No", "▁yes", "▁no", "▁Maybe", ".", "▁There")
_SCRIPT_KEYS = frozenset({"present", "hallucinate", "errors", "offset", "delay_s", "seed", "generate"})
_OBJECT = re.compile(r"is there an? (.+?) in the (?:image|picture|photo)", re.IGNORECASE)


_SCRIPTED_SIGNALS = ("noised", "layers", "instruction", "no-image", "attention")


class ScriptedBackend:
    def __init__(self, model: str, *, batch_size: int = 8) -> None:
        path = Path(model)
        try:
            script = loads(path.read_text())
        except (OSError, ValueError) as err:
            raise InputError(f"cannot read scripted backend script: {err}", path) from None
        self._path = path
        unknown_keys = set(script) - _SCRIPT_KEYS
        if unknown_keys:  # a misspelt key would silently script nothing
            raise InputError(f"unknown scripted backend keys {sorted(unknown_keys)}; known: {sorted(_SCRIPT_KEYS)}", path)
        self._present = {k: {o.lower() for o in v} for k, v in script.get("present", {}).items()}
        self._hallucinate = {k.lower(): float(v) for k, v in script.get("hallucinate", {}).items()}
        self._errors = set(script.get("errors", []))
        self._seed = int(script.get("seed", 0))
        self._delay_s = float(script.get("delay_s", 0.0))
        self._offset = dict(script.get("offset", {}))
        unknown = set(self._offset.values()) - set(SCRIPTED_VOCAB)
        if unknown:
            raise InputError(f"offset pieces {sorted(unknown)} are not in the scripted vocabulary {SCRIPTED_VOCAB}", path)
        self._generate = [
            (re.compile(rule["match"]), rule.get("image"), str(rule["text"])) for rule in script.get("generate", [])
        ]
        self._batch_size = batch_size

    def info(self) -> dict[str, Any]:
        return {"model": str(self._path), "dtype": "none", "device": "none", "batch_size": self._batch_size}

    def token_sets(self) -> TokenSets:
        ids = {piece: i for i, piece in enumerate(SCRIPTED_VOCAB)}
        return TokenSets(
            yes_ids=sorted(ids[p] for p in ("▁Yes", "Yes", "▁yes")),
            no_ids=sorted(ids[p] for p in ("▁No", "No", "▁no")),
            yes_pieces=["▁Yes", "Yes", "▁yes"],
            no_pieces=["▁No", "No", "▁no"],
            legacy_valid=False,
            legacy_pieces={},
            vocab_size=len(SCRIPTED_VOCAB),
            tokenizer_fingerprint="scripted-v1",
        )

    def render_prompt(self, question: str, template: str | None, *, image: bool = True) -> str:
        if template in (None, "chat", "llava"):
            return f"USER: <image>\n{question}\nASSISTANT:" if image else f"USER: {question}\nASSISTANT:"
        return template.format(question=question)

    def _uniform(self, image: str, obj: str) -> float:
        digest = hashlib.sha256(f"{self._seed}|{image}|{obj}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def _signal(self, name: str, obj: str, says_yes: bool, signal: str) -> SignalLogprobs:
        """A scripted contrast pass: the image's evidence weakened (``noised``: the top piece's
        probability pulled towards uniform) or an early layer (``layer:0``, near uniform, with a
        JSD from the final layer); deterministic per (image, object)."""
        strength = {"noised": 0.5, "instruction": 0.35, "no-image": 0.05, "attention": 0.9}.get(signal, 0.15)
        p_top = 1 / len(SCRIPTED_VOCAB) + strength * (0.6 + 0.35 * self._uniform(name, obj + "#" + signal))
        rest = (1.0 - p_top) / (len(SCRIPTED_VOCAB) - 1)
        probs = {piece: rest for piece in SCRIPTED_VOCAB}
        probs["▁Yes" if says_yes else "▁No"] = p_top
        logprobs = {i: math.log(probs[piece]) for i, piece in enumerate(SCRIPTED_VOCAB)}
        return SignalLogprobs(
            candidates={str(i): lp for i, lp in logprobs.items() if i in (1, 2, 3, 4, 5, 6)},
            max_logit=max(logprobs.values()),
            log_normaliser=0.0,
            jsd=0.1 if signal.startswith("layer:") else None,
        )

    def _respond(self, request: Request, max_new_tokens: int, signals: Sequence[str] = ()) -> Response:
        start = time.perf_counter()
        name = Path(request.image_path).name
        if name in self._errors or not Path(request.image_path).exists():
            return Response(split=request.split, question_id=request.question_id, error=f"cannot read image {request.image_path}")
        for pattern, image, text in self._generate:
            if max_new_tokens > 0 and pattern.search(request.prompt) and image in (None, name):
                return Response(
                    split=request.split,
                    question_id=request.question_id,
                    text=" ".join(text.split(" ")[:max_new_tokens]),
                    latency_s=time.perf_counter() - start,
                )
        match = _OBJECT.search(request.prompt)
        obj = match.group(1).lower() if match else ""
        present = obj in self._present.get(name, set())
        says_yes = present or self._uniform(name, obj) < self._hallucinate.get(obj, 0.0)
        p_top = 0.6 + 0.35 * self._uniform(name, obj + "#confidence")
        rest = (1.0 - p_top) / (len(SCRIPTED_VOCAB) - 1)
        probs = {piece: rest for piece in SCRIPTED_VOCAB}
        probs["▁Yes" if says_yes else "▁No"] = p_top
        if name in self._offset:  # the model's most likely first piece is neither yes nor no
            probs[self._offset[name]] = p_top + 0.01
        total = sum(probs.values())
        probs = {piece: p / total for piece, p in probs.items()}
        logprobs = {i: math.log(probs[p]) for i, p in enumerate(SCRIPTED_VOCAB)}
        ranked = sorted(logprobs.items(), key=lambda kv: (-kv[1], kv[0]))
        return Response(
            split=request.split,
            question_id=request.question_id,
            first_token=[TokenLogprob(id=i, piece=SCRIPTED_VOCAB[i], logprob=lp) for i, lp in ranked[:5]],
            candidates={str(i): lp for i, lp in logprobs.items() if i in (1, 2, 3, 4, 5, 6)},
            text=("Yes." if says_yes else "No.") if max_new_tokens > 0 else None,
            signals={name_: self._signal(name, obj, says_yes, name_) for name_ in signals},
            latency_s=time.perf_counter() - start,
        )

    def check_signals(self, signals: Sequence[str]) -> None:
        """InputError for a correction signal this backend does not script."""
        bad = [s for s in signals if s.partition(":")[0] not in _SCRIPTED_SIGNALS]
        if bad:
            raise InputError(f"the scripted backend records the signals {', '.join(_SCRIPTED_SIGNALS)}, not {bad[0]!r}")

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        max_new_tokens = config.max_new_tokens
        self.check_signals(config.signals)
        signals = ["layer:0" if s == "layers" else s.partition(":")[0] for s in config.signals]
        for start in range(0, len(requests), self._batch_size):
            time.sleep(self._delay_s)
            yield [self._respond(r, max_new_tokens, signals) for r in requests[start : start + self._batch_size]]
