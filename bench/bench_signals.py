"""Overhead of recording correction signals: runtime relative to no signals (hf backend, CPU).

Prints figures; asserts nothing about time. The model is the demo model shipped with halluprobe
(a trained tiny LLaVA, 3.5 M parameters) on the demo's synthetic scenes; each setting answers
the same questions (first-token readouts and 8 tokens of greedy text, as a default run), in
``--runs`` passes whose median is reported, the settings interleaved so that load from elsewhere
hits them alike. Both engines (prefix cache and plain) are measured. The header prints the
load average before and after: on a machine shared with other jobs, ``--threads 1`` gives
steadier ratios (two torch threads wait on each other when another job holds a core).

    python bench/bench_signals.py --images 12 --runs 3
    python bench/bench_signals.py --images 8 --runs 5 --threads 1

``--model DIR`` measures another LLaVA-style model folder instead (prompts in the ``llava``
format), e.g. the 576-image-token model that ``bench_engine.py --work-dir DIR`` leaves in
``DIR``; ``--engines prefix`` skips the plain engine, slow on such a model on a CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

SETTINGS: dict[str, tuple[str, ...]] = {
    "none": (),
    "noised": ("noised",),
    "layers": ("layers",),
    "instruction": ("instruction",),
    "no-image": ("no-image",),
    "attention": ("attention:0.5,0,2",),
    "noised+layers": ("noised", "layers"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--model", default=None, help="a model folder (default: the demo model)")
    parser.add_argument("--engines", choices=("both", "prefix", "plain"), default="both")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]

    from halluprobe.ask import ask
    from halluprobe.backends.hf.backend import HFBackend
    from halluprobe.benchmarks.objects import read_objects
    from halluprobe.benchmarks.pope import build_pope, write_pope
    from halluprobe.benchmarks.question_file import read_questions, split_name
    from halluprobe.benchmarks.synthetic import write_synthetic
    from halluprobe.demo import DEMO_MODEL_DIR
    from halluprobe.files import resolve_image
    from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        scenes = write_synthetic(Path(tmp) / "scenes", n_images=args.images, seed=7, overwrite=True)
        build = build_pope(read_objects(scenes.annotations), name="bench", n_images=args.images, per_image=3, seed=0)
        files = [p for p in write_pope(build, Path(tmp) / "bench", overwrite=True) if "_pope_" in p.name]
        questions = [q for f in files for q in read_questions(f, split=split_name(f))]
        results: dict[tuple[bool, str], list[float]] = {}
        engines = {"both": (True, False), "prefix": (True,), "plain": (False,)}[args.engines]
        model = args.model or str(DEMO_MODEL_DIR)
        for prefix_cache in engines:
            backend = HFBackend(model, batch_size=args.batch_size, dtype="float32", device="cpu", prefix_cache=prefix_cache)
            requests = [
                Request(split=q.split, question_id=q.question_id, image_path=str(resolve_image(q.image, scenes.images_dir)),
                        prompt=backend.render_prompt(q.text, "llava"),
                        variants={"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {q.text}", "llava"),
                                  "no-image": backend.render_prompt(q.text, "llava", image=False)})
                for q in questions
            ]  # fmt: skip
            for _ in range(args.runs):
                for name, signals in SETTINGS.items():
                    started = time.perf_counter()
                    for _batch in ask(backend, requests, GenerateConfig(max_new_tokens=8, top_k=10, signals=signals)):
                        pass
                    results.setdefault((prefix_cache, name), []).append(time.perf_counter() - started)
        print(
            f"{model}: {len(questions)} questions, {args.images} images, batch {args.batch_size}, median of {args.runs} runs, "
            f"{torch.get_num_threads()} threads, "
            f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        )
        for prefix_cache in engines:
            base = statistics.median(results[(prefix_cache, "none")])
            engine = "prefix cache" if prefix_cache else "plain"
            for name in SETTINGS:
                median = statistics.median(results[(prefix_cache, name)])
                print(f"{engine:12s} {name:14s} {median:7.2f} s  x{median / base:.2f}")


if __name__ == "__main__":
    main()
