"""The decoder's causal convs: cuDNN (F.conv1d, as the decoder ran them) against the Triton kernel,
plus a small sweep of tile sizes per shape.

Shapes are the conv decoder's stride-1 convs in a 25-frame step at batch 64 (k7 at each stage with
its dilation, the final 96 -> 1 conv, a 1x1) and a batch-1 first chunk. Each Triton result is checked
against the fp32 reference; the script exits non-zero on a mismatch. Times are CUDA-event medians
(triton.testing.do_bench, L2 flushed), after a warm-up.

  python benchmarks/bench_causal_conv.py --out conv.json           # GPU
  python benchmarks/bench_causal_conv.py --smoke --out /tmp/c.json # CPU, interpreter, tiny shapes
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first triton import
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.commit import git_commit  # noqa: E402
from kernels.causal_conv_config import ConvConfig, choose_conv_config  # noqa: E402
from kernels.causal_conv_reference import causal_conv1d_reference, weight_tap_major  # noqa: E402
from kernels.causal_conv_triton import causal_conv1d_triton  # noqa: E402

# (B, C_in, C_out, T, K, dilation)
DECODER_SHAPES = [
    (64, 96, 96, 48000, 7, 1), (64, 96, 96, 48000, 7, 9), (64, 192, 192, 16000, 7, 3),
    (64, 384, 384, 4000, 7, 1), (64, 768, 768, 800, 7, 3), (64, 1024, 1536, 100, 7, 1),
    (64, 96, 1, 48000, 7, 1), (64, 96, 96, 48000, 1, 1),
    (1, 96, 96, 1920, 7, 9), (1, 1536, 1536, 4, 7, 1), (1, 1024, 1536, 4, 7, 1),
]
SMOKE_SHAPES = [(2, 16, 16, 40, 7, 3), (1, 24, 1, 30, 7, 1)]
SWEEP = [ConvConfig(co, ci, t, w, s) for co, ci, t, w, s in [
    (64, 32, 128, 4, 3), (128, 32, 128, 8, 3), (128, 64, 128, 8, 3), (64, 64, 256, 8, 3),
    (128, 32, 256, 8, 3), (64, 32, 64, 4, 4), (128, 64, 64, 4, 3), (32, 32, 256, 4, 3),
]]


def time_ms(fn, smoke: bool) -> float:
    if smoke:
        fn()
        return 0.0
    import triton
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def bench_shape(shape, device, dtype, smoke: bool) -> dict:
    b, c_in, c_out, t, k, d = shape
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(b, c_in, t, generator=gen).to(device, dtype)
    weight = (torch.randn(c_out, c_in, k, generator=gen) / (c_in * k) ** 0.5).to(device, dtype)
    context_len = (k - 1) * d
    tail = torch.randn(b, c_in, context_len, generator=gen).to(device, dtype) if context_len else None
    bias = torch.randn(c_out, generator=gen).to(device, dtype)
    weight_kco = weight_tap_major(weight)
    ref = causal_conv1d_reference(x.float(), weight_kco.float(), d, None if tail is None else tail.float(), bias.float())
    scale = 1 + ref.abs()

    def cudnn():  # the decoder's old streaming conv: x with zero context, padded, sliced (no cat)
        return F.conv1d(x, weight, bias, padding=context_len, dilation=d)[..., :t]

    def check(y):
        err = ((y.float() - ref).abs() / scale).max().item()
        if err > 2 ** -7:
            raise SystemExit(f"mismatch at {shape}: max rel err {err:.3g}")
        return err

    row = {"shape": list(shape), "cudnn_ms": time_ms(cudnn, smoke)}
    default = choose_conv_config(c_in, c_out, t, b)
    row["default_config"] = default.__dict__
    row["max_rel_err"] = check(causal_conv1d_triton(x, weight_kco, d, tail, bias))
    row["triton_ms"] = time_ms(lambda: causal_conv1d_triton(x, weight_kco, d, tail, bias), smoke)
    sweep = []
    for cfg in ([] if smoke else SWEEP):
        try:
            check(causal_conv1d_triton(x, weight_kco, d, tail, bias, config=cfg))
            sweep.append({"config": cfg.__dict__, "ms": time_ms(lambda: causal_conv1d_triton(x, weight_kco, d, tail, bias, config=cfg), smoke)})
        except SystemExit:
            raise
        except Exception as exc:  # a tile too big for shared memory on this GPU: note it, go on
            sweep.append({"config": cfg.__dict__, "error": f"{type(exc).__name__}: {exc}"[:200]})
    row["sweep"] = sweep
    timed = [s for s in sweep if "ms" in s]
    if timed:
        row["best"] = min(timed, key=lambda s: s["ms"])
    # Bytes a perfect conv moves: x and tail read once, y written once.
    row["ideal_bytes"] = (x.numel() + c_out * b * t) * x.element_size()
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    rows = []
    report = {"bench": "causal_conv", "commit": git_commit(), "smoke": args.smoke,
              "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
              "dtype": str(dtype).removeprefix("torch."), "results": rows}
    for shape in SMOKE_SHAPES if args.smoke else DECODER_SHAPES:
        row = bench_shape(shape, device, dtype, args.smoke)
        rows.append(row)
        best = row.get("best", {})
        print(f"{str(shape):34s} cudnn {row['cudnn_ms']:8.3f} ms  triton {row['triton_ms']:8.3f} ms  "
              f"best {best.get('ms', float('nan')):8.3f} ms {best.get('config', '')}", flush=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
