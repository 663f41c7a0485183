"""CPU work done ahead on one background thread: reading, preprocessing and tokenizing the next
images while the accelerator runs the current batch.

On a GPU an image's CPU side (JPEG decode, resize and normalise, tokenizing its prompts: 15 to
20 ms) otherwise sits between two batches with the GPU idle; for POPE at a few hundred
questions per second that is a fifth of the time. One worker thread does it, in order, with
its own copy of the processor (``ModelCore.worker_inputs``): a fast tokenizer must not be
shared across threads. The model's passes stay on the calling thread. Off on a CPU model
(``ModelCore.prefetch``), where the worker would take a core from the model's own threads.

Results are the same either way: the worker runs the same functions on the same inputs; a
failure there is raised, or recomputed, on the calling thread exactly where it would have been.
No torch imported here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["BatchAhead", "ahead"]

T = TypeVar("T")
R = TypeVar("R")


def ahead(items: Iterable[T], compute: Callable[[T], R], depth: int) -> Iterator[tuple[T, R]]:
    """``(item, compute(item))`` in order, each computed on one worker thread up to ``depth``
    items before it is asked for; ``depth`` 0 computes each on the calling thread when asked.
    An exception in ``compute`` is raised here, at its item."""
    if depth <= 0:
        for item in items:
            yield item, compute(item)
        return
    rest = iter(items)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="halluprobe-ahead") as pool:
        waiting: deque[tuple[T, Future[R]]] = deque()
        try:
            for item in rest:
                waiting.append((item, pool.submit(compute, item)))
                if len(waiting) >= depth:
                    break
            while waiting:
                item, future = waiting.popleft()
                following = next(rest, _END)
                if following is not _END:
                    waiting.append((following, pool.submit(compute, following)))  # type: ignore[arg-type]
                yield item, future.result()
        finally:
            for _, future in waiting:
                future.cancel()


_END = object()


class BatchAhead(Generic[T, R]):
    """The next batch's ``compute`` on one worker thread: :meth:`start` it when the current
    batch begins, :meth:`take` it when it comes up. Batches are matched by key, so a batch
    re-formed at another size (out of memory halves it) is computed afresh by the caller.
    The next batch is started before the current one is taken (``Batching.run``'s
    ``upcoming``), so the two latest started batches are held."""

    def __init__(self, compute: Callable[[T], R]) -> None:
        self._compute = compute
        self._pool: ThreadPoolExecutor | None = None
        self._started: deque[tuple[Hashable, Future[R]]] = deque()

    def start(self, key: Hashable, batch: T) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="halluprobe-ahead")
        self._started.append((key, self._pool.submit(self._compute, batch)))
        while len(self._started) > 2:
            self._started.popleft()[1].cancel()

    def take(self, key: Hashable) -> R | None:
        """The result started for ``key``; ``None`` where none was, or it failed (the caller
        computes it again itself, and meets the failure where it would have without this).
        Batches started before ``key``'s are dropped."""
        if all(k != key for k, _ in self._started):
            return None
        while True:
            started, future = self._started.popleft()
            if started == key:
                break
            future.cancel()
        try:
            return future.result()
        except Exception:  # noqa: BLE001 - the caller's own computation meets it where it belongs
            return None

    def close(self) -> None:
        while self._started:
            self._started.popleft()[1].cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
