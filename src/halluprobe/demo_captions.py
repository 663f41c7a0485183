"""The demo's caption part: the demo model captions the held-out scenes three times (greedy, a
sampled baseline, one decoding method with the same sampling), through ``halluprobe run
--open-ended``'s own path (:func:`halluprobe.runner.run_questions`, the hf backend's decoding
engine), and CHAIR of each with the method's paired differences, through the code of
``halluprobe decoding`` (:func:`halluprobe.captions.comparison.table.decoding_table`).

CHAIR counts COCO's 80 categories. The synthetic scenes' classes are COCO names except three
(``tree``, ``shell``, ``bag``: not COCO categories nor CHAIR synonyms of one), so the ground
truth is each scene's annotated objects that are COCO categories, and a caption's ``tree`` is
neither a hallucination nor a hit. The family is ``chair@singularize`` (the original CHAIR),
which reads ``bus`` as ``bu`` (pattern's quirk, kept): a bus in a scene counts as never named.
The captions are split into words by NLTK's Treebank tokenizer without punkt's sentence split
(tokenizer ``line``): the demo needs no NLTK data, and on its one-sentence captions the words
are those of ``word_tokenize``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluprobe.backends.hf.decode_rules import parse_decode_spec
from halluprobe.benchmarks.question_file import write_questions
from halluprobe.captions.chair.families import family_named
from halluprobe.captions.chair.groundtruth import image_id_of, load_ground_truth
from halluprobe.captions.chair.lists import ImageList, chair_questions
from halluprobe.captions.chair.scoring import Difference
from halluprobe.captions.chair.vocabulary import vocabulary
from halluprobe.captions.comparison.records import ComparisonResult
from halluprobe.captions.comparison.runs import load_comparison
from halluprobe.captions.comparison.table import decoding_table
from halluprobe.files import write_atomic
from halluprobe.formatting import format_ratio
from halluprobe.jsonl import read_json_file
from halluprobe.run_setup import RunConfig, make_header, read_benchmarks
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.runner import run_questions

__all__ = [
    "CAPTION_FAMILY",
    "CAPTION_METHOD",
    "CAPTION_PROMPT",
    "CAPTION_SAMPLING",
    "CAPTION_TOKENIZER",
    "CAPTION_TOKENS",
    "CaptionDemo",
    "caption_config",
    "caption_ground_truth_lines",
    "caption_lines",
    "run_caption_demo",
    "write_caption_inputs",
]

# `halluprobe build chair`'s default prompt, the one the demo model was trained to caption on
CAPTION_PROMPT = "Please describe this image in detail."
CAPTION_TOKENS = 40  # the true captions: 12 to 32 tokens before </s> (3,000 training scenes); the trainer's held-out cap too
CAPTION_METHOD = "vcd:alpha=1,beta=0.1"
# the sampled baseline and the method draw with the same settings and seed (VCD's paper samples)
CAPTION_SAMPLING: dict[str, Any] = {"temperature": 1.0, "seed": 0}
CAPTION_FAMILY = "singularize"
CAPTION_TOKENIZER = "line"


@dataclass
class CaptionDemo:
    """The three caption runs, the ground truth file and the decoding table of them."""

    greedy: Path
    method: Path
    sampled: Path
    ground_truth: Path
    n_resamples: int = 1000  # the bootstrap of the table's CIs (seed 0)
    table: ComparisonResult | None = None

    @property
    def command(self) -> str:
        """The ``halluprobe decoding`` call that prints the same numbers."""
        return (
            f"halluprobe decoding {self.greedy} {self.method} --sampled-baseline {self.sampled} "
            f"--family {CAPTION_FAMILY} --tokenizer {CAPTION_TOKENIZER} --ground-truth {self.ground_truth} --bootstrap {self.n_resamples}"
        )


def caption_ground_truth_lines(annotations: Path) -> list[dict[str, Any]]:
    """Object lines (``{"image", "objects"}``, what ``--ground-truth`` reads) of a synthetic COCO
    instances file: each image's distinct annotated classes that CHAIR knows (COCO categories and
    their synonyms); an image keeps its line when none is."""

    known = vocabulary().node_of
    data = read_json_file(annotations, "scene annotations")
    names = {c["id"]: c["name"] for c in data["categories"]}
    objects: dict[int, list[str]] = {img["id"]: [] for img in data["images"]}
    for ann in data["annotations"]:
        name = names[ann["category_id"]]
        if name in known and name not in objects[ann["image_id"]]:
            objects[ann["image_id"]].append(name)
    return [{"image": img["file_name"], "objects": objects[img["id"]]} for img in data["images"]]


def _caption_questions(images: list[tuple[int, str]], source: Path) -> list[Any]:

    image_list = ImageList(
        name="synthetic-scenes", source=str(source), sha256=sha256_file(source),
        ids=tuple(i for i, _ in images), images=tuple(name for _, name in images),
    )  # fmt: skip
    return chair_questions(image_list, CAPTION_PROMPT)


def write_caption_inputs(folder: Path, annotations: Path) -> tuple[list[Any], dict[str, tuple[Path, str]], Path]:
    """The caption question file (one open question per scene, ``build chair``'s format) and the
    ground truth file in ``folder``: (questions, fingerprints, ground truth path), the questions
    read back as ``halluprobe run --benchmark`` reads them."""

    folder.mkdir(parents=True, exist_ok=True)
    truth_lines = caption_ground_truth_lines(annotations)
    truth_path = folder / "ground_truth.jsonl"
    write_atomic(truth_path, "".join(json.dumps(line) + "\n" for line in truth_lines))
    images = [(image_id_of(line["image"]), line["image"]) for line in truth_lines]
    question_path = folder / "chair.jsonl"
    write_questions(question_path, _caption_questions(images, annotations))
    questions, fingerprints = read_benchmarks([question_path])
    return questions, fingerprints, truth_path


def caption_config(model: str, role: str) -> Any:
    """The run config of a caption run: ``greedy``, ``method`` (VCD, sampled) or ``sampled``."""

    base: dict[str, Any] = {"model": model, "backend": "hf", "template": "llava", "overwrite": True, "open_ended": True,
                            "max_new_tokens": CAPTION_TOKENS}  # fmt: skip
    if role == "greedy":
        return RunConfig(**base)
    extra: dict[str, Any] = {"sample": True, **CAPTION_SAMPLING, **({"decode": parse_decode_spec(CAPTION_METHOD)} if role == "method" else {})}
    return RunConfig(**base, **extra)


def run_caption_demo(out: Path, annotations: Path, images_dir: Path, backend: Any, model: str, *, n_resamples: int) -> CaptionDemo:
    """Caption the scenes of ``annotations`` three times into ``out`` and compare the runs."""

    questions, fingerprints, truth_path = write_caption_inputs(out / "captions", annotations)

    configs = {role: caption_config(model, role) for role in ("greedy", "method", "sampled")}
    paths = {"greedy": out / "captions-greedy", "method": out / "captions-vcd", "sampled": out / "captions-sampled"}
    for role, config in configs.items():  # run_questions checks each decoding setting before it runs
        header = make_header(config, backend, fingerprints, images_dir)
        run_questions(backend, questions, images_dir, RunDir(paths[role]), config, header)
    demo = CaptionDemo(greedy=paths["greedy"], method=paths["method"], sampled=paths["sampled"], ground_truth=truth_path,
                       n_resamples=n_resamples)  # fmt: skip
    demo.table = decoding_table(
        load_comparison(demo.greedy, [demo.method], demo.sampled), family=family_named(CAPTION_FAMILY, tokenizer=CAPTION_TOKENIZER),
        ground_truth=load_ground_truth(truth_path), n_resamples=n_resamples, seed=0,
    )  # fmt: skip
    return demo


def _pct(value: float | None) -> str:
    return "n/a" if value is None else format_ratio(value, digits=1, scale=100) + "%"


def _signed(entry: Difference, scale: float = 100) -> str:
    if entry.diff is None:
        return "n/a"
    bounds = f" [{scale * entry.ci[0]:+.1f}, {scale * entry.ci[1]:+.1f}]" if entry.ci else ""
    return f"{scale * entry.diff:+.1f}{bounds}"


def caption_lines(demo: CaptionDemo) -> list[str]:
    """The demo's caption lines: CHAIR per run, the method's paired differences, the command."""
    assert demo.table is not None and demo.table.chair is not None  # run_caption_demo computed it, CHAIR included
    chair = demo.table.chair
    settings = ", ".join(f"{k} {v}" for k, v in CAPTION_SAMPLING.items())
    runs = []
    for row in chair.per_run:
        label = {"greedy baseline": "greedy", "sampled baseline": "sampled"}.get(row.role, f"{CAPTION_METHOD} sampled")
        runs.append(f"{label} CHAIR_s {_pct(row.chair_s)} CHAIR_i {_pct(row.chair_i)} recall {_pct(row.recall)} length {row.length:.1f}")
    method = next(p for p in chair.paired if p.vs_sampled is not None)
    diffs = []
    for against, d in (("greedy", method.vs_greedy), ("sampled", method.vs_sampled)):
        assert d is not None
        diffs.append(f"{against}: CHAIR_s {_signed(d.chair_s)} (at its length {_signed(d.chair_s_at_baseline_length)}), "
                     f"CHAIR_i {_signed(d.chair_i)}, length {_signed(d.length, 1)}")  # fmt: skip
    return [
        f"captions of the same {chair.images} scenes, CHAIR ({chair.family}, words split without punkt; sampling {settings}): "
        + "; ".join(runs),
        f"{CAPTION_METHOD} minus " + "; minus ".join(diffs) + " (CHAIR in points, length in words; paired 95% CIs)",
        f"compare: {demo.command}",
    ]
