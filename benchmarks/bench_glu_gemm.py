"""Can one Triton GEMM with the SwiGLU in its epilogue beat cuBLAS's gate/up GEMM + silu_mul at a
decode batch? (The MLP's two launches at batch 64-256; at batch 1 the few-row kernel already fuses.)

Times, each as a CUDA graph of CALLS calls (bench_decode_kernels.graph_ms), median us per call:
  - two:   torch.mm(x, W^T) then kernels.silu_mul_triton, as the step runs today;
  - fused: this file's Triton GEMM, gate and up tiles of the fused weight [2I, K] in two
           accumulators, silu(gate) * up applied before the one store, over a few tile configs;
and checks fused against two (max abs difference: bf16 noise from the summation order).

  python benchmarks/bench_glu_gemm.py --out glu-gemm.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decode_kernels import graph_ms  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402
from kernels.rmsnorm_triton import _round_to  # noqa: E402
from kernels.silu_mul_triton import _silu_mul_rounded, silu_mul_triton  # noqa: E402

# (name, I, K): the predictor's and the talker's gate/up at 1.7B
SHAPES = (("predictor", 3072, 1024), ("talker", 6144, 2048))
BATCHES = (64, 128, 256)
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
CONFIGS = ((64, 64, 64, 4, 4), (64, 64, 128, 4, 3), (64, 128, 64, 4, 4), (128, 64, 64, 8, 4),
           (128, 128, 64, 8, 3), (64, 32, 128, 4, 4), (32, 64, 128, 4, 4))


@triton.jit
def _glu_gemm_kernel(x_ptr, w_ptr, y_ptr, M, I, K, stride_xm, stride_wn, stride_ym,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < I
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    g_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None]     # [BK, BN]: W^T tile
    u_ptrs = g_ptrs + I * stride_wn
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        a = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        bg = tl.load(g_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        bu = tl.load(u_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc_g = tl.dot(a, bg, acc_g)
        acc_u = tl.dot(a, bu, acc_u)
        x_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    dtype = y_ptr.dtype.element_ty
    y = _silu_mul_rounded(_round_to(acc_g, dtype), _round_to(acc_u, dtype), dtype, False)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, y.to(dtype), mask=m_ok[:, None] & n_ok[None, :])


def glu_gemm(x: torch.Tensor, w: torch.Tensor, config) -> torch.Tensor:
    block_m, block_n, block_k, warps, stages = config
    m, k = x.shape
    inter = w.shape[0] // 2
    y = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(inter, block_n))
    _glu_gemm_kernel[grid](x, w, y, m, inter, k, x.stride(0), w.stride(0), y.stride(0),
                           BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages,
                           enable_fp_fusion=False)
    return y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    report = {"benchmark": "glu_gemm", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "torch": torch.__version__, "triton": triton.__version__, "rows": []}
    for name, inter, k in SHAPES:
        w = (torch.randn(2 * inter, k, generator=gen) * k ** -0.5).bfloat16().cuda()
        for batch in BATCHES:
            x = torch.randn(batch, k, generator=gen).bfloat16().cuda()
            want = silu_mul_triton(torch.mm(x, w.t()))
            row = {"shape": name, "m": batch, "i": inter, "k": k,
                   "two_us": 1e3 * graph_ms(lambda: silu_mul_triton(torch.mm(x, w.t()))),
                   "mm_only_us": 1e3 * graph_ms(lambda: torch.mm(x, w.t())), "fused_us": {}, "fused_err": {}}
            for config in CONFIGS:
                key = "x".join(map(str, config))
                try:
                    got = glu_gemm(x, w, config)
                    row["fused_err"][key] = float((got.float() - want.float()).abs().max())
                    row["fused_us"][key] = 1e3 * graph_ms(lambda: glu_gemm(x, w, config))
                except Exception as exc:  # noqa: BLE001 - a config that does not fit: record, go on
                    row["fused_err"][key] = repr(exc)[:200]
            best = min(row["fused_us"], key=row["fused_us"].get)
            row["best"] = best
            print(f"{name} M={batch}: two {row['two_us']:.1f} us (mm {row['mm_only_us']:.1f}), fused best {best} "
                  f"{row['fused_us'][best]:.1f} us err {row['fused_err'][best]:.3g}  "
                  f"{json.dumps({a: round(b, 1) for a, b in row['fused_us'].items()})}", flush=True)
            report["rows"].append(row)
            Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
