"""Rows of several images in one batch (issue 33): the queue both prefix-cache engines draw
their batches from.

A row is one distinct prompt about one image (the requests that ask it identically share its
answer). Images are queued in order; a batch takes the next ``size`` rows whichever images
they belong to, so an image's rows may be split over two batches and a batch may hold rows of
many images. An image's prefix cache is computed when its first row enters a batch and dropped
when its last row has been answered: caches are held only for images whose rows are in flight
(at most a batch's worth of images, plus the one split at its end).

Models whose cache layers cannot be stacked across images (sliding-window layers: Gemma 3)
take their batches from one image at a time, as before. No torch imported here.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halluprobe.backends.hf.ahead import ahead
from halluprobe.backends.hf.core import ModelCore, error_response, is_oom
from halluprobe.records import Request, Response

if TYPE_CHECKING:
    from halluprobe.backends.hf.inputs import SharedPrefix, VLMInputs

__all__ = ["Encoded", "ImageRows", "Row", "RowQueue", "ahead_images", "distinct_prompts", "encode_image", "encoded_images"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Encoded:
    """An image read and its prompts encoded (``shared`` is ``None`` where they share no prefix,
    or it exceeds a sliding-attention window)."""

    image: Any
    shared: SharedPrefix | None
    seconds: float


def encode_image(
    core: ModelCore, group: Sequence[Request], prompts: list[str], new_tokens: int, inputs: VLMInputs | None = None
) -> Encoded | list[Response]:
    """Read the image of ``group`` (requests about one image) and encode ``prompts`` on it (with
    ``inputs``, the worker thread's processor, else the core's); or every request's error
    response (an unreadable image, a failed encoding)."""
    started = time.perf_counter()
    image = core.load_image(group[0].image_path)
    if isinstance(image, str):
        return [error_response(r, image) for r in group]
    try:
        shared = (inputs or core.inputs).encode_shared(prompts, image)
    except Exception as err:
        if is_oom(err):
            raise
        log.exception("image %s failed", group[0].image_path)
        return [error_response(r, f"{type(err).__name__}: {err}") for r in group]
    if shared is not None and not core.fits_window(shared, new_tokens):
        shared = None
    return Encoded(image, shared, time.perf_counter() - started)


def ahead_images(batch_size: int) -> int:
    """How many images :func:`encoded_images` encodes early: a batch's worth (a batch may be
    rows of that many images), at most 64 (their pixels wait in memory)."""
    return min(64, max(2, batch_size))


def encoded_images(
    core: ModelCore, groups: Iterable[list[Request]], new_tokens: int, depth: int
) -> Iterator[tuple[list[Request], Encoded | list[Response]]]:
    """Each group (requests about one image) with :func:`encode_image` of its distinct prompts,
    in order; with ``core.prefetch``, encoded up to ``depth`` images early on a worker thread
    (hf/ahead.py) while the caller runs batches."""
    depth = depth if core.prefetch else 0
    inputs = core.worker_inputs() if depth else None

    def encode(group: list[Request]) -> Encoded | list[Response]:
        return encode_image(core, group, list(distinct_prompts(group)), new_tokens, inputs)

    yield from ahead(groups, encode, depth)


def distinct_prompts(group: Sequence[Request]) -> dict[str, list[Request]]:
    """The requests about one image by prompt, in first-asked order: identical prompts (POPE's
    splits repeat questions about an image) are one computation."""
    by_prompt: dict[str, list[Request]] = {}
    for r in group:
        by_prompt.setdefault(r.prompt, []).append(r)
    return by_prompt


@dataclass(eq=False)
class ImageRows:
    """One image's rows, queued to run after its prefix: row ``i`` answers ``requests[i]`` from
    the prefix's suffix ``shared.suffixes[suffix_index[i]]``.

    ``state`` is what the engine computes for the image when its first row enters a batch (the
    prefix cache, and the decoding loop's contrast prefixes); ``error`` is set instead when
    that failed, and every row of the image is then an error sample."""

    path: str
    image: Any
    shared: SharedPrefix
    requests: list[list[Request]]
    suffix_index: list[int]
    seconds: float = 0.0  # the image's own preparation (encoding), shared out over its rows
    state: Any = None
    error: str | None = None
    left: int = field(init=False)  # rows not yet answered

    def __post_init__(self) -> None:
        self.left = len(self.requests)


@dataclass(frozen=True)
class Row:
    """One row of a batch: row ``index`` of ``image``."""

    image: ImageRows
    index: int

    @property
    def requests(self) -> list[Request]:
        return self.image.requests[self.index]

    @property
    def suffix(self) -> list[int]:
        return self.image.shared.suffixes[self.image.suffix_index[self.index]]


class RowQueue:
    """The rows waiting for a batch, in image order; see the module docstring."""

    def __init__(self, *, across_images: bool) -> None:
        self.across_images = across_images
        self._rows: deque[Row] = deque()

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, image: ImageRows) -> None:
        self._rows.extend(Row(image, i) for i in range(len(image.requests)))

    def full(self, size: int) -> bool:
        """Whether the next batch of ``size`` rows can be taken without waiting for more images."""
        if not self._rows:
            return False
        if not self.across_images:
            first = self._rows[0].image
            return len(self._rows) > first.left or first.left >= size
        return len(self._rows) >= size

    def peek(self, size: int) -> list[Row]:
        """The next batch's rows (taken only by :meth:`done`, so a batch that runs out of memory
        is taken again at a smaller size)."""
        batch: list[Row] = []
        for row in self._rows:
            if len(batch) == size or (not self.across_images and batch and row.image is not batch[0].image):
                break
            batch.append(row)
        return batch

    def done(self, batch: Sequence[Row]) -> None:
        """Drop ``batch`` (the rows :meth:`peek` gave) from the queue; an image whose last row this
        was lets its caches go."""
        for row in batch:
            taken = self._rows.popleft()
            assert taken is row
            row.image.left -= 1
            if row.image.left == 0:
                row.image.state = None

    def start_images(self, batch: Sequence[Row], prepare: Callable[[list[ImageRows]], list[Any]]) -> list[tuple[Request, str]]:
        """``prepare`` the images new to ``batch`` (their prefix passes, together where the engine
        can) into their ``state``. Where that fails, each image is prepared alone: one whose own
        preparation fails (out of memory passes) loses every queued row: its requests are
        returned with the error, each to be an error sample; the batch's other rows stay queued
        for the next :meth:`peek`."""
        new = [image for image in dict.fromkeys(row.image for row in batch) if image.state is None and image.error is None]
        if not new:
            return []
        try:
            for image, state in zip(new, prepare(new), strict=True):
                image.state = state
            return []
        except Exception as err:
            if is_oom(err):
                raise
            if len(new) == 1:
                return self._failed(new[0], err)
        failed: list[tuple[Request, str]] = []
        for image in new:
            try:
                image.state = prepare([image])[0]
            except Exception as err:
                if is_oom(err):
                    raise
                failed.extend(self._failed(image, err))
        return failed

    def _failed(self, image: ImageRows, err: Exception) -> list[tuple[Request, str]]:
        log.error("image %s failed", image.path, exc_info=err)
        image.error = f"{type(err).__name__}: {err}"
        return [(r, image.error) for row in self.drop_image(image) for r in row.requests]

    def drop_image(self, image: ImageRows) -> list[Row]:
        """Remove every queued row of ``image`` (its preparation failed); returns them."""
        mine = [row for row in self._rows if row.image is image]
        self._rows = deque(row for row in self._rows if row.image is not image)
        image.left = 0
        image.state = None
        return mine
