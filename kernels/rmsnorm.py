"""RMSNorm dispatcher: one custom op, qwen3tts::rms_norm, backed by the fused Triton kernel where it
can run and by the eager reference elsewhere. torch.compile and dispatch-mode op counters see ONE op.

Routing, in order:
1. autograd needs gradients of the result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_RMSNORM_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. dtype other than fp32/bf16/fp16, or rows longer than 8192 -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

import torch

from kernels.rmsnorm_reference import rms_norm_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_RMSNORM_CPU_TRITON"
MAX_COLS = 8192  # kernels.rmsnorm_triton.MAX_COLS, repeated so routing never imports triton
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("RMSNorm", "kernels.rmsnorm_triton", "rms_norm_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _check_args(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() == 0 or weight.shape != (x.shape[-1],):
        raise ValueError(f"rms_norm expects x [..., N] and weight [N], got {tuple(x.shape)} and {tuple(weight.shape)}")
    if weight.device != x.device:
        raise ValueError(f"rms_norm: weight is on {weight.device} but x is on {x.device}")


def _wants_triton(x: torch.Tensor, weight: torch.Tensor) -> bool:
    if x.dtype not in _TRITON_DTYPES or weight.dtype not in _TRITON_DTYPES:
        return False
    if x.numel() == 0 or x.shape[-1] > MAX_COLS:
        return False
    return _route.allows(x)


def _reference_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm_reference(x, weight, eps).contiguous()


@torch.library.custom_op("qwen3tts::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh contiguous tensor (what the fake promises)."""
    return _route.run((x, weight, eps), _reference_op, wanted=_wants_triton(x, weight))


@rms_norm_op.register_fake
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.result_type(weight, x), memory_format=torch.contiguous_format)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [..., N]; weight: [N] -> [..., N] in torch.result_type(weight, x), normalized over the last dim."""
    _check_args(x, weight)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return rms_norm_reference(x, weight, eps)
    return rms_norm_op(x, weight, float(eps))
