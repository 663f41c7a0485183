"""Loading a transformers model folder: its :class:`~halluprobe.backends.hf.inputs.VLMInputs`
(:func:`load_processor`) and the model itself (:func:`load_model`).

:func:`load_processor` picks how inputs are built (hf/inputs.py's module docstring: the
family's own processor, one assembled without its video part where the family's processor
needs torchvision, or the ``grid`` fallback) and refuses a model type outside
:data:`halluprobe.backends.families.FAMILIES`. torch and transformers are imported inside
functions only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from halluprobe.backends.families import family_for
from halluprobe.backends.hf.inputs import IMAGE_MARKER, Device, DType, VLMInputs
from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.jsonl import read_json_file

__all__ = ["config_model_type", "load_model", "load_processor"]

logger = logging.getLogger(__name__)


def _is_local(path_or_id: str) -> bool:
    return Path(path_or_id).expanduser().is_dir()


def _image_token_id(config: Any) -> int | None:
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def _placeholder(tokenizer: Any, config: Any, image_token: str) -> str:
    """The image placeholder as a prompt writes it: the image token, wrapped in the model's
    vision start/end tokens when its config names them (Qwen2-VL)."""
    start = getattr(config, "vision_start_token_id", None)
    end = getattr(config, "vision_end_token_id", None)
    if isinstance(start, int) and isinstance(end, int):
        return tokenizer.convert_ids_to_tokens(start) + image_token + tokenizer.convert_ids_to_tokens(end)
    return image_token


def _folder_chat_template(path: str) -> str | None:
    """A processor-level chat template stored beside the weights (chat_template.jinja/.json)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return None
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    js = folder / "chat_template.json"
    if js.is_file():  # a broken one is the user's to fix: one line naming it, not a traceback
        data = read_json_file(js, "chat template")
        value = data.get("chat_template") if isinstance(data, dict) else None
        return value if isinstance(value, str) else None
    return None


def _processor_class(model_type: str | None) -> Any:
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    if model_type is None:
        return None
    return getattr(transformers, PROCESSOR_MAPPING_NAMES.get(model_type) or "", None)


def _processor_needs_torchvision(model_type: str | None) -> bool:
    """True when the model's processor class has a video processor and torchvision is absent.

    Every transformers 5.x video processor requires torchvision, so ``AutoProcessor`` fails
    for these families here (LLaVA-OneVision, Qwen2-VL, Qwen2.5-VL, SmolVLM, InternVL).
    """
    from transformers.utils import is_torchvision_available

    cls = _processor_class(model_type)
    get_attributes = getattr(cls, "get_attributes", None)
    return not is_torchvision_available() and callable(get_attributes) and "video_processor" in get_attributes()


def _processor_without_video(model_type: str | None, path: str, kwargs: dict[str, Any]) -> Any:
    """The family's own processor class, built from its saved parts without a video processor.

    Images never touch the video processor, so it is left out (``None``): the only change to
    the family's class is that its constructor accepts that. Everything else (image-token
    expansion, chat template, settings from processor_config.json) is the family's own code
    and files.
    """
    from transformers import AutoImageProcessor, AutoTokenizer

    base = _processor_class(model_type)

    def check_argument_for_proper_class(self: Any, argument_name: str, argument: Any) -> Any:
        if argument_name == "video_processor" and argument is None:
            return None
        return base.check_argument_for_proper_class(self, argument_name, argument)

    cls = type(base.__name__, (base,), {"check_argument_for_proper_class": check_argument_for_proper_class})
    parts: dict[str, Any] = {
        "image_processor": AutoImageProcessor.from_pretrained(path, **kwargs),
        "tokenizer": AutoTokenizer.from_pretrained(path, **kwargs),
        "video_processor": None,
    }
    attributes = list(cls.get_attributes())
    if not set(attributes) <= set(parts):
        raise ValueError(f"{base.__name__} needs {attributes}")
    processor_dict, instantiation_kwargs = cls.get_processor_dict(path, **kwargs)
    processor = cls.from_args_and_dict([parts[a] for a in attributes], processor_dict, **instantiation_kwargs)
    if not getattr(processor, "chat_template", None):
        processor.chat_template = _folder_chat_template(path)
    return processor


def _token_text(token: Any) -> str | None:
    """A processor's special token as text: some processors keep an ``AddedToken`` (InstructBLIP)."""
    if token is None:
        return None
    return str(getattr(token, "content", token))


# Families whose prompt's image token is replaced by a run of another token (the one the model
# config names): Gemma 3 writes <start_of_image>, the ids hold <image_soft_token> (tokenizer attribute).
_EXPANDED_IMAGE_TOKEN = {"gemma3": "image_token"}


def load_processor(model_path_or_id: str, *, trust_remote_code: bool = False) -> VLMInputs:
    """Load the input side of a VLM: its processor, or image processor + tokenizer (see module doc).

    A model type outside :data:`~halluprobe.backends.families.FAMILIES` is an
    :class:`InputError` naming the supported families.
    """
    path = str(model_path_or_id)
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if _is_local(path):
        kwargs["local_files_only"] = True
        config_model_type(path)  # a broken config.json: one line naming it, before transformers reads it

    from transformers import AutoConfig, AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path, **kwargs)
    except ValueError as exc:  # an unknown model_type (remote code not trusted, or a newer transformers)
        model_type = config_model_type(path)
        family_for(model_type, path)  # raises with the supported families
        raise RuntimeFailure(f"{path}: cannot read the model config: {exc}") from exc
    model_type = getattr(config, "model_type", None)
    family = family_for(model_type, path)
    image_token_id = _image_token_id(config)

    processor = None
    try:
        if _processor_needs_torchvision(model_type):
            processor = _processor_without_video(model_type, path, kwargs)
        else:
            processor = AutoProcessor.from_pretrained(path, **kwargs)
    except (ImportError, ValueError, TypeError, AttributeError, OSError, KeyError) as exc:
        logger.info("%s: the processor failed (%s: %s); building inputs from parts", path, type(exc).__name__, exc)
    if processor is not None and hasattr(processor, "image_processor") and hasattr(processor, "tokenizer"):
        tokenizer = processor.tokenizer
        tokenizer.padding_side = "left"
        image_token = _token_text(getattr(processor, "image_token", None)) or IMAGE_MARKER
        token_id = getattr(processor, "image_token_id", None)
        if token_id is None:
            token_id = tokenizer.convert_tokens_to_ids(image_token)
        if model_type in _EXPANDED_IMAGE_TOKEN:
            # the prompt's token is expanded into another one, which the ids (and config) hold
            expanded = _token_text(getattr(tokenizer, _EXPANDED_IMAGE_TOKEN[model_type]))
            token_id = tokenizer.convert_tokens_to_ids(expanded)
        if image_token_id is not None and token_id != image_token_id:
            raise RuntimeFailure(
                f"{path}: processor image token {image_token!r} is id {token_id}, the model expects {image_token_id}"
            )
        template = getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)
        return VLMInputs(
            tokenizer=tokenizer,
            mode="processor",
            image_token=image_token,
            image_token_id=int(token_id),
            image_placeholder=_placeholder(tokenizer, config, image_token),
            processor=processor,
            image_processor=processor.image_processor,
            chat_template=template,
            model_type=model_type,
            family=family,
        )

    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    tokenizer.padding_side = "left"
    image_processor = AutoImageProcessor.from_pretrained(path, **kwargs)
    names = list(getattr(image_processor, "model_input_names", []) or [])
    if image_token_id is None or "image_grid_thw" not in names:
        raise RuntimeFailure(
            f"{path}: AutoProcessor could not be built and {type(image_processor).__name__} is not a grid image "
            f"processor (image_grid_thw) with an image_token_id in the config; model type {model_type!r} "
            "is not supported without its processor"
        )
    if tokenizer.pad_token is None:
        raise RuntimeFailure(f"{path}: the tokenizer has no pad token; batches cannot be padded")
    image_token = tokenizer.convert_ids_to_tokens(image_token_id)
    template = getattr(tokenizer, "chat_template", None) or _folder_chat_template(path)
    return VLMInputs(
        tokenizer=tokenizer,
        mode="grid",
        image_token=image_token,
        image_token_id=image_token_id,
        image_placeholder=_placeholder(tokenizer, config, image_token),
        image_processor=image_processor,
        chat_template=template,
        model_type=model_type,
        family=family,
    )


def config_model_type(path: str) -> str | None:
    """``model_type`` from a local folder's config.json, read as plain JSON (no transformers):
    None for a hub id, a folder without config.json or a config naming no model type; a
    config.json that is not JSON is an InputError naming its line (transformers would say only
    "not a valid JSON file", as an OSError)."""
    config_file = Path(path).expanduser() / "config.json"
    if not config_file.is_file():
        return None
    data = read_json_file(config_file, "model config")
    value = data.get("model_type") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


_DTYPES = ("auto", "float32", "bfloat16", "float16")
_DEVICES = ("cpu", "cuda", "auto")


def load_model(
    model_path_or_id: str,
    *,
    dtype: DType = "auto",
    device: Device = "cpu",
    trust_remote_code: bool = False,
    load_in_4bit: bool = False,
) -> Any:
    """Load a VLM with ``AutoModelForImageTextToText`` (safetensors only), in eval mode.

    A local folder loads with ``local_files_only``. ``device="auto"`` lets accelerate place
    the layers; ``load_in_4bit`` needs bitsandbytes and a CUDA device.
    """
    import torch
    from transformers import AutoModelForImageTextToText

    if dtype not in _DTYPES:
        raise InputError(f"dtype must be one of {', '.join(_DTYPES)}: {dtype!r}")
    if device not in _DEVICES and not (device.startswith("cuda:") and device[5:].isascii() and device[5:].isdigit()):
        raise InputError(f"device must be one of {', '.join(_DEVICES)} or cuda:N: {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeFailure("device='cuda' asked for, but torch sees no CUDA device")
    path = str(model_path_or_id)
    kwargs: dict[str, Any] = {
        "trust_remote_code": trust_remote_code,
        "dtype": dtype if dtype == "auto" else getattr(torch, dtype),
        "use_safetensors": True,  # never unpickle weights
    }
    if _is_local(path):
        kwargs["local_files_only"] = True
    if load_in_4bit:
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as exc:
            raise RuntimeFailure("load_in_4bit needs the bitsandbytes package: pip install bitsandbytes") from exc
        if not torch.cuda.is_available():
            raise RuntimeFailure("load_in_4bit needs a CUDA device")
        from transformers import BitsAndBytesConfig

        compute = torch.bfloat16 if dtype in ("auto", "bfloat16") else getattr(torch, dtype)
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=compute)
        kwargs["device_map"] = "auto" if device == "auto" else {"": 0}
    elif device != "cpu":
        kwargs["device_map"] = device  # load straight onto the GPU(s), not via host memory
    model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    model.eval()
    return model
