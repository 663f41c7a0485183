"""Object HalBench test helpers: a small synonyms_refine-shaped table with the quirks that
matter, and an independent transcription of RLAIF-V's judge-free counting to compare with."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

# first entry = the COCO category; a double space before an entry (stripped by RLAIF-V's parse),
# a word on two lines (the later line wins), two-word synonyms (double words), a blank line
SYNONYMS_TEXT = (
    "person, man, woman, people, boy, passenger, baby, adult\n"
    "motorcycle, scooter,  motor bike, moped\n"
    "bus, buses, minibus\n"
    "dog, puppy, doggy\n"
    "bear, teddy\n"
    "teddy bear, teddy bear, teddy\n"
    "toilet, toilet, urinal\n"
    "chair, seat, stool\n"
    "wine glass, wine glass, goblet\n"
    "tie, necktie, bow\n"
    "car, taxi, sedan\n"
    "cup, mug\n"
    "\n"
    "skis, ski\n"
    "train, locomotive\n"
    "airplane, jet, plane\n"
)


def transcribe_script(
    synonyms: str,
    tokenize: Callable[[str], list[str]],
    lemmatize: Callable[[str], str],
    answers: list[tuple[int, str]],
    instances: dict[int, list[str]],
    coco_captions: dict[int, list[str]],
) -> dict[str, float]:
    """RLAIF-V's compute_chair without --use_gpt, rewritten from its rules for the test."""
    table = [[e.strip() for e in line.strip().split(", ")] for line in synonyms.splitlines()]
    vocab = {e for row in table for e in row}
    node = {}
    for row in table:
        node.update({e: row[0] for e in row})
    doubles = {w: w for w in [k for k in node if len(k.strip().split(" ")) > 1] + ["home plate", "train track"]}
    for a in ["bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "animal", "cub"]:
        doubles["baby " + a] = a
        doubles["adult " + a] = a
    doubles.update({"passenger jet": "jet", "passenger train": "train", "bow tie": "tie", "toilet seat": "toilet", "wine glas": "wine glass"})

    def read(text: str) -> tuple[list[str], list[str]]:
        toks = [lemmatize(t) for t in tokenize(text.lower())]
        merged, i = [], 0
        while i < len(toks):
            two = " ".join(toks[i : i + 2])
            merged.append(doubles.get(two, toks[i]))
            i += 2 if two in doubles else 1
        if "toilet" in merged and "seat" in merged:
            merged = [w for w in merged if w != "seat"]
        words = [w for w in merged if w in vocab]
        return words, [node[w] for w in words]

    truth = {i: {node[c] for c in instances.get(i, [])} for i, _ in answers}
    for i in truth:
        for c in coco_captions.get(i, []):
            truth[i].update(read(c)[1])
    n = with_obj = hall_caps = hall_words = words_all = recalled = gt = length = 0
    for image_id, raw in answers:
        text = raw.replace("Assistant:", "").strip()
        length += len(text.strip().split(" "))
        words, nodes = read(text)
        gt += len(truth[image_id])
        words_all += len(nodes)
        bad = [o for o in nodes if o not in truth[image_id]]
        hall_words += len(bad)
        recalled += len({o for o in nodes if o in truth[image_id]})
        n += 1
        hall_caps += bool(bad)
        with_obj += bool(words)
    return {"CHAIRs": hall_caps / n, "CHAIRs_refine": hall_caps / with_obj, "CHAIRi": hall_words / words_all,
            "obj_rec": recalled / gt, "avg_word_len": length / n, "coco_sentence_num": with_obj}  # fmt: skip


def write_answers(path: Path, answers: list[tuple[int, str]]) -> Path:
    lines = [json.dumps({"question_id": k, "image_id": i, "question": "Describe the image in detail.", "text": t})
             for k, (i, t) in enumerate(answers)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path
