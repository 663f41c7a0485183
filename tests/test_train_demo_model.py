"""tools/train_demo_model.py keeps working: a few seeded steps train, save and reload like a hub
model, twice with bit-identical weights (the shipped model's recipe, shrunk)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "train_demo_model.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_demo_model", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_short_seeded_run_saves_a_loadable_model_twice_identically(tmp_path: Path) -> None:
    train = _script()
    cfg = dataclasses.replace(
        train.TrainConfig(), steps=6, warmup=2, scenes_per_step=4, vision_steps=4, vision_batch=8, eval_images=12
    )
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    try:
        outs = []
        for name in ("a", "b"):
            result = train.train(cfg, tmp_path / name, log_every=2)
            train.save(result, cfg, tmp_path / name)
            outs.append(tmp_path / name)
    finally:  # train() sets process-wide torch state: give it back to the other tests
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    a, b = ((p / "model.safetensors").read_bytes() for p in outs)
    assert a == b
    record = json.loads((outs[0] / "training.json").read_text())
    assert record["config"]["steps"] == 6 and set(record["held_out"]["splits"]) == {"random", "popular", "adversarial"}
    assert [h["step"] for h in record["loss_history"] if h.get("stage") == 2] == [2, 4, 6]
    assert "## Held-out metrics" in (outs[0] / "TRAINING.md").read_text()

    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(outs[0], local_files_only=True)
    processor = AutoProcessor.from_pretrained(outs[0], local_files_only=True)
    assert model.dtype == torch.float32  # stored as float16, loads as float32
    assert processor.tokenizer.convert_ids_to_tokens([5592, 1770]) == ["▁Yes", "▁No"]
