"""Shared builders for the literature tests: a file:// mirror laid out <repository>/<commit>/<path>
and small files shaped like each registered entry, built from the documented fields (never
copies of the real files), with the authors' parse rules transcribed to recompute every count."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from halluprobe.benchmarks.datasets import DATASETS

REPO, COMMIT = "haotian-liu/LLaVA", "3" * 40
POPE_REPO, POPE_COMMIT = "RUCAIBox/POPE", "e" * 40
SUFFIX = "\nAnswer the question using a single word or phrase."
SPLITS = ("adversarial", "random", "popular")  # LLaVA's category order and id offsets
OFFSET = {"adversarial": 0, "random": 10_000_000, "popular": 20_000_000}
# awkward answers: LLaVA's rule reads the first sentence's words, whatever else they say
ANSWERS = ["Yes", "No", "No, there is not.", "I don't know", "Not sure.", "There isn't any", "No, but there is a cat.", "Yes."]


@pytest.fixture
def literature_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache of the test's own, and no mirror unless the test serves one (a test module
    imports this fixture and uses it for every test)."""
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HALLUPROBE_GITHUB_URL", raising=False)


def put_pinned(root: Path, repo: str, commit: str, path: str, data: bytes) -> dict[str, Any]:
    dest = root / repo / commit / path
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    pinned = {"path": path, "sha256": hashlib.sha256(data).hexdigest()}
    return pinned if (repo, commit) == (REPO, COMMIT) else {**pinned, "repository": repo, "commit": commit}


def llava_rule(text: str) -> str:
    """LLaVA's llava/eval/eval_pope.py, transcribed: first sentence, commas removed, split on spaces."""
    if text.find(".") != -1:
        text = text.split(".")[0]
    words = text.replace(",", "").split(" ")
    return "no" if ("No" in words or "not" in words or "no" in words) else "yes"


def f1_of(pairs: list[tuple[str, str]]) -> float:
    tp = sum(lab == "yes" and dec == "yes" for lab, dec in pairs)
    fp = sum(lab == "no" and dec == "yes" for lab, dec in pairs)
    fn = sum(lab == "yes" and dec == "no" for lab, dec in pairs)
    return 2 * tp / (2 * tp + fp + fn)


def llava_entry(root: Path) -> tuple[dict[str, Any], float]:
    """A registry entry shaped like llava-1.5-13b (answers + LLaVA question file + POPE labels with
    'imange'), and the mean F1 of LLaVA's rule over the splits, computed here."""
    labels, questions, answers = [], [], []
    f1s = []
    for s_i, split in enumerate(SPLITS):
        recs = []
        for i in range(8):
            image = f"COCO_val2014_{i // 2:012d}.jpg"
            obj = ("dog", "cat", "car", "cup")[(i + s_i) % 4]
            word = "imange" if i == 3 else "image"
            recs.append({"question_id": i + 1, "image": image, "text": f"Is there a {obj} in the {word}?", "label": "yes" if i % 2 == 0 else "no"})
        labels.append(put_pinned(root, POPE_REPO, POPE_COMMIT, f"output/coco/coco_pope_{split}.json", "".join(json.dumps(r) + "\n" for r in recs).encode()))
        pairs = []
        for i, r in enumerate(recs):
            qid = OFFSET[split] + r["question_id"]
            questions.append({"question_id": qid, "image": r["image"], "text": r["text"] + SUFFIX, "category": split})
            text = ANSWERS[(i + s_i) % len(ANSWERS)]
            answers.append({"question_id": qid, "prompt": r["text"] + SUFFIX, "text": text, "answer_id": f"a{qid}", "model_id": "llava-v1.5-13b", "metadata": {}})
            pairs.append((str(r["label"]), llava_rule(text)))
        f1s.append(f1_of(pairs))
    entry = {
        "name": "llava-toy", "model": "LLaVA-1.5-13B", "decoding": "greedy", "repository": REPO, "commit": COMMIT, "format": "llava",
        "answers": [put_pinned(root, REPO, COMMIT, "playground/data/eval/pope/answers/llava-v1.5-13b.jsonl", "".join(json.dumps(a) + "\n" for a in answers).encode())],
        "questions": put_pinned(root, REPO, COMMIT, "playground/data/eval/pope/llava_pope_test.jsonl", "".join(json.dumps(q) + "\n" for q in questions).encode()),
        "labels": labels, "dataset": "coco-toy", "version": "toy",
        "parser": {"rule": "pope", "source": "llava/eval/eval_pope.py"},
        "published": [], "notes": ["toy"],
    }  # fmt: skip
    return entry, sum(f1s) / len(f1s)


@pytest.fixture
def toy_coco(literature_cache: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A file:// mirror holding the LLaVA-shaped fixture, its labels pinned as dataset coco-toy@toy."""
    from halluprobe.benchmarks.datasets import DatasetVersion, SourceFile
    from halluprobe.benchmarks.fingerprint import content_fingerprint
    from halluprobe.benchmarks.question_file import read_questions

    mirror = tmp_path / "mirror"
    entry, _ = llava_entry(mirror)
    sources, prints = {}, {}
    for f in entry["labels"]:
        name = f["path"].rsplit("/", 1)[-1]
        sources[name] = (SourceFile(POPE_REPO, POPE_COMMIT, f["path"], f["sha256"]),)
        prints[name] = content_fingerprint(read_questions(mirror / POPE_REPO / POPE_COMMIT / f["path"]))
    monkeypatch.setitem(DATASETS, "coco-toy", {"toy": DatasetVersion("coco-toy", "toy", "2023-08-10", "pope", sources, prints, "coco-val2014", {})})
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", mirror.as_uri())
    return mirror


def write_registry(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({"schema_version": 1, "entries": entries}, indent=2))
    return path


# --- fixtures shaped like the other registered entries, built from their documented fields ---

CD_REPO, CD_COMMIT = "ustc-hyin/cd_rethink", "8" * 40
MARINE_REPO, MARINE_COMMIT = "Linxi-ZHAO/MARINE", "9" * 40
DASHB_REPO, DASHB_COMMIT = "YanNeu/DASH-B", "0" * 40
AWKWARD = ["Yes", "No", "I don't know", "Not sure.", "There isn't any", "No, but there is a cat.", "Yes, there is no cat.", "nothing"]


def vcd_rule(text: str, label: str) -> str:
    """cd_rethink eval/pope_eval_base.py (VCD's), transcribed: a yes-labelled answer is a TP iff
    'yes' is in it, a no-labelled one a TN iff 'no' is; returned as the decision those counts mean."""
    answer = text.strip().lower()
    if label == "yes":
        return "yes" if "yes" in answer else "no"
    return "no" if "no" in answer else "yes"


def marine_rule(text: str) -> str | None:
    """MARINE eval/eval_pope.py load_predictions, transcribed: blank -> left out (None)."""
    if not text.strip():
        return None
    return "no" if any(w.lower() in {"no", "not"} for w in text.split(".")[0].split()) else "yes"


def dashb_rule(response: str) -> str | None:
    """DASH-B src/eval_utils.py compute_answer, transcribed."""
    if "yes" in response.lower():
        return "yes"
    return "no" if "no" in response.lower() else None


def confusion(pairs: list[tuple[str, str]]) -> dict[str, float]:
    tp = sum(lab == "yes" and dec == "yes" for lab, dec in pairs)
    fp = sum(lab == "no" and dec == "yes" for lab, dec in pairs)
    tn = sum(lab == "no" and dec == "no" for lab, dec in pairs)
    fn = sum(lab == "yes" and dec == "no" for lab, dec in pairs)
    return {"f1": 2 * tp / (2 * tp + fp + fn), "accuracy": (tp + tn) / len(pairs), "yes_ratio": (tp + fp) / len(pairs)}


def pope_records(n: int, tag: int, misspell: int | None = None) -> list[dict[str, Any]]:
    return [
        {"question_id": i + 1, "image": f"COCO_val2014_{(i // 2) + 100 * tag:012d}.jpg",
         "text": f"Is there a {('dog', 'cat', 'car', 'cup', 'bus')[(i + tag) % 5]} in the {'imange' if i == misspell else 'image'}?",
         "label": "yes" if (i + tag) % 2 == 0 else "no"}
        for i in range(n)
    ]  # fmt: skip


def cd_rethink_entry(root: Path, decoding: str) -> tuple[dict[str, Any], dict[str, float]]:
    """VCD-style answer lines (question_id, prompt, text, model_id, image, metadata), one split per
    file, the authors' labels copies beside them, no LLaVA question file; nothing published."""
    answers, labels, per_split = [], [], []
    for s_i, split in enumerate(("random", "popular", "adversarial")):
        recs = pope_records(8, s_i, misspell=3 if split == "adversarial" else None)
        labels.append(put_pinned(root, CD_REPO, CD_COMMIT, f"data/coco/coco_pope_{split}.json", "".join(json.dumps(r) + "\n" for r in recs).encode()))
        lines, pairs = [], []
        for i, r in enumerate(recs):
            text = AWKWARD[(i + 2 * s_i + 3 * (decoding == "sample")) % len(AWKWARD)]
            lines.append({"question_id": r["question_id"], "prompt": r["text"], "text": text, "model_id": "llava-v1.5-7b", "image": r["image"], "metadata": {}})
            pairs.append((r["label"], vcd_rule(text, r["label"])))
        path = f"outputs/pope/baseline/llava-7b-coco-{split}-{decoding}.jsonl"
        answers.append(put_pinned(root, CD_REPO, CD_COMMIT, path, "".join(json.dumps(x) + "\n" for x in lines).encode()))
        per_split.append(confusion(pairs))
    entry = {
        "name": f"cd-rethink-toy-{decoding}", "model": "LLaVA-1.5-7B", "decoding": decoding, "repository": CD_REPO, "commit": CD_COMMIT,
        "format": "llava", "answers": answers, "questions": None, "labels": labels, "dataset": "coco-vcd-toy", "version": "toy",
        "parser": {"rule": "vcd", "source": "eval/pope_eval_base.py"}, "published": [], "notes": ["nothing published"],
    }  # fmt: skip
    macro = {f"{k}_macro": sum(m[k] for m in per_split) / len(per_split) for k in ("f1", "accuracy", "yes_ratio")}
    return entry, macro


def marine_entries(root: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]], str]:
    """MARINE's shape: answers keyed by image_id with '<image>\\n' prompts, labels an array keyed
    'id' (no text), its own adversarial draw as a POPE file, scores shipped in pope_eval.jsonl.
    Two guidance strengths share the draw and the labels; one answer is blank (left out)."""
    from halluprobe.benchmarks.fingerprint import content_fingerprint
    from halluprobe.benchmarks.question_file import read_questions

    recs = pope_records(10, 7, misspell=4)
    draw_bytes = "".join(json.dumps(r) + "\n" for r in recs).encode()
    draw = put_pinned(root, MARINE_REPO, MARINE_COMMIT, "data/org_qa/pope/coco/coco_pope_adversarial.json", draw_bytes)
    label_bytes = json.dumps([{"id": r["question_id"], "image": r["image"], "label": r["label"]} for r in recs], indent=4).encode()
    label = put_pinned(root, MARINE_REPO, MARINE_COMMIT, "data/marine_qa/label/pope_toy_label.json", label_bytes)
    fingerprint = content_fingerprint(read_questions(root / MARINE_REPO / MARINE_COMMIT / draw["path"]))
    entries, scores = [], {}
    for g_i, guidance in enumerate(("0.0", "0.7")):
        lines, pairs = [], []
        for i, r in enumerate(recs):
            text = "" if (g_i, i) == (1, 5) else AWKWARD[(i + 3 * g_i) % len(AWKWARD)] + " The image shows a table."
            lines.append({"question_id": r["question_id"], "image_id": r["image"], "prompt": "<image>\n" + r["text"], "text": text,
                          "answer_id": f"x{i}", "model_id": "llava-1.5-7b-hf", "metadata": ""})  # fmt: skip
            decision = marine_rule(text)
            if decision is not None:
                pairs.append((r["label"], decision))
        scores[guidance] = {**confusion(pairs), "answers": len(recs), "scored": len(pairs)}
        answers = put_pinned(root, MARINE_REPO, MARINE_COMMIT, f"output/answers/toy-guidance_strength{guidance}.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode())
        where = f"output/answers/eval/pope_eval.jsonl, line for guidance_strength{guidance}"
        entries.append({
            "name": f"marine-toy-{guidance}", "model": "LLaVA-1.5-7B", "decoding": f"guidance {guidance}", "repository": MARINE_REPO,
            "commit": MARINE_COMMIT, "format": "marine", "answers": [answers], "questions": draw, "labels": [label],
            "dataset": "coco", "version": None, "split": "adversarial", "fingerprint": fingerprint,
            "parser": {"rule": "marine", "source": "eval/eval_pope.py", "unknown": "drop"},
            "published": [  # as the authors' script rounds them
                {"metric": "f1", "value": round(scores[guidance]["f1"], 4), "scale": 1, "decimals": 4, "where": where, "path": "output/answers/eval/pope_eval.jsonl"},
                {"metric": "accuracy", "value": round(scores[guidance]["accuracy"], 4), "scale": 1, "decimals": 4, "where": where, "path": "output/answers/eval/pope_eval.jsonl"},
            ],
            "notes": ["MARINE's own draw"],
        })  # fmt: skip
    return entries, scores, fingerprint


def dashb_entry(root: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """DASH-B's answers array ({img_id, object_name, gt, response, answer}, pretty-printed): the
    positive file names repeat across objects. Published: the shipped results file (exact) and a
    leaderboard row whose TPR and mean the file does not give (as the real row)."""
    objects = ("ant", "bee", "owl", "yak")
    rows, answered = [], []
    for o_i, obj in enumerate(objects):
        for j in range(6):
            gt = "no" if j < 3 else "yes"
            img = f"neg_{obj}_{j}.jpg" if gt == "no" else f"pos_{j}.jpg"  # pos_3.jpg under every object
            response = AWKWARD[(o_i + j) % len(AWKWARD)].lower()
            rows.append({"img_id": img, "object_name": obj, "gt": gt, "response": response, "answer": dashb_rule(response)})
            answered.append((gt, dashb_rule(response)))
    pos = [a == "yes" for g, a in answered if g == "yes"]
    neg = [a == "no" for g, a in answered if g == "no"]
    truth = {"TPR": sum(pos) / len(pos), "TNR": sum(neg) / len(neg), "ACC": sum(g == a for g, a in answered) / len(answered)}
    answers = put_pinned(root, DASHB_REPO, DASHB_COMMIT, "output/Toy-3b_answers.json", json.dumps(rows, indent=4).encode())
    board_tpr = round(100 * truth["TPR"], 1) + 11.3
    board_mean = round((board_tpr + 100 * truth["TNR"]) / 2, 1)
    shipped = "output/Toy-3b_dash_b_results.json"
    entry = {
        "name": "dashb-toy", "model": "Toy-3b", "decoding": "the authors' evaluator", "repository": DASHB_REPO, "commit": DASHB_COMMIT,
        "format": "dashb", "answers": [answers], "questions": None, "labels": [], "dataset": "dashb", "version": "toy",
        "parser": {"rule": "dashb", "source": "src/eval_utils.py compute_answer"},
        "published": [
            {"metric": "dashb_tnr", "value": truth["TNR"], "scale": 1, "decimals": 4, "where": f"{shipped}, TNR", "path": shipped},
            {"metric": "dashb_tpr", "value": truth["TPR"], "scale": 1, "decimals": 4, "where": f"{shipped}, TPR", "path": shipped},
            {"metric": "dashb_accuracy", "value": truth["ACC"], "scale": 1, "decimals": 4, "where": f"{shipped}, ACC", "path": shipped},
            {"metric": "dashb_mean", "value": board_mean, "scale": 100, "decimals": 1, "where": "benchmark.md, row Toy-3b, ACC", "path": "benchmark.md"},
            {"metric": "dashb_tnr", "value": round(100 * truth["TNR"], 1), "scale": 100, "decimals": 1, "where": "benchmark.md, row Toy-3b, TNR", "path": "benchmark.md"},
            {"metric": "dashb_tpr", "value": board_tpr, "scale": 100, "decimals": 1, "where": "benchmark.md, row Toy-3b, TPR", "path": "benchmark.md"},
        ],
        "notes": [],
    }  # fmt: skip
    return entry, {**truth, "board_tpr": board_tpr, "board_mean": board_mean}


def pin_toy_dashb(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pinned dashb@toy in DASH-B's {source: {object: [file]}} files: every negative of the
    DASH-B fixture, but only pos_3.jpg and pos_4.jpg of 'ant' and 'bee' among its positives."""
    from halluprobe.benchmarks.datasets import DatasetVersion, SourceFile

    neg = {"coco": {obj: [f"neg_{obj}_{j}.jpg" for j in range(3)] for obj in ("ant", "bee", "owl", "yak")}}
    pos = {"objects365": {obj: ["pos_3.jpg", "pos_4.jpg"] for obj in ("ant", "bee")}}
    sources = tuple(
        SourceFile(DASHB_REPO, "1" * 40, f"images/dash_benchmark_{kind}.json", put_pinned(root, DASHB_REPO, "1" * 40, f"images/dash_benchmark_{kind}.json", json.dumps(data).encode())["sha256"])
        for kind, data in (("neg", neg), ("pos", pos))
    )
    version = DatasetVersion("dashb", "toy", "2025-03-31", "dashb", {"dashb.jsonl": sources}, {}, "user", {"dashb": 16})
    monkeypatch.setitem(DATASETS, "dashb", {"toy": version})
