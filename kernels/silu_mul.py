"""SwiGLU activation dispatcher: one custom op, qwen3tts::silu_mul, backed by the fused Triton kernel
where it can run and by the eager reference elsewhere. Replaces `gate, up = gate_up.chunk(2, -1);
F.silu(gate) * up` (two launches and an [..., I] intermediate) with ONE op; torch.compile and
dispatch-mode op counters see one op.

Optional deferred RMSNorm (`norm_source`, `eps`): the decoder layer can fold its post-attention
RMSNorm's weight into the columns of the fused gate/up weight and run the GEMM on the
un-normalised residual stream h. What is left of the norm is the factor 1/rms(h) per row -- a
scalar per row, so it commutes with the GEMM -- and this op applies it to gate_up before the
activation (kernels/silu_mul_reference.py gives the exact arithmetic). That removes one RMSNorm
launch per layer; the op stays one op, with or without the norm.

Routing, in order:
1. autograd needs gradients of the result (gate_up or norm_source requires grad) -> eager reference,
   outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_SILUMUL_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. a dtype other than fp32/bf16/fp16, or nothing to compute -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

from typing import Optional

import torch

from kernels.silu_mul_reference import silu_mul_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_SILUMUL_CPU_TRITON"
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("silu_mul", "kernels.silu_mul_triton", "silu_mul_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _check_args(gate_up: torch.Tensor, norm_source: Optional[torch.Tensor]) -> None:
    """ValueError before the op for inputs it cannot take (so a bad call never disables the kernel)."""
    if gate_up.dim() == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"silu_mul expects gate_up [..., 2*I] (gate, then up), got {tuple(gate_up.shape)}")
    if norm_source is None:
        return
    lead = tuple(gate_up.shape[:-1])
    if norm_source.dim() == 0 or tuple(norm_source.shape[:-1]) != lead or norm_source.shape[-1] == 0:
        raise ValueError(f"silu_mul: norm_source must be [..., H] (H >= 1) with gate_up's leading dims {lead}, "
                         f"got {tuple(norm_source.shape)} for gate_up {tuple(gate_up.shape)}")
    if norm_source.dtype != gate_up.dtype:
        raise ValueError(f"silu_mul: norm_source dtype must be gate_up's ({gate_up.dtype}), got {norm_source.dtype}")
    if norm_source.device != gate_up.device:
        raise ValueError(f"silu_mul: norm_source must be on gate_up's device ({gate_up.device}), "
                         f"got {norm_source.device}")


def _wants_triton(gate_up: torch.Tensor) -> bool:
    if gate_up.dtype not in _TRITON_DTYPES or gate_up.numel() == 0:
        return False
    return _route.allows(gate_up)


def _reference_op(gate_up: torch.Tensor, norm_source: Optional[torch.Tensor] = None, eps: float = 0.0) -> torch.Tensor:
    return silu_mul_reference(gate_up, norm_source, eps).contiguous()


@torch.library.custom_op("qwen3tts::silu_mul", mutates_args=())
def silu_mul_op(gate_up: torch.Tensor, norm_source: Optional[torch.Tensor] = None, eps: float = 0.0) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh contiguous tensor (what the fake promises).
    Arguments as `silu_mul`'s, already checked."""
    return _route.run((gate_up, norm_source, eps), _reference_op, wanted=_wants_triton(gate_up))


@silu_mul_op.register_fake
def _silu_mul_fake(gate_up: torch.Tensor, norm_source: Optional[torch.Tensor] = None,
                   eps: float = 0.0) -> torch.Tensor:
    return gate_up.new_empty(gate_up.shape[:-1] + (gate_up.shape[-1] // 2,))


def silu_mul(gate_up: torch.Tensor, norm_source: Optional[torch.Tensor] = None, eps: float = 0.0) -> torch.Tensor:
    """gate_up: [..., 2*I], gate in the first half and up in the second (the fused gate/up GEMM
    output) -> [..., I] = F.silu(gate) * up in gate_up's dtype, rounded as eager PyTorch rounds.

    norm_source: None, or the deferred RMSNorm's input h [..., H] (gate_up's leading dims, dtype and
    device) when the GEMM that produced gate_up read h un-normalised (norm weight folded into its
    weight columns). gate_up is then first scaled by rsqrt(mean(h^2) + eps) per row, in fp32, and
    rounded once to its dtype (kernels/silu_mul_reference.py). eps is the norm's epsilon; it is
    ignored without norm_source. Mismatched arguments raise ValueError.
    """
    _check_args(gate_up, norm_source)
    eps = float(eps)
    if torch.is_grad_enabled() and (gate_up.requires_grad or (norm_source is not None and norm_source.requires_grad)):
        return silu_mul_reference(gate_up, norm_source, eps)
    return silu_mul_op(gate_up, norm_source, eps)
