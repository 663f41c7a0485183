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
    python bench/bench_decode.py --images 4 --questions 6 --runs 5 --threads 1
    python bench/bench_decode.py --whole-process --images 16 --runs 3

Every method runs on each engine of ``--engines`` (``plain``: full prompts, DecodeEngine;
``prefix``: each image's prefix once, PrefixDecodeEngine, which decodes images asked one
question from full prompts too) and, for the contrast methods, with each of ``--passes``
(``joint``: base and contrast rows in one forward pass per step where the engine joins them;
``separate``: a pass per branch). ``--questions N`` asks N distinct questions per image (the
prefix engine shares the image's prefix among them); ``x greedy`` is against greedy on the same
engine.

``--whole-process`` times ``halluprobe run --open-ended [--decode METHOD]`` as a separate process
per setting instead (interpreter start, imports, model load, the run dir written): seconds per
run and the ratio against the run without ``--decode`` (the plain engine, ``generate``). Those
runs stop at the end token, so methods may decode different numbers of tokens (printed).

``--model llava-1.5-7b`` builds bench_engine.py's LLaVA-1.5-shaped model with random weights at
LLaVA-1.5-7B's shape (CLIP ViT-L/14-336: 1024 x 24 layers, 576 image tokens; LLaMA-7B: 4096 x 32
layers, 32 heads of 128; 7.06 B parameters) instead of the demo model; ``--model llava-shaped``
takes the shape from ``--hidden --layers --head-dim --vision-hidden --vision-layers`` (a quick
CPU check). On CUDA every setting's peak GPU memory (``torch.cuda.max_memory_allocated``, reset
before each setting's run) is printed beside the memory after loading, so the cost of each
contrast branch is measured, not computed::

    python bench/bench_decode.py --model llava-1.5-7b --device cuda --dtype bfloat16 --images 16 --runs 5
    python bench/bench_decode.py --model llava-shaped --hidden 128 --layers 4 --vision-hidden 64 \
        --vision-layers 1 --images 2 --new-tokens 4 --runs 1     # seconds on a CPU: the script runs
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# the demo model has 2 layers: PAI amplifies both
METHODS: dict[str, str | None] = {
    "greedy": None,
    "vcd": "vcd:alpha=1,beta=0.1",
    "icd": "icd:alpha=1,beta=0.1",
    "m3id": "m3id:lambda=0.02",
    "pai": "pai:gamma=1.1,alpha=0.5,start=0,end=2",
    "dola": "dola:relative_top=0.1",
}
# the questions asked about every image (--questions: the first N)
QUESTIONS = [
    "Describe the image.",
    "What objects are in this picture?",
    "Is there a dog in the image?",
    "What is the largest object here?",
    "Describe the scene in detail.",
    "Is there a cup in the image?",
]
# a bench-built LLaVA: PAI's published setting for LLaVA-1.5 (layers 2 to the last, the loop's defaults)
LLAVA_METHODS: dict[str, str | None] = {**METHODS, "pai": "pai:gamma=1.1,alpha=0.5"}
# LLaVA-1.5-7B: CLIP ViT-L/14-336 and LLaMA-7B (bench_engine.py's builder, random weights)
SHAPES: dict[str, dict[str, int]] = {
    "llava-1.5-7b": {"hidden": 4096, "layers": 32, "head_dim": 128, "vision_hidden": 1024, "vision_layers": 24},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo", choices=["demo", "llava-shaped", *SHAPES],
                        help="demo (the shipped demo model), llava-1.5-7b (its shape, random weights) or llava-shaped (--hidden ...)")  # fmt: skip
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--questions", type=int, default=1, choices=range(1, len(QUESTIONS) + 1),
                        help="distinct questions per image (the prefix engine shares each image's prefix among them)")  # fmt: skip
    parser.add_argument("--engines", default="plain,prefix", help="plain (full prompts), prefix (each image's prefix once), or both")
    parser.add_argument("--passes", default="joint,separate", help="contrast methods: joint (one forward pass for base and contrast rows), separate, or both")
    parser.add_argument("--methods", default="", help="only these methods (comma-separated names: greedy, vcd, icd, m3id, pai, dola); default all")
    parser.add_argument("--via", default="direct", choices=["direct", "answer"],
                        help="direct: the loop on images read before timing (the figures so far); answer: the engine's own answer() "
                             "over the requests, images read from disk and the next batch's CPU side ahead as --prefetch says")  # fmt: skip
    parser.add_argument("--prefetch", default="auto",
                        help="with --via answer: auto (the model's default: on for a GPU), on, off, or several comma-separated (a setting each)")  # fmt: skip
    parser.add_argument("--pack", default="auto",
                        help="prefix engine: an image's questions in one row behind a 4-D mask (hf/packed.py): auto (the model's "
                             "default), on, off, or several comma-separated (a setting each)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    # llava-shaped only (bench_engine.py's defaults: its CPU model)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--vision-hidden", type=int, default=256)
    parser.add_argument("--vision-layers", type=int, default=4)
    parser.add_argument("--whole-process", action="store_true", help="time `halluprobe run` processes instead (demo model)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="build the model here (a tokenizer/ folder there is used as is: a machine without mistral-common)")  # fmt: skip
    args = parser.parse_args()
    if not set(args.prefetch.split(",")) <= {"auto", "on", "off"}:
        parser.error(f"--prefetch takes auto, on or off (comma-separated), not {args.prefetch!r}")
    if not set(args.pack.split(",")) <= {"auto", "on", "off"}:
        parser.error(f"--pack takes auto, on or off (comma-separated), not {args.pack!r}")
    if args.via == "direct" and args.prefetch != "auto":
        parser.error("--prefetch applies to --via answer (the direct loop reads no images)")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would bury the table
    if args.whole_process:
        whole_process(args)
        return
    if args.model in SHAPES:
        for key, value in SHAPES[args.model].items():
            setattr(args, key, value)
    with tempfile.TemporaryDirectory(prefix="halluprobe-bench-decode-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        in_process(args, work)


def in_process(args: argparse.Namespace, tmp: Path) -> None:
    """Every setting timed in this process on one loaded model; prints the table."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    cuda = args.device.startswith("cuda")

    from halluprobe.backends.hf.backend import HFBackend
    from halluprobe.backends.hf.decode_engine import DecodeEngine
    from halluprobe.backends.hf.decode_prefix import PrefixDecodeEngine
    from halluprobe.records import ICD_INSTRUCTION, GenerateConfig, Request

    started = time.perf_counter()
    if args.model == "demo":
        from halluprobe.benchmarks.synthetic import write_synthetic
        from halluprobe.demo import DEMO_MODEL_DIR

        model_dir, methods = str(DEMO_MODEL_DIR), METHODS
        scenes = write_synthetic(tmp / "scenes", n_images=args.images, seed=7, overwrite=True)
        paths = sorted(str(p) for p in Path(scenes.images_dir).iterdir())[: args.images]
        described = "demo model (2 layers)"
    else:
        # bench_engine.py sits beside this script (on sys.path when run as a script)
        from bench_engine import _build_model, _images

        built, params = _build_model(tmp, args)
        model_dir, methods = str(built), LLAVA_METHODS
        paths = [str(p) for p in _images(tmp, args.images)]
        described = (f"{args.model}: LLaVA-shaped, random weights, CLIP vision {args.vision_hidden} x {args.vision_layers} "
                     f"layers (576 image tokens), LLaMA text {args.hidden} x {args.layers} layers (head {args.head_dim}), "
                     f"{params / 1e9:.2f} B parameters")  # fmt: skip
    backend = HFBackend(model_dir, batch_size=args.batch_size, dtype=args.dtype, device=args.device)
    if cuda:
        torch.cuda.synchronize()
    loaded_mb = torch.cuda.memory_allocated() / 2**20 if cuda else None
    print(f"{described}; built and loaded in {time.perf_counter() - started:.1f} s", flush=True)
    core = backend.core
    questions = QUESTIONS[: args.questions]
    requests = [
        Request(split="bench", question_id=len(paths) * k + i, image_path=p, prompt=backend.render_prompt(question, "llava"),
                variants={"instruction": backend.render_prompt(f"{ICD_INSTRUCTION} {question}", "llava"),
                          "no-image": backend.render_prompt(question, "llava", image=False)})  # fmt: skip
        for i, p in enumerate(paths)
        for k, question in enumerate(questions)
    ]
    images, errors = core.load_images(requests)
    assert not errors
    # the plain engine's batches: questions of one image together (DecodeEngine.answer's order);
    # the prefix engine's: the same rows, each image's prefixes made once (run_prefix)
    batches = [(requests[i : i + args.batch_size], images[i : i + args.batch_size]) for i in range(0, len(requests), args.batch_size)]
    per_image = [(requests[i : i + len(questions)], images[i]) for i in range(0, len(requests), len(questions))]
    if args.methods:
        unknown = set(args.methods.split(",")) - set(methods)
        if unknown:
            raise SystemExit(f"unknown methods {sorted(unknown)}: choose from {sorted(methods)}")
        methods = {name: spec for name, spec in methods.items() if name in args.methods.split(",") or name == "greedy"}
    prefetches = args.prefetch.split(",")
    packs = args.pack.split(",")
    engines: dict[str, DecodeEngine] = {}
    prefetch_of: dict[str, bool] = {}
    pack_of: dict[str, bool] = {}
    settings: list[tuple[str, str, str, str]] = []  # (setting, method, engine, passes)
    layouts = [(e, f, k) for e in args.engines.split(",") for f in prefetches for k in (packs if e == "prefix" else packs[:1])]
    for engine_name, prefetch, pack in layouts:
        # the engine column names the layout too, so that "x greedy" compares within one layout
        layout = (f" ahead-{prefetch}" if len(prefetches) > 1 else "") + (f" packed-{pack}" if len(packs) > 1 and engine_name == "prefix" else "")
        for name, spec in methods.items():
            # one pass for both branches where the engine joins them: VCD (both engines) and ICD on full
            # prompts; the no-image rows of M3ID and PAI do not join (hf_decode.JOIN_PADDING)
            joinable = name == "vcd" or (name == "icd" and (engine_name == "plain" or pack != "off"))
            for passes in tuple(args.passes.split(",")) if joinable else ("one" if spec is None or name == "dola" else "separate",):
                # built directly: a config without decode or sample would get generate, not the loop
                kind = PrefixDecodeEngine if engine_name == "prefix" else DecodeEngine
                config = GenerateConfig(max_new_tokens=args.new_tokens, stop_strings=(), decode=spec)
                engine = kind(core, backend.batching, config, joint=passes != "separate")
                engine.end_ids = []  # every row decodes exactly --new-tokens tokens
                label = f"{name} {engine_name}" + ("" if passes == "one" or not joinable else f" {passes}") + layout
                engines[label] = engine
                prefetch_of[label] = core.prefetch if prefetch == "auto" else prefetch == "on"
                pack_of[label] = core.packs_rows if pack == "auto" else pack == "on"
                settings.append((label, name, engine_name + layout, passes))

    def run_plain(engine: DecodeEngine, which: list[tuple[list[Request], list[Any]]]) -> int:
        done = 0
        for rows, imgs in which:
            decoded = engine.decode_full(rows, imgs)
            done += sum(len(t) for t in decoded.tokens)
        return done

    def run_prefix(engine: PrefixDecodeEngine, which: list[tuple[list[Request], Any]]) -> int:
        """The engine's own way (issue 33): batches of ``--batch-size`` rows across images, each
        image's prefixes made when its first row enters a batch and dropped after its last."""
        done = 0
        rows = [(r, image) for group, image in which for r in group]
        held: dict[str, Any] = {}
        left = {path: sum(r.image_path == path for r, _ in rows) for path in {r.image_path for r, _ in rows}}
        for i in range(0, len(rows), args.batch_size):
            pairs = []
            for r, image in rows[i : i + args.batch_size]:
                if r.image_path not in held:
                    group = next(g for g, _ in which if g[0].image_path == r.image_path)
                    held[r.image_path] = engine.prepare(group, image)
                    assert held[r.image_path] is not None
                pairs.append((held[r.image_path], r))
            decoded = engine.decode_prefixed(pairs)
            done += sum(len(t) for t in decoded.tokens)
            for _, r in pairs:
                left[r.image_path] -= 1
                if not left[r.image_path]:
                    del held[r.image_path]
        return done

    def run_generate(which: list[tuple[list[Request], list[Any]]]) -> int:
        done = 0
        for rows, imgs in which:
            inputs = core.to_device(core.inputs.encode([r.prompt for r in rows], imgs))
            with torch.inference_mode():
                out = core.model.generate(**inputs, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                                          num_beams=1, pad_token_id=core.tokenizer.pad_token_id)  # fmt: skip
            done += (out.shape[1] - inputs["input_ids"].shape[1]) * out.shape[0]
        return done

    def run_answer(engine: DecodeEngine, which: list[Request]) -> int:
        """The engine's own path (``answer``): images read from disk, batches formed by the engine."""
        answered = [r for batch in engine.answer(which) for r in batch]
        assert not any(r.error for r in answered), next(r.error for r in answered if r.error)
        return len(answered) * args.new_tokens

    def one(name: str, warm_up: bool = False) -> int:
        if name != "generate":
            if pack_of[name] and core.packing_refused is not None and isinstance(engines[name], PrefixDecodeEngine):
                raise SystemExit(f"--pack on: this model's questions cannot be packed ({core.packing_refused})")
            core.packs_rows = pack_of[name]
        if name != "generate" and args.via == "answer":
            core.prefetch = prefetch_of[name]
            done = run_answer(engines[name], requests[: args.batch_size] if warm_up else requests)
        elif name == "generate":
            done = run_generate(batches[:1] if warm_up else batches)
        elif isinstance(engines[name], PrefixDecodeEngine) and len(questions) > 1:
            done = run_prefix(engines[name], per_image[:1] if warm_up else per_image)  # type: ignore[arg-type]
        else:  # the prefix engine decodes images asked one question in batches of full prompts too
            done = run_plain(engines[name], batches[:1] if warm_up else batches)
        if cuda:
            torch.cuda.synchronize()  # the GPU's queued work belongs to this setting's time
        return done

    times: dict[str, list[float]] = {name: [] for name in ["generate", *engines]}
    tokens: dict[str, int] = {}
    peak_mb: dict[str, float] = {}
    for name in times:  # warm-up of every setting on one batch (kernels, allocator, per-shape caches)
        one(name, warm_up=True)
    for _ in range(args.runs):
        for name, series in times.items():
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            began = time.perf_counter()
            tokens[name] = one(name)
            series.append(time.perf_counter() - began)
            if cuda:
                peak_mb[name] = max(peak_mb.get(name, 0.0), torch.cuda.max_memory_allocated() / 2**20)

    load_after = os.getloadavg()[0]
    where = f"{torch.cuda.get_device_name()} " if cuda else ""
    import transformers

    print(f"{where}{args.device} {args.dtype}, torch {torch.__version__}, transformers {transformers.__version__}; "
          f"{len(paths)} images x {len(questions)} questions x {args.new_tokens} new tokens, batch {args.batch_size}, "
          f"threads {torch.get_num_threads()}, median of {args.runs}; load average {load_before:.1f} -> {load_after:.1f}")  # fmt: skip
    if args.via == "answer":
        print("  via answer(): images read from disk in the timed runs, the engine's own batches; ahead-on/off: the next batch's "
              "CPU side on a worker thread or not (hf/ahead.py)")  # fmt: skip
    if cuda:
        print(f"GPU memory after loading: {loaded_mb:.0f} MB (peak per setting below: torch.cuda.max_memory_allocated, reset before each run)")
    for name, spec in methods.items():
        print(f"  {name}: {spec or 'plain greedy in the loop'}")
    print("  engine: plain (full prompts) or prefix (each image's prefix once); passes: joint (base and contrast rows in one "
          "forward pass where shapes allow) or separate; x greedy: against greedy on the same engine")  # fmt: skip
    generate = statistics.median(times["generate"])
    memory_head = f" {'peak MB':>8} {'above load':>10} {'x greedy mem':>12}" if cuda else ""
    print(f"{'setting':<30} {'tokens':>7} {'median s':>9} {'tokens/s':>9} {'x greedy':>9} {'x generate':>10}{memory_head}  runs (s)")
    rows_out = [("generate", "greedy", "plain", "one"), *settings]
    for name, method, engine_name, _ in rows_out:
        values = times[name]
        median = statistics.median(values)
        greedy_name = f"greedy {engine_name}"
        greedy = statistics.median(times[greedy_name]) if greedy_name in times else float("nan")
        memory = ""
        if cuda:
            above, above_greedy = peak_mb[name] - loaded_mb, peak_mb.get(greedy_name, float("nan")) - loaded_mb
            memory = f" {peak_mb[name]:>8.0f} {above:>10.0f} {above / above_greedy:>12.2f}"
        runs = " ".join(f"{v:.3f}" for v in values)
        print(f"{name:<30} {tokens[name]:>7} {median:>9.3f} {tokens[name] / median:>9.0f} {median / greedy:>9.2f} {median / generate:>10.2f}{memory}  {runs}")


def whole_process(args: argparse.Namespace) -> None:
    """``halluprobe run`` per setting, each a fresh process; median seconds and the ratio."""
    import json
    import subprocess
    import sys

    from halluprobe.benchmarks.synthetic import write_synthetic
    from halluprobe.demo import DEMO_MODEL_DIR
    from halluprobe.demo_captions import CAPTION_PROMPT  # the prompt the demo model captions

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        scenes = write_synthetic(Path(tmp) / "scenes", n_images=args.images, seed=7, overwrite=True)
        names = sorted(p.name for p in Path(scenes.images_dir).iterdir())[: args.images]
        bench = Path(tmp) / "describe.jsonl"
        bench.write_text("".join(json.dumps({"question_id": i, "image": n, "text": CAPTION_PROMPT, "label": "yes", "kind": "open"}) + "\n"
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
