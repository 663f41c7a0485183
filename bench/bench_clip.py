"""Cost of recording the ``clip`` signal: CLIP passes per image and per object name (CPU).

Prints figures; asserts nothing about time. No CLIP weights can be had offline, so the script
builds random-weight ``CLIPModel``s with the published shapes of openai/clip-vit-base-patch32
and openai/clip-vit-large-patch14 (the compute of a pass does not depend on the weights) on the
real CLIP BPE vocabulary, and times :class:`halluprobe.clip_signal.ClipScorer` on POPE-shaped
work: each image asked about 6 objects, as in one POPE split. The first call embeds each image
once and scores its objects; a second call over the same pairs (another split of the same
images) is served from the scorer's stored similarities and is timed too. Median of ``--runs``
runs, each with a fresh scorer.

    python bench/bench_clip.py --images 8 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# published shapes: (vision width, layers, heads, patch, image size), (text width, layers, heads), projection
SHAPES: dict[str, tuple[tuple[int, int, int, int, int], tuple[int, int, int], int]] = {
    "ViT-B/32": ((768, 12, 12, 32, 224), (512, 12, 8), 512),
    "ViT-L/14": ((1024, 24, 16, 14, 224), (768, 12, 12), 768),
}
OBJECTS = ["person", "dining table", "cup", "chair", "car", "dog", "bottle", "bowl", "cat", "truck", "bench", "umbrella"]


def _build(out: Path, shape: str, tokenizer_dir: Path) -> Path:
    from transformers import AutoTokenizer, CLIPConfig, CLIPModel, CLIPProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    (width, layers, heads, patch, size), (t_width, t_layers, t_heads), projection = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = CLIPConfig(
        text_config={"hidden_size": t_width, "intermediate_size": 4 * t_width, "num_hidden_layers": t_layers,
                     "num_attention_heads": t_heads, "vocab_size": len(tokenizer), "max_position_embeddings": 77},
        vision_config={"hidden_size": width, "intermediate_size": 4 * width, "num_hidden_layers": layers,
                       "num_attention_heads": heads, "patch_size": patch, "image_size": size},
        projection_dim=projection,
    )  # fmt: skip
    CLIPModel(config).save_pretrained(str(out))
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(str(out))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import torch
    from _autoprobe_assets import clip_tokenizer_dir

    from halluprobe.benchmarks.synthetic import write_synthetic
    from halluprobe.clip_signal import ClipScorer

    with tempfile.TemporaryDirectory() as tmp:
        scenes = write_synthetic(Path(tmp) / "scenes", n_images=args.images, seed=7, overwrite=True)
        images = sorted(str(p) for p in scenes.images_dir.iterdir())[: args.images]
        pairs = [(image, OBJECTS[(i + j) % len(OBJECTS)]) for i, image in enumerate(images) for j in range(6)]
        print(f"{len(images)} images x 6 objects, median of {args.runs} runs, {torch.get_num_threads()} threads, CPU")
        for shape in args.shapes.split(","):
            folder = _build(Path(tmp) / shape.replace("/", "-"), shape, clip_tokenizer_dir())
            first: list[float] = []
            again: list[float] = []
            for _ in range(args.runs):
                scorer = ClipScorer(folder, device="cpu")
                started = time.perf_counter()
                scorer.similarities(pairs)
                first.append(time.perf_counter() - started)
                started = time.perf_counter()
                scorer.similarities(pairs)  # another split over the same images: cached embeddings
                again.append(time.perf_counter() - started)
            per_image = statistics.median(first) / len(images)
            print(
                f"{shape:9s} first split {statistics.median(first):6.2f} s ({per_image * 1000:6.0f} ms per image, "
                f"objects included); again from the caches {statistics.median(again) * 1000:6.1f} ms"
            )


if __name__ == "__main__":
    main()
