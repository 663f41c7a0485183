"""Yes/no token sets: derived from a model's own tokenizer, and the legacy LLaVA-1.5 ids checked.

The reference POPE logit evaluator reads LLaMA-2 ids (``legacy_2tok``, ``legacy_8tok``). On any
other vocabulary those ids are unrelated pieces, so every run derives its own sets
(:func:`derive_token_sets`) and records whether the legacy ids still mean yes/no there.

Derivation rule (docs/design/runs-and-readouts.md): an id belongs to the yes (no) set when its single-token
text, with whitespace and the word-start markers ``▁`` / ``Ġ`` removed at both ends and case
folded, equals ``yes`` (``no``). "Single-token text" is what the tokenizer's own decoder makes of
that one piece: byte-level vocabularies then turn ``Ġ`` into a space and ``Ċ`` / ``ĉ`` into a
newline / tab, and byte-fallback pieces such as ``<0x0A>`` into their character.

Decisions:
- Internal whitespace is kept: a piece ``"n o"`` is not the answer "no".
- No Unicode compatibility folding (NFKC): it would map ``№`` (numero sign) to ``No``.
- Non-special added tokens are included (a model can emit them as answer text); special
  tokens are excluded (control tokens, dropped when decoding with ``skip_special_tokens``).
- ``vocab_size`` is ``len(tokenizer)``: every id the tokenizer can produce, added tokens
  included (a model's embedding matrix may be padded beyond it).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.records import TokenLogprob, TokenSets

__all__ = [
    "LEGACY_2TOK_YES",
    "LEGACY_2TOK_NO",
    "LEGACY_8TOK_YES",
    "LEGACY_8TOK_NO",
    "LEGACY_IDS",
    "strip_piece",
    "normalize_piece",
    "classify_piece",
    "classify_letter",
    "derive_letter_sets",
    "derive_token_sets",
    "piece_token_sets",
    "greedy_answer",
    "describe_token_sets",
    "tokenizer_fingerprint",
    "load_tokenizer",
]

logger = logging.getLogger(__name__)

# LLaMA-2 vocabulary (LLaVA-1.5): "yes" / "no" without the word-start marker.
LEGACY_2TOK_YES = 3582
LEGACY_2TOK_NO = 1217
# yes Yes ▁yes ▁Yes / no No ▁no ▁No
LEGACY_8TOK_YES: tuple[int, ...] = (3582, 8241, 4874, 3869)
LEGACY_8TOK_NO: tuple[int, ...] = (1217, 3782, 694, 1939)
# every legacy id with the answer its piece must normalise to
LEGACY_IDS: dict[int, str] = {
    **{i: "yes" for i in LEGACY_8TOK_YES},
    **{i: "no" for i in LEGACY_8TOK_NO},
}

# every character Python's str.isspace() accepts (a test checks this against all code points),
# plus the word-start markers: str.strip with an explicit set is one C call per piece
_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
    "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_MARKERS = "\u2581\u0120"  # ▁ (SentencePiece), Ġ (byte-level BPE)
_EDGE_CHARS = _WHITESPACE + _MARKERS


def strip_piece(piece: str) -> str:
    """Strip whitespace and the markers ``▁`` / ``Ġ`` from both ends (no case folding)."""
    return piece.strip(_EDGE_CHARS)


def normalize_piece(piece: str) -> str:
    """Strip whitespace and the markers ``▁`` / ``Ġ`` from both ends, then case fold.

    ``"▁Yes"`` and ``"ĠYes"`` -> ``"yes"``. Works on raw pieces and on decoded text alike;
    ``Ċ`` (byte-level newline) is NOT removed here, because in a SentencePiece vocabulary it is
    a real letter: :func:`derive_token_sets` decodes byte-level pieces first.
    """
    return strip_piece(piece).casefold()


def classify_piece(text: str) -> Literal["yes", "no"] | None:
    """The derivation rule for one token's text: ``"yes"``, ``"no"``, or None (neither).

    The one place the rule lives: :func:`derive_token_sets` applies it to every id of a
    vocabulary, and servers that report token strings instead of ids (``keyed_by="piece"``)
    apply it to each returned piece.
    """
    norm = normalize_piece(text)
    if norm == "yes" or norm == "no":
        return norm  # type: ignore[return-value]
    return None


def classify_letter(text: str, letters: Sequence[str] = ("A", "B", "C", "D")) -> str | None:
    """The option-letter rule for one token's text: the letter, or None.

    The same edge stripping as :func:`classify_piece`, but case-sensitive: a lower-case ``a`` is
    also the article, so it is not read as option A.
    """
    stripped = strip_piece(text)
    return stripped if stripped in letters else None


def piece_token_sets(source: str) -> TokenSets:
    """Token sets for a backend without a vocabulary (an OpenAI-compatible server).

    Such a server reports the first token's top alternatives as strings, never ids, so the
    sets cannot be listed in advance: they are derived per sample from the returned pieces by
    :func:`classify_piece` (``keyed_by="piece"``). The legacy LLaMA-2 id readouts cannot be read
    and are marked invalid.
    """
    return TokenSets(
        yes_ids=[],
        no_ids=[],
        yes_pieces=[],
        no_pieces=[],
        legacy_valid=False,
        legacy_pieces={},
        vocab_size=0,
        tokenizer_fingerprint=f"pieces:{source}",
        keyed_by="piece",
    )


def greedy_answer(token: TokenLogprob, sets: TokenSets) -> Literal["yes", "no"] | None:
    """Which set the (greedy) first token belongs to: by id, or by its piece when the run has no ids."""
    if sets.keyed_by == "piece":
        return classify_piece(token.piece)
    if token.id is not None:
        return "yes" if token.id in sets.yes_ids else "no" if token.id in sets.no_ids else None
    return "yes" if token.piece in sets.yes_pieces else "no" if token.piece in sets.no_pieces else None


def _all_pieces(tokenizer: Any) -> list[str | None]:
    """Raw piece of every id ``0 .. len(tokenizer) - 1`` (None for holes), in one bulk call."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return [p if isinstance(p, str) else None for p in pieces]


def _added_tokens(tokenizer: Any) -> dict[int, Any]:
    """id -> AddedToken; empty where the tokenizer has no such table (e.g. MistralCommonBackend,
    where ``added_tokens_decoder`` is a method that is not implemented)."""
    table = getattr(tokenizer, "added_tokens_decoder", None)
    return dict(table) if isinstance(table, dict) else {}


def _special_ids(tokenizer: Any, added: dict[int, Any]) -> set[int]:
    special = {i for i, t in added.items() if getattr(t, "special", False)}
    try:
        special.update(int(i) for i in getattr(tokenizer, "all_special_ids", []) or [])
    except Exception:  # noqa: BLE001 - optional: the added-token flags already cover most
        pass
    return special


def _piece_decoder(tokenizer: Any) -> Callable[[list[str]], str] | None:
    """The tokenizer's own decoder (pieces -> text), or None when it has none."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None) if backend is not None else None
    if decoder is not None:
        return decoder.decode  # tokenizers' Rust decoder: about 1 us a piece
    convert = getattr(tokenizer, "convert_tokens_to_string", None)
    return convert if callable(convert) else None


def _single_token_texts(
    tokenizer: Any, pieces: Sequence[str | None], added: dict[int, Any]
) -> list[str | None]:
    """Text of each id on its own. Added tokens are literal text, never run through the decoder."""
    decode = _piece_decoder(tokenizer)
    texts: list[str | None] = list(pieces)
    if decode is not None:
        try:
            texts = [None if p is None else decode([p]) for p in pieces]
        except NotImplementedError:  # e.g. MistralCommonBackend: its pieces already are text
            pass
        except Exception:  # noqa: BLE001 - rare decoders reject odd pieces: go one by one
            texts = [None if p is None else _decode_or_raw(decode, p) for p in pieces]
    for i, token in added.items():
        if 0 <= i < len(texts):
            texts[i] = str(token.content)
    return texts


def _decode_or_raw(decode: Callable[[list[str]], str], piece: str) -> str:
    try:
        return decode([piece])
    except Exception:  # noqa: BLE001 - an undecodable piece is not yes/no: keep it raw
        return piece


def _fingerprint(pieces: Sequence[str | None], added: dict[int, Any]) -> str:
    added_rows = sorted(
        (int(i), str(t.content), bool(getattr(t, "special", False))) for i, t in added.items()
    )
    # pieces in id order ARE the sorted (id, piece) vocabulary: no sort, one json.dumps
    payload = json.dumps(
        {"pieces": list(pieces), "added": added_rows}, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 (hex) over the vocabulary (every id with its piece, in id order) plus added tokens.

    Stable across ``save_pretrained`` / reload; it changes when any id -> piece mapping or any
    added token (content, special flag) changes. Encoding rules (merges, normalizer) are not
    part of it: the readouts depend only on what the ids mean.
    """
    return _fingerprint(_all_pieces(tokenizer), _added_tokens(tokenizer))


def _classify_vocabulary(
    tokenizer: Any, classify: Callable[[str], str | None]
) -> tuple[list[str | None], dict[int, Any], list[str | None], dict[str, list[tuple[int, str]]]]:
    """Pieces, added tokens, single-token texts, and class -> [(id, piece)] for every
    non-special id whose single-token text ``classify`` maps to a class."""
    pieces = _all_pieces(tokenizer)
    added = _added_tokens(tokenizer)
    texts = _single_token_texts(tokenizer, pieces, added)
    special = _special_ids(tokenizer, added)
    classes: dict[str, list[tuple[int, str]]] = {}
    for i, text in enumerate(texts):
        if text is None or i in special:
            continue
        label = classify(text)
        if label is not None:
            classes.setdefault(label, []).append((i, str(pieces[i])))
    return pieces, added, texts, classes


def derive_letter_sets(tokenizer: Any, letters: Sequence[str] = ("A", "B", "C", "D")) -> dict[str, list[int]]:
    """Option letter -> the ids whose single-token text is that letter (:func:`classify_letter`),
    from the same vocabulary walk as :func:`derive_token_sets`."""
    _, _, _, classes = _classify_vocabulary(tokenizer, lambda text: classify_letter(text, letters))
    return {letter: [i for i, _ in classes.get(letter, [])] for letter in letters}


def derive_token_sets(tokenizer: Any) -> TokenSets:
    """Yes/no sets of this tokenizer, the legacy-id check, vocabulary size and fingerprint.

    ``tokenizer`` is any transformers tokenizer (fast or slow). About 0.3 s on Qwen2's 152k ids:
    pieces come from one bulk ``convert_ids_to_tokens`` call, texts from the Rust decoder.
    """
    pieces, added, texts, classes = _classify_vocabulary(tokenizer, classify_piece)
    yes, no = classes.get("yes", []), classes.get("no", [])

    legacy_pieces: dict[str, str | None] = {}
    legacy_valid = True
    for i, answer in LEGACY_IDS.items():
        piece = pieces[i] if i < len(pieces) else None
        text = texts[i] if i < len(texts) else None
        legacy_pieces[str(i)] = piece
        if piece is None or text is None or normalize_piece(text) != answer:
            legacy_valid = False
    if not legacy_valid:
        logger.info("legacy LLaVA-1.5 yes/no ids are not yes/no in this vocabulary: %s", legacy_pieces)

    return TokenSets(
        yes_ids=[i for i, _ in yes],
        no_ids=[i for i, _ in no],
        yes_pieces=[p for _, p in yes],
        no_pieces=[p for _, p in no],
        legacy_valid=legacy_valid,
        legacy_pieces=legacy_pieces,
        vocab_size=len(pieces),
        tokenizer_fingerprint=_fingerprint(pieces, added),
    )


def describe_token_sets(sets: TokenSets) -> dict[str, Any]:
    """Plain-JSON view for ``halluprobe tokens --json``: every TokenSets field plus the legacy ids."""
    out: dict[str, Any] = {
        "yes_ids": sorted(int(i) for i in sets.yes_ids),
        "no_ids": sorted(int(i) for i in sets.no_ids),
        "yes_pieces": [p for _, p in sorted(zip(sets.yes_ids, sets.yes_pieces))],
        "no_pieces": [p for _, p in sorted(zip(sets.no_ids, sets.no_pieces))],
        "legacy_valid": bool(sets.legacy_valid),
        "legacy_pieces": dict(sets.legacy_pieces),
        "legacy_ids": {
            "legacy_2tok": {"yes": [LEGACY_2TOK_YES], "no": [LEGACY_2TOK_NO]},
            "legacy_8tok": {"yes": list(LEGACY_8TOK_YES), "no": list(LEGACY_8TOK_NO)},
        },
        "vocab_size": int(sets.vocab_size),
        "tokenizer_fingerprint": sets.tokenizer_fingerprint,
        "keyed_by": sets.keyed_by,
    }
    return out


def _looks_like_path(value: str) -> bool:
    # a hub id is "name" or "org/name"; anything else that names a path is a path
    return value.startswith(("/", ".", "~")) or value.count("/") > 1 or "\\" in value


def load_tokenizer(path_or_id: str, *, trust_remote_code: bool = False) -> Any:
    """Load a tokenizer from a tokenizer folder, a model folder, a ``.gguf`` file, or a hub id.

    Tries ``AutoTokenizer``, then ``AutoProcessor(...).tokenizer`` (models whose tokenizer is
    only reachable through their processor). An existing local path is loaded with
    ``local_files_only=True`` so nothing is fetched. Raises InputError for a local path that
    does not exist or holds no loadable tokenizer, RuntimeFailure when a hub id cannot be loaded.
    """
    from transformers import AutoProcessor, AutoTokenizer  # lazy: heavy import

    path = Path(path_or_id).expanduser()
    local = path.exists()
    if not local and _looks_like_path(path_or_id):
        raise InputError("no such file or directory", path_or_id)

    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if local:
        kwargs["local_files_only"] = True
    if local and path.is_file():
        if path.suffix != ".gguf":
            raise InputError("expected a folder or a .gguf file", path_or_id)
        source, kwargs["gguf_file"] = str(path.parent), path.name
    else:
        source = str(path) if local else path_or_id

    errors: list[str] = []
    try:
        return AutoTokenizer.from_pretrained(source, **kwargs)
    except Exception as exc:  # noqa: BLE001 - fall through to the processor, report both
        errors.append(f"AutoTokenizer: {type(exc).__name__}: {exc}")
    if "gguf_file" not in kwargs:
        try:
            tokenizer = getattr(AutoProcessor.from_pretrained(source, **kwargs), "tokenizer", None)
            if tokenizer is not None:
                return tokenizer
            errors.append("AutoProcessor: the processor has no tokenizer")
        except Exception as exc:  # noqa: BLE001
            errors.append(f"AutoProcessor: {type(exc).__name__}: {exc}")
    message = "cannot load a tokenizer: " + "; ".join(e.splitlines()[0] for e in errors)
    if local:
        raise InputError(message, path_or_id)
    raise RuntimeFailure(f"{path_or_id}: {message}")
