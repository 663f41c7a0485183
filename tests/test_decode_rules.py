"""The decoding loop's per-step rules on plain tensors (no model): M3ID's weight grows as
exp(lambda t), so at long captions the rule must neither overflow nor divide by zero, and must
keep choosing the token its formula chooses (the largest gain l - l_no_image, then l)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.decode_rules import M3IDRule  # noqa: E402

pytestmark = pytest.mark.slow  # imports torch (the project's guard: torch tests are the slow tier)

VOCAB = 32000


def _logits(seed: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, VOCAB, generator=g) * 3, torch.randn(2, VOCAB, generator=g) * 3


@pytest.mark.parametrize(("lam", "step"), [(1.0, 100), (1.0, 800), (0.2, 440), (0.02, 40000)])
def test_m3id_at_a_weight_beyond_any_float_chooses_the_largest_gain(lam: float, step: int) -> None:
    base, no_image = _logits(step)
    scores = M3IDRule(lam=lam).scores(base, no_image, step)
    assert not torch.isnan(scores).any() and torch.isfinite(scores.max(dim=-1).values).all()
    gain = torch.log_softmax(base.double(), -1) - torch.log_softmax(no_image.double(), -1)
    # w_t > 1e43: the gain decides (random logits: one largest gain per row)
    assert scores.argmax(dim=-1).tolist() == gain.argmax(dim=-1).tolist()


@pytest.mark.parametrize(("lam", "step"), [(0.5, 1), (0.5, 4), (0.02, 30)])
def test_m3id_is_its_formula_less_a_constant_per_row(lam: float, step: int) -> None:
    base, no_image = _logits(step)
    lp, lq = torch.log_softmax(base.double(), -1), torch.log_softmax(no_image.double(), -1)
    w = math.exp(lam * step) - 1
    formula = lp + w * (lp - lq)
    scores = M3IDRule(lam=lam).scores(base, no_image, step).double()
    shift = formula - scores  # the row's constant w * max(lp - lq)
    assert torch.allclose(shift, (w * (lp - lq).max(dim=-1, keepdim=True).values).expand_as(shift), atol=1e-3)
    assert scores.argmax(-1).tolist() == formula.argmax(-1).tolist()
    # the same sampling distribution
    assert torch.allclose(torch.softmax(scores, -1), torch.softmax(formula, -1), atol=1e-6)


def test_m3id_is_the_base_pass_at_the_first_token() -> None:
    base, no_image = _logits(0)
    assert torch.equal(M3IDRule(lam=1.0).scores(base, no_image, 0), torch.log_softmax(base.float(), -1))
