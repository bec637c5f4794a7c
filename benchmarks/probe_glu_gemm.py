"""Does one tensor-core launch for gate/up + SwiGLU beat the frame step's pair, the gate/up GEMM
(cuBLAS, or the GEMM tuner's cuBLASLt pick) then kernels/silu_mul.py? Measured: no (H200,
2026-11-27-glu-gemm-a7479e3-h200.json): the best Triton config took 15.4 us against the pair's
10.2 us for the code predictor at M = 256, and 41.7 against 26.4 us for the talker. So the kernel
below lives here, as the probe's subject, not in kernels/.

Why it was tried: at batch 256 the frame step runs the GEMM then the SwiGLU launch for 103 layer
passes (28 talker, 75 code predictor). That launch reads the [M, 2I] GEMM output back and recomputes
each row's 1/rms from x: 0.34 ms a step on the H100 (2026-11-27-talker-profile-599b4fa-h100.json).

The kernel: one program owns a [BLOCK_M, BLOCK_N] tile of y = silu(x W[:I]^T) * (x W[I:]^T). It
accumulates the gate tile (W rows n) and the up tile (W rows I + n) over the whole K in fp32 with
tl.dot and, with NORM, the row sums of x^2 from the x tiles it loads anyway. Its epilogue is the
few-row kernel's GLU epilogue (kernels/small_m_linear_triton.py): gate and up rounded to the dtype,
scaled by s = rsqrt(mean(x^2) + eps) and rounded again, then kernels/silu_mul_triton.py's arithmetic.
The m tiles of one weight column tile are adjacent programs, so W streams from HBM once.

For the 1.7B code predictor (K 1024, I 3072) and talker (K 2048, I 6144) MLPs at M rows, each path is
a CUDA graph of one call per weight copy (copies enough that weights stream from HBM, as in the frame
step), timed with CUDA events, median us per call; the Triton kernel over a sweep of block configs.
Every config's output is compared with the pair's (max abs difference; the GEMM sums in another
order). Both paths apply the deferred RMSNorm's row factor, as the decode route does.

  python benchmarks/probe_glu_gemm.py --out glu-gemm.json [--batches 256,128,64]
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit  # noqa: E402
from kernels import gemm_tuning  # noqa: E402
from kernels.bf16_bits import from_f32 as _from_f32, to_f32 as _to_f32  # noqa: E402
from kernels.pdl import pdl_launch, wait_for_prior_grid  # noqa: E402
from kernels.silu_mul import silu_mul  # noqa: E402
from kernels.silu_mul_triton import LAUNCH_OPTIONS  # noqa: E402
from kernels.small_m_linear_triton import glu_epilogue  # noqa: E402


@triton.jit
def _glu_gemm_kernel(x_ptr, w_ptr, y_ptr, M, I, K, stride_xm, stride_wn, stride_ym, k_float, eps,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NORM: tl.constexpr,
                     EXP64: tl.constexpr, DOT_FP32: tl.constexpr, PDL: tl.constexpr):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m
    pid_n = pid // num_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < I
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    gate_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    up_rows = gate_rows + I * stride_wn
    acc_gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    sumsq = tl.zeros([BLOCK_M], tl.float32)   # NORM only: sum of x^2 per row
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_ok = k < K
        x = tl.load(x_rows + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)        # [BM, BK]
        w_mask = n_ok[:, None] & k_ok[None, :]
        w_gate = tl.load(gate_rows + k[None, :], mask=w_mask, other=0.0)                        # [BN, BK]
        w_up = tl.load(up_rows + k[None, :], mask=w_mask, other=0.0)
        if DOT_FP32:   # the interpreter: its bf16 dot and casts mangle values; exact fp32 by bits
            x = _to_f32(x)
            w_gate = _to_f32(w_gate)
            w_up = _to_f32(w_up)
        acc_gate = tl.dot(x, tl.trans(w_gate), acc_gate)
        acc_up = tl.dot(x, tl.trans(w_up), acc_up)
        if NORM:   # the x tile is here anyway: its squares cost no load
            xf = _to_f32(x)
            sumsq += tl.sum(xf * xf, axis=1)
    dtype = y_ptr.dtype.element_ty
    y = glu_epilogue(acc_gate, acc_up, sumsq, k_float, eps, dtype, NORM, EXP64)   # the few-row kernel's epilogue
    y_offs = offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    tl.store(y_ptr + y_offs, _from_f32(y, dtype), mask=m_ok[:, None] & n_ok[None, :])


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_glu_gemm_kernel, triton.runtime.JITFunction)


def glu_gemm_triton(x: torch.Tensor, weight: torch.Tensor, norm_eps: float | None,
                    config: tuple[int, int, int, int, int]) -> torch.Tensor:
    """x [M, K], weight [2I, K] (gate rows, then up rows), bf16/fp16 with unit last stride -> y [M, I] =
    silu(x W[:I]^T) * (x W[I:]^T). norm_eps: gate and up scaled by rsqrt(mean(x^2) + norm_eps) per
    row first (the deferred RMSNorm). config: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)."""
    assert x.dtype in (torch.bfloat16, torch.float16) and weight.dtype == x.dtype and weight.shape[0] % 2 == 0
    assert x.stride(1) == 1 and weight.stride(1) == 1 and x.shape[1] == weight.shape[1]
    m, k = x.shape
    inter = weight.shape[0] // 2
    y = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    block_m, block_n, block_k, num_warps, num_stages = config
    grid = (triton.cdiv(m, block_m) * triton.cdiv(inter, block_n),)
    stages = {} if is_interpreting() else {"num_stages": num_stages}
    _glu_gemm_kernel[grid](
        x, weight, y, m, inter, k, x.stride(0), weight.stride(0), y.stride(0), float(k),
        0.0 if norm_eps is None else float(norm_eps), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        NORM=norm_eps is not None, EXP64=is_interpreting(), DOT_FP32=is_interpreting(), num_warps=num_warps,
        **stages, **LAUNCH_OPTIONS, **pdl_launch(x.device),
    )
    return y


SHAPES = (("predictor.gate_up", 3072, 1024), ("talker.gate_up", 6144, 2048))   # (name, I, K)
STREAM_BYTES = 160 * 2**20
EPS = 1e-6
CONFIGS = [c for c in itertools.product((64, 128), (64, 128), (64, 128), (4, 8), (3, 4))
           if not (c[0] == 128 and c[1] == 128 and c[2] == 128)]   # (BM, BN, BK, warps, stages)


def graph_us(calls, iters: int = 25) -> float:
    return gemm_tuning.replay_us(gemm_tuning.capture_calls(calls), len(calls), iters)


def gemm(x, w):
    """The decode route's GEMM: the tuner's cuBLASLt pick where it kept one, else torch's."""
    out = gemm_tuning.linear_or_none(x, w)
    return torch.nn.functional.linear(x, w) if out is None else out


def pair(x, w):
    return silu_mul(gemm(x, w), norm_source=x, eps=EPS)


def probe(name: str, inter: int, k: int, m: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + k)
    copies = max(2, min(32, STREAM_BYTES // (2 * inter * k * 2)))
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    weights = [(torch.randn(2 * inter, k, device="cuda", generator=gen) * k ** -0.5).to(torch.bfloat16)
               for _ in range(copies)]
    with gemm_tuning.allow_tuning():
        want = pair(x, weights[0])   # tunes the GEMM shape first, as the decode warm-up does
    torch.cuda.synchronize()
    base_us = graph_us([lambda w=w: pair(x, w) for w in weights])
    gemm_us = graph_us([lambda w=w: gemm(x, w) for w in weights])
    results = []
    for config in CONFIGS:
        try:
            got = glu_gemm_triton(x, weights[0], EPS, config=config)
            torch.cuda.synchronize()
            diff = (got.float() - want.float()).abs().max().item()
            us = graph_us([lambda w=w: glu_gemm_triton(x, w, EPS, config=config) for w in weights])
        except Exception as exc:   # noqa: BLE001 - a config the compiler refuses (shared memory) is a result
            results.append({"config": config, "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        results.append({"config": config, "us": us, "max_abs_diff": diff})
    ok = [r for r in results if "us" in r]
    best = min(ok, key=lambda r: r["us"]) if ok else None
    scale = want.float().abs().max().item()
    line = {"shape": name, "m": m, "inter": inter, "k": k, "pair_us": base_us, "torch_gemm_alone_us": gemm_us,
            "best": best, "want_max_abs": scale, "configs": results}
    print(f"{name} M={m}: pair {base_us:.2f} us (torch GEMM alone {gemm_us:.2f}); "
          + (f"triton best {best['us']:.2f} us {best['config']} diff {best['max_abs_diff']:.3g} of {scale:.3g}"
             if best else "no triton config ran"), flush=True)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="256,128,64")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    report = {"benchmark": "probe_glu_gemm", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": git_commit(), "results": []}
    started = time.time()
    for m in (int(b) for b in args.batches.split(",")):
        for name, inter, k in SHAPES:
            report["results"].append(probe(name, inter, k, m))
            Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
