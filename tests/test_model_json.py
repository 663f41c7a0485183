"""A model folder's JSON files (config.json, chat_template.json) go through the project's one
reader: a broken one is one line naming the file and line (exit 2), a missing one is ignored
where it is optional. No model is built or loaded: the reader runs before transformers does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halluprobe.backends.hf.decode_rules import check_decoding, parse_decode_spec
from halluprobe.backends.hf.load import _folder_chat_template, config_model_type, load_processor
from halluprobe.benchmarks.autoprobe.detector import _model_type
from halluprobe.errors import InputError
from halluprobe.jsonl import read_json_file

BROKEN = '{\n  "model_type": "llava",\n  "hidden_size": 64,,\n}\n'  # the error is on line 3


def test_read_json_file_names_the_line_and_reads_a_bom(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(BROKEN)
    with pytest.raises(InputError) as ei:
        read_json_file(bad, "model config")
    assert str(ei.value).startswith(f"{bad}:3: model config is not valid JSON: ")
    assert "\n" not in str(ei.value) and ei.value.line == 3
    good = tmp_path / "ok.json"
    good.write_bytes(b"\xef\xbb\xbf" + json.dumps({"a": [1, 2]}).encode())  # a BOM, as some editors write
    assert read_json_file(good, "x") == {"a": [1, 2]}
    (tmp_path / "latin1.json").write_bytes(b'{"a": "caf\xe9"}')
    with pytest.raises(InputError, match=r"latin1\.json:1: not UTF-8"):
        read_json_file(tmp_path / "latin1.json", "x")


def test_a_broken_config_json_is_one_line_before_transformers_reads_it(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(BROKEN)
    with pytest.raises(InputError) as ei:
        load_processor(str(tmp_path))
    assert str(ei.value).startswith(f"{tmp_path / 'config.json'}:3: model config is not valid JSON")


def test_model_type_tolerates_what_is_optional(tmp_path: Path) -> None:
    assert config_model_type(str(tmp_path)) is None  # no config.json: nothing to say
    assert config_model_type("llava-hf/llava-1.5-7b-hf") is None  # a hub id
    (tmp_path / "config.json").write_text("[1, 2]")  # JSON, but no object: names no model type
    assert config_model_type(str(tmp_path)) is None
    (tmp_path / "config.json").write_text('{"model_type": "qwen2_vl"}')
    assert config_model_type(str(tmp_path)) == "qwen2_vl"


def test_chat_template_json(tmp_path: Path) -> None:
    assert _folder_chat_template(str(tmp_path)) is None
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert _folder_chat_template(str(tmp_path)) == "{{ messages }}"
    (tmp_path / "chat_template.json").write_text('{"chat_template": "{{ messages }}"')  # cut short
    with pytest.raises(InputError, match=r"chat_template\.json:1: chat template is not valid JSON"):
        _folder_chat_template(str(tmp_path))


def test_detector_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "owlv2"}')
    assert _model_type(str(tmp_path), True) == "owlv2"
    (tmp_path / "config.json").write_text(BROKEN)
    with pytest.raises(InputError, match=r"config\.json:3: detector config is not valid JSON"):
        _model_type(str(tmp_path), True)


def test_a_no_image_decoding_method_reads_config_json_through_the_one_reader(tmp_path: Path) -> None:
    """`run --decode m3id` looks at the model folder's family before loading: a broken config.json
    is one line naming its line there too (it was skipped silently before)."""
    (tmp_path / "config.json").write_text(BROKEN)
    settings = dict(sample=False, temperature=None, top_p=None, sample_top_k=None, seed=None, open_ended=True, backend="hf")
    with pytest.raises(InputError) as ei:
        check_decoding(parse_decode_spec("m3id"), model=str(tmp_path), **settings)
    assert str(ei.value).startswith(f"{tmp_path / 'config.json'}:3: model config is not valid JSON")
    check_decoding(parse_decode_spec("m3id"), model="llava-hf/llava-1.5-7b-hf", **settings)  # a hub id: checked after loading
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "paligemma"}))
    with pytest.raises(InputError, match="without the image"):
        check_decoding(parse_decode_spec("m3id"), model=str(tmp_path), **settings)
