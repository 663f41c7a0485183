"""A generation config that makes ``generate`` decode otherwise than plain greedy keeps stacked rows.

``packed.unpackable`` refuses fields under which ``generate`` applies a greedy logits processor
(``_NEUTRAL``). Some other fields change what ``generate`` does with a ``do_sample=False,
num_beams=1`` call altogether: contrastive search (``penalty_alpha``), DoLa (``dola_layers``),
constrained beam search (``constraints``/``force_words_ids``), stop strings of the model's own
config, several sequences per row, a time limit. On transformers 5.24 the stacked path
(``ModelCore.first_step``) raises for each of these (a hub ``custom_generate`` needing remote
code, or a stop string without a tokenizer), while the packed greedy loop ignored them and
answered plain greedy text: packing must not silently stand in for a different decoding.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")
from transformers import GenerationConfig

from halluprobe.backends.hf.packed import unpackable

pytestmark = pytest.mark.slow  # imports transformers (no model is built)


def _model(**generation: Any) -> Any:
    config = GenerationConfig()
    for name, value in generation.items():  # set after construction: some fail the constructor's validation alone
        setattr(config, name, value)
    return SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa"), generation_config=config)


def test_a_plain_generation_config_packs() -> None:
    assert unpackable(_model(eos_token_id=2, pad_token_id=0), text=True) is None
    # the global defaults of a hub config (top_k 50, num_return_sequences 1) change nothing
    assert unpackable(_model(top_k=50, num_return_sequences=1, do_sample=True, temperature=0.2), text=True) is None


@pytest.mark.parametrize(
    "field",
    [
        {"penalty_alpha": 0.6, "top_k": 4},  # contrastive search
        {"dola_layers": "high"},
        {"force_words_ids": [[100]]},
        {"stop_strings": ["."]},
        {"num_return_sequences": 2},
        {"max_time": 1.0},
    ],
)
def test_a_config_that_changes_the_decoding_mode_keeps_stacked_rows(field: dict[str, Any]) -> None:
    reason = unpackable(_model(**field), text=True)
    assert reason is not None and next(iter(field)) in reason
