"""Train halluprobe's demo VLM: a tiny LLaVA that answers "Is there a/an X in the image?".

    python tools/train_demo_model.py [--out src/halluprobe/demo_model] [--threads 2]

The model is the LLaVA architecture from transformers (``LlavaForConditionalGeneration``: a
CLIP vision tower, a two-layer projector, a LLaMA text model) on the real Mistral v1 vocabulary
(mistral-common, Apache-2.0; ``<image>`` and ``<pad>`` added as LLaVA does, 32064 rows). It is
trained from scratch, on the CPU, on scenes from :mod:`halluprobe.benchmarks.synthetic` (seed
``data_seed``; the demo asks about scenes of another seed), to answer with what a chat model
emits after ``ASSISTANT:``: ``▁Yes`` or ``▁No``, then ``.``, then ``</s>``. The loss is the
causal-LM loss on those three answer tokens only.

What makes it hallucinate like a real VLM is the data, not a trick: objects follow themes (a
fork goes with a cup), some are tiny or half hidden, and negatives in training are mostly
random absent objects. A small model trained briefly learns the co-occurrence prior before it
learns to see every small glyph, so when unsure it says yes to what usually goes with the
scene: POPE's adversarial negatives fool it more than random ones.

Everything is seeded (weights, data, order); torch runs deterministic algorithms on
``--threads`` threads. Weights are stored in float16 (the embedding of 32064 x hidden dominates;
input and output embeddings are tied) and load as float32. The folder gets ``training.json``
(config, seed, data recipe, time, held-out metrics) and ``TRAINING.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "src" / "halluprobe" / "demo_model"

# "USER: <image>\n{question}\nASSISTANT:" for one user turn: the chat template renders exactly
# halluprobe's ``llava`` prompt format, so ``--template chat`` (the default) and ``llava`` agree.
DEMO_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] + '\n' }}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}"
    "{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + '\n' }}"
    "{% endfor %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
PROMPT = "USER: <image>\n{question}\nASSISTANT:"
# the question the demo model captions on: `halluprobe build chair`'s default prompt
CAPTION_QUESTION = "Please describe this image in detail."
CAPTION_KEY = "<caption>"  # Batcher.prompt_ids key of the caption prompt (no class is named so)


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0  # weights and question sampling
    data_seed: int = 1  # synthetic scene set used for training (the demo uses another)
    eval_seed: int = 2  # held-out scenes for the metrics recorded beside the weights
    image_size: int = 96
    patch_size: int = 12  # 8 x 8 = 64 image tokens
    vision_hidden: int = 96
    vision_intermediate: int = 192
    vision_layers: int = 2
    vision_heads: int = 4
    text_hidden: int = 96
    text_intermediate: int = 256
    text_layers: int = 2
    text_heads: int = 4
    steps: int = 1500
    scenes_per_step: int = 16
    questions_per_scene: int = 4  # half positives, half negatives
    hard_negative_fraction: float = 0.2  # negatives drawn from the scene's own theme
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    threads: int = 2
    vision_steps: int = 400  # stage 1: vision pretraining (0 = none)
    vision_batch: int = 64
    vision_lr: float = 1e-2
    vision_aux_weight: float = 0.5  # stage 2: weight of the stage-1 patch loss kept alongside
    eval_images: int = 200
    captions_per_scene: int = 1  # stage 2: one true caption per scene beside the questions (0 = none)
    caption_weight: float = 1.0  # weight of the caption tokens' mean loss beside the answers'
    caption_max_new_tokens: int = 40  # held-out captions: greedy, at most this many tokens


def _rng(seed: int, purpose: str) -> np.random.Generator:
    import hashlib

    digest = hashlib.sha256(f"halluprobe/train-demo:{seed}:{purpose}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "big")))


def build_model(cfg: TrainConfig, tokenizer_dir: Path) -> tuple[Any, Any]:
    """A freshly initialised (seeded) tiny LLaVA and its processor."""
    import torch
    from tokenizers import AddedToken
    from transformers import (
        AutoTokenizer,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.add_tokens([AddedToken("<image>", special=True, normalized=False)], special_tokens=True)
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    tokenizer.padding_side = "left"
    tokenizer.init_kwargs["padding_side"] = "left"
    vocab_size = -(-len(tokenizer) // 64) * 64  # 32002 -> 32064, as LLaVA-1.5
    vision = CLIPVisionConfig(
        hidden_size=cfg.vision_hidden,
        intermediate_size=cfg.vision_intermediate,
        num_hidden_layers=cfg.vision_layers,
        num_attention_heads=cfg.vision_heads,
        image_size=cfg.image_size,
        patch_size=cfg.patch_size,
        projection_dim=cfg.vision_hidden,
    )
    text = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.text_hidden,
        intermediate_size=cfg.text_intermediate,
        num_hidden_layers=cfg.text_layers,
        num_attention_heads=cfg.text_heads,
        num_key_value_heads=cfg.text_heads,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,  # the 32064-row embedding is most of the weights: store it once
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,  # two vision layers: use both (LLaVA-1.5 takes -2 of 24)
        tie_word_embeddings=True,
    )
    torch.manual_seed(cfg.seed)
    model = LlavaForConditionalGeneration(config)
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": cfg.image_size},
        crop_size={"height": cfg.image_size, "width": cfg.image_size},
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=cfg.patch_size,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,  # CLIP's CLS token; "default" drops it again
        chat_template=DEMO_CHAT_TEMPLATE,
    )
    return model, processor


class Batcher:
    """Turns (scene image, object, label) triples into model inputs, exactly as the processor would.

    Prompt ids per object come from the processor itself (one call per class); images are
    normalised here with the processor's mean and std, which equals the processor's output at
    the model's own size (resize and crop are identities there; checked at start-up).
    """

    def __init__(self, processor: Any, classes: list[str]) -> None:
        import torch
        from PIL import Image

        from halluprobe.benchmarks.pope import question_text

        self.processor = processor
        ip = processor.image_processor
        self.mean = torch.tensor(ip.image_mean).view(1, 3, 1, 1)
        self.std = torch.tensor(ip.image_std).view(1, 3, 1, 1)
        size = ip.crop_size["height"]
        blank = Image.new("RGB", (size, size), (128, 128, 128))
        self.prompt_ids: dict[str, list[int]] = {}
        for name in classes:
            prompt = PROMPT.format(question=question_text("Is there a {} in the image?", name))
            enc = processor(text=prompt, images=blank, return_tensors="pt")
            self.prompt_ids[name] = enc["input_ids"][0].tolist()
        tok = processor.tokenizer
        self.yes, self.no = tok.convert_tokens_to_ids("▁Yes"), tok.convert_tokens_to_ids("▁No")
        self.dot, self.eos = tok.convert_tokens_to_ids("."), tok.eos_token_id
        self.pad = tok.pad_token_id
        self.image_token_id = tok.convert_tokens_to_ids("<image>")
        enc = processor(text=PROMPT.format(question=CAPTION_QUESTION), images=blank, return_tensors="pt")
        self.prompt_ids[CAPTION_KEY] = enc["input_ids"][0].tolist()
        self.tokenizer = tok

    def caption_ids(self, scene: Any) -> list[int]:
        """The ids a chat model emits after ``ASSISTANT:`` for the scene's true caption, then ``</s>``."""
        return list(self.tokenizer(caption_text(scene), add_special_tokens=False)["input_ids"]) + [self.eos]

    def pixels(self, images: np.ndarray) -> Any:
        import torch

        x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
        return (x - self.mean) / self.std

    def check_pixels(self, image: np.ndarray) -> float:
        from PIL import Image

        ref = self.processor.image_processor(images=Image.fromarray(image), return_tensors="pt")["pixel_values"]
        return float((ref - self.pixels(image[None])).abs().max())

    def text(self, names: list[str], answers: list[bool] | None) -> tuple[Any, Any, Any]:
        """Left-padded ids (prompt + answer when given), attention mask, positions."""
        import torch

        rows = []
        for i, name in enumerate(names):
            ids = list(self.prompt_ids[name])
            if answers is not None:
                ids += [self.yes if answers[i] else self.no, self.dot, self.eos]
            rows.append(ids)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids, mask, positions


    def packed(self, per_image: list[list[tuple[str, bool]]], captions: list[list[int]] | None = None) -> dict[str, Any]:
        """One sequence per image: the prompt prefix all questions share (BOS, ``USER:``, the
        image tokens, ...) once, then each question's own tokens and answer (and, given
        ``captions``, the caption prompt and the caption's ids), each block seeing the prefix and
        itself only, with the positions it would have alone. The prefix-cache idea of
        ``backends/hf/backend.py`` applied to training: 2 to 3 times fewer tokens. Targets: the yes/no
        answers' three tokens first (``first``: the index of each answer's first token), then
        the captions' (``is_caption``)."""
        import torch

        prompts = list(self.prompt_ids.values())
        n = 0
        while all(len(p) > n + 1 and p[n] == prompts[0][n] for p in prompts):
            n += 1
        prefix = prompts[0][:n]
        rows, spans = [], []
        for r, questions in enumerate(per_image):
            ids, pos, blocks, targets = list(prefix), list(range(n)), [], []
            answers = [(name, [self.yes if answer else self.no, self.dot, self.eos], False) for name, answer in questions]
            if captions is not None:
                answers.append((CAPTION_KEY, captions[r], True))
            for key, answer, is_caption in answers:
                tail = self.prompt_ids[key][n:] + answer
                start = len(ids)
                ids += tail
                pos += range(n, n + len(tail))
                blocks.append((start, len(ids)))
                # the last prompt token predicts the answer's first token, each answer token the next
                first = len(ids) - len(answer) - 1
                targets += [(first + k, answer[k], is_caption) for k in range(len(answer))]
            rows.append((ids, pos, blocks))
            spans.append(targets)
        width = max(len(r[0]) for r in rows)
        ids_t = torch.full((len(rows), width), self.pad, dtype=torch.long)
        pos_t = torch.zeros((len(rows), width), dtype=torch.long)
        allowed = torch.zeros((len(rows), width, width), dtype=torch.bool)
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        for r, (ids, pos, blocks) in enumerate(rows):
            ids_t[r, : len(ids)] = torch.tensor(ids)
            pos_t[r, : len(pos)] = torch.tensor(pos)
            allowed[r, :, :n] = True  # everyone sees the prefix ...
            for a, b in blocks:
                allowed[r, a:b, a:b] = True  # ... and its own block
            allowed[r, len(ids) :, :] = True  # padding rows: anything, never read
        allowed &= causal
        mask = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(~allowed, torch.finfo(torch.float32).min)
        # answers' targets first, then captions': the yes/no tokens keep their old order
        order = [(r, i, tok, c) for c_pass in (False, True) for r, t in enumerate(spans) for i, tok, c in t if c == c_pass]
        gather = torch.tensor([[r, i] for r, i, _, _ in order])
        target = torch.tensor([tok for _, _, tok, _ in order])
        is_caption = torch.tensor([c for _, _, _, c in order], dtype=torch.bool)
        n_answers = int((~is_caption).sum())
        return {"ids": ids_t, "positions": pos_t, "mask": mask[:, None], "gather": gather, "target": target,
                "is_caption": is_caption, "first": torch.arange(0, n_answers, 3)}  # fmt: skip


def _image_features(model: Any, pixels: Any) -> Any:
    """Projected image features ``[images, image tokens, hidden]``, as LLaVA's forward computes them."""
    import torch

    cfg = model.config
    feats = model.model.get_image_features(
        pixel_values=pixels,
        vision_feature_layer=cfg.vision_feature_layer,
        vision_feature_select_strategy=cfg.vision_feature_select_strategy,
    ).pooler_output
    return torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats


def _text_forward(model: Any, batcher: Batcher, ids: Any, feats: Any, mask: Any, positions: Any) -> Any:
    """Last hidden states with ``feats`` (one row per sequence) scattered into the image tokens."""
    embeds = model.model.get_input_embeddings()(ids)
    image_mask = (ids == batcher.image_token_id).unsqueeze(-1).expand_as(embeds)
    embeds = embeds.masked_scatter(image_mask, feats.reshape(-1, feats.shape[-1]).to(embeds.dtype))
    return model.model.language_model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions).last_hidden_state


def forward_packed(model: Any, batcher: Batcher, pixels: Any, batch: dict[str, Any]) -> tuple[Any, Any]:
    """Logits at ``batch["gather"]`` positions of packed sequences (see :meth:`Batcher.packed`),
    and the projected image features."""
    feats = _image_features(model, pixels)
    hidden = _text_forward(model, batcher, batch["ids"], feats, batch["mask"], batch["positions"])
    g = batch["gather"]
    return model.lm_head(hidden[g[:, 0], g[:, 1]]), feats


def forward_last(model: Any, batcher: Batcher, pixels: Any, image_of_row: Any, ids: Any, mask: Any, positions: Any, keep: int) -> Any:
    """Logits of the last ``keep`` positions; each image goes through the vision tower once.

    The same computation as ``LlavaForConditionalGeneration.forward`` (image features scattered
    into the image-token embeddings), with the vision features shared by the rows that show the
    same image; checked against the full forward at start-up.
    """
    feats = _image_features(model, pixels)
    hidden = _text_forward(model, batcher, ids, feats[image_of_row], mask, positions)
    return model.lm_head(hidden[:, -keep:])


def caption_text(scene: Any) -> str:
    """The scene's true caption: its theme and every distinct object class once, in the order of
    ``CLASSES`` ("A kitchen with a cup, a bowl and a person."). A fixed order makes each next
    object one decision the model must read from the image; where it cannot, it names what the
    theme makes likely: CHAIR's hallucinations."""
    from halluprobe.benchmarks.synthetic_classes import CLASSES

    present = set(scene.names)
    names = [c.name for c in CLASSES if c.name in present]
    items = [f"{'an' if name[0] in 'aeiou' else 'a'} {name}" for name in names]
    listed = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return f"{'An' if scene.theme[0] in 'aeiou' else 'A'} {scene.theme} with {listed}."


def mentioned_classes(caption: str, classes: list[str]) -> set[str]:
    """The synthetic classes a caption names (whole words, lower case; ``traffic light`` as two)."""
    import re

    text = caption.lower()
    return {name for name in classes if re.search(rf"\b{re.escape(name)}\b", text)}


def evaluate_captions(model: Any, processor: Any, cfg: TrainConfig, classes: list[str]) -> dict[str, Any]:
    """Greedy captions of the held-out scenes, read against the scenes' true classes (all 29
    synthetic classes, not only CHAIR's COCO ones): the share of captions naming an absent
    object, of named objects that are absent, of present objects named; absent ones named split
    by whether they belong to the scene's theme."""
    import torch
    from PIL import Image

    from halluprobe.benchmarks.synthetic_classes import THEMES
    from halluprobe.benchmarks.synthetic import generate_scene

    scenes = [generate_scene(cfg.eval_seed, i, size=cfg.image_size) for i in range(cfg.eval_images)]
    prompt = PROMPT.format(question=CAPTION_QUESTION)
    captions: list[str] = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(scenes), 50):
            part = scenes[start : start + 50]
            enc = processor(text=[prompt] * len(part), images=[Image.fromarray(s.image) for s in part], return_tensors="pt")
            out = model.generate(**enc, max_new_tokens=cfg.caption_max_new_tokens, do_sample=False)
            captions += processor.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    with_hallucination = mentions = hallucinated = in_theme = present_total = recalled = 0
    for scene, caption in zip(scenes, captions):
        named = mentioned_classes(caption, classes)
        present = set(scene.names)
        wrong = named - present
        with_hallucination += bool(wrong)
        mentions += len(named)
        hallucinated += len(wrong)
        in_theme += len(wrong & set(THEMES[scene.theme]))
        present_total += len(present)
        recalled += len(named & present)
    n = len(scenes)
    return {
        "n": n,
        "captions_with_absent_object": round(with_hallucination / n, 4),
        "absent_share_of_named": round(hallucinated / mentions, 4) if mentions else None,
        "recall": round(recalled / present_total, 4) if present_total else None,
        "named": mentions, "absent_named": hallucinated, "absent_named_in_theme": in_theme,
        "present": present_total, "present_named": recalled,
        "exact_captions": sum(c.strip() == caption_text(s) for s, c in zip(scenes, captions)),
        "mean_words": round(sum(len(c.split()) for c in captions) / n, 2),
        "examples": [{"scene": i, "truth": caption_text(scenes[i]), "caption": captions[i].strip()} for i in range(3)],
    }  # fmt: skip


def sample_questions(rng: np.random.Generator, scene: Any, n: int, hard_fraction: float, classes: list[str]) -> list[tuple[str, bool]]:
    """``n`` questions about one scene: half present objects, half absent ones (mostly random)."""
    from halluprobe.benchmarks.synthetic_classes import THEMES

    present = list(scene.names)
    absent = [c for c in classes if c not in present]
    same_theme = [c for c in THEMES[scene.theme] if c not in present]
    out: list[tuple[str, bool]] = []
    n_pos = n // 2
    for i in rng.permutation(len(present))[:n_pos]:
        out.append((present[int(i)], True))
    for _ in range(n - len(out)):
        pool = same_theme if same_theme and rng.random() < hard_fraction else absent
        pool = [c for c in pool if (c, False) not in out] or absent
        out.append((pool[int(rng.integers(len(pool)))], False))
    return out


def evaluate(model: Any, batcher: Batcher, cfg: TrainConfig, classes: list[str]) -> dict[str, Any]:
    """Accuracy / F1 / yes-ratio per POPE split on held-out scenes (first-token ▁Yes vs ▁No)."""
    import torch

    from halluprobe.benchmarks.objects import ObjectIndex
    from halluprobe.benchmarks.pope import build_pope
    from halluprobe.benchmarks.synthetic import generate_scene

    scenes = {f"s{i}": generate_scene(cfg.eval_seed, i, size=cfg.image_size) for i in range(cfg.eval_images)}
    index = ObjectIndex(images={k: s.names for k, s in scenes.items()})
    build = build_pope(index, name="eval", n_images=cfg.eval_images, per_image=3, seed=0)
    keys = list(scenes)
    pos = {k: i for i, k in enumerate(keys)}
    pixels = batcher.pixels(np.stack([scenes[k].image for k in keys]))
    results: dict[str, Any] = {}
    model.eval()
    with torch.inference_mode():
        for split, questions in build.splits.items():
            tp = fp = tn = fn = 0
            for start in range(0, len(questions), 96):
                qs = questions[start : start + 96]
                imgs = sorted({pos[q.image] for q in qs})
                local = {g: j for j, g in enumerate(imgs)}
                ids, mask, positions = batcher.text([q.object for q in qs], None)
                row_image = torch.tensor([local[pos[q.image]] for q in qs])
                logits = forward_last(model, batcher, pixels[imgs], row_image, ids, mask, positions, 1)[:, 0]
                says_yes = (logits[:, batcher.yes] > logits[:, batcher.no]).tolist()
                for q, y in zip(qs, says_yes):
                    if q.label == "yes":
                        tp, fn = tp + y, fn + (not y)
                    else:
                        fp, tn = fp + y, tn + (not y)
            n = tp + fp + tn + fn
            results[split] = {
                "n": n,
                "accuracy": round((tp + tn) / n, 4),
                "f1": round(2 * tp / (2 * tp + fp + fn), 4) if tp + fp + fn else 0.0,
                "yes_ratio": round((tp + fp) / n, 4),
                "tp": tp, "fp": fp, "tn": tn, "fn": fn,
            }  # fmt: skip
    return results


def patch_targets(scene: Any, column: dict[str, int], patch: int) -> np.ndarray:
    """``float32 [patches, classes]``: 1 where a class has a visible pixel in that patch."""
    size = scene.owner.shape[0]
    grid = size // patch
    out = np.zeros((grid * grid, len(column)), dtype=np.float32)
    for i, obj in enumerate(scene.objects):
        hits = (scene.owner == i).reshape(grid, patch, grid, patch).any(axis=(1, 3)).ravel()
        out[hits, column[obj.name]] = 1.0
    return out


def pretrain_vision(model: Any, batcher: Batcher, cfg: TrainConfig, classes: list[str], history: list[dict[str, float]], log_every: int) -> tuple[int, Any]:
    """Stage 1, the tiny analogue of LLaVA's pretrained CLIP tower: the vision tower and the
    projector learn which classes each image patch shows (per image token, multi-label, through a
    linear head that is thrown away afterwards; the generator knows every pixel's object). Without it the language
    model learns only the answer prior for a long time before it starts to look. Returns the
    number of scenes used and the head (for the auxiliary loss of stage 2)."""
    import torch

    from halluprobe.benchmarks.synthetic import generate_scene

    torch.manual_seed(cfg.seed + 1)
    head = torch.nn.Linear(cfg.text_hidden, len(classes))
    params = list(model.model.vision_tower.parameters()) + list(model.model.multi_modal_projector.parameters()) + list(head.parameters())
    optim = torch.optim.AdamW(params, lr=cfg.vision_lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay, fused=True)
    column = {name: i for i, name in enumerate(classes)}
    started = time.perf_counter()
    running = 0.0
    for step in range(cfg.vision_steps):
        first = step * cfg.vision_batch
        scenes = [generate_scene(cfg.data_seed, first + i, size=cfg.image_size) for i in range(cfg.vision_batch)]
        target = torch.from_numpy(np.stack([patch_targets(s, column, cfg.patch_size) for s in scenes]))
        feats = _image_features(model, batcher.pixels(np.stack([s.image for s in scenes])))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(feats), target)
        for group in optim.param_groups:
            group["lr"] = cfg.vision_lr * min(1.0, (step + 1) / 50) * (0.5 * (1 + math.cos(math.pi * step / cfg.vision_steps)))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        optim.step()
        running += float(loss.detach())
        if (step + 1) % log_every == 0:
            elapsed = time.perf_counter() - started
            history.append({"stage": 1, "step": step + 1, "loss": round(running / log_every, 4), "seconds": round(elapsed, 1)})
            print(f"vision {step + 1:5d}  bce {running / log_every:.4f}  {elapsed:6.1f}s", flush=True)
            running = 0.0
    # held-out check: a class is "seen" when any patch's logit is positive
    with torch.no_grad():
        scenes = [generate_scene(cfg.eval_seed, i, size=cfg.image_size) for i in range(200)]
        feats = _image_features(model, batcher.pixels(np.stack([s.image for s in scenes])))
        seen = (head(feats).amax(1) > 0).numpy()
        truth = np.stack([patch_targets(s, column, cfg.patch_size).max(0) for s in scenes]) > 0
        tp, fp, fn = int((seen & truth).sum()), int((seen & ~truth).sum()), int((~seen & truth).sum())
        f1 = 2 * tp / (2 * tp + fp + fn)
    history.append({"stage": 1, "held_out_presence_f1": round(f1, 4), "tp": tp, "fp": fp, "fn": fn})
    print(f"vision held-out presence F1 {f1:.3f} (tp {tp} fp {fp} fn {fn})", flush=True)
    return cfg.vision_steps * cfg.vision_batch, head


def train(cfg: TrainConfig, out: Path, *, log_every: int = 50) -> dict[str, Any]:
    import torch

    from halluprobe.benchmarks.synthetic_classes import CLASSES
    from halluprobe.benchmarks.synthetic import generate_scene
    from halluprobe.tiny import mistral_tokenizer_dir

    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    # deterministic mode also NaN-fills every new tensor: a 3x slowdown here, and not needed
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    classes = [c.name for c in CLASSES]
    with tempfile.TemporaryDirectory(prefix="halluprobe-train-") as tmp:
        model, processor = build_model(cfg, mistral_tokenizer_dir(Path(tmp) / "tokenizer"))
    batcher = Batcher(processor, classes)

    # start-up checks: our pixel path and forward equal the processor's and the model's own
    probe = generate_scene(cfg.data_seed, 0, size=cfg.image_size)
    assert batcher.check_pixels(probe.image) < 1e-5, "pixel normalisation differs from the processor"
    with torch.no_grad():
        ids, mask, positions = batcher.text(["cup", "traffic light"], [True, False])
        pix = batcher.pixels(probe.image[None])
        ours = forward_last(model, batcher, pix, torch.tensor([0, 0]), ids, mask, positions, 4)
        ref = model(input_ids=ids, pixel_values=pix.expand(2, -1, -1, -1), attention_mask=mask, position_ids=positions).logits[:, -4:]
        assert float((ours - ref).abs().max()) < 1e-4, "shared-image forward differs from the model's forward"
        packed = batcher.packed([[("cup", True), ("traffic light", False)]])
        ours = forward_packed(model, batcher, pix, packed)[0].view(2, 3, -1)
        assert float((ours - ref[:, :3]).abs().max()) < 1e-4, "packed forward differs from the model's forward"

    started = time.perf_counter()
    scene_index = 0
    history: list[dict[str, float]] = []
    head = None
    column = {name: i for i, name in enumerate(classes)}
    if cfg.vision_steps:
        scene_index, head = pretrain_vision(model, batcher, cfg, classes, history, log_every)

    named = list(model.named_parameters()) + ([] if head is None else [(f"aux_head.{n}", p) for n, p in head.named_parameters()])
    decay = [p for n, p in named if p.ndim >= 2 and "embed" not in n and "norm" not in n]
    rest = [p for n, p in named if not (p.ndim >= 2 and "embed" not in n and "norm" not in n)]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.98), fused=True,
    )  # fmt: skip

    def lr_at(step: int) -> float:
        if step < cfg.warmup:
            return cfg.lr * (step + 1) / cfg.warmup
        t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))

    qrng = _rng(cfg.seed, "questions")
    model.train()
    running = running_acc = 0.0
    for step in range(cfg.steps):
        scenes = [generate_scene(cfg.data_seed, scene_index + i, size=cfg.image_size) for i in range(cfg.scenes_per_step)]
        scene_index += cfg.scenes_per_step
        per_image = [
            sample_questions(qrng, scene, cfg.questions_per_scene, cfg.hard_negative_fraction, classes) for scene in scenes
        ]
        captions = [batcher.caption_ids(s) for s in scenes] if cfg.captions_per_scene else None
        batch = batcher.packed(per_image, captions)
        pixels = batcher.pixels(np.stack([s.image for s in scenes]))
        logits, feats = forward_packed(model, batcher, pixels, batch)
        is_caption = batch["is_caption"]
        # the answers' mean loss as before; the captions' mean beside it, weighted
        loss = torch.nn.functional.cross_entropy(logits[~is_caption].float(), batch["target"][~is_caption])
        if captions is not None and cfg.caption_weight:
            loss = loss + cfg.caption_weight * torch.nn.functional.cross_entropy(logits[is_caption].float(), batch["target"][is_caption])
        if head is not None and cfg.vision_aux_weight:
            # keep the stage-1 patch labels as an auxiliary loss: the tower goes on learning to see
            target = torch.from_numpy(np.stack([patch_targets(s, column, cfg.patch_size) for s in scenes]))
            loss = loss + cfg.vision_aux_weight * torch.nn.functional.binary_cross_entropy_with_logits(head(feats), target)
        with torch.no_grad():  # monitoring: is the first answer token right?
            first = logits[batch["first"]]
            answers = torch.tensor([a for qs in per_image for _, a in qs])
            running_acc += float(((first[:, batcher.yes] > first[:, batcher.no]) == answers).float().mean())
        for group in optim.param_groups:
            group["lr"] = lr_at(step)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], cfg.grad_clip)
        optim.step()
        running += float(loss.detach())
        if (step + 1) % log_every == 0:
            elapsed = time.perf_counter() - started
            acc = running_acc / log_every
            history.append({"stage": 2, "step": step + 1, "loss": round(running / log_every, 4), "accuracy": round(acc, 4), "seconds": round(elapsed, 1)})
            print(f"step {step + 1:5d}  loss {running / log_every:.4f}  acc {acc:.3f}  {elapsed:6.1f}s", flush=True)
            running = running_acc = 0.0
    train_seconds = time.perf_counter() - started
    model.eval()
    # the shipped weights are float16: measure those (loaded as float32, as users load them)
    model.to(torch.float16).to(torch.float32)
    metrics = evaluate(model, batcher, cfg, classes)
    print(json.dumps(metrics), flush=True)
    caption_metrics = evaluate_captions(model, processor, cfg, classes) if cfg.captions_per_scene else None
    print(json.dumps(caption_metrics), flush=True)
    return {"model": model, "processor": processor, "seconds": train_seconds, "history": history, "metrics": metrics, "scenes": scene_index,
            "caption_metrics": caption_metrics}  # fmt: skip


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def save(result: dict[str, Any], cfg: TrainConfig, out: Path) -> None:
    import torch
    import transformers

    model, processor = result["model"], result["processor"]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.to(torch.float16)  # half the bytes; the values are well inside float16's range
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))
    # Load as float32 by default: float16 matmuls on a CPU are slow or missing.
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    for section in (config, config.get("text_config", {}), config.get("vision_config", {})):
        if "dtype" in section:
            section["dtype"] = "float32"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    # tokenizer.json is 3.5 MB pretty-printed and 1.4 MB compact: same content
    tok_path = out / "tokenizer.json"
    tok_path.write_text(json.dumps(json.loads(tok_path.read_text(encoding="utf-8")), ensure_ascii=False, separators=(",", ":")), encoding="utf-8")

    from halluprobe.benchmarks.synthetic import GENERATOR_VERSION

    record = {
        "config": dataclasses.asdict(cfg),
        "data_recipe": {
            "generator": "halluprobe.benchmarks.synthetic",
            "generator_version": GENERATOR_VERSION,
            "scenes": f"generate_scene(data_seed={cfg.data_seed}, index=0..{result['scenes'] - 1}, size={cfg.image_size}), each seen once",
            "questions": (
                f"{cfg.questions_per_scene} per scene: {cfg.questions_per_scene // 2} present objects, the rest absent ones "
                f"(from the scene's theme with probability {cfg.hard_negative_fraction}, else uniform over absent classes)"
            ),
            "prompt": PROMPT,
            "target": "▁Yes|▁No . </s> (loss on these three tokens only)",
            "caption_prompt": PROMPT.format(question=CAPTION_QUESTION),
            "captions": (
                f"{cfg.captions_per_scene} per scene, the true one: 'A {{theme}} with a X, a Y and a Z.' naming every distinct class "
                f"once in the order of CLASSES, then </s>; its tokens' mean loss added at weight {cfg.caption_weight}"
                if cfg.captions_per_scene else "none"
            ),
        },
        "training_seconds": round(result["seconds"], 1),
        "threads": cfg.threads,
        "machine": {
            "python": platform.python_version(),
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
        },
        "packages": {"torch": torch.__version__, "transformers": transformers.__version__},
        "loss_history": result["history"],
        "held_out": {
            "how": f"POPE (3 positives per image, seed 0) on {cfg.eval_images} scenes of eval_seed={cfg.eval_seed}; first token ▁Yes vs ▁No, with the weights as shipped (float16, computed in float32)",
            "splits": result["metrics"],
        },
    }
    if result.get("caption_metrics") is not None:
        record["held_out_captions"] = {
            "how": (
                f"greedy captions (at most {cfg.caption_max_new_tokens} new tokens, transformers generate) of the same {cfg.eval_images} "
                "scenes, the classes they name read against the scenes' true classes (all 29 synthetic classes), weights as shipped"
            ),
            **result["caption_metrics"],
        }
    record["parameters"] = {
        "total": sum(p.numel() for p in model.parameters()),
        "vision_tower": sum(p.numel() for p in model.model.vision_tower.parameters()),
        "projector": sum(p.numel() for p in model.model.multi_modal_projector.parameters()),
        "language_model": sum(p.numel() for p in model.model.language_model.parameters()),
    }
    record["files"] = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    (out / "training.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "TRAINING.md").write_text(training_md(record), encoding="utf-8")


def training_md(record: dict[str, Any]) -> str:
    """The model card: what the model is, how it was trained, what it scores."""
    cfg = record["config"]
    recipe = record["data_recipe"]
    params = record["parameters"]
    rows = "\n".join(
        f"| {split} | {m['n']} | {m['accuracy']:.3f} | {m['f1']:.3f} | {m['yes_ratio']:.3f} | {m['fp']} / {m['fp'] + m['tn']} |"
        for split, m in record["held_out"]["splits"].items()
    )
    size = sum(record["files"].values())
    prompt = recipe["prompt"].replace("\n", "\\n")  # shown on one line
    note = f" {record['timing_note']}" if record.get("timing_note") else ""
    caption_section = _captions_md(record)
    caption_prompt = recipe.get("caption_prompt", "").replace("\n", "\\n")  # shown on one line
    captions_step = (
        f"\n   Captions: {recipe['captions']}, on the prompt `{caption_prompt}`." if record.get("held_out_captions") else ""
    )
    return f"""# halluprobe demo model

A tiny LLaVA (`LlavaForConditionalGeneration`: CLIP vision tower, two-layer projector, LLaMA
text model) that answers "Is there a/an X in the image?" about halluprobe's synthetic scenes
with `▁Yes` / `▁No`, then `.`, then `</s>`, and describes a scene when asked "{CAPTION_QUESTION}"
("A kitchen with a cup, a bowl and a person."). It exists for `halluprobe demo`: it really looks at
the image, and when unsure it leans on what usually goes with the scene, so POPE's adversarial
negatives fool it more than random ones and its captions name objects that are not there.
It is not a general-purpose model.

- Architecture: vision {cfg['vision_layers']} layers x {cfg['vision_hidden']} ({cfg['image_size']} px,
  patch {cfg['patch_size']}: {(cfg['image_size'] // cfg['patch_size']) ** 2} image tokens), text {cfg['text_layers']} layers x {cfg['text_hidden']},
  {cfg['text_heads']} heads; input and output embeddings tied; {params['total']:,} parameters
  ({params['language_model']:,} in the text model, mostly its 32064-row embedding).
- Tokenizer: Mistral v1 (32000 pieces, `tokenizer.model.v1` from `mistral-common`, Apache-2.0),
  plus `<image>` (32000) and `<pad>` (32001) as LLaVA adds them. The legacy LLaMA-2 yes/no ids
  are other words in this vocabulary: halluprobe marks them invalid.
- Files: {size / 1e6:.1f} MB in all; weights in float16 (`model.safetensors`), `config.json`
  asks for float32 when loaded with `dtype="auto"`. Load it like any hub model:
  `AutoProcessor.from_pretrained(DIR)`, `AutoModelForImageTextToText.from_pretrained(DIR)`.
- Prompt: `{prompt}` (the chat template renders the same string).

## Training

`python tools/train_demo_model.py` (seed {cfg['seed']}, {record['threads']} CPU threads,
deterministic algorithms) took {record['training_seconds']:.0f} s here
({record['machine']['processor']}, torch {record['packages']['torch']}, transformers
{record['packages']['transformers']}).{note}

1. Vision stage ({cfg['vision_steps']} steps x {cfg['vision_batch']} scenes, lr {cfg['vision_lr']}): the
   tower and the projector learn which classes each image patch shows (a linear head on every
   image token, thrown away afterwards): the tiny analogue of LLaVA starting from a
   pretrained CLIP.
2. VLM stage ({cfg['steps']} steps x {cfg['scenes_per_step']} scenes, lr {cfg['lr']}): everything, on
   the causal-LM loss of the answer tokens only (`{recipe['target']}`), with the vision
   stage's patch loss kept at weight {cfg['vision_aux_weight']}. Questions: {recipe['questions']}.{captions_step}
   The questions (and the caption) about one image share its prompt prefix in one packed sequence.

Data: {recipe['scenes']} ({recipe['generator']}, generator version {recipe['generator_version']}).

## Held-out metrics

{record['held_out']['how']}.

| split | questions | accuracy | F1 | yes ratio | yes to absent |
|---|---|---|---|---|---|
{rows}
{caption_section}"""


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _captions_md(record: dict[str, Any]) -> str:
    """The held-out captions paragraph of the model card ("" for a model trained without captions)."""
    c = record.get("held_out_captions")
    if not c:
        return ""
    examples = "\n".join(f"- scene {e['scene']}: `{e['caption']}` (true: `{e['truth']}`)" for e in c["examples"])
    return f"""
Captions: {c['how']}.

| captions | naming an absent object | absent share of named | recall | named | absent named (of the theme) | exact | words |
|---|---|---|---|---|---|---|---|
| {c['n']} | {_rate(c['captions_with_absent_object'])} | {_rate(c['absent_share_of_named'])} | {_rate(c['recall'])} | {c['named']} | {c['absent_named']} ({c['absent_named_in_theme']}) | {c['exact_captions']} | {c['mean_words']:.1f} |

{examples}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--threads", type=int, default=TrainConfig.threads)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override a TrainConfig field")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {"threads": args.threads, "steps": args.steps}
    fields = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in fields:
            parser.error(f"unknown field {key!r}")
        overrides[key] = float(value) if fields[key] in ("float", float) else int(value)
    cfg = dataclasses.replace(TrainConfig(), **overrides)
    result = train(cfg, args.out)
    save(result, cfg, args.out)
    print(f"wrote {args.out} in {result['seconds']:.0f} s of training", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
