"""One function over many jobs, here or in worker processes (phantoms, case checks, the cache)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


def in_processes(fn: Callable[..., Any], jobs: Sequence[tuple], workers: int) -> Iterator[tuple[int, Any]]:
    """``(index, fn(*jobs[index]))`` for each job, in the order they finish: here, one at a time,
    when ``workers`` <= 1, else in that many processes (spawned: the caller may hold torch
    threads and open files that a fork would copy). ``fn`` must be importable at module level."""
    if workers <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            yield i, fn(*job)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(fn, *job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            yield futures[future], future.result()
