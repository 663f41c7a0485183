"""Sample logs written the way lmms-eval 0.7 writes them for its POPE tasks (``--log_samples``).

Modelled on EvolvingLMMs-Lab/lmms-eval at tag v0.7 (commit ecfb5990d00e65fd92adf883d84d3ffc39d12252)
and v0.7.2 (cb45ac4d4a667ea5ef89c7a148bff69b3489b981), read, not copied:

- ``lmms_eval/tasks/pope/``: ``pope.yaml`` (the pooled task: dataset lmms-lab/POPE, split
  ``test``, 9,000 rows, the three splits one block each, ``category`` naming the split);
  ``pope_random.yaml`` / ``pope_pop.yaml`` / ``pope_adv.yaml`` (config ``Full``, splits
  ``random`` / ``popular`` / ``adversarial``); ``pope_full.yaml`` (a group of those three: one
  samples file per member task); ``utils.py`` (the prompt is ``question.strip()`` + the
  post_prompt "\\nAnswer the question using a single word or phrase."; ``pope_process_results``
  lower-cases and strips the answer and writes five metric entries of ``question_id``, ``score``,
  ``prediction``, ``ground_truth``).
- ``lmms_eval/evaluator.py`` (the ``log_samples`` branch): each sample is ``doc_id``, ``doc``
  (the row without its image), ``target`` (``doc["answer"]``), ``arguments`` (the request's
  serialisable arguments: prompt, generation kwargs, doc_id, task, split), ``resps``,
  ``filtered_resps``, ``token_counts``, ``doc_hash`` (sha256 of the row's JSON), then the
  metric entries; 0.7.1 adds ``input_media`` when the row or the arguments name an image file
  or hold image bytes (a POPE row's image is a decoded picture and its ``image_source`` has no
  extension: none).
- ``lmms_eval/loggers/evaluation_tracker.py`` (``save_results_samples``): ``input`` becomes
  ``arguments[0]``; ``resps`` and ``filtered_resps`` are made strings (``sanitize_list``) and
  a one-element list is flattened (``filtered_resps`` becomes the bare answer); ``resps`` is
  dropped when it says what ``filtered_resps`` says; ``target`` becomes a string; ``arguments``
  and ``doc`` are dropped; one JSON line per sample in ``<YYYYmmdd_HHMMSS>_samples_<task>.jsonl``.

lmms-lab/POPE's columns (its dataset card): ``id``, ``question_id`` (strings), ``question``,
``answer``, ``image_source`` (``COCO_val2014_000000310196``), ``image``, ``category``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["METRICS", "POST_PROMPT", "POOLED_BLOCKS", "FULL_TASKS", "Picture", "lmms_row", "logged_sample", "saved_line", "write_samples"]

POST_PROMPT = "\nAnswer the question using a single word or phrase."
POOLED_BLOCKS = ("adversarial", "popular", "random")  # the order of lmms-lab/POPE's test split
FULL_TASKS = {"adversarial": "pope_adv", "popular": "pope_pop", "random": "pope_random"}  # pope_full's members
METRICS = ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio")
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")


class Picture:
    """A decoded image in a row (what the datasets library hands lmms-eval): not JSON, never logged."""

    def __repr__(self) -> str:
        return "<PIL.Image.Image image mode=RGB size=640x480>"


def lmms_row(row: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    """One lmms-lab/POPE row for a halluprobe label row (``image`` ``COCO_val2014_....jpg``)."""
    return {
        "id": str(index),
        "question_id": str(row["question_id"]),
        "question": row["text"],
        "answer": row["label"],
        "image_source": row["image"].rsplit(".", 1)[0],
        "image": Picture(),
        "category": split,
    }


def _names_an_image(value: Any) -> bool:
    return isinstance(value, str) and (value.lower().startswith("data:image/") or value.lower().endswith(_IMAGE_SUFFIXES))


def logged_sample(doc_id: int, doc: dict[str, Any], task: str, split: str, answer: str, *, raw: str | None = None) -> dict[str, Any]:
    """The evaluator's record of one sample (before saving). ``raw``: the model's text before
    lmms-eval stripped reasoning tags from it (``--reasoning_tags``), when it did."""
    prompt = doc["question"].strip() + POST_PROMPT
    gen_kwargs = {"max_new_tokens": 128, "temperature": 0, "top_p": 1.0 if task == "pope" else 0, "num_beams": 1, "do_sample": False}
    arguments = [prompt, gen_kwargs, doc_id, task, split]  # doc_to_visual, a function, is not kept
    pred = answer.lower().strip()
    gold = doc["answer"].lower().strip()
    entry = {"question_id": doc["question_id"], "score": 1.0 if pred == gold else 0.0, "prediction": pred, "ground_truth": gold}
    sample: dict[str, Any] = {
        "doc_id": doc_id,
        "doc": {k: v for k, v in doc.items() if not isinstance(v, Picture)},
        "target": doc["answer"],
        "arguments": arguments,
        # raw_filtered_resps (the text before tag stripping) where lmms-eval stripped, else req.resps (a list)
        "resps": [raw] if raw is not None else [[answer]],
        "filtered_resps": [answer],
        "token_counts": [None],
        "doc_hash": hashlib.sha256(json.dumps(doc, indent=2, default=repr, ensure_ascii=False).encode()).hexdigest(),
    }
    media = [v for v in (*doc.values(), *arguments) if _names_an_image(v)][:4]
    if media:  # 0.7.1 and later; never for a POPE row
        sample["input_media"] = media
    sample.update({metric: dict(entry) for metric in METRICS})
    return sample


def _strings(value: Any) -> Any:
    return [_strings(v) for v in value] if isinstance(value, list) else str(value)


def saved_line(sample: dict[str, Any]) -> dict[str, Any]:
    """What ``save_results_samples`` writes for one sample."""
    out = dict(sample)
    out["input"] = out["arguments"][0]
    out["resps"] = _strings(out["resps"])
    out["filtered_resps"] = _strings(out["filtered_resps"])
    if isinstance(out["resps"], list) and len(out["resps"]) == 1:
        out["resps"] = out["resps"][0]
    if isinstance(out["filtered_resps"], list) and len(out["filtered_resps"]) == 1:
        out["filtered_resps"] = out["filtered_resps"][0]
    if out["resps"] == out["filtered_resps"] or (
        isinstance(out["resps"], list) and len(out["resps"]) == 1 and out["resps"][0] == out["filtered_resps"]
    ):
        out.pop("resps")
    out["target"] = str(out["target"])
    out.pop("arguments")
    out.pop("doc")
    return out


def write_samples(folder: Path, task: str, samples: list[dict[str, Any]], date_id: str = "20260101_120000") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{date_id}_samples_{task}.jsonl"
    with open(path, "a", encoding="utf-8") as fh:  # lmms-eval appends line by line
        for sample in samples:
            fh.write(json.dumps(saved_line(sample), ensure_ascii=False) + "\n")
    return path
