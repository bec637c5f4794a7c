"""Device tensor -> host array without stalling the process's other threads.

`tensor.cpu()` of a CUDA tensor copies into pageable memory, and that copy waits for every kernel
queued before it on the stream; while it waits, kernel launches from the process's other threads
wait too. On the H200 a thread launching 400 small kernels took 30 ms on an idle GPU and 2.9 s
beside a thread that replayed a 5 ms CUDA graph and read its output with `.cpu()`; 45 ms when
that thread waited on an event instead (benchmarks/probe_stream_starvation.py). In the talker
the decode loop is that thread and the voice encoder thread the victim: clone references waited
for the running streams to end (0.8-1 s) before their encoding could finish.

So the talker's loop and encoders, and the vocoder's runner, read results back the same way: an
asynchronous copy into pinned memory, then an event wait, which holds nothing the other threads
need. `HostCopy` splits the two, so a loop can queue more work before it reads (the talker's next
decode step, the vocoder's next batch). The other direction (`to_device_async`) does not wait for
the device's queue at all.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch


class WaitClock:
    """Seconds a thread spent in to_host waiting for the device, summed: what a loop subtracts from
    its wall time to get its host time.

    `while_waiting`: host work the waiting thread may do while the device has not got there yet
    (the talker reads its queued gateway messages); called until it returns False (nothing at hand)
    or the device is done, so each call should be short. Its time is host time, summed in
    `worked_s`, not in `total_s`."""

    def __init__(self, while_waiting: Callable[[], bool] | None = None) -> None:
        self.total_s = 0.0
        self.worked_s = 0.0
        self.while_waiting = while_waiting


class HostCopy:
    """A device -> host copy queued on the stream: `wait()` gives the values once the device got
    there. Queue it right after the kernel (or graph replay) that wrote the tensor: later work on
    the stream may reuse that memory (graphs share one pool), the copy has already taken it."""

    def __init__(self, tensor: torch.Tensor) -> None:
        tensor = tensor.detach()
        self._done: torch.cuda.Event | None = None
        if tensor.device.type != "cuda":
            self._host = tensor.numpy()
            return
        # a block of torch's caching host allocator: pinned, reused once this array is gone
        self._host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        self._host.copy_(tensor, non_blocking=True)
        self._done = torch.cuda.Event()
        self._done.record(torch.cuda.current_stream(tensor.device))

    def wait(self, clock: WaitClock | None = None) -> np.ndarray:
        """The values as a host array the caller owns. `clock` adds the time spent waiting."""
        if self._done is None:
            return self._host
        if clock is None:
            self._done.synchronize()
            return self._host.numpy()
        started_s = time.perf_counter()
        worked_s = 0.0
        work = clock.while_waiting
        if work is not None:
            while not self._done.query():
                work_start_s = time.perf_counter()
                is_more = work()
                worked_s += time.perf_counter() - work_start_s
                if not is_more:
                    break
        self._done.synchronize()
        clock.total_s += time.perf_counter() - started_s - worked_s
        clock.worked_s += worked_s
        return self._host.numpy()


def to_host(tensor: torch.Tensor, clock: WaitClock | None = None) -> np.ndarray:
    """The tensor's values as a host array the caller owns (CPU tensors: a view of their data).
    Dtypes numpy has only (cast bfloat16 first). `clock` adds the time spent waiting for the device."""
    return HostCopy(tensor).wait(clock)


def to_device_async(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on `device` without waiting for the device's queue. non_blocking is safe from
    pageable memory only: cudaMemcpyAsync stages a pageable buffer before it returns, so the source
    may change or go at once. A pinned source is read later by the DMA, so it is copied to pageable
    memory first (an x-vector can be a view of a pinned read-back buffer, see to_host)."""
    if host.device.type != "cpu" or device.type != "cuda":
        return host.to(device)
    if host.is_pinned():
        host = host.clone()
    return host.to(device, non_blocking=True)
