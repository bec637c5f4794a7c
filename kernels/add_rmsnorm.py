"""Residual add + RMSNorm dispatcher: one custom op, qwen3tts::add_rms_norm, backed by the fused
Triton kernel where it can run and by the eager reference elsewhere. Replaces the decoder layer's
`h = h + out; normed = norm(h)` (an add plus an RMSNorm launch) with ONE op returning
(normed, summed); torch.compile and dispatch-mode op counters see one op.

Routing, in order:
1. autograd needs gradients of a result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_ADDNORM_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. a dtype other than fp32/bf16/fp16, rows longer than 8192 or nothing to compute -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

import torch

from kernels.add_rmsnorm_reference import add_rms_norm_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_ADDNORM_CPU_TRITON"
MAX_COLS = 8192  # kernels.rmsnorm_triton.MAX_COLS, repeated so routing never imports triton
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("add+RMSNorm", "kernels.add_rmsnorm_triton", "add_rms_norm_triton",
                     CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _check_args(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() == 0 or residual.shape != x.shape or weight.shape != (x.shape[-1],):
        raise ValueError(f"add_rms_norm expects x and residual [..., N] of one shape and weight [N], got "
                         f"{tuple(x.shape)}, {tuple(residual.shape)} and {tuple(weight.shape)}")
    for name, t in (("residual", residual), ("weight", weight)):
        if t.device != x.device:
            raise ValueError(f"add_rms_norm: {name} is on {t.device} but x is on {x.device}")


def _wants_triton(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
    if any(t.dtype not in _TRITON_DTYPES for t in (x, residual, weight)):
        return False
    if x.numel() == 0 or x.shape[-1] > MAX_COLS:
        return False
    return _route.allows(x)


def _reference_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    normed, summed = add_rms_norm_reference(x, residual, weight, eps)
    return normed.contiguous(), summed.contiguous()


@torch.library.custom_op("qwen3tts::add_rms_norm", mutates_args=())
def add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The op body: Triton or reference, always two fresh contiguous tensors (what the fake promises)."""
    return _route.run((x, residual, weight, eps), _reference_op, wanted=_wants_triton(x, residual, weight))


@add_rms_norm_op.register_fake
def _add_rms_norm_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    sum_dtype = torch.result_type(x, residual)
    normed = x.new_empty(x.shape, dtype=torch.promote_types(weight.dtype, sum_dtype))
    return normed, x.new_empty(x.shape, dtype=sum_dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual: [..., N] of one shape; weight: [N] -> (normed, summed), both [..., N]:
    summed = x + residual (in torch.result_type(x, residual): x's dtype when they match),
    normed = rms_norm_reference(summed, weight, eps) (in torch.result_type(weight, summed))."""
    _check_args(x, residual, weight)
    if torch.is_grad_enabled() and (x.requires_grad or residual.requires_grad or weight.requires_grad):
        return add_rms_norm_reference(x, residual, weight, eps)
    return add_rms_norm_op(x, residual, weight, float(eps))
