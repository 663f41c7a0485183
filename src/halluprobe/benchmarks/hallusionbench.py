"""HallusionBench's question file (tianyi-lab/HallusionBench, ``HallusionBench.json``) as question files.

Each record names its figure by ``category`` (VD: visual-dependent, VS: visual-supplement),
``subcategory``, ``set_id`` and ``figure_id`` (the official ``get_image_file_location`` puts it
at ``<category>/<subcategory>/<set_id>_<figure_id>.png``; ``filename`` says the same with a
leading ``./``), asks ``question`` (``question_id`` within its set) and has ``gt_answer`` "1"
(yes) or "0" (no). A VS record with ``visual_input`` "0" has no figure (``filename`` null): the
question is asked without an image.

A split per category and subcategory (``VD_illusion.jsonl``, ...) keeps the grouping the official
script needs in what every scored row carries: the split gives category and subcategory, the
question id packs the rest (``set_id * 10000 + figure_id * 100 + question_id``, each checked to
fit), and the record's own fields stay in the line. The questions without a figure cannot be
asked by a backend that answers about an image; they are left out and counted
(:attr:`HallusionQuestions.without_figure`), and every score says so.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from halluprobe.benchmarks.datasets import SourceFile
from halluprobe.errors import InputError
from halluprobe.files import plain_component
from halluprobe.jsonl import loads, read_text, type_name
from halluprobe.records import Question

__all__ = [
    "HALLUSIONBENCH_JUDGE_SCRIPT",
    "HALLUSIONBENCH_SOURCE",
    "HallusionVerdict",
    "answer_details",
    "fill_hallusion_prompt",
    "hallusion_judge_template",
    "official_code",
    "parse_hallusion_verdict",
    "HallusionKey",
    "HallusionQuestions",
    "hallusion_key",
    "hallusion_questions",
    "missing_figures",
    "pack_id",
]

# HallusionBench.json as last changed (commit c226ce4, 2023-11-15; unchanged at 744007c)
HALLUSIONBENCH_SOURCE = SourceFile(
    repository="tianyi-lab/HallusionBench",
    commit="c226ce45c95eec2935b09789099409c682a6c05d",
    path="HallusionBench.json",
    sha256="ca6e0fb677dd56e5fb0e2700d06c58d01f8a6ae66e0f1773b2ac48c0a095d051",
    size=431987,
)
# utils.py as last changed (commit d0114ff; unchanged at 744007c): its judge prompt is read from
# the syntax tree of evaluate_by_chatgpt, never run; halluprobe carries no copy of it
HALLUSIONBENCH_JUDGE_SCRIPT = SourceFile(
    repository="tianyi-lab/HallusionBench",
    commit="d0114ffe754ad411b80a1e22264ed582febcee97",
    path="utils.py",
    sha256="535734ad70c8ea14253131ea59e4d2df6af4fae5341f044d226a8e78eaeb9c30",
    size=17600,
)
_FIELDS = ("category", "subcategory", "visual_input", "set_id", "figure_id", "question_id", "question", "gt_answer", "filename")
_FIELD_LIMIT = 100  # figure_id and question_id below this, so the packed id is unambiguous


@dataclass(frozen=True)
class HallusionKey:
    """A question's place in the official grouping."""

    category: str
    subcategory: str
    set_id: int
    figure_id: int
    question_id: int


def pack_id(set_id: int, figure_id: int, question_id: int) -> int:
    return set_id * _FIELD_LIMIT * _FIELD_LIMIT + figure_id * _FIELD_LIMIT + question_id


def hallusion_key(split: str, packed: int) -> HallusionKey:
    """The grouping fields of a scored row (its split and question id); ValueError when the split is no HallusionBench split."""
    category, sep, subcategory = split.partition("_")
    if not sep or category not in ("VD", "VS"):
        raise ValueError(f"split {split!r} is not a HallusionBench split (VD_<subcategory> or VS_<subcategory>)")
    rest, question_id = divmod(packed, _FIELD_LIMIT)
    set_id, figure_id = divmod(rest, _FIELD_LIMIT)
    return HallusionKey(category, subcategory, set_id, figure_id, question_id)


@dataclass(frozen=True)
class HallusionQuestions:
    by_split: dict[str, list[Question]]
    without_figure: int


def _int_field(record: dict[str, Any], key: str, path: Path, line: int) -> int:
    value = record[key]
    text = str(value)
    if isinstance(value, bool) or not text.isdigit() or len(text) > 6:
        raise InputError(f"{key!r} must be a small non-negative integer (as a string), got {value!r}", path, line)
    return int(text)


def _record_lines(text: str, count: int) -> list[int]:
    """The line where each element of the (already parsed) array starts, for messages."""
    decoder = json.JSONDecoder()
    lines, pos = [], text.index("[") + 1
    for _ in range(count):
        while text[pos] in " \t\r\n,":
            pos += 1
        lines.append(text.count("\n", 0, pos) + 1)
        _, pos = decoder.raw_decode(text, pos)
    return lines


def hallusion_questions(path: str | Path) -> HallusionQuestions:
    """Read ``HallusionBench.json``; every bad record is one line naming the file and its line."""
    p = Path(path)
    _, text = read_text(p, "HallusionBench question file")
    try:
        data = loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON (truncated?): {e.msg} (column {e.colno})", p, e.lineno) from e
    if not isinstance(data, list) or not data:
        raise InputError(f"expected a non-empty JSON array of question records, got {type_name(data)}", p)
    by_split: dict[str, list[Question]] = {}
    first: dict[tuple[str, int], int] = {}
    without = 0
    for rec, line in zip(data, _record_lines(text, len(data))):
        if not isinstance(rec, dict):
            raise InputError(f"expected a JSON object, got {type_name(rec)}", p, line)
        for key in _FIELDS:
            if key not in rec:
                raise InputError(f"missing key {key!r}", p, line)
        category, subcategory = rec["category"], rec["subcategory"]
        if category not in ("VD", "VS"):
            raise InputError(f"category must be VD or VS, got {category!r}", p, line)
        if not isinstance(subcategory, str) or "_" in subcategory:
            raise InputError(f"subcategory must be a name without '_', got {subcategory!r}", p, line)
        set_id, figure_id, qid = (_int_field(rec, k, p, line) for k in ("set_id", "figure_id", "question_id"))
        if figure_id >= _FIELD_LIMIT or qid >= _FIELD_LIMIT:
            raise InputError(f"figure_id and question_id must be below {_FIELD_LIMIT}", p, line)
        if rec["gt_answer"] not in ("0", "1"):
            raise InputError(f"gt_answer must be '0' or '1', got {rec['gt_answer']!r}", p, line)
        question = rec["question"]
        if not isinstance(question, str) or not question.strip():
            raise InputError("empty question", p, line)
        split = plain_component(f"{category}_{subcategory}", "HallusionBench split", p, line)
        packed = pack_id(set_id, figure_id, qid)
        if (split, packed) in first:
            raise InputError(f"duplicate question {category}/{subcategory} set {set_id} figure {figure_id} question {qid} (first on line {first[(split, packed)]})", p, line)
        first[(split, packed)] = line
        if rec["filename"] is None:
            if str(rec["visual_input"]) != "0":
                raise InputError("filename is null but visual_input is not '0'", p, line)
            without += 1
            continue
        image = f"{category}/{subcategory}/{set_id}_{figure_id}.png"
        if str(rec["filename"]).removeprefix("./") != image:
            raise InputError(f"filename {rec['filename']!r} is not the official location {image!r}", p, line)
        extra = {k: rec[k] for k in ("category", "subcategory", "visual_input", "set_id", "figure_id") if k in rec}
        by_split.setdefault(split, []).append(
            Question(
                split=split, question_id=packed, image=image, text=question, label="yes" if rec["gt_answer"] == "1" else "no",
                object=None, metadata={**extra, "hb_question_id": rec["question_id"]},
            )  # fmt: skip
        )
    return HallusionQuestions(by_split=by_split, without_figure=without)


def missing_figures(questions: HallusionQuestions, images_root: str | Path) -> list[str]:
    """The figures the questions name that are not files under ``images_root`` (sorted, each once)."""
    root = Path(images_root)
    if not root.is_dir():
        raise InputError("the HallusionBench images folder is not a directory", root)
    names = sorted({q.image for qs in questions.by_split.values() for q in qs})
    return [name for name in names if not (root / name).is_file()]


# -- the official judge (utils.py's evaluate_by_chatgpt) ------------------------------------------

HallusionVerdict = Literal["correct", "incorrect", "unclear"]
_JUDGE_FUNCTION = "evaluate_by_chatgpt"
_SLOTS = {"question": "{question}", "gt_answer_details": "{gt_answer_details}"}
_PREDICTION = "{prediction}"  # sample[output_entry]: the model's answer


def _prompt_part(node: ast.expr, path: Path) -> str:
    """One piece the official prompt is concatenated from: literal text (braces escaped) or a slot."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "sample":
        key = node.slice
        if isinstance(key, ast.Constant) and key.value in _SLOTS:
            return _SLOTS[key.value]
        if isinstance(key, ast.Name):
            return _PREDICTION
    raise InputError("the prompt is built from something other than strings and sample[...] fields", path, node.lineno)


def hallusion_judge_template(script: str | Path) -> str:
    """The judge prompt with the slots ``{question}``, ``{gt_answer_details}`` and ``{prediction}``:
    the ``prompt = ...`` / ``prompt += ...`` statements of ``evaluate_by_chatgpt`` in ``script``
    (HallusionBench's utils.py), read from its syntax tree in source order, never executed."""
    path = Path(script)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as err:
        raise InputError(f"cannot read the judge script: {err}", path) from None
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == _JUDGE_FUNCTION), None)
    if func is None:
        raise InputError(f"no function {_JUDGE_FUNCTION}: not HallusionBench's utils.py", path)
    steps = sorted(
        (n for n in ast.walk(func)
         if (isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["prompt"])
         or (isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and getattr(n.target, "id", None) == "prompt")),
        key=lambda n: (n.lineno, n.col_offset),
    )  # fmt: skip
    if not steps or not isinstance(steps[0], ast.Assign) or any(isinstance(n, ast.Assign) for n in steps[1:]):
        raise InputError(f"{_JUDGE_FUNCTION} does not build `prompt` as one assignment then `+=` steps", path, func.lineno)
    template = "".join(_prompt_part(n.value, path) for n in steps)
    for slot in (*_SLOTS.values(), _PREDICTION):
        if template.count(slot) != 1:
            raise InputError(f"the prompt has {template.count(slot)} {slot} slot(s), not one", path, func.lineno)
    return template


def fill_hallusion_prompt(template: str, question: str, details: str, prediction: str) -> str:
    return template.format(question=question, gt_answer_details=details, prediction=prediction)


def parse_hallusion_verdict(reply: str) -> tuple[HallusionVerdict | None, str | None]:
    """The official substring rule ('incorrect' first, since 'correct' is in it); a reply with none of
    the three words is unparseable here (the official script reads it as unclear, code 2)."""
    low = reply.lower()
    if "incorrect" in low:
        return "incorrect", None
    if "correct" in low:
        return "correct", None
    if "unclear" in low:
        return "unclear", None
    return None, "none of 'incorrect', 'correct', 'unclear' in the reply"


def official_code(verdict: HallusionVerdict | None) -> int:
    """utils.py's correctness code: 1 correct, 0 incorrect, 2 anything else (unclear, no verdict)."""
    return {"correct": 1, "incorrect": 0}.get(verdict or "", 2)


def answer_details(path: str | Path) -> dict[tuple[str, int], tuple[str, str]]:
    """(question, gt_answer_details) by (split, packed id), what the judge prompt needs; the file is
    checked by :func:`hallusion_questions` first."""
    p = Path(path)
    hallusion_questions(p)
    _, text = read_text(p, "HallusionBench question file")
    data = loads(text)
    out = {}
    for rec, line in zip(data, _record_lines(text, len(data))):
        details = rec.get("gt_answer_details")
        if not isinstance(details, str):
            raise InputError(f"gt_answer_details must be a string (the judge's reference answer), got {type_name(details)}", p, line)
        key = (f"{rec['category']}_{rec['subcategory']}", pack_id(int(rec["set_id"]), int(rec["figure_id"]), int(rec["question_id"])))
        out[key] = (rec["question"], details)
    return out
