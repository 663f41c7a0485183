"""The worker thread of hf/ahead.py (issue 33): order kept, at most ``depth`` items ahead, a
failure raised or recomputed where it would have happened without it. The engines with it on:
tests/test_ahead_engines.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from halluprobe.backends.hf.ahead import BatchAhead, ahead


def test_ahead_keeps_order_and_runs_at_most_depth_items_early() -> None:
    done: list[int] = []
    threads: set[str] = set()

    def compute(item: int) -> int:
        threads.add(threading.current_thread().name)
        done.append(item)
        return item * item

    seen = []
    for item, result in ahead(range(10), compute, 3):
        time.sleep(0.01)  # the worker runs ahead while the caller works
        assert len(done) <= item + 1 + 3, (item, done)
        seen.append((item, result))
    assert seen == [(i, i * i) for i in range(10)]
    assert threads and all(name.startswith("halluprobe-ahead") for name in threads)


def test_ahead_with_depth_0_computes_on_the_calling_thread() -> None:
    names = [name for _, name in ahead(range(3), lambda _: threading.current_thread().name, 0)]
    assert names == [threading.current_thread().name] * 3


def test_ahead_raises_a_failure_at_its_item() -> None:
    def compute(item: int) -> int:
        if item == 2:
            raise ValueError("bad item 2")
        return item

    got = []
    with pytest.raises(ValueError, match="bad item 2"):
        for item, _ in ahead(range(5), compute, 2):
            got.append(item)
    assert got == [0, 1]


def test_batch_ahead_gives_the_started_batch_only() -> None:
    runs: list[tuple[int, ...]] = []
    worker = BatchAhead(lambda batch: runs.append(batch) or sum(batch))
    try:
        worker.start((1, 2), (1, 2))
        assert worker.take((1, 2)) == 3
        assert worker.take((1, 2)) is None  # taken once
        worker.start((3,), (3,))
        assert worker.take((3, 4)) is None  # a batch re-formed at another size: the caller computes it
        failing = BatchAhead(lambda batch: 1 / 0)
        failing.start("k", ())
        assert failing.take("k") is None  # the caller computes it again, and meets the error itself
        failing.close()
    finally:
        worker.close()
    assert runs[0] == (1, 2)


def test_batch_ahead_under_batching_run_gives_each_next_batch() -> None:
    """``Batching.run`` starts the next batch before the current one is taken: the current
    one's start must survive it (it was cancelled there, so no prefetched batch was ever used)."""
    from halluprobe.backends.hf.core import Batching

    worker = BatchAhead(lambda batch: tuple(batch))
    taken = []

    def answer(batch: list[int]) -> list[int]:
        taken.append(worker.take(tuple(batch)))
        return batch

    try:
        list(Batching(size=2).run(list(range(7)), answer, lambda: None, lambda batch: worker.start(tuple(batch), batch)))
    finally:
        worker.close()
    assert taken == [None, (2, 3), (4, 5), (6,)]
