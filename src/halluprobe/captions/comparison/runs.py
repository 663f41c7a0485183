"""The runs a decoding table compares: which method and settings each was decoded with (read
from its ``run.json``), and the check that they answered the same questions about the same
images, so that a per-image difference pairs like with like.

A run's method is its ``run.json``'s ``decode`` (under ``generate`` or at the top), a string
such as ``vcd:alpha=1,beta=0.1`` or an object with a ``method``/``name`` key; a run without one
is named by its folder. Every other key of ``generate`` beyond the plain answer settings is a
decoding setting; the sampling keys (``sample``, ``do_sample``, ``temperature``, ``top_p``,
``seed``, ...) are also reported apart, so a method's sampling can be set beside the sampled
baseline's. The raw JSON is read, so run dirs of any halluprobe that wrote these keys work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.records import FrozenRecord
from halluprobe.rundir import RunDir, sha256_file

__all__ = ["ANSWER_KEYS", "SAMPLING_KEYS", "DecodingRun", "decoding_identity", "read_decoding_run", "refuse_other_questions"]

# generate's keys that say how long and what to record, not how tokens are chosen
ANSWER_KEYS = frozenset({"max_new_tokens", "top_k", "stop_strings", "signals", "instruction"})
SAMPLING_KEYS = ("sample", "do_sample", "temperature", "top_p", "sample_top_k", "seed")


class DecodingRun(FrozenRecord):
    """One run of a decoding table: where it is, what it is called, how it was decoded."""

    path: str
    role: str  # "greedy baseline", "sampled baseline" or "method"
    name: str
    method: str | None  # the run.json's decode, as written ("vcd:alpha=1"); None: plain decoding
    settings: dict[str, Any] = Field(default_factory=dict)  # generate's decoding keys
    sampling: dict[str, Any] = Field(default_factory=dict)
    sampled: bool = False
    fingerprint: str
    samples_sha256: str


def _method_text(decode: Any) -> str | None:
    if decode is None or decode == "" or decode == {}:
        return None
    if isinstance(decode, str):
        return decode
    if isinstance(decode, Mapping):
        name = decode.get("method", decode.get("name"))
        rest = ",".join(f"{k}={v}" for k, v in sorted(decode.items()) if k not in ("method", "name"))
        return f"{name}:{rest}" if rest else str(name)
    return str(decode)


def decoding_identity(header: Mapping[str, Any], folder_name: str) -> tuple[str, str | None, dict[str, Any], dict[str, Any], bool]:
    """(name, method, decoding settings, sampling settings, sampled?) of a raw ``run.json``."""
    generate = header.get("generate") or {}
    if not isinstance(generate, Mapping):
        generate = {}
    decode = generate.get("decode", header.get("decode"))
    method = _method_text(decode)
    settings = {k: v for k, v in sorted(generate.items()) if k not in ANSWER_KEYS and k != "decode"}
    sampling = {k: generate[k] for k in SAMPLING_KEYS if k in generate}
    temperature = sampling.get("temperature")
    sampled = bool(sampling.get("sample") or sampling.get("do_sample")) or (
        isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature > 0 and "sample" not in sampling
        and "do_sample" not in sampling
    )
    name = method if method else folder_name
    if sampled:
        name += " (sampled" + "".join(f", {k}={v}" for k, v in sampling.items() if k not in ("sample", "do_sample")) + ")"
    return name, method, settings, sampling, sampled


def read_decoding_run(path: Path, role: str) -> DecodingRun:
    """The run at ``path`` as a table names it (its header validated by the run dir reader)."""
    rundir = RunDir(path)
    header = rundir.read_header()  # refuses a folder without run.json, or a malformed one
    raw = loads(rundir.header_path.read_text(encoding="utf-8"))
    name, method, settings, sampling, sampled = decoding_identity(raw, path.resolve().name)
    return DecodingRun(path=str(path), role=role, name=name, method=method, settings=settings, sampling=sampling, sampled=sampled,
                       fingerprint=header.fingerprint, samples_sha256=sha256_file(rundir.samples_path))  # fmt: skip


def _questions(path: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """(split, question id) -> (image, prompt) of every sample, errored ones too."""
    rundir = RunDir(path)
    return {(s.split, s.question_id): (s.image, s.prompt) for s in rundir.read_samples()}


def refuse_other_questions(baseline: Path, others: Sequence[Path]) -> None:
    """One line, naming the run's samples file, when a run asked other questions (a question
    missing or added, another image or another prompt) than the baseline."""
    base = _questions(baseline)
    for path in others:
        theirs = _questions(path)
        where = RunDir(path).samples_path
        extra = sorted(set(theirs) - set(base))
        missing = sorted(set(base) - set(theirs))
        if extra or missing:
            key = (extra or missing)[0]
            raise InputError(f"not the questions of the baseline {baseline}: {len(missing)} of its questions missing, {len(extra)} others "
                             f"(e.g. {key[0]}/{key[1]})", where)  # fmt: skip
        for key, (image, prompt) in sorted(base.items()):
            if theirs[key][0] != image:
                raise InputError(f"question {key[0]}/{key[1]} is about {theirs[key][0]!r}, the baseline's about {image!r}: other images", where)
            if theirs[key][1] != prompt:
                raise InputError(f"question {key[0]}/{key[1]} asked {theirs[key][1]!r}, the baseline {prompt!r}: other questions", where)
