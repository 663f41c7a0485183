"""Auto-Probe test assets: the real CLIP BPE tokenizer and a tiny random-weight OWLv2.

The CLIP vocabulary (also OWL-ViT's and OWLv2's text side) is ``open_clip/bpe_simple_vocab_16e6.txt.gz``
inside the ``open-clip-torch`` wheel. The wheel is downloaded with ``pip download --no-deps`` and
only that file is read: installing open-clip-torch would pull a CUDA torch. The vocabulary and
merges are built as CLIP's own ``SimpleTokenizer`` builds them (256 byte symbols, the same with
``</w>``, one symbol per merge, then the two special tokens: 49408), checked against CLIP's
known encoding of "a photo of a cat", and saved as a transformers ``CLIPTokenizer`` folder
(cached like the other tokenizers, see ``_assets.py``).
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import _assets

__all__ = ["OPEN_CLIP_WHEEL", "clip_tokenizer_dir", "build_tiny_owlv2", "tiny_owlv2_dir", "tiny_llava_dir"]

OPEN_CLIP_WHEEL = "open-clip-torch==3.3.0"
_VOCAB_MEMBER = "open_clip/bpe_simple_vocab_16e6.txt.gz"
# CLIP's published ids: <|startoftext|> a photo of a cat <|endoftext|>
_CAT_IDS = [49406, 320, 1125, 539, 320, 2368, 49407]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2 / CLIP's reversible byte -> printable character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def _build_clip(out: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer, CLIPTokenizer

    with tempfile.TemporaryDirectory() as staging:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", staging, OPEN_CLIP_WHEEL],
            check=True,
        )
        wheel = next(Path(staging).glob("open_clip_torch-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            raw = gzip.decompress(archive.read(_VOCAB_MEMBER)).decode("utf-8")
        wheel_name = wheel.name
        wheel_sha256 = _assets._sha256(wheel)
    lines = raw.split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1]]
    symbols = list(_bytes_to_unicode().values())
    vocab_list = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab_list += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {piece: i for i, piece in enumerate(vocab_list)}
    # OWL-ViT / OWLv2 pad with "!" (id 0), as their published tokenizer configs do
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges, pad_token="!")
    tokenizer.save_pretrained(str(out))
    reloaded = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    got = reloaded("a photo of a cat").input_ids
    if got != _CAT_IDS or len(reloaded) != 49408:
        raise RuntimeError(f"CLIP tokenizer check failed: {got} (len {len(reloaded)})")
    return {"source": f"{wheel_name}:{_VOCAB_MEMBER}", "wheel_sha256": wheel_sha256, "len": len(reloaded)}


def clip_tokenizer_dir() -> Path:
    """CLIP BPE tokenizer folder (49408 pieces), built once from the open-clip-torch wheel."""
    return _assets._build_once("clip-bpe-tokenizer", _build_clip)


def build_tiny_owlv2(out_dir: Path, tokenizer_dir: Path, *, seed: int = 0, image_size: int = 64) -> Path:
    """Write a random-weight OWLv2 folder (model + Owlv2Processor with the PIL image processor)."""
    import torch
    from transformers import AutoTokenizer, Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessorPil, Owlv2Processor

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    config = Owlv2Config(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 16,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": image_size,
            "patch_size": 16,
        },
        projection_dim=32,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Owlv2ForObjectDetection(config).eval()
    processor = Owlv2Processor(
        image_processor=Owlv2ImageProcessorPil(size={"height": image_size, "width": image_size}),
        tokenizer=tokenizer,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    processor.save_pretrained(str(out_dir))
    return out_dir


def tiny_owlv2_dir() -> Path:
    """The tiny OWLv2 folder (seed 0, 64-pixel input), built once into the test-asset cache."""

    def build(out: Path) -> dict[str, Any]:
        build_tiny_owlv2(out, clip_tokenizer_dir())
        return {"source": "random weights, seed 0", "tokenizer": "clip-bpe-tokenizer"}

    return _assets._build_once("tiny-owlv2", build)


def tiny_llava_dir() -> Path:
    """A tiny random-weight LLaVA (seed 0, 56-pixel images) on the LLaMA-2 tokenizer, built once."""
    from halluprobe.tiny import build_tiny_llava

    def build(out: Path) -> dict[str, Any]:
        build_tiny_llava(out, _assets.llama_tokenizer_dir(), seed=0, image_size=56)
        return {"source": "halluprobe.tiny.build_tiny_llava, seed 0, image_size 56"}

    return _assets._build_once("tiny-llava-56", build)
