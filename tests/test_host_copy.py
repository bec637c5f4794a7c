"""service_common.host_copy.to_host: values, dtype and shape as `.cpu()` gives them.

The point of it (other threads' launches keep going while it waits) only shows on a GPU:
benchmarks/probe_stream_starvation.py measures it there. On CPU it must simply be the values.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from service_common.host_copy import WaitClock, to_host


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.int16])
def test_the_values_come_back_as_cpu_gives_them(dtype):
    tensor = (torch.arange(48).reshape(3, 16) * 3).to(dtype)
    got = to_host(tensor.t())   # non-contiguous views too
    want = tensor.t().cpu()
    assert got.shape == tuple(want.shape)
    assert got.dtype == want.numpy().dtype and np.array_equal(got, want.numpy())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the pinned path needs CUDA")
def test_a_cuda_tensor_comes_back_in_fresh_host_memory():
    tensor = torch.arange(64, device="cuda").reshape(4, 16)
    first, second = to_host(tensor), to_host(tensor + 1)
    assert np.array_equal(first, np.arange(64).reshape(4, 16)) and np.array_equal(second, first + 1)


def test_cpu_tensors_add_no_device_wait():
    clock = WaitClock()
    assert np.array_equal(to_host(torch.arange(5), clock), np.arange(5))
    assert clock.total_s == 0.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the pinned path needs CUDA")
def test_the_clock_sums_the_waits_for_queued_work():
    """A read-back queued behind ~tens of ms of matmuls waits for them: the clock sees the wait."""
    clock = WaitClock()
    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    for _ in range(20):
        x = x @ x / 64
    to_host(x[:1, :4], clock)
    first = clock.total_s
    assert first > 0.001
    to_host(torch.zeros(2, device="cuda"), clock)
    assert clock.total_s >= first
