"""The ``clip`` signal: CLIP's certainty that a question's object is in its image.

For each question's (image, object) a CLIP model gives four cosine similarities
(:class:`~halluprobe.records.ClipSimilarity`): its text embedding of the object's caption
(``"a photo of a {object}."``) against the image embedding and against the best-matching patch,
and the same two for a caption that names no object (``"a photo."``). A patch's embedding is its
token from the vision tower's last layer through the tower's final norm and the visual
projection: what the class token goes through to become the image embedding. The per-patch
maximum sees small objects that the global embedding averages away.

The ``clip:beta`` correction (:mod:`halluprobe.readouts.corrections`) reads these at score time. The
runner records the signal, not the answering backend: a CLIP model is small, and the VLM need
not run here (a server backend's run records it too). torch and transformers are imported when
a scorer is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.files import read_rgb_image
from halluprobe.records import ClipSetting, ClipSimilarity

__all__ = ["CLIP_SIGNAL", "OBJECT_CAPTION", "EMPTY_CAPTION", "ClipScorer", "object_caption"]

CLIP_SIGNAL = "clip"
# CLIP's zero-shot prompt (Radford et al. 2021); the empty caption is the same without the object
OBJECT_CAPTION = "a photo of a {object}."
EMPTY_CAPTION = "a photo."


def object_caption(obj: str) -> str:
    return OBJECT_CAPTION.format(object=obj)


def _load(model: str) -> tuple[Any, Any]:
    """CLIP's processor and model, from a local folder or a hub id; a folder or model that is
    not CLIP is one line (InputError), one that cannot be loaded too (RuntimeFailure)."""
    from transformers import AutoConfig, CLIPModel, CLIPProcessor

    folder = Path(model).expanduser()
    local = folder.is_dir()
    if not local and (folder.exists() or model.startswith((".", "~", "/")) or model.count("/") > 1):
        raise InputError("--clip-model: no such folder (a CLIP model folder or a hub id such as openai/clip-vit-large-patch14)", model)
    if local and not (folder / "config.json").is_file():
        raise InputError("--clip-model: the folder has no config.json (a CLIP model folder, as save_pretrained writes it)", folder)
    try:
        model_type = AutoConfig.from_pretrained(str(folder) if local else model, local_files_only=local).model_type
        if model_type != "clip":
            raise InputError(f"--clip-model: model_type {model_type!r} is not a CLIP model ('clip')", folder / "config.json" if local else model)
        source = str(folder) if local else model
        processor = CLIPProcessor.from_pretrained(source, local_files_only=local)
        clip = CLIPModel.from_pretrained(source, local_files_only=local, use_safetensors=True)  # never unpickle weights
    except (InputError, RuntimeFailure):
        raise
    except (OSError, ValueError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RuntimeFailure(f"cannot load CLIP model {model!r}: {first_line}") from None
    return processor, clip


class ClipScorer:
    """A CLIP model (``CLIPModel``, local folder or hub id) that scores (image, object) pairs.

    Each image is embedded once: when it is first needed, every object :meth:`expect` named for
    it is scored with it, and only the four similarities per pair are kept (POPE asks about an
    image in each of its three splits, often in another order than the answering backend's).
    """

    def __init__(self, model: str | Path, *, device: str = "auto", batch_size: int = 16) -> None:
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._model_id = str(model)
        self._processor, clip = _load(self._model_id)
        self._model = clip.to(device).eval()
        self._device = device
        self._batch_size = max(1, batch_size)
        self._texts: dict[str, Any] = {}  # caption -> normalised text embedding [D]
        self._expected: dict[str, set[str]] = {}  # image path -> objects asked about it
        self._scored: dict[tuple[str, str], ClipSimilarity | str] = {}  # (image path, object) -> result

    def setting(self) -> ClipSetting:
        return ClipSetting(
            model=self._model_id,
            revision=getattr(self._model.config, "_commit_hash", None),
            object_caption=OBJECT_CAPTION,
            empty_caption=EMPTY_CAPTION,
        )

    def expect(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Name the (image path, object) pairs that will be asked, so each image is embedded once."""
        for path, obj in pairs:
            self._expected.setdefault(path, set()).add(obj)

    def similarities(self, pairs: Sequence[tuple[str, str]]) -> list[ClipSimilarity | str]:
        """Per (image path, object): the four similarities, or the reason there are none."""
        self.expect(pairs)
        paths = list(dict.fromkeys(path for path, obj in pairs if (path, obj) not in self._scored))
        for start in range(0, len(paths), self._batch_size):
            self._score_images(paths[start : start + self._batch_size])
        return [self._scored[pair] for pair in pairs]

    def _score_images(self, paths: list[str]) -> None:
        """Embed the images (global and per patch) and score every object expected for each."""
        import torch

        readable: list[tuple[str, Any]] = []
        for path in paths:
            image = read_rgb_image(path)
            if isinstance(image, str):
                for obj in self._expected[path]:
                    self._scored[(path, obj)] = f"clip signal: {image}"
            else:
                readable.append((path, image))
        if not readable:
            return
        objects = sorted({obj for path, _ in readable for obj in self._expected[path]})
        self._embed_texts([c for c in [EMPTY_CAPTION, *map(object_caption, objects)] if c not in self._texts])
        vision, projection = self._model.vision_model, self._model.visual_projection
        pixels = self._processor(images=[img for _, img in readable], return_tensors="pt")["pixel_values"].to(self._device)
        with torch.inference_mode():
            hidden = vision(pixel_values=pixels).last_hidden_state  # [B, 1 + P, H]: class token first
            tokens = torch.nn.functional.normalize(projection(vision.post_layernorm(hidden)).float(), dim=-1)
            scale = float(self._model.logit_scale.exp())
            empty = self._texts[EMPTY_CAPTION]
            for (path, _), row in zip(readable, tokens):
                image, patches = row[0], row[1:]
                empty_global, empty_patch = float(image @ empty), float((patches @ empty).max())
                for obj in self._expected[path]:
                    text = self._texts[object_caption(obj)]
                    self._scored[(path, obj)] = ClipSimilarity(
                        object_global=float(image @ text),
                        object_patch=float((patches @ text).max()),
                        empty_global=empty_global,
                        empty_patch=empty_patch,
                        logit_scale=scale,
                    )

    def _embed_texts(self, captions: list[str]) -> None:
        import torch

        for start in range(0, len(captions), self._batch_size):
            chunk = captions[start : start + self._batch_size]
            inputs = self._processor(text=chunk, return_tensors="pt", padding=True, truncation=True)
            with torch.inference_mode():
                embeds = self._model.get_text_features(
                    input_ids=inputs["input_ids"].to(self._device), attention_mask=inputs["attention_mask"].to(self._device)
                ).pooler_output.float()
            for caption, row in zip(chunk, torch.nn.functional.normalize(embeds, dim=-1)):
                self._texts[caption] = row
