"""cuDNN on the decoder's convs in three memory layouts, heuristic and timed algorithm picks.

The vocoder keeps activations [B, C, T] (NCL). For bf16, cuDNN runs its NHWC kernels and wraps each
conv in NCHW <-> NHWC transposes: ~10 ms of a ~46 ms batch-64 x 25-frame graph step on an H100
(benchmarks/results/2026-11-25-talker-frame-attention-h100.md). Storing activations time-major
([B, T, C]) removes those transposes, but on 2026-11-25 cuDNN's heuristics picked 10-15x slower
algorithms for the [B, C, 1, T] channels-last view (vocoder-time-major-h200.md), and timing every
captured shape (cudnn.benchmark) made graph capture take minutes. This script times, per shape:

  ncl        F.conv1d on [B, C, T] contiguous (today)
  nhwc_1t    conv2d on the [B, C, 1, T] view of [B, T, C] memory (channels-last, kernel 1 x K)
  nhwc_t1    conv2d on the [B, C, T, 1] view of [B, T, C] memory (channels-last, kernel K x 1)

each with cudnn.benchmark off (heuristics) and on (its first call, which times the algorithms, is
reported as `benchmark_first_call_ms`), plus one [B, C, T] <-> [B, T, C] transpose for scale. Every
layout's output is checked against the NCL one.

  python benchmarks/bench_conv_layouts.py --out layouts.json            # GPU, bf16, decoder shapes
  python benchmarks/bench_conv_layouts.py --smoke --out /tmp/l.json     # CPU, fp32, tiny shapes
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit  # noqa: E402
from benchmarks.device_name import gpu_name  # noqa: E402

# (B, C_in, C_out, T, K, dilation): the conv decoder's stride-1 convs in a batch-64 x 25-frame step
DECODER_SHAPES = [
    (64, 1024, 1536, 100, 7, 1), (64, 768, 768, 800, 7, 3), (64, 384, 384, 4000, 7, 1),
    (64, 192, 192, 16000, 7, 3), (64, 96, 96, 48000, 7, 1), (64, 96, 96, 48000, 7, 9),
    (64, 96, 96, 48000, 1, 1), (64, 96, 1, 48000, 7, 1), (1, 96, 96, 1920, 7, 9),
]
SMOKE_SHAPES = [(2, 8, 6, 40, 7, 3), (1, 4, 1, 30, 3, 1)]
LAYOUTS = ("ncl", "nhwc_1t", "nhwc_t1")
WARMUP, ITERS = 5, 20


def make_conv(layout: str, x_ncl: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, dilation: int):
    """A no-argument call of this layout's conv (inputs prepared outside it) and a function turning
    its output into [B, C_out, T] for the check."""
    pad = (weight.shape[-1] - 1) * dilation
    x_pad = F.pad(x_ncl, (pad, 0))                                  # causal: left context of zeros
    if layout == "ncl":
        return (lambda: F.conv1d(x_pad, weight, bias, dilation=dilation)), (lambda y: y)
    time_major = x_pad.transpose(1, 2).contiguous()                # [B, T + pad, C] memory
    if layout == "nhwc_1t":
        x4 = time_major.transpose(1, 2).unsqueeze(2)               # [B, C, 1, T]: strides of NHWC
        w4 = weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)
        assert x4.is_contiguous(memory_format=torch.channels_last)
        return (lambda: F.conv2d(x4, w4, bias, dilation=(1, dilation))), (lambda y: y[:, :, 0])
    x4 = time_major.transpose(1, 2).unsqueeze(3)                    # [B, C, T, 1]: strides of NHWC
    w4 = weight.unsqueeze(3).contiguous(memory_format=torch.channels_last)
    assert x4.is_contiguous(memory_format=torch.channels_last)
    return (lambda: F.conv2d(x4, w4, bias, dilation=(dilation, 1))), (lambda y: y[..., 0])


def time_ms(fn, device: torch.device) -> float:
    """Median ms over ITERS calls after WARMUP (CUDA events on a GPU, wall clock on CPU)."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(ITERS):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def first_call_ms(fn, device: torch.device) -> float:
    """Wall time of one call including cuDNN's algorithm timing (what capture would pay once)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def bench_shape(shape, device: torch.device, dtype: torch.dtype) -> dict:
    b, c_in, c_out, t, k, d = shape
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(b, c_in, t, generator=gen).to(device, dtype)
    weight = (torch.randn(c_out, c_in, k, generator=gen) / (c_in * k) ** 0.5).to(device, dtype)
    bias = torch.randn(c_out, generator=gen).to(device, dtype)
    row: dict = {"shape": list(shape), "transpose_ms": time_ms(lambda: x.transpose(1, 2).contiguous(), device)}
    reference = None
    tolerance = 1e-4 if dtype == torch.float32 else 2 ** -6
    for layout in LAYOUTS:
        conv, to_ncl = make_conv(layout, x, weight, bias, d)
        entry: dict = {}
        for benchmark in (False, True):
            torch.backends.cudnn.benchmark = benchmark
            try:
                if benchmark:
                    entry["benchmark_first_call_ms"] = first_call_ms(conv, device)
                key = "benchmark_ms" if benchmark else "heuristic_ms"
                entry[key] = time_ms(conv, device)
                out = to_ncl(conv()).float()
            except RuntimeError as exc:   # a layout cuDNN refuses: note it, go on
                entry[f"error_{'benchmark' if benchmark else 'heuristic'}"] = f"{exc}"[:200]
                continue
            finally:
                torch.backends.cudnn.benchmark = False
            if reference is None:
                reference = out
            err = ((out - reference).abs() / (1 + reference.abs())).max().item()
            if err > tolerance:
                raise SystemExit(f"{layout} disagrees with ncl at {shape}: max rel err {err:.3g}")
            entry["max_rel_err_vs_ncl"] = max(entry.get("max_rel_err_vs_ncl", 0.0), err)
        row[layout] = entry
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--smoke", action="store_true", help="CPU, fp32, tiny shapes: checks the script runs")
    args = p.parse_args(argv)
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    rows: list[dict] = []
    report = {"bench": "conv_layouts", "commit": git_commit(), "smoke": args.smoke, "torch": torch.__version__,
              "gpu": gpu_name(device),
              "dtype": str(dtype).removeprefix("torch."), "results": rows}
    with torch.no_grad():
        for shape in SMOKE_SHAPES if args.smoke else DECODER_SHAPES:
            row = bench_shape(shape, device, dtype)
            rows.append(row)
            cells = "  ".join(f"{name} {row[name].get('heuristic_ms', float('nan')):7.3f}/"
                              f"{row[name].get('benchmark_ms', float('nan')):7.3f}" for name in LAYOUTS)
            print(f"{str(shape):32s} heuristic/benchmark ms: {cells}  transpose {row['transpose_ms']:.3f}", flush=True)
            args.out.write_text(json.dumps(report, indent=1))   # as it goes
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
