"""Shared pytest fixtures. Real tokenizers come from registry packages (tests/_assets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import _assets


@pytest.fixture(scope="session")
def llama_tokenizer_dir() -> Path:
    """LLaMA-2 / LLaVA-1.5 tokenizer folder (32000 pieces)."""
    return _assets.llama_tokenizer_dir()


@pytest.fixture(scope="session")
def qwen2_tokenizer_dir() -> Path:
    """Qwen2 tokenizer folder (151936 ids)."""
    return _assets.qwen2_tokenizer_dir()


@pytest.fixture(scope="session")
def mistral_tokenizer_dir() -> Path:
    """Mistral v1 tokenizer folder (32000 pieces; LLaVA-1.6-Mistral)."""
    return _assets.mistral_tokenizer_dir("v1")


# Modules whose tests build, load or run models (tiny VLMs, the demo model, OWLv2, MiniLM, spaCy):
# the slow tier. `python3 -m pytest -q` skips them (the fast tier, for local work); the README's
# test command, which CI runs, selects every tier with -m "not gpu and not network".
SLOW_MODULES = frozenset(
    {
        "test_autoprobe_build", "test_autoprobe_choice", "test_autoprobe_detector", "test_autoprobe_extraction",
        "test_autoprobe_induce", "test_clip_signal", "test_demo", "test_demo_model", "test_families", "test_hf_backend", "test_hf_inputs", "test_hf_signals",
        "test_prefix_cache", "test_prove_build", "test_prove_cli", "test_prove_extraction", "test_prove_open_ended",
        "test_prove_scoring", "test_tiny", "test_train_demo_model",
    }
)  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__ in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
