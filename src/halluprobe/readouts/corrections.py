"""Inference-time corrections as readouts: decision rules over signals stored per sample.

A correction method (VCD, ICD, M3ID, PAI, DoLa, CLIP certainty, a logit bias) changes the first
answer token's logits using a second forward pass (a *signal*: the same prompt with a noised
image, without the image, with a disturbing instruction, an early layer's logits, a pass with
amplified image attention) or a second model (CLIP's image-object similarities).
``halluprobe run --signals ...`` stores each signal's log-probabilities over the yes/no ids
(:class:`~halluprobe.records.SignalLogprobs`; CLIP's: ``Sample.clip``); the rules below apply
the method's formula to those numbers at score time, so any setting of any method is read from
one run.

A correction is named like a readout, ``NAME`` or ``NAME:key=value,...``: ``vcd:alpha=1,beta=0.1``.
Every rule reads the base pass (``Sample.candidates``, and the first token's top log-probability
as the step's maximum) and its signals, builds contrast scores for every yes/no id, and decides
as ``dynamic`` does: log-sum-exp over the yes set against the no set
(:func:`halluprobe.readouts.logits.decide`). Ids that fail the method's plausibility cut-off get
no mass. Working on log-probabilities instead of logits changes every contrast score of one
step by the same constant, which leaves decisions and ``p_yes`` (the yes set against the no
set) unchanged. A rule that only moves the yes set's and the no set's log-mass (``bias``,
``clip``) is a *shift* of the ``dynamic`` readout, so it reads server runs' pieces too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from halluprobe.errors import InputError
from halluprobe.readouts.logits import decide, logsumexp, read_dynamic
from halluprobe.records import ReadoutResult, Sample, SignalLogprobs, TokenSets

__all__ = [
    "m3id_log_weight",
    "CORRECTIONS",
    "Correction",
    "Param",
    "apply_correction",
    "apply_threshold",
    "RUN_LEVEL",
    "inert_reason",
    "inert_reason_of",
    "parse_correction",
    "recorded_signals",
    "required_signals",
]

Scores = dict[int, float]  # token id -> score


class Param(NamedTuple):
    """One parameter of a method: its published default and the closed range a value must lie in
    (outside it the rule is not the method any more, or its numbers leave the float range)."""

    default: float
    low: float
    high: float


@dataclass(frozen=True)
class Correction:
    """One method: its signals, its parameters (default and valid range), and its rule."""

    signals: tuple[str, ...]
    params: Mapping[str, Param]
    # per-id scores from the base pass's yes/no log-probabilities (contrast methods); None: a
    # log-odds shift (below) or a rule that reads the whole run (RUN_LEVEL, apply_threshold)
    rule: Callable[[Scores, float, Sample, Mapping[str, float], TokenSets], Scores | None] | None
    reference: str
    # a rule that only moves the dynamic readout's yes and no log-masses: (to yes, to no). It
    # needs no per-id numbers, so it reads piece-keyed runs (server backends) too.
    shift: Callable[[Sample, Mapping[str, float]], tuple[float, float] | None] | None = None

    @property
    def defaults(self) -> dict[str, float]:
        return {key: param.default for key, param in self.params.items()}


def _scores(candidates: Mapping[str, float], ids: list[int]) -> Scores | None:
    values = {i: candidates.get(str(i)) for i in ids}
    if any(v is None for v in values.values()):
        return None
    return {i: float(v) for i, v in values.items() if v is not None}


def _cutoff(base: Scores, base_max: float, beta: float) -> Callable[[int], bool]:
    """The adaptive plausibility constraint: an id is kept when its base probability is at least
    ``beta`` times the step's largest (``beta`` = 0 keeps every id)."""
    threshold = math.log(beta) + base_max if beta > 0 else -math.inf
    return lambda i: base[i] >= threshold


def _contrast(base: Scores, base_max: float, other: SignalLogprobs, alpha: float, beta: float) -> Scores | None:
    """``(1 + alpha) * base - alpha * other`` on the ids the plausibility cut-off keeps."""
    ids = list(base)
    theirs = _scores(other.candidates, ids)
    if theirs is None:
        return None
    keep = _cutoff(base, base_max, beta)
    return {i: (1 + alpha) * base[i] - alpha * theirs[i] if keep(i) else -math.inf for i in ids}


def _vcd(base: Scores, base_max: float, sample: Sample, p: Mapping[str, float], sets: TokenSets) -> Scores | None:
    """VCD (Leng et al., CVPR 2024; github.com/DAMO-NLP-SG/VCD, ``vcd_sample.py``):
    ``(1 + alpha) * l(v) - alpha * l(v')`` with ``v'`` the diffusion-noised image, on the tokens
    with ``p(v) >= beta * max p(v)``."""
    return _contrast(base, base_max, sample.signals["noised"], p["alpha"], p["beta"])


def _icd(base: Scores, base_max: float, sample: Sample, p: Mapping[str, float], sets: TokenSets) -> Scores | None:
    """ICD (Wang et al., ACL Findings 2024): VCD's contrast with the same image under a disturbing
    system instruction instead of a noised image; the same plausibility cut-off."""
    return _contrast(base, base_max, sample.signals["instruction"], p["alpha"], p["beta"])


def m3id_log_weight(p: Mapping[str, float]) -> float:
    """log of M3ID's guidance weight at step t, ``w_t = (1 - exp(-lambda t)) / exp(-lambda t)``
    = ``exp(lambda t) - 1``, in log space: ``lambda t + log(1 - exp(-lambda t))``. No division
    and no overflow at any ``lambda t``; -inf (w = 0) at t = 0."""
    x = p["lambda"] * p["t"]
    return -math.inf if x <= 0 else x + math.log(-math.expm1(-x))


def _m3id(base: Scores, base_max: float, sample: Sample, p: Mapping[str, float], sets: TokenSets) -> Scores | None:
    """M3ID (Favero et al., CVPR 2024): ``l(v) + w_t * (l(v) - l(no image))`` with
    ``w_t = (1 - exp(-lambda t)) / exp(-lambda t)``. At the first answer token (t = 0) the weight
    is 0: the method cannot change a yes/no answer read there (:func:`inert_reason` says so).

    Computed as ``l(v) - w_t * (d_max - d)`` with ``d = l(v) - l(no image)``: the same scores less
    the constant ``w_t * d_max`` (which leaves decisions and ``p_yes`` unchanged), so a weight
    too large for a float drives the other ids to -inf instead of giving inf - inf."""
    log_w = m3id_log_weight(p)
    if log_w == -math.inf:  # inert: the base pass, whatever the signal says (none is needed)
        return dict(base)
    ids = list(base)
    theirs = _scores(sample.signals["no-image"].candidates, ids)
    if theirs is None:
        return None
    gain = {i: base[i] - theirs[i] for i in ids}
    if not all(math.isfinite(g) for g in gain.values()):
        return None  # a pass without mass on an id: no contrast to read
    top = max(gain.values())
    return {i: base[i] - _exp_or_inf(log_w + math.log(top - gain[i])) if gain[i] < top else base[i] for i in ids}


def _exp_or_inf(x: float) -> float:
    return math.exp(x) if x < 709.0 else math.inf  # exp(709.8) is the largest float


def _pai(base: Scores, base_max: float, sample: Sample, p: Mapping[str, float], sets: TokenSets) -> Scores | None:
    """PAI (Liu et al., ECCV 2024; github.com/LALBJ/PAI): image-centric logit refinement
    ``gamma * l(amplified image attention) - (gamma - 1) * l(no image)``. With the attention
    signal recorded at alpha = 0 and gamma = 1 this is the base pass."""
    ids = list(base)
    amplified = _scores(sample.signals["attention"].candidates, ids)
    text_only = _scores(sample.signals["no-image"].candidates, ids)
    if amplified is None or text_only is None:
        return None
    g = p["gamma"]
    return {i: g * amplified[i] - (g - 1) * text_only[i] for i in ids}


def _dola(base: Scores, base_max: float, sample: Sample, p: Mapping[str, float], sets: TokenSets) -> Scores | None:
    """DoLa (Chuang et al., ICLR 2024; github.com/voidism/DoLa): the premature layer is the
    candidate whose next-token distribution is furthest (Jensen-Shannon) from the final one;
    score = ``log p_final - log p_premature`` on the tokens with
    ``p_final >= relative_top * max p_final``."""
    layers = {name: s for name, s in sample.signals.items() if name.startswith("layer:") and s.jsd is not None}
    if not layers:
        return None
    premature = max(layers.values(), key=lambda s: s.jsd or 0.0)
    return _contrast_dola(base, base_max, premature, p["relative_top"])


def _contrast_dola(base: Scores, base_max: float, premature: SignalLogprobs, relative_top: float) -> Scores | None:
    ids = list(base)
    early = _scores(premature.candidates, ids)
    if early is None:
        return None
    keep = _cutoff(base, base_max, relative_top)
    return {i: base[i] - early[i] if keep(i) else -math.inf for i in ids}


def _bias(sample: Sample, p: Mapping[str, float]) -> tuple[float, float] | None:
    """A logit bias against "yes": every yes id's log-probability lowered by ``b`` (the no ids
    keep theirs), i.e. the yes-vs-no log-odds shifted by ``-b``. Needs no signal."""
    return -p["b"], 0.0


def _clip(sample: Sample, p: Mapping[str, float]) -> tuple[float, float] | None:
    """CLIP certainty (halluprobe's rule, :mod:`halluprobe.clip_signal`): CLIP's zero-shot
    probability that the object's caption fits the image better than a caption naming nothing,
    ``c = sigmoid(s * (sim(object) - sim(empty)))`` with ``s`` CLIP's logit scale and
    ``sim = (1 - patch) * global + patch * per-patch maximum``, combined with the model's answer
    as a product of experts: ``p'(yes) ~ p(yes) c^beta``, ``p'(no) ~ p(no) (1 - c)^beta``, i.e.
    the yes-vs-no log-odds moved by ``beta * logit(c)``. ``beta`` = 0 is the base pass. The
    sentence-level method it adapts to one answer token is CLIP-guided decoding (Deng et al.
    2024; github.com/d-ailin/CLIP-Guided-Decoding), which mixes the likelihood with CLIP's
    image-text similarity."""
    clip = sample.clip
    if clip is None:
        return None
    w = p["patch"]
    z = clip.logit_scale * ((1 - w) * (clip.object_global - clip.empty_global) + w * (clip.object_patch - clip.empty_patch))
    # log sigmoid(z) and log(1 - sigmoid(z)), weighted by beta
    return -p["beta"] * _softplus(-z), -p["beta"] * _softplus(z)


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


# The ranges: alpha, gamma, beta (clip) and b up to 100 (beyond it the contrast or the shift
# alone decides, and larger values only lose float precision); the plausibility cut-offs (beta,
# relative_top), CLIP's patch weight and the yes-ratio are fractions; lambda t up to 10 * 4096.
CORRECTIONS: dict[str, Correction] = {
    "vcd": Correction(
        ("noised",), {"alpha": Param(1.0, 0.0, 100.0), "beta": Param(0.1, 0.0, 1.0)}, _vcd, "Leng et al. 2024"
    ),
    "icd": Correction(
        ("instruction",), {"alpha": Param(1.0, 0.0, 100.0), "beta": Param(0.1, 0.0, 1.0)}, _icd, "Wang et al. 2024"
    ),
    "m3id": Correction(
        ("no-image",), {"lambda": Param(0.02, 0.0, 10.0), "t": Param(0.0, 0.0, 4096.0)}, _m3id, "Favero et al. 2024"
    ),
    "pai": Correction(("attention", "no-image"), {"gamma": Param(1.1, 1.0, 100.0)}, _pai, "Liu et al. 2024"),
    "dola": Correction(("layer:*",), {"relative_top": Param(0.1, 0.0, 1.0)}, _dola, "Chuang et al. 2024"),
    "clip": Correction(
        ("clip",), {"beta": Param(1.0, 0.0, 100.0), "patch": Param(0.0, 0.0, 1.0)}, rule=None,
        reference="CLIP certainty (after Deng et al. 2024)", shift=_clip,
    ),
    "bias": Correction((), {"b": Param(0.5, -100.0, 100.0)}, rule=None, reference="a constant logit bias", shift=_bias),
    "threshold": Correction(
        (), {"yes_ratio": Param(0.5, 0.0, 1.0)}, None, "a decision threshold on p_yes (run-level: apply_threshold)"
    ),
}
# rules that read the whole run, not one sample: applied by apply_threshold
RUN_LEVEL = frozenset({"threshold"})


def parse_correction(spec: str) -> tuple[str, dict[str, float]]:
    """``NAME`` or ``NAME:key=value,...`` -> (name, every parameter with its value or default).

    Strict: a key given twice, a value that is not a finite number or lies outside the
    method's range (:class:`Param`) is refused with one line naming the spec."""
    name, _, rest = spec.partition(":")
    if name not in CORRECTIONS:
        raise InputError(f"unknown correction {name!r}; known: {', '.join(CORRECTIONS)}")
    declared = CORRECTIONS[name].params
    params = {key: param.default for key, param in declared.items()}
    given: set[str] = set()
    for pair in filter(None, (x.strip() for x in rest.split(","))):
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or key not in declared:
            raise InputError(f"{spec}: {name} takes {', '.join(f'{k}=NUMBER' for k in declared)}, not {pair!r}")
        if key in given:  # the last value would win while the name still shows the first
            raise InputError(f"{spec}: {key} is given twice")
        given.add(key)
        try:
            params[key] = float(value)
        except ValueError:
            raise InputError(f"{spec}: {key} must be a number, not {value!r}") from None
        if not math.isfinite(params[key]):
            raise InputError(f"{spec}: {key} must be a finite number, not {value!r}")
        low, high = declared[key].low, declared[key].high
        if not low <= params[key] <= high:
            raise InputError(f"{spec}: {key} must lie in [{low:g}, {high:g}]")
    return name, params


def required_signals(name: str, params: Mapping[str, float]) -> tuple[str, ...]:
    """The signals a correction reads (``layer:*``: at least one early layer); none when its
    settings make it inert."""
    return () if inert_reason_of(name, params) is not None else CORRECTIONS[name].signals


def inert_reason(spec: str) -> str | None:
    """Why a correction spec cannot change a first-token yes/no answer, if so."""
    return inert_reason_of(*parse_correction(spec))


def inert_reason_of(name: str, params: Mapping[str, float]) -> str | None:
    """Why a correction cannot change a first-token yes/no answer with these settings, if so."""
    if name == "m3id" and m3id_log_weight(params) == -math.inf:
        return "M3ID's guidance weight (1 - exp(-lambda t)) / exp(-lambda t) is 0 at t = 0, the first answer token"
    return None


def recorded_signals(sample: Sample) -> set[str]:
    """The signals a sample holds, by the names corrections require (``layer:*`` for any early
    layer; ``clip`` for the CLIP similarities)."""
    names = set(sample.signals)
    if any(name.startswith("layer:") for name in names):
        names.add("layer:*")
    if sample.clip is not None:
        names.add("clip")
    return names


def apply_correction(name: str, params: Mapping[str, float], sample: Sample, token_sets: TokenSets | None) -> ReadoutResult | None:
    """One correction (parsed by :func:`parse_correction`) applied to one stored sample; None
    when the sample lacks what it reads."""
    if name in RUN_LEVEL:
        raise ValueError(f"{name} reads the whole run: apply it with apply_threshold")
    if sample.error is not None or token_sets is None or not sample.candidates:
        return None
    correction = CORRECTIONS[name]
    if inert_reason_of(name, params) is None and not set(correction.signals) <= recorded_signals(sample):
        return None
    if correction.shift is not None and token_sets.keyed_by != "id":  # pieces: the dynamic readout's masses
        return _shifted(read_dynamic(sample.candidates, token_sets), correction.shift(sample, params))
    if token_sets.keyed_by != "id":
        return None
    ids = [*token_sets.yes_ids, *token_sets.no_ids]
    base = _scores(sample.candidates, ids)
    if base is None:
        return None
    base_max = sample.first_token[0].logprob if sample.first_token else max(base.values())
    if correction.shift is not None:
        # every yes (no) id moved by the same amount: the set's log-mass moves by it
        shift = correction.shift(sample, params)
        if shift is None:
            return None
        yes_ids = set(token_sets.yes_ids)
        scores: Scores | None = {i: lp + (shift[0] if i in yes_ids else shift[1]) for i, lp in base.items()}
    else:
        assert correction.rule is not None  # run-level rules were refused above
        scores = correction.rule(base, base_max, sample, params, token_sets)
    if scores is None:
        return None
    yes = [scores[i] for i in token_sets.yes_ids]
    no = [scores[i] for i in token_sets.no_ids]
    if not yes or not no:
        return None
    return decide(logsumexp(yes), logsumexp(no))


def _shifted(base: ReadoutResult, shift: tuple[float, float] | None) -> ReadoutResult | None:
    """The base readout with its yes and no log-masses moved (no mass stays no mass)."""
    if shift is None:
        return None
    yes = -math.inf if base.yes_score is None else base.yes_score + shift[0]
    no = -math.inf if base.no_score is None else base.no_score + shift[1]
    return decide(yes, no)


def apply_threshold(params: Mapping[str, float], samples: Sequence[Sample], token_sets: TokenSets | None) -> list[ReadoutResult | None]:
    """``threshold:yes_ratio=r``: the dynamic readout's ``p_yes`` with the threshold chosen on
    the run so that a fraction ``r`` of the answered questions is answered yes (the largest
    ``p_yes`` first; ties at the threshold all go the same way, so the ratio is met as closely
    as ties allow). A prior correction, not a decoding method: it shows how much of a method's
    gain a plain change of the yes-ratio gives. ``p_yes`` is kept; only the decision moves."""
    ratio = params["yes_ratio"]
    base: list[ReadoutResult | None] = [
        read_dynamic(s.candidates, token_sets) if s.error is None and token_sets is not None and s.candidates else None
        for s in samples
    ]
    scored = sorted((r.p_yes for r in base if r is not None and r.p_yes is not None), reverse=True)
    if not scored:
        return base
    k = round(ratio * len(scored))
    threshold = math.inf if k == 0 else scored[k - 1]
    return [
        None if r is None or r.p_yes is None else r.model_copy(update={"decision": "yes" if r.p_yes >= threshold else "no"})
        for r in base
    ]
