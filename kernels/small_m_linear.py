"""Few-row linear dispatcher: `linear(x, weight, bias)` is F.linear, except that with
QWEN3_TTS_LINEAR_TRITON=1 a call of at most MAX_ROWS rows goes to one custom op,
qwen3tts::small_m_linear, backed by the Triton weight-stream kernel (kernels/small_m_linear_triton.py).

Opt-in until measured: the kernel exists for the talker's batch-1 and batch-8 decode GEMMs, which
cuBLAS runs at about half the HBM bandwidth; whether it beats them on an H100/H200 is what
`benchmarks/bench_small_m_linear.py` (suite piece `small-m-linear`) and a talker-profile with the
variable set decide. Without it nothing changes: F.linear, the same launches.

Routing of `linear`, in order:
1. not asked for (QWEN3_TTS_LINEAR_TRITON != "1"), under torch.compile, autograd needing gradients,
   no rows or more than MAX_ROWS of them, a dtype the kernel lacks, or mixed dtypes -> F.linear
   (any K works: the kernel loops over slices of the row);
inside the op:
2. CPU tensors -> F.linear, unless QWEN3_TTS_LINEAR_CPU_TRITON=1 asks for the Triton path (tests, with
   TRITON_INTERPRET=1 set before triton is imported);
3. a Triton failure was recorded earlier -> F.linear; otherwise the launcher (a failure there is
   logged once, remembered, and F.linear answers; see kernels/triton_route.py).
"""
from __future__ import annotations

import os
from typing import Optional

import torch
import torch.nn.functional as F

from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_LINEAR_CPU_TRITON"
ENABLE_ENV = "QWEN3_TTS_LINEAR_TRITON"
MAX_ROWS = 16   # kernels.small_m_linear_triton.MAX_ROWS, repeated so routing never imports triton
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("small-M linear", "kernels.small_m_linear_triton", "small_m_linear_triton", CPU_TRITON_ENV,
                     __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def kernel_enabled() -> bool:
    return os.environ.get(ENABLE_ENV) == "1"


def _reference_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return F.linear(x, weight, bias).contiguous()


@torch.library.custom_op("qwen3tts::small_m_linear", mutates_args=())
def small_m_linear_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), weight [N, K], bias [N] or None -> fresh contiguous [M, N]."""
    return _route.run((x, weight, bias), _reference_op, wanted=_route.allows(x))


@small_m_linear_op.register_fake
def _small_m_linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))


def _wants_kernel(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> bool:
    if not kernel_enabled() or torch.compiler.is_compiling() or x.dim() == 0:
        return False
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return False
    if x.dtype not in _TRITON_DTYPES or weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        return False
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return 1 <= rows <= MAX_ROWS and weight.dim() == 2 and weight.shape[1] == x.shape[-1]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [..., K], weight [N, K]: the same result shape and dtype; the
    few-row Triton kernel answers when asked for (module docstring), F.linear otherwise."""
    if not _wants_kernel(x, weight, bias):
        return F.linear(x, weight, bias)
    out = small_m_linear_op(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])
