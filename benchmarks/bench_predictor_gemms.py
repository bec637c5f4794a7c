"""The code predictor's GEMMs at a decode batch, alone: is cuBLAS's pick the best there is?

At batch 256 the predictor runs 300 GEMMs a frame (15 steps x 5 layers x qkv / o / gate_up / down)
of 1-3 GFLOP each in 6.6-7.8 us (H200), about 270 TFLOP/s: a third of the step. This times each
shape three ways, every one as a CUDA graph of CALLS calls (launch gaps as in the step), CUDA events,
median us per call:
  - cublas:     torch.mm as the step runs it (default BLAS library);
  - cublaslt:   the same with torch.backends.cuda.preferred_blas_library("cublaslt");
  - autotune:   torch.compile(mode="max-autotune-no-cudagraphs") of the mm: Inductor times its
                Triton GEMM templates against cuBLAS and keeps the fastest (its own table is logged);
and checks the other two results against cublas (`*_err`, max abs difference: bf16 noise).

  python benchmarks/bench_predictor_gemms.py --out predictor-gemms.json [--batches 64,256]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decode_kernels import CALLS, graph_ms  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402

# (name, K, N) of the 1.7B predictor: hidden 1024, 16 q + 8 kv heads of 128, intermediate 3072
SHAPES = (("qkv", 1024, 4096), ("o", 2048, 1024), ("gate_up", 1024, 6144), ("down", 3072, 1024),
          ("lm_head", 1024, 2048))


def bench_shape(batch: int, name: str, k: int, n: int, gen: torch.Generator) -> dict:
    x = torch.randn(batch, k, generator=gen).bfloat16().cuda()
    w = (torch.randn(n, k, generator=gen) * k ** -0.5).bfloat16().cuda()   # nn.Linear layout [out, in]
    want = torch.mm(x, w.t()).float()
    entry = {"shape": name, "m": batch, "k": k, "n": n, "gflop": 2 * batch * k * n / 1e9}
    entry["cublas_us"] = 1e3 * graph_ms(lambda: torch.mm(x, w.t()))
    previous = torch.backends.cuda.preferred_blas_library()
    try:
        torch.backends.cuda.preferred_blas_library("cublaslt")
        entry["cublaslt_err"] = float((torch.mm(x, w.t()).float() - want).abs().max())
        entry["cublaslt_us"] = 1e3 * graph_ms(lambda: torch.mm(x, w.t()))
    finally:
        torch.backends.cuda.preferred_blas_library(previous)
    try:
        compiled = torch.compile(lambda a, b: torch.mm(a, b.t()), mode="max-autotune-no-cudagraphs", dynamic=False)
        entry["autotune_err"] = float((compiled(x, w).float() - want).abs().max())
        entry["autotune_us"] = 1e3 * graph_ms(lambda: compiled(x, w))
    except Exception as exc:  # noqa: BLE001 (no compiler on the box: report, keep the rest)
        entry["autotune_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    best = min(("cublas", "cublaslt", "autotune"), key=lambda kind: entry.get(f"{kind}_us", float("inf")))
    entry["best"] = best
    print(f"bs={batch:4d} {name:8s} {entry['gflop']:.2f} GFLOP: cublas {entry['cublas_us']:.1f} us, cublaslt "
          f"{entry['cublaslt_us']:.1f} us, autotune {entry.get('autotune_us', float('nan')):.1f} us -> {best} "
          f"({entry['gflop'] / entry[f'{best}_us'] * 1e3:.0f} TFLOP/s)", flush=True)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="256")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(0)
    rows = [bench_shape(batch, name, k, n, gen) for batch in (int(b) for b in args.batches.split(","))
            for name, k, n in SHAPES]
    result = {"benchmark": "predictor_gemms", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "torch": torch.__version__, "calls_per_graph": CALLS, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
