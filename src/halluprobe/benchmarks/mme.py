"""MME's questions in the official layouts, as question files a run executes like POPE's.

Two layouts are read (both tab-separated text, one question per line, two questions per image):

- the release folder (``MME_Benchmark_release_version``): one folder per subtask; either the
  images and, beside each, ``<stem>.txt`` with ``question<TAB>answer`` lines (existence, count,
  position, color, OCR, the cognition subtasks), or ``images/`` and ``questions_answers_YN/``
  holding the same ``<stem>.txt`` files (artwork, celebrity, landmark, posters, scene);
- the eval tool's files (``eval_tool/Your_Results/<subtask>.txt``): ``image<TAB>question<TAB>answer``
  lines, with the model's response as a fourth column in a results file.

A third input is lmms-lab's copy (the Hugging Face dataset ``lmms-lab/MME``, ``data/test-*.parquet``):
one row per question with ``question_id`` (the image's path, ``code_reasoning/0020.png``),
``question``, ``answer``, ``category`` (the subtask) and ``image`` (``{bytes, path}``). Its
images are written out under their ``question_id`` (:func:`write_parquet_images`), so an image
path is relative to that images folder and keeps the release's file name.

A subtask becomes one question file, ``<subtask>.jsonl`` (so its split is the subtask's name),
its questions numbered in the eval tool's line order: ``calculation.py`` pairs lines 2k and
2k+1 as one image, so ``question_id // 2`` is that pair. Image paths are relative to the release
folder (``existence/000000006040.jpg``, ``artwork/images/10002.jpg``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError
from halluprobe.files import plain_component, write_atomic
from halluprobe.jsonl import read_text
from halluprobe.readouts.benchmark_rules import one_line
from halluprobe.records import Label, Question

__all__ = [
    "COGNITION",
    "HALLUCINATION",
    "PARQUET_COLUMNS",
    "PERCEPTION",
    "MmeLine",
    "mme_questions",
    "parquet_files",
    "read_eval_tool_file",
    "read_parquet",
    "read_release_folder",
    "results_lines",
    "write_parquet_images",
]

# calculation.py's eval_type_dict, in its order
PERCEPTION: tuple[str, ...] = ("existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark", "artwork", "OCR")
COGNITION: tuple[str, ...] = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")
# the hallucination subsets papers report (MME's object-level perception subtasks)
HALLUCINATION: tuple[str, ...] = ("existence", "count", "position", "color")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
# lmms-lab/MME's columns (lmms-eval's mme task reads these); the image is read in a second pass
PARQUET_COLUMNS: tuple[str, ...] = ("question_id", "question", "answer", "category", "image")


@dataclass(frozen=True)
class MmeLine:
    """One question: its subtask, where it was read, the image path (relative to the release
    folder), the question, the answer (yes/no) and, in a results file, the model's response."""

    subtask: str
    source: Path
    line: int
    image: str
    question: str
    answer: Label
    response: str | None = None


def _answer(value: str, path: Path, line: int) -> Label:
    # calculation.py lower-cases the answer and asserts yes or no
    answer = value.strip().lower()
    if answer not in ("yes", "no"):
        raise InputError(f"answer {value!r} is not Yes or No", path, line)
    return answer  # type: ignore[return-value]


def _lines(path: Path) -> list[tuple[int, str]]:
    _, text = read_text(path, "MME question file")
    rows = [(i, raw.rstrip("\r")) for i, raw in enumerate(text.split("\n"), start=1)]
    if rows and rows[-1][1] == "":
        rows.pop()  # the final newline
    if not rows:
        raise InputError("empty file: no questions", path)
    return rows


def _image_in(folder: Path, name: str) -> str | None:
    """The image's path relative to the release folder's root, in either subtask layout."""
    for candidate in (folder / name, folder / "images" / name):
        if candidate.is_file():
            return candidate.relative_to(folder.parent).as_posix()
    return None


def read_eval_tool_file(path: str | Path, *, images_root: str | Path | None = None, results: bool | None = False) -> list[MmeLine]:
    """An eval-tool file (``<subtask>.txt``): three columns, four with ``results=True``, either
    (the response, if any, kept) with ``results=None``.

    With ``images_root`` (the release folder) each image must be found in its subtask's folder
    (beside the text files or in ``images/``) and gets that path; without it, ``<subtask>/<name>``.
    """
    p = Path(path)
    subtask = plain_component(p.stem, "MME subtask", p)
    folder = Path(images_root) / subtask if images_root is not None else None
    if folder is not None and not folder.is_dir():
        raise InputError(f"no image folder for subtask {subtask!r} in the MME release folder", folder)
    columns = (3, 4) if results is None else ((4,) if results else (3,))
    out: list[MmeLine] = []
    for lineno, raw in _lines(p):
        fields = raw.split("\t")
        if len(fields) not in columns:
            want = " or ".join(str(c) for c in columns)
            raise InputError(f"expected {want} tab-separated columns (image, question, answer{', response' if results is not False else ''}), got {len(fields)}", p, lineno)
        name, question = fields[0], fields[1]
        if not name.strip() or not question.strip():
            raise InputError("empty image name or question", p, lineno)
        image = f"{subtask}/{plain_component(name, 'image name', p, lineno)}"
        if folder is not None:
            found = _image_in(folder, name)
            if found is None:
                raise InputError(f"image {name!r} is not in {folder} (nor in its images/)", p, lineno)
            image = found
        out.append(MmeLine(subtask, p, lineno, image, question, _answer(fields[2], p, lineno), fields[3] if len(fields) == 4 else None))
    return out


def _subtask_lines(folder: Path) -> list[MmeLine]:
    """A release subtask folder's questions: images sorted by name, each with its text file."""
    subtask = folder.name
    qa_dir = folder / "questions_answers_YN" if (folder / "questions_answers_YN").is_dir() else folder
    image_dir = folder / "images" if (folder / "images").is_dir() else folder
    images = sorted(p for p in image_dir.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES and p.is_file())
    if not images:
        raise InputError(f"no images in subtask folder {subtask!r}", image_dir)
    out: list[MmeLine] = []
    for image in images:
        txt = qa_dir / f"{image.stem}.txt"
        if not txt.is_file():
            raise InputError(f"image {image.name!r} has no question file {txt.name!r}", qa_dir)
        rel = image.relative_to(folder.parent).as_posix()
        for lineno, raw in _lines(txt):
            fields = raw.split("\t")
            if len(fields) != 2 or not fields[0].strip():
                raise InputError(f"expected question<TAB>answer, got {len(fields)} column(s)", txt, lineno)
            out.append(MmeLine(subtask, txt, lineno, rel, fields[0], _answer(fields[1], txt, lineno)))
    return out


def read_release_folder(root: str | Path, subtasks: tuple[str, ...] | None = None) -> dict[str, list[MmeLine]]:
    """The release folder's subtasks (those of ``subtasks``, default every MME subtask present;
    a named one that is absent is bad input) -> their questions in eval-tool order."""
    base = Path(root)
    if not base.is_dir():
        raise InputError("the MME release folder is not a directory", base)
    wanted = subtasks if subtasks is not None else tuple(s for s in (*PERCEPTION, *COGNITION) if (base / s).is_dir())
    if not wanted:
        raise InputError(f"no MME subtask folder ({', '.join(PERCEPTION + COGNITION)}) in it", base)
    out: dict[str, list[MmeLine]] = {}
    for subtask in wanted:
        folder = base / plain_component(subtask, "MME subtask")
        if not folder.is_dir():
            raise InputError(f"no folder for subtask {subtask!r}", folder)
        out[subtask] = _subtask_lines(folder)
    return out


def mme_questions(lines: list[MmeLine]) -> list[Question]:
    """One subtask's lines as questions, ``question_id`` = line order (``// 2``: the tool's pair).

    An odd number of lines, or a pair whose two lines name different images, is refused: the
    official tool pairs consecutive lines as one image, and such a file would pair strangers."""
    if len(lines) % 2:
        last = lines[-1]
        raise InputError(f"{len(lines)} questions: MME asks two per image (the last has no partner)", last.source, last.line)
    seen: dict[str, tuple[Path, int]] = {}
    for first, second in zip(lines[::2], lines[1::2]):
        if first.image != second.image:
            raise InputError(f"consecutive questions pair images {first.image!r} and {second.image!r}: MME pairs two lines per image", second.source, second.line)
        if first.image in seen:
            where = seen[first.image]
            raise InputError(f"duplicate image {first.image!r} (first at {where[0]}:{where[1]})", first.source, first.line)
        seen[first.image] = (first.source, first.line)
    return [
        Question(split=line.subtask, question_id=i, image=line.image, text=line.question, label=line.answer, object=None)
        for i, line in enumerate(lines)
    ]


def results_lines(rows: list[tuple[str, str, Label, str]]) -> str:
    """The eval tool's results file for one subtask: ``image<TAB>question<TAB>Answer<TAB>response``
    per question (the image's file name only; the response as :func:`one_line` makes it, so
    ``text:mme`` reads what the tool reads)."""
    out = []
    for image, question, label, response in rows:
        out.append(f"{image.rsplit('/', 1)[-1]}\t{question}\t{label.capitalize()}\t{one_line(response)}\n")
    return "".join(out)


# -- lmms-lab's parquet copy ------------------------------------------------------------------


def _parquet_module() -> Any:
    # optional and heavy: imported on use only, and tables are read as Arrow (no pandas)
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("reading lmms-lab's MME parquet files needs pyarrow: pip install pyarrow") from None
    # before 14.0.1 a parquet file could make pyarrow unpickle an extension type (CVE-2023-47248)
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", pyarrow.__version__)
    if found is None or tuple(int(g) for g in found.groups()) < (14, 0, 1):
        raise InputError(f"pyarrow {pyarrow.__version__} can unpickle data from a parquet file (CVE-2023-47248): pip install 'pyarrow>=14.0.1'")
    return pq


def parquet_files(paths: Iterable[str | Path]) -> list[Path]:
    """The parquet files named: a file as given, a folder's ``*.parquet`` (else its
    ``data/*.parquet``, the dataset repository's layout) sorted by name; in the order given."""
    out: list[Path] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            found = sorted(p.glob("*.parquet")) or sorted(p.glob("data/*.parquet"))
            if not found:
                raise InputError("no *.parquet file in the folder (nor in its data/)", p)
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise InputError("no such parquet file or folder", p)
    if len(set(out)) != len(out):
        raise InputError("a parquet file is named twice", next(p for p in out if out.count(p) > 1))
    return out


def _open_parquet(pq: Any, path: Path) -> Any:
    try:
        handle = pq.ParquetFile(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"not a readable parquet file: {str(e).splitlines()[0] if str(e) else type(e).__name__}", path) from None
    names = set(handle.schema_arrow.names)
    missing = [c for c in PARQUET_COLUMNS if c not in names]
    if missing:
        raise InputError(f"no column {', '.join(repr(c) for c in missing)} (lmms-lab/MME has {', '.join(PARQUET_COLUMNS)})", path)
    image = handle.schema_arrow.field("image").type
    struct_bytes = hasattr(image, "get_field_index") and image.get_field_index("bytes") >= 0
    if not (struct_bytes or str(image) in ("binary", "large_binary")):
        raise InputError(f"column 'image' is {image}, not lmms-lab/MME's struct {{bytes, path}}", path)
    return handle


def _image_path(value: str, path: Path, row: int) -> str:
    """``question_id`` as a path inside the images folder: relative, plain components only."""
    parts = value.split("/")
    try:
        for part in parts:
            plain_component(part, "image path component")
    except InputError:
        raise InputError(f"question_id {value!r} would land outside the images folder: it must be a relative path of plain names", path, row) from None
    return value


def _text(value: object, column: str, path: Path, row: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"column {column!r} is empty or not text", path, row)
    return value


def read_parquet(paths: Iterable[str | Path], subtasks: tuple[str, ...] | None = None) -> dict[str, list[MmeLine]]:
    """lmms-lab's parquet files -> the subtasks' questions (those of ``subtasks``, default every
    MME subtask present; a named one that is absent is bad input), each in file order.

    A line's ``line`` is its row in its file (1-based) and ``image`` its ``question_id``. Only the
    text columns are read here; :func:`write_parquet_images` reads the images."""
    pq = _parquet_module()
    by_subtask: dict[str, list[MmeLine]] = {}
    seen: dict[tuple[str, str], tuple[Path, int]] = {}
    for path in parquet_files(paths):
        columns: dict[str, list[object]] = {c: [] for c in PARQUET_COLUMNS[:4]}
        for batch in _batches(_open_parquet(pq, path), path, list(PARQUET_COLUMNS[:4])):
            for c in columns:
                columns[c].extend(batch.column(c).to_pylist())
        for i in range(len(columns["question_id"])):
            row = i + 1
            qid = _image_path(_text(columns["question_id"][i], "question_id", path, row), path, row)
            question = _text(columns["question"][i], "question", path, row)
            answer = _answer(_text(columns["answer"][i], "answer", path, row), path, row)
            subtask = plain_component(_text(columns["category"][i], "category", path, row), "MME subtask", path, row)
            if (qid, question) in seen:
                first = seen[(qid, question)]
                raise InputError(f"duplicate question for image {qid!r} (first at {first[0]}:{first[1]})", path, row)
            seen[(qid, question)] = (path, row)
            by_subtask.setdefault(subtask, []).append(MmeLine(subtask, path, row, qid, question, answer))
    if not by_subtask:
        raise InputError("no rows in the parquet file(s)")
    wanted = subtasks if subtasks is not None else tuple(s for s in (*PERCEPTION, *COGNITION) if s in by_subtask)
    if not wanted:
        raise InputError(f"no MME subtask ({', '.join(PERCEPTION + COGNITION)}) in the parquet category column")
    absent = [s for s in wanted if s not in by_subtask]
    if absent:
        raise InputError(f"no rows of subtask {absent[0]!r} in the parquet file(s)")
    return {s: by_subtask[s] for s in wanted}


def _batches(handle: Any, path: Path, columns: list[str]) -> Iterable[Any]:
    """The file's record batches; a corrupt file is bad input (pyarrow raises OSError or ArrowInvalid)."""
    batches = handle.iter_batches(batch_size=64, columns=columns)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, ValueError) as e:
            raise InputError(f"cannot read the parquet file: {str(e).splitlines()[0] if str(e) else type(e).__name__}", path) from None
        yield batch


def _image_rows(pq: Any, path: Path, rows: set[int]) -> Iterable[tuple[int, str, bytes]]:
    """(row, question_id, image bytes) of the wanted rows of one file, a few rows at a time."""
    row = 0
    for batch in _batches(_open_parquet(pq, path), path, ["question_id", "image"]):
        image_col = batch.column(1)
        # lmms-lab's image is a struct {bytes, path}; a bare binary column is read as the bytes
        data = image_col.field("bytes").to_pylist() if hasattr(image_col, "field") else image_col.to_pylist()
        for qid, blob in zip(batch.column(0).to_pylist(), data):
            row += 1
            if row in rows:
                if not isinstance(blob, bytes) or not blob:
                    raise InputError(f"no image bytes for {qid!r}", path, row)
                yield row, qid, blob


def write_parquet_images(lines: Iterable[MmeLine], images_dir: str | Path) -> list[Path]:
    """Write each distinct image of ``lines`` (read from its parquet row) once, to
    ``images_dir/<question_id>``; returns the files. Every row's bytes are checked first (an
    image's rows must agree), so bad input writes nothing; the caller refuses existing files."""
    pq = _parquet_module()
    root = Path(images_dir)
    wanted: dict[Path, set[int]] = {}
    for line in lines:
        wanted.setdefault(line.source, set()).add(line.line)
    first: dict[str, tuple[str, Path, int]] = {}  # image -> (sha256, the row whose bytes are written)
    for path, rows in wanted.items():
        for row, qid, blob in _image_rows(pq, path, rows):
            digest = hashlib.sha256(blob).hexdigest()
            if qid not in first:
                first[qid] = (digest, path, row)
            elif first[qid][0] != digest:
                raise InputError(f"image {qid!r} differs from its bytes at {first[qid][1]}:{first[qid][2]}", path, row)
    # a second read writes them: holding every image (about 1 GB for MME) in memory is worse
    out: list[Path] = []
    for path in wanted:
        rows = {row for _, src, row in first.values() if src == path}
        for row, qid, blob in _image_rows(pq, path, rows):
            out.append(write_atomic(root / _image_path(qid, path, row), blob))
    return out
