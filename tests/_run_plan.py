"""What the run-plan tests share (test_run_plan.py): a scripted backend with a decoding loop's
capabilities, so a ``--decode`` run goes through the run path without a model. It also has the
probe earlier versions called (``decoding_engine``), so the stored old run dir was written by the
version before the run plan with this very class (tests/golden/run_plan/)."""

from __future__ import annotations

from typing import Any

from halluprobe.backends.scripted import ScriptedBackend
from halluprobe.records import GenerateConfig

SPEC = "vcd:alpha=1"
QUESTIONS = [("a.png", "Describe the image."), ("b.png", "Describe the image."), ("c.png", "What is on the table?")]
SCRIPT = {"generate": [{"match": "Describe", "text": "A red cube on a table."}, {"match": "table", "text": "A green ball."}]}


class DecodingScripted(ScriptedBackend):
    """Scripted free-form answers standing for decoded ones; counts what the run asks of it."""

    def __init__(self, model: str, *, batch_size: int = 8) -> None:
        super().__init__(model, batch_size=batch_size)
        self.asked: list[str] = []

    def check_decoding(self, config: GenerateConfig) -> None:
        self.asked.append("check_decoding")

    def decoding_engine(self, config: GenerateConfig) -> None:  # the probe of versions before the plan
        self.asked.append("decoding_engine")

    def decoding_settings(self, spec: Any) -> dict[str, Any]:
        return {"method": str(spec).partition(":")[0], "as_typed": str(spec)}
