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
