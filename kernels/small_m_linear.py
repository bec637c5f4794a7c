"""Few-row linear dispatcher: `linear(x, weight, bias)` is F.linear, except that a CUDA call of one
or two rows (by default) goes to one custom op, qwen3tts::small_m_linear, backed by the Triton
weight-stream kernel (kernels/small_m_linear_triton.py).

Why up to two rows by default (benchmarks/results/2026-11-26-*.md): at one row the kernel streams
the talker's weights faster than cuBLAS (H200: one frame's GEMMs 3.56 -> 2.27 ms; the batch-1
talker step 5.61 -> 4.29 ms), at eight rows it is twice as slow (3.06 -> 6.39 ms; step 5.60 -> 8.96
ms). In between (H100, with the GLU variant and PDL): the step at batch 2 5.22-5.34 -> 4.89 ms, at
batch 4 5.27-5.38 -> 6.08-6.10 ms. QWEN3_TTS_LINEAR_TRITON chooses otherwise: "0" never, "1" every
call of at most MAX_ROWS rows (tuning and tests), unset or anything else the default.

Routing of `linear`, in order:
1. not asked for (QWEN3_TTS_LINEAR_TRITON="0", or by default more than AUTO_MAX_ROWS rows or a
   tensor off CUDA), under torch.compile, autograd needing gradients, no rows or more than MAX_ROWS
   of them, a dtype the kernel lacks, or mixed dtypes -> F.linear
   (any K works: the kernel loops over slices of the row);
inside the op:
2. CPU tensors -> F.linear, unless QWEN3_TTS_LINEAR_CPU_TRITON=1 asks for the Triton path (tests, with
   TRITON_INTERPRET=1 set before triton is imported);
3. a Triton failure was recorded earlier -> F.linear; otherwise the launcher (a failure there is
   logged once, remembered, and F.linear answers; see kernels/triton_route.py).

`linear_silu_mul(x, weight, bias)` is the MLP's silu_mul(F.linear(x, weight, bias)) for a fused
gate/up weight [2I, K]. Routed by the same rules (and the same QWEN3_TTS_LINEAR_TRITON), it is one
op, qwen3tts::small_m_linear_silu_mul, on the kernel's GLU variant: the projection and the SwiGLU in
one launch (103 launches a batch-1 frame step fewer, one per layer pass). Otherwise, and as that
op's fallback, it is F.linear then kernels/silu_mul.py.
"""
from __future__ import annotations

import os
from typing import Optional

import torch
import torch.nn.functional as F

from kernels.silu_mul import silu_mul
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_LINEAR_CPU_TRITON"
ENABLE_ENV = "QWEN3_TTS_LINEAR_TRITON"
MAX_ROWS = 16   # kernels.small_m_linear_triton.MAX_ROWS, repeated so routing never imports triton
AUTO_MAX_ROWS = 2  # rows the kernel takes when the variable is unset (measured faster only up to there)
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("small-M linear", "kernels.small_m_linear_triton", "small_m_linear_triton", CPU_TRITON_ENV,
                     __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure
# the GLU op's own failure memory: a failure of that variant leaves the plain kernel in use
_glu_route = TritonRoute("small-M linear + SiLU-GLU", "kernels.small_m_linear_triton",
                         "small_m_linear_silu_mul_triton", CPU_TRITON_ENV, __name__)
glu_triton_failure = _glu_route.triton_failure
reset_glu_triton_failure = _glu_route.reset_failure


def max_rows_on(device: torch.device) -> int:
    """The most rows a call on `device` sends to the kernel: 0 (off), AUTO_MAX_ROWS on CUDA, or MAX_ROWS."""
    wanted = os.environ.get(ENABLE_ENV)
    if wanted == "0":
        return 0
    if wanted == "1":
        return MAX_ROWS
    return AUTO_MAX_ROWS if device.type == "cuda" else 0


def max_rows_for(x: torch.Tensor) -> int:
    """max_rows_on(x's device)."""
    return max_rows_on(x.device)


def _reference_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return F.linear(x, weight, bias).contiguous()


@torch.library.custom_op("qwen3tts::small_m_linear", mutates_args=())
def small_m_linear_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), weight [N, K], bias [N] or None -> fresh contiguous [M, N]."""
    return _route.run((x, weight, bias), _reference_op, wanted=_route.allows(x))


@small_m_linear_op.register_fake
def _small_m_linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))


def _reference_glu_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return silu_mul(F.linear(x, weight, bias))


@torch.library.custom_op("qwen3tts::small_m_linear_silu_mul", mutates_args=())
def small_m_linear_silu_mul_op(x: torch.Tensor, weight: torch.Tensor,
                               bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), weight [2I, K] (gate, then up), bias [2I] or None -> fresh [M, I]."""
    return _glu_route.run((x, weight, bias), _reference_glu_op, wanted=_glu_route.allows(x))


@small_m_linear_silu_mul_op.register_fake
def _small_m_linear_silu_mul_fake(x: torch.Tensor, weight: torch.Tensor,
                                  bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0] // 2))


def _wants_kernel(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> bool:
    if torch.compiler.is_compiling() or x.dim() == 0:
        return False
    max_rows = max_rows_for(x)
    if max_rows == 0:
        return False
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return False
    if x.dtype not in _TRITON_DTYPES or weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        return False
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return 1 <= rows <= max_rows and weight.dim() == 2 and weight.shape[1] == x.shape[-1]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [..., K], weight [N, K]: the same result shape and dtype; the
    few-row Triton kernel answers when asked for (module docstring), F.linear otherwise."""
    if not _wants_kernel(x, weight, bias):
        return F.linear(x, weight, bias)
    out = small_m_linear_op(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def linear_silu_mul(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """silu_mul(F.linear(x, weight, bias)) for x [..., K] and a fused gate/up weight [2I, K] -> [..., I];
    one launch of the few-row kernel's GLU variant when `linear` would take the kernel (module docstring)."""
    if weight.dim() != 2 or weight.shape[0] % 2 or not _wants_kernel(x, weight, bias):
        return _reference_glu_op(x, weight, bias)
    out = small_m_linear_silu_mul_op(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0] // 2)
