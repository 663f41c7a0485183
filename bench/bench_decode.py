"""Cost of decoding free-form text with a correction: tokens per second of each method against
greedy decoding in the same loop (hf backend, CPU, in-process).

Prints figures; asserts nothing about time. The model is the demo model shipped with halluprobe
(a trained tiny LLaVA, 2 layers) on the demo's synthetic scenes, one "Describe the image."
per image. Every row decodes exactly ``--new-tokens`` tokens (end tokens ignored), so every
method generates the same number of tokens. Each setting runs ``--runs`` times, the settings
interleaved so that load from elsewhere hits them alike; the median time is reported, and the
ratio against greedy decoding in the same loop (``greedy``) and against transformers'
``generate`` (``generate``, the plain engine's path) measured in the same run.

    python bench/bench_decode.py --images 16 --runs 5 --threads 1
    python bench/bench_decode.py --whole-process --images 16 --runs 3

``--whole-process`` times ``halluprobe run --open-ended [--decode METHOD]`` as a separate process
per setting instead (interpreter start, imports, model load, the run dir written): seconds per
run and the ratio against the run without ``--decode`` (the plain engine, ``generate``). Those
runs stop at the end token, so methods may decode different numbers of tokens (printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

# the demo model has 2 layers: PAI amplifies both
METHODS: dict[str, str | None] = {
    "greedy": None,
    "vcd": "vcd:alpha=1,beta=0.1",
    "icd": "icd:alpha=1,beta=0.1",
    "m3id": "m3id:lambda=0.02",
    "pai": "pai:gamma=1.1,alpha=0.5,start=0,end=2",
    "dola": "dola:relative_top=0.1",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--whole-process", action="store_true", help="time `halluprobe run` processes instead")
    args = parser.parse_args()
    if args.whole_process:
        whole_process(args)
        return

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]

    from halluprobe.backends.hf import HFBackend
    from halluprobe.backends.hf_decode_engine import DecodeEngine
    from halluprobe.benchmarks.synthetic import write_synthetic
    from halluprobe.demo import DEMO_MODEL_DIR
    from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request

    backend = HFBackend(str(DEMO_MODEL_DIR), batch_size=args.batch_size, dtype="float32", device="cpu")
    core = backend.core
    with tempfile.TemporaryDirectory() as tmp:
        scenes = write_synthetic(Path(tmp) / "scenes", n_images=args.images, seed=7, overwrite=True)
        paths = sorted(str(p) for p in Path(scenes.images_dir).iterdir())[: args.images]
        question = "Describe the image."
        requests = [
            Request(split="bench", question_id=i, image_path=p, prompt=backend.render_prompt(question, "llava"),
                    variants={"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {question}", "llava"),
                              "no-image": backend.render_prompt(question, "llava", image=False)})  # fmt: skip
            for i, p in enumerate(paths)
        ]
        images, errors = core.load_images(requests)
        assert not errors
        batches = [(requests[i : i + args.batch_size], images[i : i + args.batch_size]) for i in range(0, len(requests), args.batch_size)]
        engines = {}
        for name, spec in METHODS.items():
            # built directly: a config without decode or sample would get the plain engine, not the loop
            engine = DecodeEngine(core, backend.batching, GenerateConfig(max_new_tokens=args.new_tokens, stop_strings=(), decode=spec))
            engine.end_ids = []  # every row decodes exactly --new-tokens tokens
            engines[name] = engine

        def run_loop(engine: DecodeEngine) -> int:
            done = 0
            for rows, imgs in batches:
                decoded = engine.decode_batch(rows, imgs)
                done += sum(len(t) for t in decoded.tokens)
            return done

        def run_generate() -> int:
            done = 0
            for rows, imgs in batches:
                inputs = core.to_device(core.inputs.encode([r.prompt for r in rows], imgs))
                with torch.inference_mode():
                    out = core.model.generate(**inputs, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                                              num_beams=1, pad_token_id=core.tokenizer.pad_token_id)  # fmt: skip
                done += (out.shape[1] - inputs["input_ids"].shape[1]) * out.shape[0]
            return done

        times: dict[str, list[float]] = {name: [] for name in ["generate", *METHODS]}
        tokens: dict[str, int] = {}
        run_loop(engines["greedy"])  # warm-up
        for _ in range(args.runs):
            for name in times:
                started = time.perf_counter()
                tokens[name] = run_generate() if name == "generate" else run_loop(engines[name])
                times[name].append(time.perf_counter() - started)

    load_after = os.getloadavg()[0]
    print(f"demo model, {len(requests)} images x {args.new_tokens} new tokens, batch {args.batch_size}, "
          f"threads {torch.get_num_threads()}, median of {args.runs}; load average {load_before:.1f} -> {load_after:.1f}")  # fmt: skip
    greedy = statistics.median(times["greedy"])
    generate = statistics.median(times["generate"])
    print(f"{'setting':<10} {'tokens':>7} {'median s':>9} {'tokens/s':>9} {'x greedy':>9} {'x generate':>10}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<10} {tokens[name]:>7} {median:>9.3f} {tokens[name] / median:>9.0f} {median / greedy:>9.2f} {median / generate:>10.2f}")


def whole_process(args: argparse.Namespace) -> None:
    """``halluprobe run`` per setting, each a fresh process; median seconds and the ratio."""
    import json
    import subprocess
    import sys

    from halluprobe.benchmarks.synthetic import write_synthetic
    from halluprobe.demo import DEMO_MODEL_DIR

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        scenes = write_synthetic(Path(tmp) / "scenes", n_images=args.images, seed=7, overwrite=True)
        names = sorted(p.name for p in Path(scenes.images_dir).iterdir())[: args.images]
        bench = Path(tmp) / "describe.jsonl"
        bench.write_text("".join(json.dumps({"question_id": i, "image": n, "text": "Describe the image.", "label": "yes", "kind": "open"}) + "\n"
                                 for i, n in enumerate(names)))  # fmt: skip
        env = {**os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})}
        times: dict[str, list[float]] = {name: [] for name in METHODS}
        words: dict[str, int] = {}
        for _ in range(args.runs):
            for name, spec in METHODS.items():
                out = Path(tmp) / name
                command = [sys.executable, "-m", "halluprobe.cli", "run", "--model", str(DEMO_MODEL_DIR), "--benchmark", str(bench),
                           "--images", str(scenes.images_dir), "--template", "llava", "--open-ended", "--max-new-tokens", str(args.new_tokens),
                           "--dtype", "float32", "--device", "cpu", "--batch-size", str(args.batch_size), "--out", str(out), "--overwrite",
                           *(("--decode", spec) if spec else ())]  # fmt: skip
                started = time.perf_counter()
                subprocess.run(command, check=True, env=env, capture_output=True)
                times[name].append(time.perf_counter() - started)
                texts = [json.loads(line)["text"] or "" for line in (out / "samples.jsonl").read_text().splitlines()]
                words[name] = sum(len(t.split()) for t in texts)
    print(f"whole process: demo model, {args.images} images, up to {args.new_tokens} new tokens, median of {args.runs}; "
          f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}")  # fmt: skip
    base = statistics.median(times["greedy"])
    print(f"{'setting':<10} {'words':>6} {'median s':>9} {'x plain run':>11}")
    for name, values in times.items():
        print(f"{name:<10} {words[name]:>6} {statistics.median(values):>9.2f} {statistics.median(values) / base:>11.2f}")


if __name__ == "__main__":
    main()
