"""The judge path against a REAL OpenAI-compatible server: llama.cpp's, with the suite's tiny GGUF
(tests/test_openai_llamacpp.py builds and starts it). Its verdicts are noise; the transport and
the ledger (the model as configured and as the server names it, template hash, settings, raw
reply, verdict or reason) are what is tested. Skipped unless llama_cpp is installed."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh --server-tests)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (llama.cpp's server needs it)")

from PIL import Image
from test_openai_llamacpp import llama_server  # noqa: F401  (the module-scoped server fixture)

from halluprobe.backends.base import load_backend
from halluprobe.judging.judge import JudgeItem, judge_generation, judge_items
from halluprobe.judging.ledger import JudgeHeader, template_sha256
from halluprobe.judging.store import JudgmentDir

pytestmark = pytest.mark.slow

TEMPLATE = "Is the answer {} right? Reply 'Rating: N' with N from 0 to 6."


def _parse(reply: str) -> tuple[int | None, str | None]:
    found = [s for s in range(7) if f"rating: {s}" in reply.lower()]
    return (found[0], None) if len(found) == 1 else (None, f"{len(found)} ratings")


def test_a_real_server_judges_with_a_complete_ledger(llama_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    image = tmp_path / "img.png"
    Image.new("RGB", (16, 16), (10, 20, 30)).save(image)
    backend = load_backend("openai", model="tiny", endpoints=[llama_server], send_images=False, concurrency=2)
    generation = judge_generation(6)
    header = JudgeHeader(benchmark="test", backend="openai", model="tiny", backend_info=backend.info(), template_name="t",
                         template=TEMPLATE, template_sha256=template_sha256(TEMPLATE), generation=generation,
                         answers="fixture", answers_sha256="0")  # fmt: skip
    items = [JudgeItem(item_id=f"i{k}", image_path=str(image), prompt=TEMPLATE.format(f"a{k}")) for k in range(3)]
    store = JudgmentDir(tmp_path / "j")
    result = judge_items(backend, items, store=store, header=header, parse=_parse)
    assert (result.asked, result.errors) == (3, 0)
    judged = store.read_judgments()
    assert sorted(j.item_id for j in judged) == ["i0", "i1", "i2"]
    for j in judged:
        assert j.status in ("parsed", "unparseable") and j.reply  # the tiny model says " Yes" over and over
        assert j.judge_model == "tiny" and isinstance(j.judge_model_reported, str) and j.judge_model_reported
        assert j.template_sha256 == header.template_sha256 and j.generation.max_new_tokens == 6
        assert (j.verdict is None) == (j.status == "unparseable") and (j.reason is None) == (j.status == "parsed")
    assert store.read_header().backend_info["endpoints"] == [llama_server]
    assert judge_items(backend, items, store=store, header=header, parse=_parse).asked == 0
