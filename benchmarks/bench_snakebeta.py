"""SnakeBeta bandwidth: eager PyTorch vs the fused Triton kernel, plus a launch-config sweep.

GB/s = (bytes of x read + bytes of y written + the two fp32 [C] vectors) / median time. Shapes are
the decoder's SnakeBeta inputs for 25-frame chunks at batch 64 (one per upsampling stage), one
larger tensor, and batch-1 first-chunk sizes (latency bound). Every Triton result is also checked
against the fp32 reference (1 ulp of the storage dtype); the script exits non-zero on a mismatch.

  python benchmarks/bench_snakebeta.py --out benchmarks/results/snakebeta_h200.json   # GPU
  python benchmarks/bench_snakebeta.py --smoke --out /tmp/snake_smoke.json            # CPU, interpreter
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first triton import
sys.path.insert(0, str(ROOT))

from benchmarks.commit import git_commit as read_commit  # noqa: E402
from benchmarks.device_name import gpu_name  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402

from kernels import snakebeta_config  # noqa: E402
from kernels.snakebeta_config import SnakeConfig, choose_config, next_pow2  # noqa: E402
from kernels.snakebeta_reference import snake_beta_reference, snake_params_from_log, storage_ulp  # noqa: E402
from kernels.snakebeta_triton import snake_beta_triton  # noqa: E402

# [B, C, T] at batch 64, 25-frame chunks: decoder.1..4 inputs and the final SnakeBeta(96).
DECODER_SHAPES = [(64, 1536, 100), (64, 768, 800), (64, 384, 4000), (64, 192, 16000), (64, 96, 48000)]
BIG_SHAPES = [(64, 96, 192000)]
# Batch-1 first chunk of 2 frames: smallest and largest stage.
LATENCY_SHAPES = [(1, 1536, 8), (1, 96, 3840)]
SMOKE_SHAPES = [(2, 8, 40), (1, 4, 300)]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}

SWEEP_BLOCK_ELEMS = (2048, 4096, 8192, 16384)
SWEEP_MAX_BLOCK_T = (512, 2048, 8192)
SWEEP_NUM_WARPS = (4, 8, 16)


def git_commit() -> str:
    return read_commit(ROOT, mark_dirty=True)


def time_ms(fn, device: torch.device, rep_ms: int) -> float:
    """Median time of fn in ms (do_bench with an L2 flush on CUDA; wall clock on CPU)."""
    if device.type == "cuda":
        return float(triton.testing.do_bench(fn, warmup=max(5, rep_ms // 4), rep=rep_ms, return_mode="median"))
    fn()
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def official_eager(x, alpha_log, beta_log):
    """The checkpoint's formula as written upstream: exp() per call, math in x's dtype."""
    alpha = torch.exp(alpha_log).view(1, -1, 1)
    beta = torch.exp(beta_log).view(1, -1, 1)
    return x + (1.0 / (beta + 1e-9)) * torch.pow(torch.sin(x * alpha), 2)


def max_ulp_error(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """Worst |y - fp32 reference| in units of the storage dtype's spacing at the reference value."""
    ref = snake_beta_reference(x.float(), a, b)
    ulp = storage_ulp(ref, x.dtype)
    # 4e-6 absolute: the fp32 sin / range-reduction error budget of tests/test_snakebeta.py.
    return float(((y.float() - ref).abs() / (ulp + 4e-6)).max())


def sweep_configs(shape, elem_bytes: int, can_fast_sin: bool):
    _, num_channels, num_samples = shape
    seen = set()
    for block_elems in SWEEP_BLOCK_ELEMS:
        for max_block_t in SWEEP_MAX_BLOCK_T:
            block_t = min(next_pow2(num_samples), max_block_t, block_elems)
            block_c = min(next_pow2(num_channels), max(1, block_elems // block_t))
            for num_warps in SWEEP_NUM_WARPS:
                if block_c * block_t < 32 * num_warps:  # fewer elements than threads
                    continue
                key = (block_c, block_t, num_warps)
                if key not in seen:
                    seen.add(key)
                    yield SnakeConfig(block_c, block_t, num_warps, fast_sin=can_fast_sin)


def bench_shape(shape, dtype, device, args) -> dict:
    num_batch, num_channels, num_samples = shape
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.randn(shape, generator=gen) * 3).to(device=device, dtype=dtype)
    alpha_log = (torch.rand(num_channels, generator=gen) * 2 - 1).to(device)
    beta_log = (torch.rand(num_channels, generator=gen) * 2 - 1).to(device)
    a, b = snake_params_from_log(alpha_log, beta_log)
    num_bytes = 2 * x.numel() * x.element_size() + 2 * num_channels * 4

    def gbps(ms):
        return num_bytes / (ms * 1e-3) / 1e9

    is_cuda = device.type == "cuda"
    heuristic = choose_config(num_channels, num_samples, x.element_size(), num_batch=num_batch, is_cuda=is_cuda,
                              num_sms=torch.cuda.get_device_properties(device).multi_processor_count
                              if is_cuda else 1)
    row = {"shape": list(shape), "dtype": str(dtype).replace("torch.", ""), "bytes_moved": num_bytes,
           "heuristic": vars(heuristic)}
    with torch.no_grad():
        row["eager_reference_ms"] = time_ms(lambda: snake_beta_reference(x, a, b), device, args.rep_ms)
        alpha_t, beta_t = alpha_log.to(dtype), beta_log.to(dtype)
        row["eager_official_ms"] = time_ms(lambda: official_eager(x, alpha_t, beta_t), device, args.rep_ms)
        out = torch.empty_like(x)
        row["triton_ms"] = time_ms(lambda: snake_beta_triton(x, a, b, out=out, config=heuristic), device, args.rep_ms)
        row["triton_max_ulp_err"] = max_ulp_error(snake_beta_triton(x, a, b, config=heuristic), x, a, b)
        sweep = []
        if args.sweep:
            for cfg in sweep_configs(shape, x.element_size(), can_fast_sin=is_cuda):
                ms = time_ms(lambda: snake_beta_triton(x, a, b, out=out, config=cfg), device, args.sweep_rep_ms)
                sweep.append({"config": vars(cfg), "ms": ms, "gbps": gbps(ms)})
            best = min(sweep, key=lambda s: s["ms"])
            # The sin choice at the best tile: accurate libdevice sinf vs MUFU sin.approx.
            alt = SnakeConfig(**dict(best["config"], fast_sin=not best["config"]["fast_sin"]))
            if is_cuda:
                ms = time_ms(lambda: snake_beta_triton(x, a, b, out=out, config=alt), device, args.sweep_rep_ms)
                sweep.append({"config": vars(alt), "ms": ms, "gbps": gbps(ms)})
                row["alt_sin_max_ulp_err"] = max_ulp_error(snake_beta_triton(x, a, b, config=alt), x, a, b)
            row["best"] = min(sweep, key=lambda s: s["ms"])
        row["sweep"] = sweep
    for key in ("eager_reference", "eager_official", "triton"):
        row[f"{key}_gbps"] = gbps(row[f"{key}_ms"])
    return row


def print_header() -> None:
    print(f"{'shape':>18} {'dtype':>8} {'eager_ref':>10} {'eager_off':>10} {'triton':>10} {'best':>10}"
          f" {'ulp':>5}  best config (GB/s; eager ~430, goal >= 3000)")


def print_row(r: dict) -> None:
    best = r.get("best")
    best_txt = "-" if best is None else f"{best['gbps']:10.0f}"
    cfg = "" if best is None else "c{block_c} t{block_t} w{num_warps} fast={fast_sin}".format(**best["config"])
    print(f"{'x'.join(map(str, r['shape'])):>18} {r['dtype']:>8} {r['eager_reference_gbps']:10.0f}"
          f" {r['eager_official_gbps']:10.0f} {r['triton_gbps']:10.0f} {best_txt:>10}"
          f" {r['triton_max_ulp_err']:5.2f}  {cfg}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON results path")
    parser.add_argument("--smoke", action="store_true", help="CPU + Triton interpreter, tiny shapes")
    parser.add_argument("--no-sweep", dest="sweep", action="store_false", help="skip the config sweep")
    parser.add_argument("--rep-ms", type=int, default=200, help="do_bench repetition time per measurement")
    parser.add_argument("--sweep-rep-ms", type=int, default=50, help="do_bench repetition time per sweep point")
    parser.add_argument("--dtypes", default="bf16,fp32", help="comma list from " + ",".join(DTYPES))
    args = parser.parse_args(argv)

    if args.smoke:
        device, shapes = torch.device("cpu"), SMOKE_SHAPES
    else:
        if not torch.cuda.is_available():
            parser.error("no CUDA device: use --smoke for the CPU interpreter run")
        device, shapes = torch.device("cuda"), DECODER_SHAPES + BIG_SHAPES + LATENCY_SHAPES
    rows = []
    print_header()
    for dname in args.dtypes.split(","):
        for shape in shapes:
            rows.append(bench_shape(shape, DTYPES[dname], device, args))
            print_row(rows[-1])
    report = {
        "benchmark": "snakebeta",
        "device": gpu_name(device) or "cpu (triton interpreter)",
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "commit": git_commit(), "smoke": args.smoke,
        "heuristic_constants": {k: getattr(snakebeta_config, k) for k in dir(snakebeta_config) if k.isupper()},
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}")
    bad = [r for r in rows if r["triton_max_ulp_err"] > 1.0]
    if bad:
        print(f"ERROR: Triton output off by more than 1 ulp for {[(r['shape'], r['dtype']) for r in bad]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
