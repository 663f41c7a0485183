"""Real tokenizers for the tests, obtained offline from registry packages and cached on disk.

- LLaMA-2 (32000 pieces) and Qwen2 (151936 ids): vocab-only GGUF files vendored in the source
  distribution of ``llama-cpp-python==0.3.36`` (downloaded with pip, never built).
- Mistral v1 (32000) and v3 (32768): SentencePiece models shipped in the installed
  ``mistral-common`` wheel.

Each tokenizer is converted once with transformers, checked against reference encodings, saved
with ``save_pretrained`` and reused. The cache lives in ``$HALLUPROBE_TEST_ASSETS`` (default
``~/.cache/halluprobe-test-assets``). Builds take a per-asset file lock and write into a temporary
folder that is renamed into place, so concurrent pytest processes (xdist, parallel CI jobs) and
killed runs never see a half-built asset.

Measured here (2 cores, no pip cache): first build of everything about 37 s (pip download of
the 76.6 MB sdist and its metadata step 7-10 s, Qwen2 GGUF conversion 12-17 s, LLaMA 4 s,
Mistral v1 / v3 1 s each, plus importing transformers); cached: one stat per asset, and loading a
saved tokenizer takes 0.2-0.5 s (LLaMA, Mistral) / 1.1-1.4 s (Qwen2).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "LLAMA_CPP_SDIST",
    "LLAMA_CPP_SDIST_SHA256",
    "assets_dir",
    "gguf_vocab_dir",
    "llama_tokenizer_dir",
    "qwen2_tokenizer_dir",
    "mistral_tokenizer_dir",
    "reference_encodings",
]

LLAMA_CPP_SDIST = "llama-cpp-python==0.3.36"
LLAMA_CPP_SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
# pinned: the GGUF vocabularies (and so every expected id in the tests) come from this file
LLAMA_CPP_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
_GGUF_NAMES = ("ggml-vocab-llama-spm.gguf", "ggml-vocab-qwen2.gguf")
_GGUF_MEMBER_DIR = "/vendor/llama.cpp/models/"

# bump when a recipe changes: cached assets with another recipe are rebuilt
_RECIPE = 1
_MARKER = "halluprobe-asset.json"

_MISTRAL_MODELS = {
    "v1": ("tokenizer.model.v1",),
    "v3": ("tokenizer.model.v3", "mistral_instruct_tokenizer_240323.model.v3"),
}


def assets_dir() -> Path:
    """The cache folder: ``$HALLUPROBE_TEST_ASSETS`` or ``~/.cache/halluprobe-test-assets``."""
    env = os.environ.get("HALLUPROBE_TEST_ASSETS")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "halluprobe-test-assets"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    """Exclusive inter-process lock for one asset (blocking)."""
    locks = assets_dir() / ".locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{name}.lock", "a+") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: the atomic rename below still keeps assets whole
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _ready(folder: Path) -> bool:
    marker = folder / _MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("recipe") == _RECIPE
    except (OSError, ValueError):
        return False


def _build_once(name: str, build: Callable[[Path], dict[str, Any]]) -> Path:
    """Return ``assets_dir()/name``, building it with ``build(tmp_folder)`` if needed.

    ``build`` fills a fresh temporary folder and returns facts for the marker file; the folder is
    renamed into place only after the build (and its checks) succeeded.
    """
    final = assets_dir() / name
    if _ready(final):
        return final
    with _lock(name):
        if _ready(final):  # another process built it while we waited
            return final
        for leftover in assets_dir().glob(f".{name}-*"):  # from a killed build; we hold the lock
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=assets_dir()))
        try:
            started = time.perf_counter()
            facts = build(tmp)
            facts.update(recipe=_RECIPE, build_s=round(time.perf_counter() - started, 2))
            (tmp / _MARKER).write_text(json.dumps(facts, indent=2, sort_keys=True), encoding="utf-8")
            if final.exists():  # stale (older recipe or interrupted without marker)
                shutil.rmtree(final)
            try:
                os.replace(tmp, final)
            except OSError:
                if not _ready(final):  # without fcntl another process may have won the rename
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _build_gguf_vocab(out: Path) -> dict[str, Any]:
    # pip download only: nothing of llama.cpp is built or installed. --no-binary names the one
    # package: ":all:" also reaches the isolated metadata step, which then builds
    # scikit-build-core and its own build tools from source (396 s on 2 cores without a pip
    # cache, against 7 s here).
    download = out / "download"
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
        "--disable-pip-version-check", "-q", "-d", str(download), LLAMA_CPP_SDIST,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    sdist = download / LLAMA_CPP_SDIST_FILE
    if proc.returncode != 0 or not sdist.is_file():
        raise RuntimeError(
            f"could not download {LLAMA_CPP_SDIST} (needed for the real LLaMA-2/Qwen2 tokenizers); "
            f"pre-populate $HALLUPROBE_TEST_ASSETS or allow the package index.\n{proc.stderr[-2000:]}"
        )
    digest = _sha256(sdist)
    if digest != LLAMA_CPP_SDIST_SHA256:
        raise RuntimeError(f"{sdist.name}: sha256 {digest}, expected {LLAMA_CPP_SDIST_SHA256}")

    wanted = {n for base in _GGUF_NAMES for n in (base, base + ".inp", base + ".out")}
    found: dict[str, str] = {}
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive:
            base = member.name.rsplit("/", 1)[-1]
            if member.isfile() and _GGUF_MEMBER_DIR in member.name and base in wanted:
                source = archive.extractfile(member)
                assert source is not None
                with source, open(out / base, "wb") as target:  # our own name: no path traversal
                    shutil.copyfileobj(source, target)
                found[base] = _sha256(out / base)
    missing = wanted - set(found)
    if missing:
        raise RuntimeError(f"{sdist.name} lacks {sorted(missing)}")
    shutil.rmtree(download)  # keep the cache small: only the 6.6 MB we use stays
    return {"source": LLAMA_CPP_SDIST, "sdist_sha256": digest, "files": found}


def gguf_vocab_dir() -> Path:
    """Folder with ``ggml-vocab-{llama-spm,qwen2}.gguf`` and their ``.inp`` / ``.out`` files."""
    return _build_once("llama-cpp-vocab", _build_gguf_vocab)


def reference_encodings(gguf: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's reference encodings shipped beside a vocab GGUF (``.inp`` / ``.out``), no BOS."""
    texts = Path(f"{gguf}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    lines = Path(f"{gguf}.out").read_text(encoding="utf-8").split("\n")
    if len(texts) != len(lines):
        raise RuntimeError(f"{gguf.name}: {len(texts)} inputs but {len(lines)} outputs")
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines) if t]


def _check_reference(tokenizer: Any, gguf: Path, *, skip_leading_space: bool) -> int:
    # transformers 5.x drops one leading space of a string that STARTS with a space on the
    # SentencePiece (Metaspace) conversion (see ASSETS.md): 15 of the 45 LLaMA strings; yes/no
    # ids are untouched. Every other reference string must encode exactly as llama.cpp does.
    checked = 0
    for text, expected in reference_encodings(gguf):
        if skip_leading_space and text.startswith(" "):
            continue
        got = tokenizer.encode(text, add_special_tokens=False)
        if got != expected:
            raise RuntimeError(f"{gguf.name}: {text!r} -> {got}, llama.cpp says {expected}")
        checked += 1
    if checked < 30:
        raise RuntimeError(f"{gguf.name}: only {checked} reference strings checked")
    return checked


def _check_ids(tokenizer: Any, expected: dict[str, int], label: str) -> None:
    got = {piece: tokenizer.convert_tokens_to_ids(piece) for piece in expected}
    if got != expected:
        raise RuntimeError(f"{label}: piece ids {got}, expected {expected}")


def _gguf_tokenizer_builder(
    gguf_name: str, expected: dict[str, int], *, skip_leading_space: bool
) -> Callable[[Path], dict[str, Any]]:
    def build(out: Path) -> dict[str, Any]:
        from transformers import AutoTokenizer

        vocab = gguf_vocab_dir()
        tokenizer = AutoTokenizer.from_pretrained(str(vocab), gguf_file=gguf_name)
        tokenizer.save_pretrained(str(out))
        # check what the tests will load: the saved copy, not the in-memory conversion
        reloaded = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
        _check_ids(reloaded, expected, gguf_name)
        checked = _check_reference(reloaded, vocab / gguf_name, skip_leading_space=skip_leading_space)
        return {"source": f"{LLAMA_CPP_SDIST}:{gguf_name}", "reference_strings_checked": checked,
                "len": len(reloaded)}

    return build


_LLAMA_IDS = {"yes": 3582, "Yes": 8241, "▁yes": 4874, "▁Yes": 3869,
              "no": 1217, "No": 3782, "▁no": 694, "▁No": 1939}
_QWEN2_IDS = {"Yes": 9454, "No": 2753, "ĠYes": 7414, "ĠNo": 2308}
_MISTRAL_IDS = {
    "v1": {"▁Yes": 5592, "▁No": 1770, "Yes": 5613, "No": 2501},
    "v3": {"▁Yes": 6360, "▁No": 2538},
}


def llama_tokenizer_dir() -> Path:
    """LLaMA-2 / Vicuna / LLaVA-1.5 tokenizer (32000 pieces, adds BOS), a ``save_pretrained`` folder."""
    build = _gguf_tokenizer_builder("ggml-vocab-llama-spm.gguf", _LLAMA_IDS, skip_leading_space=True)
    return _build_once("llama2-tokenizer", build)


def qwen2_tokenizer_dir() -> Path:
    """Qwen2 tokenizer (byte-level BPE; 151643 pieces + specials, padded with ``[PADn]`` to 151936)."""
    # byte-level BPE: all 45 reference strings encode exactly, leading spaces included
    build = _gguf_tokenizer_builder("ggml-vocab-qwen2.gguf", _QWEN2_IDS, skip_leading_space=False)
    return _build_once("qwen2-tokenizer", build)


def _mistral_model_file(version: str) -> Path:
    import mistral_common

    data = Path(mistral_common.__file__).parent / "data"
    for name in _MISTRAL_MODELS[version]:
        if (data / name).is_file():
            return data / name
    raise RuntimeError(f"mistral-common {mistral_common.__version__} ships no {version} tokenizer in {data}")


def _build_mistral(version: str) -> Callable[[Path], dict[str, Any]]:
    def build(out: Path) -> dict[str, Any]:
        import sentencepiece
        from transformers import AutoTokenizer, LlamaTokenizer

        model = _mistral_model_file(version)
        with tempfile.TemporaryDirectory() as staging:
            shutil.copyfile(model, Path(staging) / "tokenizer.model")
            # add_bos_token: as in Mistral's own tokenizer_config.json
            tokenizer = LlamaTokenizer.from_pretrained(staging, add_bos_token=True)
            tokenizer.save_pretrained(str(out))
        reloaded = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
        _check_ids(reloaded, _MISTRAL_IDS[version], model.name)
        # SentencePiece itself is the reference: every piece, and a few encodings (with BOS)
        sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
        pieces = reloaded.convert_ids_to_tokens(list(range(sp.get_piece_size())))
        if pieces != [sp.id_to_piece(i) for i in range(sp.get_piece_size())]:
            raise RuntimeError(f"{model.name}: pieces differ from SentencePiece")
        # (runs of spaces differ: HF merges "  " into "▁▁", SentencePiece gives "▁" + "▁b"; not checked)
        for text in ("Is there a cat in the image? Yes", "No, there is not.", "a b\nc 12.5% ünï 猫"):
            got = reloaded.encode(text)
            if got != [sp.bos_id(), *sp.encode(text)]:
                raise RuntimeError(f"{model.name}: {text!r} -> {got}, SentencePiece says {sp.encode(text)}")
        return {"source": f"mistral-common:{model.name}", "model_sha256": _sha256(model),
                "len": len(reloaded)}

    return build


def mistral_tokenizer_dir(version: str = "v1") -> Path:
    """Mistral tokenizer from mistral-common: ``v1`` (32000, LLaVA-1.6-Mistral) or ``v3`` (32768)."""
    if version not in _MISTRAL_MODELS:
        raise ValueError(f"unknown Mistral tokenizer version {version!r}; known: {sorted(_MISTRAL_MODELS)}")
    return _build_once(f"mistral-{version}-tokenizer", _build_mistral(version))


if __name__ == "__main__":  # python tests/_assets.py: build (or find) everything, with timings
    for label, make in (("llama2", llama_tokenizer_dir), ("qwen2", qwen2_tokenizer_dir),
                        ("mistral-v1", mistral_tokenizer_dir), ("mistral-v3", lambda: mistral_tokenizer_dir("v3"))):
        t0 = time.perf_counter()
        where = make()
        print(f"{label}: {where} ({time.perf_counter() - t0:.2f} s)")
