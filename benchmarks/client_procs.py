"""A load level's client work spread over several processes.

One Python process driving hundreds of streams becomes part of what is measured: its event loop
delays chunks and first audio by as much as the servers do (at 256 streams on an H200 the client's
TTFA p50 was ~400 ms past the gateway's own). Each part runs in a spawned process with its own
event loop; with one part it runs here, in this process.
"""
from __future__ import annotations

import multiprocessing
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def round_robin(items: list[T], num_parts: int) -> list[list[T]]:
    """items split into `num_parts` lists, item i in part i % num_parts (empty parts dropped)."""
    if num_parts < 1:
        raise ValueError(f"need at least one part, got {num_parts}")
    return [part for part in (items[p::num_parts] for p in range(num_parts)) if part]


def _timed(job: tuple[Callable, tuple]) -> dict:
    fn, fn_args = job
    cpu0 = time.process_time()
    result = fn(*fn_args)
    return {"result": result, "cpu_s": time.process_time() - cpu0}


def run_parts(fn: Callable, parts_args: list[tuple]) -> list[dict]:
    """fn(*args) for each entry of `parts_args`, each in a spawned process (here when there is one);
    -> [{"result": fn's value, "cpu_s": the part's own CPU seconds}] in order. `fn` must be a
    module-level function and its arguments picklable."""
    jobs = [(fn, args) for args in parts_args]
    if len(jobs) == 1:
        return [_timed(jobs[0])]
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        return pool.map(_timed, jobs)
