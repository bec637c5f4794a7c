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

Deferred RMSNorms (talker_service/model/layers.py): a decoder layer's two norms cost no launch of
their own. RMSNorm(h) * w feeding a bias-free W is (h (W * w)^T) * s with s = rsqrt(mean(h^2) + eps)
one scalar per row, so the norm weight is folded into W's columns, the GEMM reads the un-normalised
h, and whoever consumes the GEMM output applies s; the residual adds move into the GEMMs before the
norms. Two entry points serve that:
- `linear_silu_mul(x, weight, norm_eps=eps)`: x is h, and the result is silu_mul(F.linear(x, weight),
  norm_source=x, eps=eps) (kernels/silu_mul.py scales gate/up by s, rounds, then the SwiGLU). On the
  kernel the GLU variant's NORM flag sums x^2 while it streams x anyway: no extra launch or read.
  A bias with norm_eps is a ValueError (s must not scale a bias).
- `linear_add_(residual, x, weight, bias)`: residual <- round(residual + x W^T (+ bias)) in place (the
  fp32 sum rounded once), returned. Where `linear` would take the kernel (the same rules), one op,
  qwen3tts::small_m_linear_add_ (mutates residual), on the kernel's RESIDUAL variant: it reads the
  residual tile (before its K loop, so the read hides under the weight stream), adds it to the fp32
  sum and stores the total over it (one program owns each element, so in place is safe; measured,
  it costs the plain kernel's time). Elsewhere, and as that op's fallback (its own
  failure memory, as the GLU op has): without a bias residual.view(-1, N).addmm_(x, W^T) (cuBLAS
  adds C in its beta=1 epilogue, and addmm_ into its own output needs no copy launch, unlike
  out-of-place addmm); with a bias residual.add_(F.linear(x, W, b)) (two roundings). Under autograd
  or torch.compile: the eager path. cuBLAS does not always round once: on an H100 (torch 2.11,
  cu130, bf16, 1-2 rows) addmm_ at K = 2048 gave exactly round(residual + round(x W^T)), the bits of
  F.linear then an add, while at K = 3072 and 6144 it rounded once; the kernel always rounds once.
  Either way the o_proj / down_proj launch does the residual add: one launch a layer pass fewer
  than linear + add_rms_norm. residual must be contiguous and must not overlap x (ValueError).
"""
from __future__ import annotations

import os
from typing import Optional

import torch
import torch.nn.functional as F

from kernels import gemm_tuning
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
# the residual-add op's own, likewise
_add_route = TritonRoute("small-M linear + residual add", "kernels.small_m_linear_triton",
                         "small_m_linear_add_triton", CPU_TRITON_ENV, __name__)
add_triton_failure = _add_route.triton_failure
reset_add_triton_failure = _add_route.reset_failure


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


def _plain_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """F.linear, or without a bias the tuned cuBLASLt algorithm where one was chosen (kernels/gemm_tuning.py)."""
    if bias is None:
        out = gemm_tuning.linear_or_none(x, weight)
        if out is not None:
            return out
    return F.linear(x, weight, bias)


def _reference_glu_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                      norm_eps: Optional[float] = None) -> torch.Tensor:
    if norm_eps is None:
        return silu_mul(_plain_linear(x, weight, bias))
    return silu_mul(_plain_linear(x, weight, None), norm_source=x, eps=norm_eps)   # no bias: checked by the caller


@torch.library.custom_op("qwen3tts::small_m_linear_silu_mul", mutates_args=())
def small_m_linear_silu_mul_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                               norm_eps: Optional[float] = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), weight [2I, K] (gate, then up), bias [2I] or None -> fresh [M, I];
    norm_eps (no bias): x is the un-normalised input, gate/up scaled by rsqrt(mean(x^2) + norm_eps)."""
    # the launcher and the reference get norm_eps only when given: stand-ins of (x, w, b) keep working
    args = (x, weight, bias) if norm_eps is None else (x, weight, bias, norm_eps)
    return _glu_route.run(args, _reference_glu_op, wanted=_glu_route.allows(x))


@small_m_linear_silu_mul_op.register_fake
def _small_m_linear_silu_mul_fake(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                                  norm_eps: Optional[float] = None) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0] // 2))


def _reference_add_(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                    bias: Optional[torch.Tensor]) -> torch.Tensor:
    """residual [M, N] += x [M, K] W^T (+ bias) in place, eagerly (module docstring: the eager path)."""
    if bias is None:   # cuBLAS adds C in its epilogue (beta=1); in place, so no copy launch
        if gemm_tuning.add_(residual, x, weight):   # the tuned cuBLASLt algorithm, where one was chosen
            return residual
        return residual.addmm_(x, weight.t())
    return residual.add_(F.linear(x, weight, bias))


@torch.library.custom_op("qwen3tts::small_m_linear_add_", mutates_args=("residual",))
def small_m_linear_add_op(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                          bias: Optional[torch.Tensor] = None) -> None:
    """residual [M, N] (contiguous) += x [M, K] (M <= MAX_ROWS) weight[N, K]^T (+ bias [N]), in place."""
    _add_route.run((residual, x, weight, bias), _reference_add_, wanted=_add_route.allows(x))


@small_m_linear_add_op.register_fake
def _small_m_linear_add_fake(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                             bias: Optional[torch.Tensor] = None) -> None:
    return None


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
        return _plain_linear(x, weight, bias)
    out = small_m_linear_op(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def linear_silu_mul(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                    norm_eps: Optional[float] = None) -> torch.Tensor:
    """silu_mul(F.linear(x, weight, bias)) for x [..., K] and a fused gate/up weight [2I, K] -> [..., I];
    one launch of the few-row kernel's GLU variant when `linear` would take the kernel (module docstring).

    norm_eps (a deferred RMSNorm): x is the un-normalised residual stream and weight has the norm's
    weight folded into its columns; the result is silu_mul(F.linear(x, weight), norm_source=x,
    eps=norm_eps), i.e. gate/up scaled by rsqrt(mean(x^2) + norm_eps) per row before the SwiGLU.
    A bias with norm_eps is a ValueError (the factor would scale it)."""
    if norm_eps is not None and bias is not None:
        raise ValueError("linear_silu_mul: norm_eps with a bias (the 1/rms factor must not scale the bias)")
    if weight.dim() != 2 or weight.shape[0] % 2 or not _wants_kernel(x, weight, bias):
        return _reference_glu_op(x, weight, bias, norm_eps)
    out = small_m_linear_silu_mul_op(x.reshape(-1, x.shape[-1]), weight, bias,
                                     None if norm_eps is None else float(norm_eps))
    return out.view(*x.shape[:-1], weight.shape[0] // 2)


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[first, end) addresses of the bytes a non-empty t's elements can touch (strides are >= 0)."""
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _check_add_args(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                    bias: Optional[torch.Tensor]) -> None:
    if residual.dim() == 0 or x.dim() != residual.dim() or weight.dim() != 2:
        raise ValueError(f"linear_add_: need residual [..., N], x [..., K] (same leading dims) and weight [N, K], "
                         f"got {tuple(residual.shape)}, {tuple(x.shape)} and {tuple(weight.shape)}")
    if (x.shape[:-1] != residual.shape[:-1] or tuple(weight.shape) != (residual.shape[-1], x.shape[-1])
            or (bias is not None and tuple(bias.shape) != (residual.shape[-1],))):
        raise ValueError(f"linear_add_: shapes disagree: residual {tuple(residual.shape)}, x {tuple(x.shape)}, "
                         f"weight {tuple(weight.shape)}, bias {None if bias is None else tuple(bias.shape)}")
    tensors = [t for t in (residual, x, weight, bias) if t is not None]
    if any(t.dtype != residual.dtype for t in tensors):
        raise ValueError(f"linear_add_: residual, x, weight and bias must share a dtype, got "
                         f"{[t.dtype for t in tensors]}")
    if any(t.device != residual.device for t in tensors):
        raise ValueError(f"linear_add_: residual, x, weight and bias must share a device, got "
                         f"{[str(t.device) for t in tensors]}")
    if not residual.is_contiguous():
        raise ValueError("linear_add_: residual must be contiguous (it is updated in place through a [-1, N] view)")
    # meta tensors (the launch counter) have no addresses: every one reads as 0, so nothing to compare
    if (residual.device.type != "meta" and residual.numel() and x.numel()
            and residual.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()):
        (r0, r1), (x0, x1) = _byte_span(residual), _byte_span(x)
        if r0 < x1 and x0 < r1:
            raise ValueError("linear_add_: x overlaps residual (residual is written while x is read)")


def linear_add_(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """residual [..., N] (contiguous) <- residual + x [..., K] weight[N, K]^T (+ bias [N]), in place, the
    fp32 sum rounded once to the dtype where the few-row kernel or cuBLAS's beta=1 epilogue answers
    (the eager path with a bias rounds F.linear first); returns residual. The residual add of a
    decoder layer moved into its o_proj / down_proj GEMM (module docstring)."""
    _check_add_args(residual, x, weight, bias)
    if residual.numel() == 0:
        return residual
    n, k = weight.shape
    rows = residual.view(-1, n)
    x_rows = x.reshape(rows.shape[0], k)
    grad = torch.is_grad_enabled() and residual.requires_grad
    if grad or not _wants_kernel(x, weight, bias):
        _reference_add_(rows, x_rows, weight, bias)
    else:
        small_m_linear_add_op(rows, x_rows, weight, bias)
    return residual
