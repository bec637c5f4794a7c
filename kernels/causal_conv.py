"""Causal conv dispatcher: the Triton implicit-GEMM kernel where it can run, cuDNN (the eager
reference) elsewhere.

Routing, in order:
1. under torch.compile -> the reference is traced (Inductor picks its own conv);
2. autograd needs gradients -> reference (the kernel has no backward);
3. CPU tensors -> reference, unless QWEN3_TTS_CONV_CPU_TRITON=1 asks for the Triton path (tests, with
   TRITON_INTERPRET=1 set before triton is imported);
4. dtype other than fp32/bf16/fp16 -> reference;
5. QWEN3_TTS_CONV_TRITON=0 -> reference (to compare against cuDNN in a benchmark);
6. a Triton failure was recorded earlier -> reference; otherwise the launcher (a failure there is
   logged once, remembered, and the reference answers; see kernels/triton_route.py).
"""
from __future__ import annotations

import os

import torch

from kernels.causal_conv_reference import causal_conv1d_reference, weight_tap_major  # noqa: F401
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_CONV_CPU_TRITON"
DISABLE_ENV = "QWEN3_TTS_CONV_TRITON"
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
    if x.dtype not in _TRITON_DTYPES or weight_kco.dtype != x.dtype or os.environ.get(DISABLE_ENV) == "0":
        return False
    return _route.allows(x)


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
