"""Causal conv dispatcher: the Triton implicit-GEMM kernel when asked for, cuDNN (the eager
reference) otherwise.

Opt-in (QWEN3_TTS_CONV_TRITON=1): on an H100 (2026-11-25, benchmarks/bench_causal_conv.py) the
kernel is 1.1-2.2x slower than cuDNN on the decoder's batch-64 convs (3.54 vs 3.04 ms at 96
channels x 48000, 2.60 vs 1.20 ms at 768 x 800), and the vocoder service with it decoded 1653
audio-s/s at 64 streams against 2018 with cuDNN. It stays as a correct, tested starting point:
each tap reloads its input tile, where a faster design would load [BLOCK_CI, BLOCK_T + context]
once and fuse the producing SnakeBeta into that load.

Routing, in order:
1. under torch.compile -> the reference is traced (Inductor picks its own conv);
2. autograd needs gradients -> reference (the kernel has no backward);
3. CPU tensors -> reference, unless QWEN3_TTS_CONV_CPU_TRITON=1 asks for the Triton path (tests, with
   TRITON_INTERPRET=1 set before triton is imported);
4. dtype other than fp32/bf16/fp16 -> reference;
5. QWEN3_TTS_CONV_TRITON is not "1" -> reference (the default, see above);
6. a Triton failure was recorded earlier -> reference; otherwise the launcher (a failure there is
   logged once, remembered, and the reference answers; see kernels/triton_route.py).
"""
from __future__ import annotations

import os

import torch

from kernels.causal_conv_reference import causal_conv1d_reference, weight_tap_major  # noqa: F401
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_CONV_CPU_TRITON"
ENABLE_ENV = "QWEN3_TTS_CONV_TRITON"
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("causal conv", "kernels.causal_conv_triton", "causal_conv1d_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _check_args(x, weight_kco, dilation, tail, bias) -> None:
    if x.dim() != 3 or weight_kco.dim() != 3 or x.shape[1] != weight_kco.shape[2]:
        raise ValueError(f"causal_conv1d: x must be [B, C_in, T] and weight [K, C_out, C_in] with the same "
                         f"C_in, got {tuple(x.shape)} and {tuple(weight_kco.shape)}")
    if dilation < 1:
        raise ValueError(f"causal_conv1d: dilation must be >= 1, got {dilation}")
    context_len = (weight_kco.shape[0] - 1) * dilation
    if tail is not None and tuple(tail.shape) != (x.shape[0], x.shape[1], context_len):
        raise ValueError(f"causal_conv1d: tail must be [{x.shape[0]}, {x.shape[1]}, {context_len}], "
                         f"got {tuple(tail.shape)}")
    if bias is not None and tuple(bias.shape) != (weight_kco.shape[1],):
        raise ValueError(f"causal_conv1d: bias must be [{weight_kco.shape[1]}], got {tuple(bias.shape)}")


def _wants_triton(x, weight_kco, tail, bias) -> bool:
    tensors = [t for t in (x, weight_kco, tail, bias) if t is not None]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    if x.dtype not in _TRITON_DTYPES or weight_kco.dtype != x.dtype or not kernel_enabled():
        return False
    return _route.allows(x)


def kernel_enabled() -> bool:
    """The kernel was asked for (QWEN3_TTS_CONV_TRITON=1); callers keep their own cuDNN path otherwise."""
    return os.environ.get(ENABLE_ENV) == "1"


def causal_conv1d(
    x: torch.Tensor,
    weight_kco: torch.Tensor,
    dilation: int = 1,
    tail: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """conv1d([tail ++ x], W, dilation): x [B, C_in, T], weight_kco [K, C_out, C_in] (weight_tap_major),
    tail [B, C_in, (K-1)*dilation] or None (zeros: a sequence's start), bias [C_out] or None
    -> [B, C_out, T]."""
    if torch.compiler.is_compiling():
        return causal_conv1d_reference(x, weight_kco, dilation, tail, bias)
    _check_args(x, weight_kco, dilation, tail, bias)
    return _route.run((x, weight_kco, dilation, tail, bias), causal_conv1d_reference,
                      wanted=_wants_triton(x, weight_kco, tail, bias))
