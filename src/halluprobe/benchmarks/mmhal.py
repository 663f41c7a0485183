"""MMHal-Bench (Sun et al. 2023): 96 open questions on 96 images, rated 0-6 by a judge.

The released response template (a JSON array; RLAIF-V carries it as
``eval/data/mmhal-bench_answer_template.json``) is read from a local file; its sha256 is compared
with the pinned release and recorded. The judge prompt is the official evaluation script's
(a reworded prompt would be another judge): the script (RLAIF-V's ``eval/eval_gpt_mmhal.py``) is
fetched pinned by sha256 and cached, and its module-level ``template`` string is read from its
syntax tree (never executed). halluprobe carries no copy of it.

A rating is read as the official script reads it: ``rating: N`` (N in 0..6) searched in the
lower-cased reply; exactly one N found is the rating, none or several is unparseable.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath

from halluprobe.benchmarks.download import copy_pinned, default_cache_dir, fetch_pinned
from halluprobe.benchmarks.script_strings import module_string
from halluprobe.errors import InputError
from halluprobe.jsonl import read_records, type_name
from halluprobe.records import FrozenRecord

__all__ = [
    "MMHAL_N",
    "MMHAL_TEMPLATE_SHA256",
    "MMHAL_TEMPLATE_URL",
    "MMHalFile",
    "MMHalItem",
    "MMHAL_JUDGE_SCRIPT_SHA256",
    "MMHAL_JUDGE_SCRIPT_URL",
    "fetch_mmhal_judge_script",
    "fetch_mmhal_template",
    "fill_judge_prompt",
    "judge_prompt_template",
    "parse_rating",
    "read_mmhal",
]

# RLAIF-V at a commit that holds the released template unchanged
MMHAL_TEMPLATE_URL = (
    "https://raw.githubusercontent.com/RLHF-V/RLAIF-V/83d917b2e8118ca8e7877a796d72af9bb3e6b356/"
    "eval/data/mmhal-bench_answer_template.json"
)
MMHAL_TEMPLATE_SHA256 = "28ed24e19ffef292597c35f1dad37760b2e0a088b3b40ca3b50f105fc1b951bb"
# the official judge script at the same commit: its prompt is read from it, never run
MMHAL_JUDGE_SCRIPT_URL = (
    "https://raw.githubusercontent.com/RLHF-V/RLAIF-V/83d917b2e8118ca8e7877a796d72af9bb3e6b356/eval/eval_gpt_mmhal.py"
)
MMHAL_JUDGE_SCRIPT_SHA256 = "35f8275a596715f5fff622db4bd0e017578ebb3d6cdec4eceb753ee3bc1ba348"
MMHAL_N = 96
_FIELDS = ("question_type", "question_topic", "image_id", "image_src", "image_content", "question", "gt_answer")


class MMHalItem(FrozenRecord):
    """One question of the template; ``index`` is its position (the official summarizer's type is index % 8)."""

    index: int
    question_type: str
    question_topic: str
    image_id: str
    image_src: str
    image_content: tuple[str, ...]
    question: str
    gt_answer: str
    model_answer: str | None = None  # a filled-in responses file carries the answers

    @property
    def image_file(self) -> str:
        """The image's file name in a local images folder: the URL's last segment."""
        return PurePosixPath(self.image_src.split("?")[0]).name


class MMHalFile(FrozenRecord):
    """The template as read, with its hash and whether it is the pinned release."""

    path: str
    sha256: str
    pinned: bool
    items: tuple[MMHalItem, ...]


def read_mmhal(path: str | Path) -> MMHalFile:
    """The template (or a responses file in its shape): 96 records, every field present; one line on bad input."""
    p = Path(path)
    try:
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError as err:
        raise InputError(f"cannot read MMHal-Bench file: {err.strerror or err}", p) from None
    items = []
    for record in read_records(p, "MMHal-Bench"):
        value = record.value
        where = record.where
        missing = [f for f in _FIELDS if f not in value]
        if missing:
            raise InputError(f"{where}missing field {missing[0]!r}", p, record.line)
        content = value["image_content"]
        if not isinstance(content, list) or not all(isinstance(c, str) for c in content):
            raise InputError(f"{where}image_content must be a list of strings, not {type_name(content)}", p, record.line)
        for name in _FIELDS:
            if name != "image_content" and not isinstance(value[name], str):
                raise InputError(f"{where}{name} must be a string, not {type_name(value[name])}", p, record.line)
        answer = value.get("model_answer")
        if answer is not None and not isinstance(answer, str):
            raise InputError(f"{where}model_answer must be a string, not {type_name(answer)}", p, record.line)
        items.append(MMHalItem(index=record.index, image_content=tuple(content), model_answer=answer or None,
                               **{k: value[k] for k in _FIELDS if k != "image_content"}))  # fmt: skip
    if len(items) != MMHAL_N:
        raise InputError(f"{len(items)} records: MMHal-Bench has {MMHAL_N} (the official summarizer reads types by position)", p)
    return MMHalFile(path=str(p), sha256=digest, pinned=digest == MMHAL_TEMPLATE_SHA256, items=tuple(items))


def fetch_mmhal_template(out: str | Path, *, url: str | None = None, cache_dir: Path | None = None, overwrite: bool = False) -> Path:
    """Download the released template (``url``: a mirror of the same file) into the cache, check its
    sha256 against the pin, and copy it to ``out``; a second call needs no network."""
    cached = fetch_pinned(url or MMHAL_TEMPLATE_URL, "mmhal-bench_answer_template.json", MMHAL_TEMPLATE_SHA256,
                          cache_dir=cache_dir or default_cache_dir(), kind="mmhal", size=1_000_000)  # fmt: skip
    return copy_pinned(cached, Path(out), MMHAL_TEMPLATE_SHA256, overwrite=overwrite)


def fetch_mmhal_judge_script(*, url: str | None = None, cache_dir: Path | None = None) -> Path:
    """The official judge script (``url``: a mirror of the same file), cached and checked against
    its pin; a second call needs no network."""
    return fetch_pinned(url or MMHAL_JUDGE_SCRIPT_URL, "eval_gpt_mmhal.py", MMHAL_JUDGE_SCRIPT_SHA256,
                        cache_dir=cache_dir or default_cache_dir(), kind="mmhal", size=100_000)  # fmt: skip


def judge_prompt_template(script: str | Path | None = None) -> str:
    """The judge prompt with four ``{}`` slots (image contents, question, ground truth, response):
    the module-level ``template`` string of ``script`` (default: the official script, fetched
    pinned), read from its syntax tree, never executed."""
    path = Path(script) if script is not None else fetch_mmhal_judge_script()
    text, line = module_string(path, "template", "MMHal-Bench's judge script")
    if text.count("{}") != 4:
        raise InputError("its `template` string has not the four {} slots of MMHal's judge prompt", path, line)
    return text


def fill_judge_prompt(template: str, item: MMHalItem, answer: str) -> str:
    """The prompt for one answer, filled as the official script fills it (contents joined by ", ")."""
    return template.format(", ".join(item.image_content), item.question, item.gt_answer, answer)


def parse_rating(reply: str) -> tuple[int | None, str | None]:
    """(rating, None), or (None, why): the official substring rule, so the same replies parse."""
    low = reply.lower()
    found = [s for s in range(7) if f"rating: {s}" in low]
    if len(found) == 1:
        return found[0], None
    if not found:
        return None, "no 'rating: N' (N in 0-6) in the reply"
    return None, f"several ratings in the reply: {found}"
