"""What the ``chair`` verb reads: the ground truth a user names (a file, COCO's annotations or
the shipped sets), the captions (a run dir of open answers or a caption file) and the source a
CHAIR table names. Kept out of the CLI so the verb only parses, calls and prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluprobe.captions.chair.families import family_named
from halluprobe.captions.chair.groundtruth import (
    coco_annotation_files,
    ground_truth_from_coco,
    image_key,
    load_ground_truth,
    shipped_ground_truth,
)
from halluprobe.captions.chair.runs import run_captions
from halluprobe.captions.chair.scoring import Caption, ChairSettings
from halluprobe.errors import InputError
from halluprobe.imports.captions import one_prompt, read_caption_file
from halluprobe.rundir import RunDir, sha256_file

if TYPE_CHECKING:
    from halluprobe.captions.chair.groundtruth import GroundTruth
    from halluprobe.captions.chair.scoring import Caption, ChairSettings

__all__ = ["caption_source", "ground_truth_for", "read_captions"]


def ground_truth_for(
    family: str, ground_truth: Path | None, coco: Path | None, year: str, coco_sha256: str | None = None, *, tokenizer: str = "punkt"
) -> GroundTruth:
    """The ground truth named by ``--ground-truth`` or ``--coco`` (built for ``family``, COCO's
    captions split into words by ``tokenizer`` as the runs' captions are), else the shipped sets."""

    if ground_truth is not None and coco is not None:
        raise InputError("give --ground-truth or --coco, not both")
    if ground_truth is not None:
        return load_ground_truth(ground_truth)
    if coco is not None:
        instances, captions = coco_annotation_files(coco, year, expected_sha256=coco_sha256)
        return ground_truth_from_coco(
            instances, captions, family_named(family, tokenizer=tokenizer), year=year
        )
    return shipped_ground_truth(family)


def read_captions(path: Path, fmt: str | None) -> tuple[list[Caption], ChairSettings]:
    """The captions of a run dir, or of a caption file in ``fmt`` (OPERA's by default), and what to record of them."""

    if path.is_dir():
        return run_captions(path)
    if not path.is_file():
        raise InputError(
            "not found: a run dir of open answers, or a caption file with --format",
            path,
        )

    lines = read_caption_file(fmt or "opera", path)
    caps = []
    for c in lines:
        file, _, line = c.source.rpartition(":")
        caps.append(
            Caption(
                image_id=image_key(c.image, file, int(line)),
                text=c.text,
                source=c.source,
            )
        )
    # a file whose lines record their prompt (LLaVA-style captions) names it, one prompt per file,
    # as `import llava-captions` does; the other formats record none
    prompt = "unknown (caption file)" if all(c.prompt is None for c in lines) else one_prompt(lines)
    return caps, ChairSettings(
        captions=str(path), format=fmt or "opera", prompt=prompt, max_new_tokens="unknown (caption file)"
    )


def caption_source(path: Path) -> dict[str, Any]:
    """What a CHAIR table names as its source: a run (path, fingerprint, samples sha256) or a file."""

    if path.is_dir():
        run = RunDir(path)
        return {"run": str(path), "fingerprint": run.read_header().fingerprint, "samples_sha256": sha256_file(run.samples_path)}
    return {"captions": str(path), "sha256": sha256_file(path)}
