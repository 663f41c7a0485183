"""Yes/no token sets on REAL vocabularies: LLaMA-2, Mistral v1 / v3, Qwen2 (tests/_assets.py).

The expected sets below were read off the vocabularies once and are asserted exactly: a new
rule that adds or drops a piece (``YES``, ``▁NO``, Qwen2's tab-prefixed ``ĉno``) fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import _assets  # noqa: E402
from halluprobe.errors import InputError, RuntimeFailure  # noqa: E402
from halluprobe.readouts import tokensets  # noqa: E402
from halluprobe.readouts.tokensets import (  # noqa: E402
    LEGACY_2TOK_NO,
    LEGACY_2TOK_YES,
    LEGACY_8TOK_NO,
    LEGACY_8TOK_YES,
    derive_token_sets,
    describe_token_sets,
    load_tokenizer,
    normalize_piece,
    tokenizer_fingerprint,
)
from halluprobe.records import TokenSets  # noqa: E402

# id -> raw piece, per vocabulary
LLAMA_YES = {3582: "yes", 3869: "▁Yes", 4874: "▁yes", 8241: "Yes", 21143: "YES", 22483: "▁YES"}
LLAMA_NO = {694: "▁no", 1217: "no", 1939: "▁No", 3782: "No", 6632: "NO", 11698: "▁NO"}
MISTRAL_V1_YES = {5081: "▁yes", 5592: "▁Yes", 5613: "Yes", 9780: "yes"}  # no "YES" piece
MISTRAL_V1_NO = {708: "▁no", 1510: "no", 1770: "▁No", 2501: "No", 4032: "NO", 7929: "▁NO"}
MISTRAL_V3_YES = {5849: "▁yes", 6360: "▁Yes", 6381: "Yes", 10548: "yes"}
MISTRAL_V3_NO = {1476: "▁no", 2278: "no", 2538: "▁No", 3269: "No", 4800: "NO", 8697: "▁NO"}
QWEN2_YES = {7414: "ĠYes", 9454: "Yes", 9693: "yes", 9834: "Ġyes", 14004: "YES", 14080: "ĠYES"}
# 72104 is "\tno": the byte-level piece decodes to a tab + "no", and whitespace is stripped
QWEN2_NO = {902: "Ġno", 2152: "no", 2308: "ĠNo", 2753: "No", 5664: "ĠNO", 8996: "NO", 72104: "ĉno"}

LLAMA_LEGACY = {"3582": "yes", "8241": "Yes", "4874": "▁yes", "3869": "▁Yes",
                "1217": "no", "3782": "No", "694": "▁no", "1939": "▁No"}
MISTRAL_V1_LEGACY = {"3582": "▁estab", "8241": "▁Minister", "4874": "ULT", "3869": "▁uint",
                     "1217": "▁fil", "3782": "▁Act", "694": "err", "1939": "▁--"}
MISTRAL_V3_LEGACY = {"3582": "object", "8241": "ingu", "4874": "Block", "3869": "bed",
                     "1217": "iv", "3782": "▁major", "694": "[control_692]", "1939": "▁incl"}
QWEN2_LEGACY = {"3582": "Ġtyp", "8241": "Ġproviding", "4874": "anced", "3869": "Ġ}}",
                "1217": "Ġreg", "3782": "byte", "694": "ple", "1939": "?ĊĊ"}


def _load(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


@pytest.fixture(scope="module")
def llama(llama_tokenizer_dir: Path) -> Any:
    return _load(llama_tokenizer_dir)


@pytest.fixture(scope="module")
def qwen2(qwen2_tokenizer_dir: Path) -> Any:
    return _load(qwen2_tokenizer_dir)


@pytest.fixture(scope="module")
def mistral_v1(mistral_tokenizer_dir: Path) -> Any:
    return _load(mistral_tokenizer_dir)


@pytest.fixture(scope="module")
def mistral_v3() -> Any:
    return _load(_assets.mistral_tokenizer_dir("v3"))


def _as_maps(sets: TokenSets) -> tuple[dict[int, str], dict[int, str]]:
    assert sets.yes_ids == sorted(sets.yes_ids) and sets.no_ids == sorted(sets.no_ids)
    assert len(sets.yes_ids) == len(sets.yes_pieces) and len(sets.no_ids) == len(sets.no_pieces)
    return dict(zip(sets.yes_ids, sets.yes_pieces)), dict(zip(sets.no_ids, sets.no_pieces))


# -- normalize_piece ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("piece", "expected"),
    [
        ("yes", "yes"),
        ("Yes", "yes"),
        ("YES", "yes"),
        ("▁Yes", "yes"),  # SentencePiece word start
        ("ĠYes", "yes"),  # byte-level BPE word start (Qwen2, GPT-2)
        ("▁▁No▁", "no"),
        (" No\n", "no"),  # decoded text: whitespace at both ends
        ("\tno", "no"),
        ("no\u00a0", "no"),  # no-break space is whitespace
        ("\u3000Yes", "yes"),  # ideographic space
        ("Ġ ▁yes", "yes"),
        ("Yes.", "yes."),  # punctuation stays: "Yes." is not the piece "Yes"
        ("No,", "no,"),
        ("Nope", "nope"),
        ("n o", "n o"),  # internal whitespace stays
        ("y\u2581es", "y\u2581es"),  # a marker inside a piece is not a word start
        ("ĉno", "ĉno"),  # raw byte-level tab: only decoding turns it into whitespace
        ("Ċyes", "ċyes"),  # raw byte-level newline: a real letter in SentencePiece vocabularies
        ("№", "№"),  # numero sign: no compatibility folding to "No"
        ("ｙｅｓ", "ｙｅｓ"),  # fullwidth letters are not folded either
        ("▁", ""),
        ("", ""),
    ],
)
def test_normalize_piece(piece: str, expected: str) -> None:
    assert normalize_piece(piece) == expected


def test_whitespace_table_is_exactly_str_isspace() -> None:
    computed = {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert set(tokensets._WHITESPACE) == computed


# -- the four real vocabularies ------------------------------------------------------------


def test_llama2_sets_are_exact_and_legacy_ids_hold(llama: Any) -> None:
    sets = derive_token_sets(llama)
    yes, no = _as_maps(sets)
    assert yes == LLAMA_YES
    assert no == LLAMA_NO
    assert set(LEGACY_8TOK_YES) <= set(yes) and set(LEGACY_8TOK_NO) <= set(no)
    assert LEGACY_2TOK_YES in yes and LEGACY_2TOK_NO in no
    assert sets.legacy_valid is True
    assert sets.legacy_pieces == LLAMA_LEGACY
    assert sets.vocab_size == 32000
    assert len(sets.tokenizer_fingerprint) == 64


def test_mistral_v1_sets_are_exact_and_legacy_ids_are_invalid(mistral_v1: Any) -> None:
    sets = derive_token_sets(mistral_v1)
    yes, no = _as_maps(sets)
    assert yes == MISTRAL_V1_YES
    assert no == MISTRAL_V1_NO
    assert sets.legacy_valid is False
    # the LLaMA ids mean something else entirely here
    assert sets.legacy_pieces == MISTRAL_V1_LEGACY
    assert sets.vocab_size == 32000


def test_mistral_v3_sets_are_exact(mistral_v3: Any) -> None:
    sets = derive_token_sets(mistral_v3)
    yes, no = _as_maps(sets)
    assert yes == MISTRAL_V3_YES
    assert no == MISTRAL_V3_NO
    assert sets.legacy_valid is False and sets.legacy_pieces == MISTRAL_V3_LEGACY
    assert sets.vocab_size == 32768


def test_qwen2_byte_level_sets_are_exact(qwen2: Any) -> None:
    sets = derive_token_sets(qwen2)
    yes, no = _as_maps(sets)
    assert yes == QWEN2_YES
    assert no == QWEN2_NO
    # the published ids, and what the byte-level pieces mean as text
    assert {9454, 7414} <= set(yes) and {2753, 2308} <= set(no)
    assert [qwen2.convert_tokens_to_string([yes[i]]) for i in (9454, 7414)] == ["Yes", " Yes"]
    assert [qwen2.convert_tokens_to_string([no[i]]) for i in (2753, 2308, 72104)] == ["No", " No", "\tno"]
    assert sets.legacy_valid is False and sets.legacy_pieces == QWEN2_LEGACY
    assert sets.vocab_size == 151936  # 151643 BPE pieces + specials + [PADn] placeholders


def test_derivation_reads_a_150k_vocabulary_in_bulk(qwen2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast by construction, not by a wall-clock bound (which flaked on a busy machine): the
    vocabulary is read through a constant number of bulk tokenizer calls, never one per id
    (151,936 calls would take seconds). The time itself is printed by bench/bench_tokensets.py."""
    calls: dict[str, int] = {}
    for name in ("convert_ids_to_tokens", "decode", "convert_tokens_to_string", "batch_decode"):
        original = getattr(qwen2, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(qwen2, name, counted)
    sets = derive_token_sets(qwen2)
    assert sets.vocab_size == 151936 and 9454 in sets.yes_ids
    assert sum(calls.values()) <= 10, calls


def test_assets_reproduce_llama_cpp_reference_encodings(llama: Any, qwen2: Any) -> None:
    vocab = _assets.gguf_vocab_dir()
    for tokenizer, name, skip_space in ((llama, "ggml-vocab-llama-spm.gguf", True),
                                        (qwen2, "ggml-vocab-qwen2.gguf", False)):
        pairs = [(t, ids) for t, ids in _assets.reference_encodings(vocab / name)
                 if not (skip_space and t.startswith(" "))]
        assert len(pairs) >= 30
        for text, ids in pairs:
            assert tokenizer.encode(text, add_special_tokens=False) == ids, (name, text)


# -- added tokens, holes, small vocabularies -----------------------------------------------


def test_added_tokens_count_unless_special(llama_tokenizer_dir: Path) -> None:
    from tokenizers import AddedToken

    tokenizer = _load(llama_tokenizer_dir)
    before = derive_token_sets(tokenizer)
    tokenizer.add_tokens([AddedToken("yEs", normalized=False)])  # plain: the model can say it
    tokenizer.add_tokens([AddedToken("nO", special=True, normalized=False)], special_tokens=True)
    after = derive_token_sets(tokenizer)
    assert after.vocab_size == 32002
    assert dict(zip(after.yes_ids, after.yes_pieces)) == {**LLAMA_YES, 32000: "yEs"}
    assert dict(zip(after.no_ids, after.no_pieces)) == LLAMA_NO  # the special "nO" is excluded
    assert after.legacy_valid is True
    assert after.tokenizer_fingerprint != before.tokenizer_fingerprint


def test_small_vocabulary_has_no_legacy_ids() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "Yes": 1, "▁no": 2, "maybe": 3, "YES!": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    sets = derive_token_sets(tokenizer)
    assert (sets.yes_ids, sets.yes_pieces) == ([1], ["Yes"])
    assert (sets.no_ids, sets.no_pieces) == ([2], ["▁no"])
    assert sets.vocab_size == 5
    assert sets.legacy_valid is False
    assert sets.legacy_pieces == {str(i): None for i in (*LEGACY_8TOK_YES, *LEGACY_8TOK_NO)}


# -- fingerprint -----------------------------------------------------------------------------


def test_fingerprint_is_stable_across_save_and_reload(llama: Any, qwen2: Any, tmp_path: Path) -> None:
    for name, tokenizer in (("llama", llama), ("qwen2", qwen2)):
        tokenizer.save_pretrained(str(tmp_path / name))
        reloaded = _load(tmp_path / name)
        assert tokenizer_fingerprint(reloaded) == tokenizer_fingerprint(tokenizer)
        assert derive_token_sets(reloaded) == derive_token_sets(tokenizer)


def test_fingerprint_differs_across_vocabularies(llama: Any, qwen2: Any, mistral_v1: Any, mistral_v3: Any) -> None:
    prints = [derive_token_sets(t).tokenizer_fingerprint for t in (llama, qwen2, mistral_v1, mistral_v3)]
    assert len(set(prints)) == 4
    assert prints[0] == tokenizer_fingerprint(llama)


# -- describe_token_sets ---------------------------------------------------------------------


def test_describe_token_sets_is_plain_sorted_json(llama: Any, qwen2: Any) -> None:
    for tokenizer in (llama, qwen2):
        sets = derive_token_sets(tokenizer)
        info = json.loads(json.dumps(describe_token_sets(sets), ensure_ascii=False))
        assert info["yes_ids"] == sets.yes_ids == sorted(info["yes_ids"])
        assert info["no_ids"] == sets.no_ids
        assert info["yes_pieces"] == sets.yes_pieces and info["no_pieces"] == sets.no_pieces
        assert info["legacy_valid"] is sets.legacy_valid
        assert info["legacy_pieces"] == sets.legacy_pieces
        assert info["vocab_size"] == sets.vocab_size
        assert info["tokenizer_fingerprint"] == sets.tokenizer_fingerprint
        assert info["legacy_ids"] == {
            "legacy_2tok": {"yes": [3582], "no": [1217]},
            "legacy_8tok": {"yes": [3582, 8241, 4874, 3869], "no": [1217, 3782, 694, 1939]},
        }
    # the record survives its own JSON round trip (it goes into run.json)
    assert TokenSets.model_validate_json(sets.model_dump_json()) == sets


# -- load_tokenizer --------------------------------------------------------------------------


def _llava_processor_dir(llama_tokenizer_dir: Path, out: Path) -> Path:
    from tokenizers import AddedToken
    from transformers import LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = _load(llama_tokenizer_dir)
    tokenizer.add_tokens([AddedToken("<image>", special=True, normalized=False)], special_tokens=True)
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    processor = LlavaProcessor(image_processor=CLIPImageProcessorPil(), tokenizer=tokenizer, patch_size=14,
                               vision_feature_select_strategy="default", image_token="<image>")
    processor.save_pretrained(str(out))
    return out


def test_load_tokenizer_from_tokenizer_and_processor_folders(llama_tokenizer_dir: Path, tmp_path: Path) -> None:
    plain = load_tokenizer(str(llama_tokenizer_dir))
    assert derive_token_sets(plain) == derive_token_sets(_load(llama_tokenizer_dir))

    model_dir = _llava_processor_dir(llama_tokenizer_dir, tmp_path / "llava")
    tokenizer = load_tokenizer(str(model_dir))
    assert tokenizer.convert_tokens_to_ids(["<image>", "<pad>"]) == [32000, 32001]
    sets = derive_token_sets(tokenizer)
    assert dict(zip(sets.yes_ids, sets.yes_pieces)) == LLAMA_YES and sets.legacy_valid is True
    assert sets.vocab_size == 32002  # LLaVA-1.5: <image>=32000, <pad>=32001
    assert sets.tokenizer_fingerprint != tokenizer_fingerprint(plain)


def test_load_tokenizer_falls_back_to_the_processor(
    llama_tokenizer_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    model_dir = _llava_processor_dir(llama_tokenizer_dir, tmp_path / "llava")
    real = transformers.AutoTokenizer.from_pretrained
    seen: list[dict[str, Any]] = []

    def refuse_first(*args: Any, **kwargs: Any) -> Any:
        # the first call is load_tokenizer's own; AutoProcessor then loads its tokenizer itself
        seen.append(kwargs)
        if len(seen) == 1:
            raise OSError("no tokenizer here")
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse_first)
    tokenizer = load_tokenizer(str(model_dir))
    assert len(seen) >= 2, "the processor fallback was not used"
    assert seen[0]["local_files_only"] is True and seen[0]["trust_remote_code"] is False
    assert tokenizer.convert_tokens_to_ids("<image>") == 32000


def test_load_tokenizer_from_a_gguf_file_matches_the_saved_copy(llama: Any) -> None:
    gguf = _assets.gguf_vocab_dir() / "ggml-vocab-llama-spm.gguf"
    converted = load_tokenizer(str(gguf))
    # same ids, same pieces, same added tokens as the save_pretrained copy the tests use
    assert derive_token_sets(converted) == derive_token_sets(llama)


def test_load_tokenizer_bad_local_paths_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_tokenizer(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="cannot load a tokenizer"):
        load_tokenizer(str(tmp_path / "empty"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=".gguf"):
        load_tokenizer(str(tmp_path / "notes.txt"))


def test_load_tokenizer_unloadable_hub_id_is_a_runtime_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    calls: list[tuple[str, dict[str, Any]]] = []

    def offline(name: str, **kwargs: Any) -> Any:
        calls.append((name, kwargs))
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    # never touch the network in a test: both loaders are stubbed
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", offline)
    with pytest.raises(RuntimeFailure, match="llava-hf/llava-1.5-7b-hf"):
        load_tokenizer("llava-hf/llava-1.5-7b-hf", trust_remote_code=True)
    assert [name for name, _ in calls] == ["llava-hf/llava-1.5-7b-hf"] * 2
    assert all("local_files_only" not in kw and kw["trust_remote_code"] is True for _, kw in calls)


# -- the asset cache ---------------------------------------------------------------------------


def test_asset_build_recovers_from_a_killed_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_TEST_ASSETS", str(tmp_path))
    # what a killed build leaves: a temp folder, and a final folder without its marker
    (tmp_path / ".mistral-v1-tokenizer-dead").mkdir()
    (tmp_path / "mistral-v1-tokenizer").mkdir()
    (tmp_path / "mistral-v1-tokenizer" / "tokenizer.json").write_text("{truncated")
    folder = _assets.mistral_tokenizer_dir("v1")
    assert folder == tmp_path / "mistral-v1-tokenizer"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", "mistral-v1-tokenizer"]
    assert derive_token_sets(_load(folder)).yes_ids == sorted(MISTRAL_V1_YES)
    with pytest.raises(ValueError, match="unknown Mistral"):
        _assets.mistral_tokenizer_dir("v9")


def test_concurrent_processes_build_an_asset_once(tmp_path: Path) -> None:
    # three fresh interpreters race for one lock: about 5 s here (each imports transformers)
    env = {**os.environ, "HALLUPROBE_TEST_ASSETS": str(tmp_path)}
    code = "import _assets; print(_assets.mistral_tokenizer_dir('v3'))"
    tests_dir = str(Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=tests_dir, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    assert {out.strip().splitlines()[-1] for out, _ in outputs} == {str(tmp_path / "mistral-v3-tokenizer")}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", "mistral-v3-tokenizer"]
    marker = json.loads((tmp_path / "mistral-v3-tokenizer" / "halluprobe-asset.json").read_text())
    assert marker["len"] == 32768
