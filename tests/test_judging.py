"""The judge path: a scripted backend judges through ask(); the ledger is complete; a killed pass
resumes by item id with nothing judged twice; a dir of another judge is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from halluprobe.backends.scripted import ScriptedBackend
from halluprobe.errors import InputError
from halluprobe.judging.agreement import agreement, paired_difference
from halluprobe.judging.judge import JudgeItem, judge_items
from halluprobe.judging.ledger import JudgeHeader, Judgment, template_sha256
from halluprobe.judging.mmhal_score import mean_of
from halluprobe.judging.store import JudgmentDir
from halluprobe.records import GenerateConfig, Request, Response

TEMPLATE = "Rate the answer {}. Reply 'Rating: N'."


def _parse(reply: str) -> tuple[int | None, str | None]:
    found = [s for s in range(7) if f"rating: {s}" in reply.lower()]
    return (found[0], None) if len(found) == 1 else (None, f"{len(found)} ratings")


def _setup(tmp_path: Path, n: int = 10) -> tuple[ScriptedBackend, list[JudgeItem], JudgeHeader]:
    image = tmp_path / "img.png"
    Image.new("RGB", (4, 4)).save(image)
    script = {"generate": [{"match": r"answer a3\b", "text": "I cannot rate this."},
                           {"match": r"answer a\d*[02468]\b", "text": "Fine. Rating: 5"},
                           {"match": r"answer a", "text": "Bad. Rating: 1"}]}  # fmt: skip
    (tmp_path / "judge.json").write_text(json.dumps(script))
    backend = ScriptedBackend(str(tmp_path / "judge.json"), batch_size=3)
    items = [JudgeItem(item_id=f"q{i}", image_path=str(image), prompt=TEMPLATE.format(f"a{i}")) for i in range(n)]
    header = JudgeHeader(benchmark="test", backend="scripted", model="judge.json", template_name="t",
                         template=TEMPLATE, template_sha256=template_sha256(TEMPLATE),
                         generation=GenerateConfig(max_new_tokens=64, stop_strings=()), answers="x", answers_sha256="0")  # fmt: skip
    return backend, items, header


def test_ledger_is_complete(tmp_path: Path) -> None:
    backend, items, header = _setup(tmp_path)
    store = JudgmentDir(tmp_path / "j")
    result = judge_items(backend, items, store=store, header=header, parse=_parse)
    assert (result.asked, result.skipped, result.errors) == (10, 0, 0)
    judged = {j.item_id: j for j in store.read_judgments()}
    assert judged["q2"].verdict == 5 and judged["q1"].verdict == 1
    assert judged["q3"].status == "unparseable" and judged["q3"].reason == "0 ratings" and judged["q3"].reply == "I cannot rate this."
    line = judged["q0"]
    assert line.template_sha256 == template_sha256(TEMPLATE) and line.judge_model == "judge.json"
    assert line.judge_model_reported is None  # the scripted backend names no served model
    assert line.generation.max_new_tokens == 64 and len(line.prompt_sha256) == 64
    assert store.read_header() == header


class _Dies:
    """A backend that is killed after its first batch (like a process killed mid-pass)."""

    def __init__(self, inner: ScriptedBackend) -> None:
        self.inner = inner
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        for batch in self.inner.answer(requests, config):
            yield batch
            raise KeyboardInterrupt


class _Counts(_Dies):
    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        self.asked.extend(r.prompt for r in requests)
        yield from self.inner.answer(requests, config)


def test_killed_pass_resumes_by_id(tmp_path: Path) -> None:
    backend, items, header = _setup(tmp_path)
    store = JudgmentDir(tmp_path / "j")
    with pytest.raises(KeyboardInterrupt):
        judge_items(_Dies(backend), items, store=store, header=header, parse=_parse)  # type: ignore[arg-type]
    first = store.done_ids()
    assert len(first) == 3
    # the resumed pass gets the items in another order: only ids count
    counting = _Counts(backend)
    result = judge_items(counting, list(reversed(items)), store=store, header=header, parse=_parse)  # type: ignore[arg-type]
    assert (result.asked, result.skipped) == (7, 3)
    asked = {p for p in counting.asked}
    assert not asked & {backend.render_prompt(i.prompt, None, image=False) for i in items if i.item_id in first}
    lines = (tmp_path / "j" / "judgments.jsonl").read_text().splitlines()
    assert len(lines) == 10 and len({json.loads(x)["item_id"] for x in lines}) == 10
    again = judge_items(counting, items, store=store, header=header, parse=_parse)  # type: ignore[arg-type]
    assert again.asked == 0


def test_another_judge_is_refused(tmp_path: Path) -> None:
    backend, items, header = _setup(tmp_path, n=2)
    store = JudgmentDir(tmp_path / "j")
    judge_items(backend, items, store=store, header=header, parse=_parse)
    other = header.model_copy(update={"model": "other"})
    with pytest.raises(InputError, match="another judge"):
        judge_items(backend, items, store=store, header=other, parse=_parse)
    judge_items(backend, items, store=store, header=other, parse=_parse, overwrite=True)
    assert {j.judge_model for j in store.read_judgments()} == {"other"}


def test_errors_are_asked_again(tmp_path: Path) -> None:
    backend, items, header = _setup(tmp_path, n=3)
    broken = [JudgeItem(item_id=i.item_id, image_path=str(tmp_path / "missing.png"), prompt=i.prompt) for i in items]
    store = JudgmentDir(tmp_path / "j")
    assert judge_items(backend, broken, store=store, header=header, parse=_parse).errors == 3
    assert store.done_ids() == set()
    assert judge_items(backend, items, store=store, header=header, parse=_parse).asked == 3
    assert all(j.status != "error" for j in store.read_judgments())


def _j(item: str, verdict: int | None) -> Judgment:
    status = "parsed" if verdict is not None else "unparseable"
    return Judgment(item_id=item, judge_model="m", template_sha256="0", prompt_sha256="0", generation=GenerateConfig(),
                    reply="r", status=status, verdict=verdict, reason=None if verdict is not None else "none")  # fmt: skip


def test_agreement_and_kappa_by_hand() -> None:
    a = [_j("w", 1), _j("x", 1), _j("y", 0), _j("z", 0)]
    b = [_j("z", 0), _j("y", 0), _j("x", 0), _j("w", 1)]  # paired by id, not by position
    result = agreement(a, b)
    # observed 3/4; chance 1/2 x 1/4 + 1/2 x 3/4 = 1/2; kappa (3/4 - 1/2) / (1 - 1/2)
    assert (result.n, result.agreed, result.disagreements) == (4, 3, ("x",))
    assert result.kappa == pytest.approx(0.5)
    same = agreement([_j("a", 2), _j("b", None)], [_j("a", 2), _j("b", 3)])
    assert same.agreed == 1 and same.disagreements == ("b",)  # unparseable is a category of its own
    assert agreement([_j("a", 2)], [_j("a", 2)]).kappa is None  # one category throughout: chance agreement is 1


def test_paired_difference_is_paired() -> None:
    values_a, values_b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 1.0, 2.0, 3.0])
    diff = paired_difference(["i0", "i1", "i2", "i3"], lambda r: mean_of(values_a, r), lambda r: mean_of(values_b, r), n_resamples=200)
    assert diff.difference == pytest.approx(1.0) and diff.ci == pytest.approx((1.0, 1.0))  # a constant shift: no spread
