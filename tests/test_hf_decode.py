"""hf/decode.py: contrastive greedy decoding (VCD) on the tiny LLaVA, against independent
recomputations: alpha 0 is generate's greedy text; every step's token and scores equal the
rule applied to the two branches' logits recomputed from full sequences without a cache."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.backends.hf.decode_rules import ContrastRule, M3IDRule, parse_contrast
from halluprobe.backends.hf.decode import contrast_decode  # noqa: E402
from halluprobe.backends.hf.signals import VCD_NOISE_STEP, noised_inputs  # noqa: E402
from halluprobe.errors import InputError  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow

QUESTIONS = ["Describe the image.", "What is on the table in this picture?", "Is there a cat?"]
PHOTOS = ["coffee.jpg", "chelsea.jpg", "astronaut.jpg"]
STEPS = 5


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> tuple[HFBackend, list[str], list[Any], list[str]]:
    from PIL import Image

    photos, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    path = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    backend = HFBackend(str(path), dtype="float32", device="cpu")
    paths = [str(photos / name) for name in PHOTOS]
    images = []
    for p in paths:
        with Image.open(p) as im:
            images.append(im.convert("RGB"))
    return backend, [backend.render_prompt(q, None) for q in QUESTIONS], images, paths


def _branches(backend: HFBackend, prompts: list[str], images: list[Any], paths: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    base = backend.core.inputs.encode(prompts, images)
    return base, noised_inputs(base, paths, VCD_NOISE_STEP)


def _decode(backend: HFBackend, base: dict[str, Any], contrast: dict[str, Any], rule: Any, steps: int) -> Any:
    core = backend.core
    return contrast_decode(core.model, base, contrast, rule, max_new_tokens=steps,
                           end_ids=[core.tokenizer.eos_token_id], pad_id=core.pad_id, keep_steps=True)  # fmt: skip


def test_alpha_zero_is_generates_greedy_text(setup: Any) -> None:
    backend, prompts, images, paths = setup
    base, contrast = _branches(backend, prompts, images, paths)
    assert len({int(m.sum()) for m in base["attention_mask"]}) > 1  # rows of different lengths: left padding
    got = _decode(backend, base, contrast, ContrastRule(alpha=0.0, beta=0.1), 8)
    with torch.inference_mode():
        want = backend.core.model.generate(**base, max_new_tokens=8, do_sample=False, num_beams=1,
                                           pad_token_id=backend.core.tokenizer.pad_token_id)  # fmt: skip
    eos = backend.core.tokenizer.eos_token_id
    for row, tokens in enumerate(got.tokens):
        expected = want[row, base["input_ids"].shape[1] :].tolist()
        if eos in expected:
            expected = expected[: expected.index(eos) + 1]
        assert tokens == expected, row


def _independent_scores(base_logits: Any, contrast_logits: Any, alpha: float, beta: float) -> list[float]:
    """VCD's step written out again, in plain Python over the vocabulary."""
    lp = torch.log_softmax(base_logits.double(), -1).tolist()
    lq = torch.log_softmax(contrast_logits.double(), -1).tolist()
    threshold = math.log(beta) + max(lp) if beta > 0 else -math.inf
    return [(1 + alpha) * p - alpha * q if p >= threshold else -math.inf for p, q in zip(lp, lq)]


@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.1), (3.0, 0.0)])
def test_every_step_is_the_rule_on_the_branches_recomputed_without_a_cache(setup: Any, alpha: float, beta: float) -> None:
    """Each row's steps recomputed alone (batch 1, no padding, no cache): the prompt plus the
    tokens chosen so far through the model with the image and with the noised image."""
    backend, prompts, images, paths = setup
    base, contrast = _branches(backend, prompts, images, paths)
    got = _decode(backend, base, contrast, ContrastRule(alpha=alpha, beta=beta), STEPS)
    model, moved = backend.core.model, 0.0
    for row in range(len(prompts)):
        one = backend.core.inputs.encode([prompts[row]], [images[row]])
        for step, token in enumerate(got.tokens[row]):
            ids = torch.cat([one["input_ids"], torch.tensor([got.tokens[row][:step]], dtype=torch.long)], dim=-1)
            full = {**one, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
            with torch.inference_mode():
                lb = model(**full).logits[0, -1]
                lc = model(**noised_inputs(full, [paths[row]], VCD_NOISE_STEP)).logits[0, -1]
            want = _independent_scores(lb, lc, alpha, beta)
            assert token == max(range(len(want)), key=want.__getitem__), (row, step)
            engine = got.scores[step][row].tolist()
            finite = [i for i, v in enumerate(want) if v > -math.inf]
            assert [i for i, v in enumerate(engine) if v > -math.inf] == finite
            assert max(abs(engine[i] - want[i]) for i in finite) < 1e-4
            base_lp = torch.log_softmax(lb.double(), -1).tolist()
            moved = max(moved, max(abs(engine[i] - base_lp[i]) for i in finite))
    assert moved > 1e-3  # the contrast branch changed the scores: the rule is not the base pass


def test_icd_steps_are_its_rule_on_the_instruction_branch_recomputed_without_a_cache(setup: Any) -> None:
    """ICD: the contrast branch is the question under the disturbing instruction (same image),
    each row's steps recomputed alone from full sequences, no cache: VCD's rule on that branch."""
    from halluprobe.records import ICD_INSTRUCTION

    backend, prompts, images, _ = setup
    alpha, beta = 1.0, 0.1
    disturbed = [backend.render_prompt(f"{ICD_INSTRUCTION} {q}", None) for q in QUESTIONS]
    base = backend.core.inputs.encode(prompts, images)
    got = _decode(backend, base, backend.core.inputs.encode(disturbed, images), ContrastRule(alpha=alpha, beta=beta), STEPS)
    model, moved = backend.core.model, 0.0
    for row in range(len(prompts)):
        chosen = torch.tensor([got.tokens[row]], dtype=torch.long)
        for step, token in enumerate(got.tokens[row]):
            logits = []
            for prompt in (prompts[row], disturbed[row]):
                one = backend.core.inputs.encode([prompt], [images[row]])
                ids = torch.cat([one["input_ids"], chosen[:, :step]], dim=-1)
                with torch.inference_mode():
                    logits.append(model(**{**one, "input_ids": ids, "attention_mask": torch.ones_like(ids)}).logits[0, -1])
            want = _independent_scores(logits[0], logits[1], alpha, beta)
            assert token == max(range(len(want)), key=want.__getitem__), (row, step)
            engine = got.scores[step][row].tolist()
            finite = [i for i, v in enumerate(want) if v > -math.inf]
            assert [i for i, v in enumerate(engine) if v > -math.inf] == finite
            assert max(abs(engine[i] - want[i]) for i in finite) < 1e-4
            base_lp = torch.log_softmax(logits[0].double(), -1).tolist()
            moved = max(moved, max(abs(engine[i] - base_lp[i]) for i in finite))
    assert moved > 1e-3  # the instruction branch changed the scores


def test_m3id_steps_are_its_rule_on_the_no_image_branch_inert_only_at_the_first_token(setup: Any) -> None:
    """M3ID against the question without the image, recomputed alone per row and step: the
    first token is the base pass's, later ones move by ``w_t`` (exp(lambda t) - 1)."""
    backend, prompts, images, paths = setup
    lam = 0.5
    no_image = [backend.render_prompt(q, None, image=False) for q in QUESTIONS]
    base = backend.core.inputs.encode(prompts, images)
    got = _decode(backend, base, backend.core.inputs.encode(no_image, []), M3IDRule(lam=lam), STEPS)
    model, moved = backend.core.model, [0.0] * STEPS
    for row in range(len(prompts)):
        with_image = backend.core.inputs.encode([prompts[row]], [images[row]])
        text_only = backend.core.inputs.encode([no_image[row]], [])
        for step, token in enumerate(got.tokens[row]):
            chosen = torch.tensor([got.tokens[row][:step]], dtype=torch.long)
            logits = []
            for one in (with_image, text_only):
                ids = torch.cat([one["input_ids"], chosen], dim=-1)
                with torch.inference_mode():
                    logits.append(model(**{**one, "input_ids": ids, "attention_mask": torch.ones_like(ids)}).logits[0, -1])
            lp = torch.log_softmax(logits[0].double(), -1).tolist()
            lq = torch.log_softmax(logits[1].double(), -1).tolist()
            w = math.exp(lam * step) - 1
            top = max(p - q for p, q in zip(lp, lq))  # the row's constant w * top is left out, as the offline rule does
            want = [p - w * (top - (p - q)) for p, q in zip(lp, lq)]
            assert token == max(range(len(want)), key=want.__getitem__), (row, step)
            engine = got.scores[step][row].tolist()
            assert max(abs(a - b) for a, b in zip(engine, want)) < 1e-4
            moved[step] = max(moved[step], max(abs(a - b) for a, b in zip(engine, lp)))
    assert moved[0] < 1e-5 and min(moved[1:]) > 1e-3  # inert at t = 0 only


def test_decoding_methods_are_parsed_and_bad_ones_refused() -> None:
    assert parse_contrast("vcd") == ("vcd", ContrastRule(alpha=1.0, beta=0.1))
    assert parse_contrast("icd:alpha=0.5,beta=0") == ("icd", ContrastRule(alpha=0.5, beta=0.0))
    assert parse_contrast("m3id:lambda=0.5") == ("m3id", M3IDRule(lam=0.5))
    for bad, message in (("opera", "runs vcd, icd, m3id, dola, pai"), ("m3id:alpha=1", "not 'alpha=1'"), ("vcd:gamma=1", "not 'gamma=1'"),
                         ("vcd:alpha=x", "alpha must be a number"), ("vcd:beta=2", r"beta must lie in \[0, 1\]"),
                         ("m3id:t=2", "t is the decoding step"), ("vcd:alpha=1,alpha=2", "given twice")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            parse_contrast(bad)


def test_dola_steps_are_its_rule_recomputed_without_a_cache(setup: Any) -> None:
    """DoLa over candidate layers 0 and 1, recomputed per row and step from the full sequence
    without a cache: each layer's logits through the norm and head, the JSD written out in plain
    Python, the premature layer the furthest one, the relative-top cut-off and transformers'
    repetition penalty over the prompt and the tokens so far."""
    from halluprobe.backends.hf.decode_rules import DoLaRule

    backend, prompts, images, paths = setup
    rule = DoLaRule(layers=(0, 1), relative_top=0.1, repetition_penalty=1.5)
    base = backend.core.inputs.encode(prompts, images)
    core = backend.core
    got = contrast_decode(core.model, base, None, rule, max_new_tokens=STEPS, end_ids=[core.tokenizer.eos_token_id], pad_id=core.pad_id, keep_steps=True)
    model = core.model
    norm, head = model.get_decoder().norm, model.get_output_embeddings()
    penalised = 0
    for row in range(len(prompts)):
        one = backend.core.inputs.encode([prompts[row]], [images[row]])
        for step, token in enumerate(got.tokens[row]):
            ids = torch.cat([one["input_ids"], torch.tensor([got.tokens[row][:step]], dtype=torch.long)], dim=-1)
            with torch.inference_mode():
                out = model(**{**one, "input_ids": ids, "attention_mask": torch.ones_like(ids)}, output_hidden_states=True)
                early = [head(norm(out.hidden_states[n][0, -1])) for n in rule.layers]
            final = torch.log_softmax(out.logits[0, -1].double(), -1).tolist()

            def jsd(q_logits: Any, final: list[float] = final) -> float:
                q = torch.log_softmax(q_logits.double(), -1).tolist()
                total = 0.0
                for a, b in zip(final, q):
                    m = math.log((math.exp(a) + math.exp(b)) / 2)
                    total += 0.5 * (math.exp(a) * (a - m) + math.exp(b) * (b - m))
                return total

            divergences = [jsd(e) for e in early]
            premature = max(range(len(early)), key=divergences.__getitem__)
            q = torch.log_softmax(early[premature].double(), -1).tolist()
            threshold = math.log(rule.relative_top) + max(final)
            seen = set(ids[0].tolist())
            want = []
            for i, (a, b) in enumerate(zip(final, q)):
                v = a - b if a >= threshold else -math.inf
                if i in seen and v > -math.inf:
                    v = v * rule.repetition_penalty if v < 0 else v / rule.repetition_penalty
                    penalised += 1
                want.append(v)
            assert token == max(range(len(want)), key=want.__getitem__), (row, step)
            engine = got.scores[step][row].tolist()
            finite = [i for i, v in enumerate(want) if v > -math.inf]
            assert [i for i, v in enumerate(engine) if v > -math.inf] == finite
            assert max(abs(engine[i] - want[i]) for i in finite) < 1e-4
    assert penalised > 0  # the penalty touched some kept token


def test_every_setting_a_spec_decodes_with_is_resolved_for_the_record() -> None:
    from halluprobe.backends.hf.decode_rules import parse_decode_spec, rule_settings

    def rule_settings_of(spec: str, n_layers: int) -> dict[str, Any]:
        return rule_settings(parse_decode_spec(spec), n_layers)

    assert rule_settings_of("dola", 8) == {"method": "dola", "candidate_layers": [0, 2], "relative_top": 0.1, "repetition_penalty": 1.2}
    assert rule_settings_of("pai", 8) == {"method": "pai", "gamma": 1.1, "alpha": 0.5, "start": 2, "end": 8}
    assert rule_settings_of("m3id", 8) == {"method": "m3id", "lambda": 0.02}
    assert rule_settings_of("icd:beta=0.3", 8) == {"method": "icd", "alpha": 1.0, "beta": 0.3}
    assert rule_settings_of("vcd", 8) == rule_settings_of("vcd:alpha=1,beta=0.1", 8) == {"method": "vcd", "alpha": 1.0, "beta": 0.1, "noise_step": 500}


def test_dola_is_parsed_with_its_repetition_penalty() -> None:
    from halluprobe.backends.hf.decode_rules import DoLaRule, parse_decode

    assert parse_decode("dola") == ("dola", {"relative_top": 0.1, "repetition_penalty": 1.2})
    assert parse_contrast("dola:repetition_penalty=1,relative_top=0.2", n_layers=8) == ("dola", DoLaRule((0, 2), 0.2, 1.0))
    for bad, message in (("dola:repetition_penalty=0.5", r"must lie in \[1, 10\]"), ("dola:repetition_penalty=1,repetition_penalty=2", "given twice"),
                         ("dola:alpha=1", "not 'alpha=1'"), ("pai:start=1.5,end=2", "whole numbers"), ("pai:start=2,end=2", "hold no layer"), ("pai:end=3", "past the model's 2 layers")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            parse_contrast(bad, n_layers=2)


def test_pai_steps_are_its_rule_recomputed_without_a_cache(setup: Any) -> None:
    """PAI, recomputed per row and step from full sequences without a cache: the amplified pass
    (hf_signals' attention hook over every image key of the full sequence) and the no-image pass,
    ``gamma * lp_amplified - (gamma - 1) * lp_no_image``; the amplification moves later steps too."""
    from halluprobe.backends.hf.decode_rules import PAIRule
    from halluprobe.backends.hf.signals import PaiSetting, amplified_attention

    backend, prompts, images, _ = setup
    core = backend.core
    rule = PAIRule(gamma=1.5, setting=PaiSetting(alpha=0.5, start=0, end=2))
    no_image = [backend.render_prompt(q, None, image=False) for q in QUESTIONS]
    base = core.inputs.encode(prompts, images)
    got = contrast_decode(core.model, base, core.inputs.encode(no_image, []), rule, max_new_tokens=STEPS, end_ids=[core.tokenizer.eos_token_id],
                          pad_id=core.pad_id, keep_steps=True, image_token_id=core.inputs.image_token_id)  # fmt: skip
    model, amplified_moved = core.model, [0.0] * STEPS
    for row in range(len(prompts)):
        with_image = core.inputs.encode([prompts[row]], [images[row]])
        text_only = core.inputs.encode([no_image[row]], [])
        for step, token in enumerate(got.tokens[row]):
            chosen = torch.tensor([got.tokens[row][:step]], dtype=torch.long)
            ids = torch.cat([with_image["input_ids"], chosen], dim=-1)
            full = {**with_image, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
            text_ids = torch.cat([text_only["input_ids"], chosen], dim=-1)
            with torch.inference_mode():
                plain = model(**full).logits[0, -1]
                with amplified_attention(model, rule.setting, ids == core.inputs.image_token_id):
                    amplified = model(**full).logits[0, -1]
                lq = model(**{**text_only, "input_ids": text_ids, "attention_mask": torch.ones_like(text_ids)}).logits[0, -1]
            la = torch.log_softmax(amplified.double(), -1).tolist()
            lq_ = torch.log_softmax(lq.double(), -1).tolist()
            want = [rule.gamma * a - (rule.gamma - 1) * b for a, b in zip(la, lq_)]
            assert token == max(range(len(want)), key=want.__getitem__), (row, step)
            engine = got.scores[step][row].tolist()
            assert max(abs(a - b) for a, b in zip(engine, want)) < 1e-4
            amplified_moved[step] = max(amplified_moved[step], float((amplified - plain).abs().max()))
    assert min(amplified_moved[: min(len(t) for t in got.tokens)]) > 1e-4  # the hook acts at every step, not only the prompt's
