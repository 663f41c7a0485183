"""The captions of a run dir of open answers (``run --open-ended``, or imported caption files),
and the generation settings that move CHAIR, recorded with every result."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe.captions.chair.groundtruth import image_key
from halluprobe.captions.chair.scoring import Caption, ChairSettings
from halluprobe.errors import InputError
from halluprobe.jsonl import loads
from halluprobe.records import Sample
from halluprobe.rundir import RunDir

__all__ = ["run_captions"]


def _question_file(benchmark_path: str) -> tuple[str | None, str | None]:
    """(``chair_list``, question text) of a ``build chair`` question file, where it is still there."""
    try:
        first = loads(
            Path(benchmark_path).read_text(encoding="utf-8").split("\n", 1)[0]
        )
    except (OSError, ValueError):
        return None, None
    if not isinstance(first, dict):
        return None, None
    name, text = first.get("chair_list"), first.get("text")
    if not isinstance(
        name, str
    ):  # not a `build chair` file (an imported caption file's "text" is a caption)
        return None, None
    return name, (text if isinstance(text, str) else None)


def sample_captions(samples: Sequence[Sample], where: Path) -> list[Caption]:
    """The captions of a run's samples (read from ``where``), each image keyed as CHAIR keys it;
    errored samples left out. The one reading of captions from samples: `chair` and the decoding
    comparison both go through it."""
    return [Caption(image_id=image_key(s.image, where, line), text=s.text, source=f"{where}:{line}")
            for line, s in enumerate(samples, start=1) if not s.error and s.text is not None]  # fmt: skip


def run_captions(path: Path) -> tuple[list[Caption], ChairSettings]:
    """(captions, settings) of a run dir. A run of yes/no answers is refused: CHAIR reads captions.
    Errored samples are left out and counted in ``settings.errors``."""
    rundir = RunDir(path)
    header = rundir.read_header()
    if not header.open_ended:
        raise InputError(
            "a run of yes/no answers: CHAIR scores captions (build the questions with `halluprobe build chair`, "
            "run them with `halluprobe run --open-ended`, or import a caption file)",
            rundir.header_path,
        )
    samples = rundir.read_samples()
    captions = sample_captions(samples, rundir.samples_path)
    errors = len(samples) - len(captions)
    prompts = {s.prompt for s in samples if not (s.error or s.text is None)}
    imported = header.backend.startswith("import:")
    files = {split: _question_file(p) for split, p in header.benchmark_paths.items()}
    questions = sorted({text for _, text in files.values() if text is not None})
    settings = ChairSettings(
        run=str(path),
        model=header.model,
        backend=header.backend,
        image_list={split: files[split][0] or Path(p).name for split, p in header.benchmark_paths.items()},
        questions_sha256=dict(header.benchmarks),
        # the question asked (from the question file), and the prompt the model saw
        prompt=(questions[0] if len(questions) == 1 else questions) if questions else "unknown",
        rendered_prompt=sorted(prompts)[0] if len(prompts) == 1 else sorted(prompts),
        template=header.template,
        max_new_tokens="unknown (imported)" if imported else header.max_new_tokens,
        errors=errors,
    )
    return captions, settings
