"""The decoding loop's per-step rules and their parsing (issue 24; the loop: hf/decode.py).

A method's spec (``run --decode vcd:alpha=1,beta=0.1``) is parsed once, into a
:class:`~halluprobe.records.DecodeSpec` (:func:`parse_decode_spec`), by corrections.py's strict
parser, with the same names, defaults and ranges as the offline first-token rule; the settings
only the loop has (DoLa's repetition penalty, PAI's attention amplification and layers) are
parsed here. Each rule turns one step's last-position logits of the base branch (and the
method's contrast branch) into next-token scores over the whole vocabulary. torch is imported
inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluprobe.backends.families import FAMILIES
from halluprobe.backends.hf.load import config_model_type
from halluprobe.backends.hf.signals import VCD_NOISE_STEP, PaiSetting
from halluprobe.errors import InputError
from halluprobe.jsonl import read_json_file
from halluprobe.readouts.corrections import m3id_log_weight, parse_correction
from halluprobe.records import DecodeSpec

__all__ = [
    "BRANCHES",
    "ContrastRule",
    "DoLaRule",
    "GreedyRule",
    "M3IDRule",
    "PAIRule",
    "Sampling",
    "StepRule",
    "check_decoding",
    "decode_rule",
    "dola_layers",
    "pai_layers",
    "parse_contrast",
    "parse_decode",
    "parse_decode_spec",
    "resolved",
    "rule_settings",
]

# each method's contrast branch, named as the request variant / signal it reads
BRANCHES: dict[str, str | None] = {"vcd": "noised", "icd": "instruction", "m3id": "no-image", "dola": None, "pai": "no-image"}
# settings of the loop only, beside corrections.py's: (default, low, high); None: set from the model.
# DoLa's repetition penalty (the first-token rule has no history to penalise); PAI's attention
# amplification, which the offline rule reads from the ``attention`` signal's own settings.
_LOOP_PARAMS: dict[str, dict[str, tuple[float | None, float, float]]] = {
    "dola": {"repetition_penalty": (1.2, 1.0, 10.0)},
    "pai": {"alpha": (0.5, 0.0, 100.0), "start": (2.0, 0.0, 4096.0), "end": (None, 1.0, 4096.0)},
}


@dataclass(frozen=True)
class ContrastRule:
    """VCD's / ICD's next-token scores from the base and contrast branches' logits."""

    alpha: float = 1.0
    beta: float = 0.1

    def scores(self, base_logits: Any, contrast_logits: Any, step: int = 0) -> Any:
        """[batch, vocab] scores; ``-inf`` on the tokens the plausibility cut-off drops."""
        import torch

        base = torch.log_softmax(base_logits.float(), dim=-1)
        contrast = torch.log_softmax(contrast_logits.float(), dim=-1)
        scores = (1 + self.alpha) * base - self.alpha * contrast
        if self.beta <= 0:
            return scores
        cutoff = math.log(self.beta) + base.max(dim=-1, keepdim=True).values
        return scores.masked_fill(base < cutoff, -math.inf)


@dataclass(frozen=True)
class M3IDRule:
    """M3ID's next-token scores at step ``step`` from the base and no-image branches' logits.

    ``l + w_t (l - l_no_image)`` less its row's constant ``w_t * max(l - l_no_image)``, as the
    offline rule computes it (corrections.py's ``m3id``): the same argmax and the same sampling
    distribution, and no overflow where ``w_t = exp(lambda t) - 1`` outgrows a float (lambda 1
    from about step 90 in float32; every other token then goes to -inf, not inf - inf)."""

    lam: float = 0.02

    def scores(self, base_logits: Any, contrast_logits: Any, step: int = 0) -> Any:
        import torch

        log_w = m3id_log_weight({"lambda": self.lam, "t": float(step)})
        if log_w == -math.inf:  # the first token: the base pass
            return torch.log_softmax(base_logits.float(), dim=-1)
        base = torch.log_softmax(base_logits.float(), dim=-1)
        gain = base - torch.log_softmax(contrast_logits.float(), dim=-1)
        below = gain.max(dim=-1, keepdim=True).values - gain  # >= 0; 0 at the row's largest gain
        if log_w < 60.0:  # w_t < 1e26: w_t * below stays a float32 (log-probabilities differ by far less than 1e12)
            return base - math.exp(log_w) * below
        # in log space: exp overflows to inf past ~88 in float32, and those tokens go to -inf, as the formula drives them
        return base - torch.exp(log_w + torch.log(below))


@dataclass(frozen=True)
class GreedyRule:
    """Plain decoding (no method): the base branch's log-probabilities; no contrast branch."""

    def scores(self, base_logits: Any, contrast_logits: Any, step: int = 0) -> Any:
        import torch

        return torch.log_softmax(base_logits.float(), dim=-1)


@dataclass(frozen=True)
class DoLaRule:
    """DoLa's step (Chuang et al., ICLR 2024) from the base branch's own pass, no contrast branch:
    among the candidate ``layers`` (hidden state N through the final norm and the LM head, as the
    ``layer:N`` signal), the premature layer is the one whose next-token distribution is furthest
    (Jensen-Shannon) from the final layer's, per row and step; scores are ``log p_final - log
    p_premature`` on the tokens with ``p_final >= relative_top * max p_final``, then transformers'
    repetition penalty over the row's tokens so far (prompt and generated; a positive score
    divided by it, a negative one multiplied)."""

    layers: tuple[int, ...]
    relative_top: float = 0.1
    repetition_penalty: float = 1.2

    def premature(self, final_logits: Any, early_logits: Sequence[Any]) -> Any:
        """[batch] index into ``layers`` of each row's premature layer (the largest JSD)."""
        import torch

        final = torch.log_softmax(final_logits.float(), dim=-1)
        return _furthest(final, [torch.log_softmax(e.float(), dim=-1) for e in early_logits])

    def dola_scores(self, final_logits: Any, early_logits: Sequence[Any], seen: Any) -> Any:
        """[batch, vocab] scores; ``seen`` [batch, vocab] bool marks each row's tokens so far."""
        import torch

        # each distribution's log-softmax once per step: on a small model the vocabulary-wide
        # passes are most of DoLa's cost (bench/README.md)
        final = torch.log_softmax(final_logits.float(), dim=-1)
        early_logs = [torch.log_softmax(e.float(), dim=-1) for e in early_logits]
        if len(early_logs) == 1:
            early = early_logs[0]
        else:
            chosen = _furthest(final, early_logs)
            early = torch.stack(early_logs, dim=1)[torch.arange(final.shape[0], device=final.device), chosen]
        scores = final - early
        if self.relative_top > 0:
            cutoff = math.log(self.relative_top) + final.max(dim=-1, keepdim=True).values
            scores = scores.masked_fill(final < cutoff, -math.inf)
        if self.repetition_penalty != 1.0:  # on the seen tokens only (a few dozen ids of the vocabulary)
            rows, columns = seen.nonzero(as_tuple=True)
            picked = scores[rows, columns]
            scores[rows, columns] = torch.where(picked < 0, picked * self.repetition_penalty, picked / self.repetition_penalty)
        return scores


def _furthest(final: Any, early_logs: Sequence[Any]) -> Any:
    """[batch] index of the early distribution (log-probabilities) with the largest
    Jensen-Shannon divergence from ``final`` (log-probabilities), per row."""
    import torch

    p = final.exp()
    divergences = []
    for q in early_logs:
        m = torch.logaddexp(final, q) - math.log(2.0)
        divergences.append(0.5 * ((p * (final - m)).sum(-1) + (q.exp() * (q - m)).sum(-1)))
    return torch.stack(divergences, dim=-1).argmax(dim=-1)


@dataclass(frozen=True)
class PAIRule:
    """PAI's step (Liu et al., ECCV 2024): the base branch runs with the image tokens' attention
    amplified (``A + alpha |A|`` on the last query row, layers [start, end): hf_signals'
    ``amplified_attention``, as the ``attention`` signal) at every step, and the scores are
    ``gamma * log p_amplified - (gamma - 1) * log p_no_image`` (corrections.py's ``pai``)."""

    gamma: float
    setting: PaiSetting

    def scores(self, base_logits: Any, contrast_logits: Any, step: int = 0) -> Any:
        import torch

        amplified = torch.log_softmax(base_logits.float(), dim=-1)
        if self.gamma == 1.0:
            return amplified
        return self.gamma * amplified - (self.gamma - 1) * torch.log_softmax(contrast_logits.float(), dim=-1)


StepRule = ContrastRule | M3IDRule | GreedyRule | DoLaRule | PAIRule


def parse_decode(spec: str) -> tuple[str, dict[str, float]]:
    """``vcd:alpha=1,beta=0.1`` -> (method, every parameter): corrections.py's strict parser and
    ranges (the same names and defaults as the offline rule), restricted to the methods this loop
    runs. M3ID's ``t`` is the loop's own step, never given."""
    name, _, rest = spec.partition(":")
    if name not in BRANCHES:
        raise InputError(f"--decode {spec}: the decoding loop runs {', '.join(BRANCHES)}")
    if name in _LOOP_PARAMS:  # the loop's own settings parsed here, the rest by corrections.py
        own = _LOOP_PARAMS[name]
        given: dict[str, float] = {}
        kept = []
        for pair in filter(None, (x.strip() for x in rest.split(","))):
            key, _, value = (part.strip() for part in pair.partition("="))
            if key not in own:
                kept.append(pair)
                continue
            if key in given:
                raise InputError(f"{spec}: {key} is given twice")
            try:
                given[key] = float(value)
            except ValueError:
                raise InputError(f"{spec}: {key} must be a number, not {value!r}") from None
            low, high = own[key][1], own[key][2]
            if not (math.isfinite(given[key]) and low <= given[key] <= high):
                raise InputError(f"{spec}: {key} must lie in [{low:g}, {high:g}]")
        name, params = parse_correction(f"{name}:{','.join(kept)}" if kept else name)
        for key, (default, _, _) in own.items():
            value = given.get(key, default)
            if value is not None:
                params[key] = value
        return name, params
    name, params = parse_correction(spec)
    if name == "m3id":
        if "t=" in spec.replace(" ", ""):
            raise InputError(f"--decode {spec}: m3id's t is the decoding step, not a setting; give lambda only")
        params.pop("t", None)
    return name, params


def parse_decode_spec(spec: str) -> DecodeSpec:
    """``--decode``'s text as the typed spec a run carries: a run's one parse (:func:`parse_decode`)."""
    method, params = parse_decode(spec)
    return DecodeSpec(text=spec, method=method, params=params)


def resolved(spec: DecodeSpec) -> DecodeSpec:
    """``spec`` with every setting resolved (one read back from a bare string is parsed here)."""
    return spec if spec.params is not None else parse_decode_spec(spec.text)


def dola_layers(n_layers: int) -> tuple[int, ...]:
    """DoLa's candidate premature layers: the ``layers`` signal's default (every second layer of
    the lower half), so the loop and the offline rule choose among the same layers."""
    return tuple(range(0, max(1, n_layers // 2), 2))


def pai_layers(spec: str, params: dict[str, float], n_layers: int | None) -> tuple[int, int | None]:
    """PAI's layers [start, end) (``end`` by default the model's ``n_layers``); InputError unless
    whole numbers with start < end <= n_layers. ``n_layers`` None (not known before loading):
    only what the spec alone can contradict."""
    start, end = params["start"], params.get("end", float(n_layers) if n_layers is not None else None)
    if start != int(start) or (end is not None and end != int(end)):
        raise InputError(f"{spec}: PAI's layers [start, end) are whole numbers")
    if end is not None and start >= end:
        where = f"this model has {n_layers} layers" if "end" not in params else "give start < end"
        raise InputError(f"{spec}: PAI's layers [{start:g}, {end:g}) hold no layer ({where})")
    if n_layers is not None and end is not None and end > n_layers:
        raise InputError(f"{spec}: PAI's end {end:g} is past the model's {n_layers} layers")
    return int(start), int(end) if end is not None else None


def rule_settings(spec: DecodeSpec, n_layers: int) -> dict[str, Any]:
    """Every setting the loop decodes ``spec`` with, defaults and the model's own included (what
    ``run.json`` records beside the spec as typed): VCD's noise step, DoLa's candidate layers,
    PAI's layers [start, end)."""
    name, rule = spec.method, decode_rule(spec, n_layers)
    if isinstance(rule, ContrastRule):
        extra = {"noise_step": VCD_NOISE_STEP} if name == "vcd" else {}
        return {"method": name, "alpha": rule.alpha, "beta": rule.beta, **extra}
    if isinstance(rule, M3IDRule):
        return {"method": name, "lambda": rule.lam}
    if isinstance(rule, DoLaRule):
        return {"method": name, "candidate_layers": list(rule.layers), "relative_top": rule.relative_top,
                "repetition_penalty": rule.repetition_penalty}  # fmt: skip
    assert isinstance(rule, PAIRule)
    return {"method": name, "gamma": rule.gamma, "alpha": rule.setting.alpha, "start": rule.setting.start, "end": rule.setting.end}


def decode_rule(spec: DecodeSpec, n_layers: int = 0) -> StepRule:
    """The step rule of ``spec`` on ``n_layers`` text layers; InputError for PAI layers it lacks."""
    name, p = spec.method, resolved(spec).params
    assert p is not None  # resolved
    if name == "dola":
        return DoLaRule(dola_layers(n_layers), p["relative_top"], p["repetition_penalty"])
    if name == "pai":
        start, end = pai_layers(spec.text, p, n_layers)
        assert end is not None  # n_layers given
        return PAIRule(p["gamma"], PaiSetting(p["alpha"], start, end))
    if name == "m3id":
        return M3IDRule(lam=p["lambda"])
    return ContrastRule(alpha=p["alpha"], beta=p["beta"])


def parse_contrast(spec: str, n_layers: int = 0) -> tuple[str, StepRule]:
    """``vcd`` / ``icd:alpha=1,beta=0.1`` / ``dola`` -> (method, rule) on ``n_layers`` text layers."""
    typed = parse_decode_spec(spec)
    return typed.method, decode_rule(typed, n_layers)


@dataclass(frozen=True)
class Sampling:
    """Seeded sampling of a step's scores: temperature, then top-k, then top-p (nucleus)."""

    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None

    def filtered(self, scores: Any) -> Any:
        """The scores each row draws from (``-inf`` outside its top-k and its top-p mass)."""
        import torch

        scores = scores.float() / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[-1]:
            kth = torch.topk(scores, self.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, -math.inf)
        if self.top_p is not None and self.top_p < 1:
            ordered, order = torch.sort(scores, dim=-1, descending=True)
            mass = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = mass - torch.softmax(ordered, dim=-1) >= self.top_p  # the mass before it already reaches p
            scores = scores.masked_fill(drop.scatter(-1, order, drop), -math.inf)
        return scores

    def choose(self, scores: Any, generators: Sequence[Any]) -> Any:
        """One token per row, row ``i`` drawn with ``generators[i]`` (on the CPU)."""
        import torch

        probs = torch.softmax(self.filtered(scores), dim=-1).cpu()
        drawn = [int(torch.multinomial(probs[row], 1, generator=g)) for row, g in enumerate(generators)]
        return torch.tensor(drawn, dtype=torch.long, device=scores.device)


def check_decoding(
    decode: DecodeSpec | None, *, sample: bool, temperature: float | None, top_p: float | None,
    sample_top_k: int | None, seed: int | None, open_ended: bool, backend: str, model: str,
) -> None:
    """``run --decode`` / ``--sample`` settings that cannot run, refused in one line before any
    model loads (the run plan): an unknown method or parameter, a method on a yes/no run, a sampled run without
    a seed, sampling settings without ``--sample``, a backend other than hf, a no-image method on
    a family that cannot leave the image out (read from a local folder's config.json)."""
    if decode is not None:
        decode = resolved(decode)  # parsed at the edge already; a spec from a bare string is parsed here
        if not open_ended:
            raise InputError("--decode decodes free-form answers: give --open-ended (yes/no runs correct the first token at score time)")
    if sample:
        if seed is None:
            raise InputError("--sample needs --seed: a sampled run must write the same text when resumed")
        if not open_ended:
            raise InputError("--sample decodes free-form answers: give --open-ended")
        if temperature is not None and not temperature > 0:
            raise InputError(f"--temperature must be > 0, not {temperature:g}")
        if top_p is not None and not 0 < top_p <= 1:
            raise InputError(f"--top-p must lie in (0, 1], not {top_p:g}")
        if sample_top_k is not None and sample_top_k < 1:
            raise InputError(f"--sample-top-k must be >= 1, not {sample_top_k}")
    else:
        given = [name for name, value in (("--temperature", temperature), ("--top-p", top_p), ("--sample-top-k", sample_top_k), ("--seed", seed)) if value is not None]
        if given:
            raise InputError(f"{given[0]} is a sampling setting: give --sample too")
    if backend != "hf":
        raise InputError(f"the {backend} backend cannot apply --decode or --sample: they need the hf backend's decoding loop")
    if decode is not None and BRANCHES[decode.method] == "no-image":
        _refuse_image_first(decode.method, model)
    if decode is not None and decode.method == "pai":
        assert decode.params is not None  # resolved above
        pai_layers(decode.text, decode.params, _local_text_layers(model))


def _local_text_layers(model: str) -> int | None:
    """The text model's layer count from a local folder's config.json (``text_config``, InternVL's
    ``llm_config``, or the top level); None for a hub id or a config that names none."""

    path = Path(model).expanduser() / "config.json"
    if not path.is_file():
        return None
    config = read_json_file(path, "model config")
    for part in (config.get("text_config"), config.get("llm_config"), config) if isinstance(config, dict) else ():
        layers = part.get("num_hidden_layers") if isinstance(part, dict) else None
        if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0:
            return layers
    return None


def _refuse_image_first(method: str, model: str) -> None:
    """A no-image method on a family whose processor cannot leave the image out, refused from a
    local model folder's config.json before loading it (a hub id is checked when the engine is
    built, after loading, before the run dir is written)."""

    path = Path(model).expanduser() / "config.json"
    model_type = config_model_type(model)  # None for a hub id; a broken config.json: one line naming its line
    family = FAMILIES.get(model_type or "")
    if family is not None and family.no_image_reason is not None:
        raise InputError(f"--decode {method} decodes against the question without the image: {model_type}: {family.no_image_reason}", path)
