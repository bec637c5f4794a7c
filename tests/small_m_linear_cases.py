"""Inputs shared by the few-row linear tests (tests/test_small_m_linear.py, the Triton kernel in the
CPU interpreter, on a GPU and compiled for sm_90; tests/test_small_m_linear_routing.py, the
dispatcher in-process with stand-in launchers): the case tables and their seeded makers, per
variant (plain, GLU, RESIDUAL, GLU with NORM), and the deferred norm + SwiGLU written from torch ops."""
from __future__ import annotations

import torch

# (M, N, K, bias, dtype, kwargs): 1, 3, 5, 8 and 16 rows; N not a multiple of any tile; K not a
# power of two (96, 80) and K past one slice (8200: the slice loop runs twice); x with a row stride
# other than K; block_n and num_warps overridden
CASES = {
    "fp32-m1": (1, 37, 64, True, torch.float32, {}),
    "fp32-m2-k8200": (2, 5, 8200, True, torch.float32, {}),
    "fp32-m8-k96": (8, 20, 96, False, torch.float32, {}),
    "bf16-m1": (1, 50, 128, True, torch.bfloat16, {}),
    "bf16-m5-bn4": (5, 33, 80, True, torch.bfloat16, {"block_n": 4}),
    "fp16-m16": (16, 24, 64, False, torch.float16, {"num_warps": 2}),
    "bf16-m3-strided": (3, 40, 64, True, torch.bfloat16, {}),
}


def _make(name, seed):
    m, n, k, with_bias, dtype, kwargs = CASES[name]
    gen = torch.Generator().manual_seed(seed)
    if name.endswith("strided"):   # x as the first K columns of a wider buffer: row stride != K
        x = torch.randn(m, k + 16, generator=gen).to(dtype)[:, :k]
    else:
        x = torch.randn(m, k, generator=gen).to(dtype)
    weight = (torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype) if with_bias else None
    return {"x": x, "weight": weight, "bias": bias, "kwargs": kwargs}


# the GLU variant (fused gate/up weight [2I, K] -> silu(gate) * up [M, I]): (M, I, K, bias, dtype, kwargs)
GLU_CASES = {
    "glu-bf16-m1": (1, 48, 128, False, torch.bfloat16, {}),
    "glu-bf16-m3-bias": (3, 40, 96, True, torch.bfloat16, {}),
    "glu-fp16-m2-bn2": (2, 33, 64, True, torch.float16, {"block_n": 2}),
    "glu-fp32-m1-k8200": (1, 12, 8200, False, torch.float32, {}),
}


def _make_glu(name, seed):
    m, inter, k, with_bias, dtype, kwargs = GLU_CASES[name]
    gen = torch.Generator().manual_seed(100 + seed)
    # x scaled by 3: gate sums spread over silu's curved part and both of its tails
    x = (3 * torch.randn(m, k, generator=gen)).to(dtype)
    weight = (torch.randn(2 * inter, k, generator=gen) / k ** 0.5).to(dtype)
    bias = torch.randn(2 * inter, generator=gen).to(dtype) if with_bias else None
    return {"x": x, "weight": weight, "bias": bias, "kwargs": kwargs}


# linear_add_ (residual [M, N] += x W^T (+ b)): (M, N, K, bias, dtype); every dtype at K = 1024 (one
# slice) and K = 8200 (two), with and without a bias, 1-3 rows
ADD_CASES = {
    f"add-{tag}-m{m}-k{k}{'-bias' if with_bias else ''}": (m, n, k, with_bias, dtype)
    for tag, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32))
    for (m, n, k, with_bias) in ((1, 48, 1024, False), (3, 20, 1024, True), (2, 12, 8200, False), (3, 10, 8200, True))
}


def _make_add(name, seed):
    m, n, k, with_bias, dtype = ADD_CASES[name]
    gen = torch.Generator().manual_seed(200 + seed)
    return {"residual": (4 * torch.randn(m, n, generator=gen)).to(dtype), "x": torch.randn(m, k, generator=gen).to(dtype),
            "weight": (torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype),
            "bias": torch.randn(n, generator=gen).to(dtype) if with_bias else None}


# GLU with a deferred norm (x un-normalised, bias-free): (M, I, K, dtype, x scale, eps); the last
# with an eps the size of the variance, so a wrong eps shows
NORM_CASES = {
    "norm-bf16-m1-k1024": (1, 48, 1024, torch.bfloat16, 3.0, 1e-6),
    "norm-bf16-m2-k8200": (2, 20, 8200, torch.bfloat16, 3.0, 1e-6),
    "norm-fp16-m2-k1024": (2, 40, 1024, torch.float16, 3.0, 1e-6),
    "norm-fp16-m1-k8200": (1, 24, 8200, torch.float16, 3.0, 1e-6),
    "norm-fp32-m1-k1024": (1, 40, 1024, torch.float32, 3.0, 1e-6),
    "norm-fp32-m2-k8200": (2, 12, 8200, torch.float32, 3.0, 1e-6),
    "norm-bf16-m2-k1024-eps": (2, 32, 1024, torch.bfloat16, 0.5, 0.25),
}


def _make_norm(name, seed):
    m, inter, k, dtype, scale, eps = NORM_CASES[name]
    gen = torch.Generator().manual_seed(300 + seed)
    # gate/up sums ~ scale * N(0, 1), then scaled by ~1/scale: silu's curved part and both tails
    return {"x": (scale * torch.randn(m, k, generator=gen)).to(dtype),
            "weight": (torch.randn(2 * inter, k, generator=gen) / k ** 0.5).to(dtype), "eps": eps}


def _norm_silu_mul(gate_up, x, eps, variance_ulps=0):
    """The deferred norm + SwiGLU from torch ops (independent of kernels/silu_mul*.py): s =
    rsqrt(mean(x32^2) + eps) per row, gate_up scaled in fp32 and rounded to its dtype, then silu(gate)
    rounded and * up rounded, with exp correctly rounded to fp32 (fp64, as the interpreter's EXP64 and,
    for bf16/fp16, CPU F.silu). variance_ulps moves mean(x32^2) by that many fp32 ulps first."""
    var = x.float().pow(2).mean(-1, keepdim=True)
    for _ in range(abs(variance_ulps)):
        var = torch.nextafter(var, torch.full_like(var, float("inf") if variance_ulps > 0 else 0.0))
    gate_up = (gate_up.float() * torch.rsqrt(var + eps)).to(gate_up.dtype)
    gate, up = gate_up.float().chunk(2, dim=-1)
    silu = (gate / (1 + torch.exp(-gate.double()).float())).to(gate_up.dtype)
    return (silu.float() * up).to(gate_up.dtype)
