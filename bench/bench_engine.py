"""Throughput and peak memory of the hf backend's engines on POPE-shaped work.

Prints figures; asserts nothing about time. Three modes, each timed over ``--runs`` full
passes (median reported), every pass in a fresh process (its own peak RSS; a warm-up on two
questions first), the modes interleaved so that load from elsewhere hits them alike:

  a  plain path, ``generate`` per question at batch 1, up to 128 new tokens with stop strings
     ('.', newline, EOS): what lmms-eval's llava_hf model does for POPE
  b  plain path, batched (``--batch-size``), up to 8 new tokens (the run default)
  c  prefix-cache path (the default engine), same batch size and token cap as b

Every mode asks for every readout (first-token log-probabilities and the greedy text), as a
``halluprobe run`` with text rules does. The model is LLaVA-1.5-shaped with random weights:
a CLIP vision tower at 336 px with 14 px patches (576 image tokens), a LLaMA text model, the
Mistral v1 tokenizer (32000 pieces, offline from the mistral-common package) and LLaVA-1.5's
added ``<image>``/``<pad>`` tokens. Its answer head is steered so that every answer is
``▁Yes`` then EOS (two tokens), as a real LLaVA-1.5 answers a POPE question; a random head
would ramble to the 128-token cap and make mode a look far worse than it is.

Usage (about 3 minutes on 2 cores with the defaults)::

    python bench/bench_engine.py                 # all three modes, 4 images x 18 questions
    python bench/bench_engine.py --modes bc --images 8 --batch-size 18
    python bench/bench_engine.py --json out.json # also write the figures as JSON

Nothing is downloaded. ``--device cuda`` runs the same modes on a GPU (peak memory is then
``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# 18 COCO objects: one POPE image's questions (6 per split x 3 splits), all distinct so the
# prefix-cache engine gets no help from its de-duplication of identical prompts.
OBJECTS = (
    "person", "cup", "cat", "dog", "umbrella", "motorcycle", "dining table", "bottle", "car",
    "chair", "traffic light", "bicycle", "bench", "handbag", "laptop", "spoon", "bird", "clock",
)

MODES = {
    "a": "plain, generate per question, batch 1, <=128 new tokens",
    "b": "plain, batched, <=8 new tokens",
    "c": "prefix cache (default), batched, <=8 new tokens",
}

# Embedding scale and head gain for the steered answer (see _steer).
_EMBED_SCALE = 300.0
_HEAD_GAIN = 2.0


def _build_model(folder: Path, args: argparse.Namespace) -> tuple[Path, int]:
    """A LLaVA-1.5-shaped model folder with random weights; returns it and its parameter count."""
    import torch
    from transformers import AutoTokenizer, LlavaConfig, LlavaForConditionalGeneration

    from halluprobe.tiny import build_tiny_llava, mistral_tokenizer_dir

    shape = {k: getattr(args, k) for k in ("hidden", "layers", "head_dim", "vision_hidden", "vision_layers", "dtype")}
    marker = folder / "model" / "bench-shape.json"
    if marker.is_file() and json.loads(marker.read_text())["shape"] == shape:  # a --work-dir built earlier: reuse it
        return folder / "model", int(json.loads(marker.read_text())["params"])
    tok_dir = folder / "tokenizer"
    if not (tok_dir / "tokenizer.json").is_file():  # a work dir may bring it (a machine without mistral-common)
        tok_dir = mistral_tokenizer_dir(tok_dir)
    # build_tiny_llava writes the processor (CLIP 336 px, <image> expansion, chat template);
    # its 4 M-parameter model is then replaced by the bench-sized one below.
    model_dir = build_tiny_llava(folder / "model", tok_dir, seed=0, image_size=336)
    config = LlavaConfig.from_pretrained(model_dir)
    vision, text = config.vision_config, config.text_config
    vision.hidden_size, vision.intermediate_size = args.vision_hidden, 4 * args.vision_hidden
    vision.num_hidden_layers, vision.num_attention_heads = args.vision_layers, max(1, args.vision_hidden // 64)
    vision.projection_dim = args.vision_hidden
    text.hidden_size, text.intermediate_size = args.hidden, (args.hidden * 43 // 16) // 16 * 16  # LLaMA's 11008/4096
    text.num_hidden_layers = args.layers
    text.num_attention_heads = text.num_key_value_heads = max(1, args.hidden // args.head_dim)
    text.head_dim = args.head_dim
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        # built on the bench's device (a 7B shape initialises in seconds on a GPU, minutes on CPU),
        # saved in the bench's dtype
        with torch.device(args.device):
            model = LlavaForConditionalGeneration(config).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    _steer(model, tokenizer)
    if args.dtype != "float32":
        model = model.to(getattr(torch, args.dtype))
    model.save_pretrained(model_dir)
    params = sum(p.numel() for p in model.parameters())
    marker.write_text(json.dumps({"shape": shape, "params": params}))
    return model_dir, params


def _steer(model: Any, tokenizer: Any) -> None:
    """Make every answer ``▁Yes`` then EOS.

    The input embeddings are scaled up so that the final hidden state points along the current
    token's embedding; the head row of the wanted next token is then set to that direction:
    after the prompt's last token (``:`` of ``ASSISTANT:``) comes ``▁Yes``, after ``▁Yes``
    comes EOS. Compute per token is unchanged.
    """
    import torch

    last = tokenizer("ASSISTANT:", add_special_tokens=False)["input_ids"][-1]
    yes = tokenizer.convert_tokens_to_ids("▁Yes")
    eos = tokenizer.eos_token_id
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        embed.mul_(_EMBED_SCALE)
        for current, following in ((last, yes), (yes, eos)):
            head[following] = embed[current] / embed[current].norm() * _HEAD_GAIN


def _images(folder: Path, n: int) -> list[Path]:
    """``n`` images: scikit-image's real photos first, then seeded synthetic ones."""
    import numpy as np
    from PIL import Image

    from halluprobe.tiny import demo_photos

    images_dir, _ = demo_photos(folder / "photos")
    paths = sorted(images_dir.iterdir())[:n]
    rng = np.random.default_rng(0)
    for i in range(n - len(paths)):
        h, w = int(rng.integers(360, 640)), int(rng.integers(360, 640))
        yy, xx = np.mgrid[0:h, 0:w]
        array = np.stack([(xx * (i + 3)) % 256, (yy * (i + 5)) % 256, rng.integers(0, 256, (h, w))], -1)
        path = images_dir / f"synthetic_{i:03d}.png"
        Image.fromarray(array.astype("uint8")).save(path)
        paths.append(path)
    return paths


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _worker(args: argparse.Namespace) -> None:
    """One mode in this process: load, warm up, time ``--runs`` passes, print one JSON line.

    The parent starts one worker per pass (``--runs 1``)."""
    import torch

    import halluprobe
    try:
        from halluprobe.backends.hf.backend import HFBackend
    except ImportError:  # a --src tree from before backends/hf/ was a package
        from halluprobe.backends.hf import HFBackend  # type: ignore[attr-defined,no-redef]
    from halluprobe.records import GenerateConfig, Request

    mode = args.worker
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [1] if mode == "a" else _sizes(args.batch_size)
    batch = sizes[0]
    max_new = 128 if mode == "a" else 8
    backend = HFBackend(
        args.model_dir, batch_size=batch, dtype=args.dtype, device=args.device, prefix_cache=(mode == "c")
    )
    requests = []
    for path in json.loads(args.images_json):
        for obj in OBJECTS:
            article = "an" if obj[0] in "aeiou" else "a"
            prompt = backend.render_prompt(f"Is there {article} {obj} in the image?", "llava")
            requests.append(Request(split="bench", question_id=len(requests), image_path=path, prompt=prompt))
    rss_loaded = _rss_mb()
    cuda = args.device.startswith("cuda")

    def one_pass(reqs: list[Request]) -> list[Any]:
        out = [r for b in backend.answer(reqs, GenerateConfig(max_new_tokens=max_new, top_k=5)) for r in b]
        if cuda:
            torch.cuda.synchronize()
        return out

    one_pass(requests[:2])  # warm-up: first-call costs (stop-string tables, allocator)
    prefetches = args.prefetch.split(",")
    default_prefetch = getattr(backend.core, "prefetch", None)  # None: a --src tree from before hf/ahead.py
    packs = args.pack.split(",")
    default_pack = getattr(backend.core, "packs_rows", None)  # None: a --src tree from before hf/packed.py
    if "on" in packs and default_pack is not None and backend.core.packing_refused is not None:
        raise SystemExit(f"--pack on: this model's questions cannot be packed ({backend.core.packing_refused})")
    # a --src tree without a setting runs once for it, labelled "absent" (no GPU time on repeats of one code)
    settings = [
        (size, prefetch, pack)
        for size in sizes
        for prefetch in (prefetches if default_prefetch is not None else ["absent"])
        for pack in (packs if default_pack is not None else ["absent"])
    ]
    for size, prefetch, pack in settings:  # a line each
        backend.batching.size = size
        if default_prefetch is not None:
            backend.core.prefetch = default_prefetch if prefetch == "auto" else prefetch == "on"
        if default_pack is not None:
            backend.core.packs_rows = default_pack if pack == "auto" else pack == "on"
        one_pass(requests[: 2 * size])  # this size's shapes once before timing
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        seconds = []
        for _ in range(args.runs):
            started = time.perf_counter()
            responses = one_pass(requests)
            seconds.append(time.perf_counter() - started)
        label = mode if len(sizes) == 1 else f"{mode}/{size}"
        label += f"/ahead-{prefetch}" if len(prefetches) > 1 else ""
        label += f"/packed-{pack}" if len(packs) > 1 else ""
        _print_result(label, requests, responses, seconds, rss_loaded, cuda)


def _print_result(mode: str, requests: list[Any], responses: list[Any], seconds: list[float], rss_loaded: float, cuda: bool) -> None:
    import torch

    import halluprobe

    errors = [r.error for r in responses if r.error]
    answers = {str(r.question_id): [r.first_token[0].id if r.first_token else None, r.text] for r in responses}
    print(
        json.dumps(
            {
                "mode": mode,
                "questions": len(requests),
                "seconds": seconds,
                "rss_loaded_mb": rss_loaded,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
                "threads": torch.get_num_threads(),
                "errors": errors[:3],
                "halluprobe": str(Path(halluprobe.__file__).parent),
                "answers": answers,
            }
        ),
        flush=True,
    )


def _sizes(text: str) -> list[int]:
    """``--batch-size``: one size, or several separated by commas (modes b and c run each)."""
    return [int(part) for part in str(text).split(",")]


def _merge(results: dict[str, dict[str, Any]], key: str, one: dict[str, Any], process_seconds: float, run: int, args: argparse.Namespace) -> None:
    """One worker line into ``results`` (the runs of a key merged)."""
    one["process_seconds"] = [process_seconds]
    if one["errors"]:
        print(f"mode {key}: errors: {one['errors']}", file=sys.stderr)
    print(
        f"run {run + 1}/{args.runs} mode {key}: {', '.join(f'{x:.2f}' for x in one['seconds'])} s "
        f"in process, {process_seconds:.1f} s whole process ({one['halluprobe']})",
        flush=True,
    )
    if key not in results:
        results[key] = one
        return
    merged = results[key]
    merged["seconds"] += one["seconds"]
    merged["process_seconds"] += one["process_seconds"]
    for field in ("peak_rss_mb", "cuda_peak_mb", "rss_loaded_mb"):
        if one[field] is not None:
            merged[field] = max(merged[field], one[field])
    if one["answers"] != merged["answers"]:
        print(f"mode {key}: answers differ between runs", file=sys.stderr)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _table(results: dict[str, dict[str, Any]], args: argparse.Namespace, params: int) -> str:
    lines = []
    qps = {m: r["questions"] / statistics.median(r["seconds"]) for m, r in results.items()}
    memory_key = "cuda_peak_mb" if args.device.startswith("cuda") else "peak_rss_mb"
    memory_name = "peak GPU MB" if memory_key == "cuda_peak_mb" else "peak RSS MB"
    lines.append(
        f"| mode | engine | questions | runs (s) | q/s (median) | s/question | {memory_name} | RSS after load MB |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    for mode, r in results.items():
        runs = ", ".join(f"{s:.1f}" for s in r["seconds"])
        lines.append(
            f"| {mode} | {MODES[mode[0]]} | {r['questions']} | {runs} | {qps[mode]:.2f} | {1 / qps[mode]:.3f} "
            f"| {r[memory_key]:.0f} | {r['rss_loaded_mb']:.0f} |"
        )
    lines.append("")
    ratios = []
    for fast, slow in (("c", "a"), ("c", "b"), ("b", "a")):
        if fast in qps and slow in qps:
            ratios.append(f"{fast}/{slow} = {qps[fast] / qps[slow]:.2f}x")
    first = next(iter(qps))
    ratios += [f"{key}/{first} = {qps[key] / qps[first]:.2f}x" for key in qps if "/" in key and key != first]
    if ratios:
        lines.append("throughput ratios (same run): " + ", ".join(ratios))
    modes = list(results)
    if len(modes) > 1:
        ref = results[modes[0]]["answers"]
        same = {m: sum(results[m]["answers"].get(k) == v for k, v in ref.items()) for m in modes[1:]}
        lines.append(
            "same first token and text as mode "
            + modes[0]
            + ": "
            + ", ".join(f"{m} {n}/{len(ref)}" for m, n in same.items())
        )
    return "\n".join(lines)


def _source(text: str) -> tuple[str, str]:
    """``LABEL=PATH`` of ``--src`` (PATH holds the ``halluprobe`` package)."""
    label, sep, path = text.partition("=")
    if not sep or not label or not (Path(path) / "halluprobe" / "__init__.py").is_file():
        raise SystemExit(f"--src wants LABEL=PATH with PATH/halluprobe/__init__.py, not {text!r}")
    return label, str(Path(path).resolve())


def _with_path(env: dict[str, str], src: str) -> dict[str, str]:
    """``env`` with ``src`` first on PYTHONPATH (what was there stays after it: carried packages)."""
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join([src, *rest])}


def _compare_table(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    """Per mode, each source tree's median seconds in process (the timed passes) and for the
    whole worker process (start, imports, load, warm-up, passes), against the first tree."""
    memory_key = "cuda_peak_mb" if args.device.startswith("cuda") else "peak_rss_mb"
    lines = [
        "| mode | tree | in-process runs (s) | median (s) | vs first | whole-process runs (s) | median (s) | vs first | peak MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in (m for m in MODES if m in args.modes):
        keys = [k for k in results if k.split("@")[0].split("/")[0] == mode]
        first = results[keys[0]]
        for key in keys:
            r = results[key]
            inner, whole = statistics.median(r["seconds"]), statistics.median(r["process_seconds"])
            lines.append(
                f"| {key.split('@', 1)[0]} | {key.split('@', 1)[1]} | {', '.join(f'{x:.2f}' for x in r['seconds'])} | {inner:.2f} "
                f"| {inner / statistics.median(first['seconds']):.3f} | {', '.join(f'{x:.1f}' for x in r['process_seconds'])} "
                f"| {whole:.1f} | {whole / statistics.median(first['process_seconds']):.3f} | {r[memory_key]:.0f} |"
            )
        same = all(results[k]["answers"] == first["answers"] for k in keys)
        lines.append(f"| {mode} | same first token and text in every tree: {'yes' if same else 'NO'} | | | | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="abc", help="which of a, b, c to run (default abc)")
    parser.add_argument("--images", type=int, default=4, help="images (18 questions each); default 4")
    parser.add_argument("--runs", type=int, default=3, help="timed passes per mode (median reported); default 3")
    parser.add_argument("--batch-size", default="8", help="batch size of modes b and c (rows across images); several, comma-separated, run in one process each; default 8")
    parser.add_argument("--hidden", type=int, default=512, help="text hidden size; default 512")
    parser.add_argument("--layers", type=int, default=6, help="text layers; default 6")
    parser.add_argument("--head-dim", type=int, default=64, help="text attention head size; default 64 (LLaMA-7B: 128)")
    parser.add_argument("--vision-hidden", type=int, default=256, help="vision hidden size; default 256")
    parser.add_argument("--vision-layers", type=int, default=4, help="vision layers; default 4")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the model and images here")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument(
        "--src", action="append", default=[], metavar="LABEL=PATH",
        help="compare halluprobe source trees (a folder holding the halluprobe package, e.g. another checkout's src): "
        "every worker runs once per tree with PYTHONPATH=PATH, interleaved; repeatable",
    )  # fmt: skip
    parser.add_argument("--inner-runs", type=int, default=1, help="timed passes per worker process (default 1: a fresh process per pass)")
    parser.add_argument("--prefetch", default="auto",
                        help="the next images' CPU side on a worker thread (hf/ahead.py): auto (on for a GPU model), on, off, "
                             "or several comma-separated (each in turn in one worker, a line each)")  # fmt: skip
    parser.add_argument("--pack", default="auto",
                        help="prefix cache (mode c): an image's questions in one row behind a 4-D mask (hf/packed.py): auto "
                             "(the model's default: on where packed.unpackable finds no reason against it, CPU too), on, off, or several "
                             "comma-separated (a line each)")  # fmt: skip
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--images-json", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for option, value in (("--prefetch", args.prefetch), ("--pack", args.pack)):
        if not set(value.split(",")) <= {"auto", "on", "off"}:
            parser.error(f"{option} takes auto, on or off (comma-separated), not {value!r}")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would bury the table
    if args.worker:
        _worker(args)
        return
    if args.runs < 3:
        print("note: fewer than 3 runs; the issue asks for the median of at least 3", file=sys.stderr)

    import torch
    import transformers

    with tempfile.TemporaryDirectory(prefix="halluprobe-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        load_before = os.getloadavg()[0]
        model_dir, params = _build_model(work, args)
        images = [str(p) for p in _images(work, args.images)]
        print(f"model: {params / 1e6:.1f} M parameters, built in {time.perf_counter() - started:.1f} s", flush=True)
        for mode in args.modes:
            if mode not in MODES:
                parser.error(f"unknown mode {mode!r}")
        # Runs interleave the modes (a b c a b c ...), one fresh process each: a load spike on
        # a shared machine then hits every mode alike instead of one mode's whole series.
        results: dict[str, dict[str, Any]] = {}
        env = {**os.environ, "TQDM_DISABLE": "1"}
        sources = [_source(text) for text in args.src] or [(None, None)]
        for run in range(args.runs):
            for mode in args.modes:
                for label, src in sources:
                    command = [
                        sys.executable, __file__, "--worker", mode, "--model-dir", str(model_dir),
                        "--images-json", json.dumps(images), "--runs", str(args.inner_runs),
                        "--batch-size", str(args.batch_size), "--prefetch", args.prefetch, "--pack", args.pack, "--device", args.device, "--dtype", args.dtype,
                        "--threads", str(args.threads),
                    ]  # fmt: skip
                    process_started = time.perf_counter()
                    proc = subprocess.run(
                        command, capture_output=True, text=True, check=False, env=env if src is None else _with_path(env, src)
                    )
                    process_seconds = time.perf_counter() - process_started
                    if proc.returncode != 0:
                        sys.stderr.write(proc.stderr)
                        raise SystemExit(f"mode {mode} failed (exit {proc.returncode})")
                    for line in proc.stdout.strip().splitlines():
                        if not line.startswith("{"):
                            continue
                        one = json.loads(line)
                        key = one["mode"] if label is None else f"{one['mode']}@{label}"
                        _merge(results, key, one, process_seconds, run, args)
        keys = list(results)
        if args.src:
            results = {k: results[k] for m in MODES if m in args.modes for k in keys if k.split("/")[0].split("@")[0] == m}
        else:
            results = {k: results[k] for m in MODES for k in keys if k.split("/")[0] == m}
    header = (
        f"{_dt.date.today().isoformat()}  {_cpu_name()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({results[next(iter(results))]['threads']} threads), "
        f"transformers {transformers.__version__}, {args.device} {args.dtype}\n"
        f"LLaVA-shaped model, random weights: CLIP vision {args.vision_hidden} x {args.vision_layers} layers at "
        f"336 px (576 image tokens), LLaMA text {args.hidden} x {args.layers} layers, {params / 1e6:.1f} M "
        f"parameters; {args.images} images x {len(OBJECTS)} questions; batch size {args.batch_size} (b, c)\n"
        f"1-minute load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (other work on the machine)"
    )
    print()
    print(header)
    print()
    print(_compare_table(results, args) if args.src else _table(results, args, params))
    if args.json:
        payload = {"header": header, "args": {k: str(v) for k, v in vars(args).items()}, "results": results}
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
