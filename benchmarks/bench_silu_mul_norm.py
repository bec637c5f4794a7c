"""The SwiGLU launch with the deferred norm (kernels/silu_mul_triton.py, norm_source): what the
per-row 1/rms costs on top of the plain launch, and whether wider column blocks pay it back.

    python benchmarks/bench_silu_mul_norm.py --out silu-mul-norm.json

Each program of the launch recomputes its row's factor from h (a reduction over the hidden size),
so a row of I columns split into I / BLOCK programs pays it I / BLOCK times. This times, per shape
of the decode step (rows x I, H: the predictor's 3072 x 1024 and the talker's 6144 x 2048), the
plain launch, then the norm launch at each (BLOCK, num_warps) of a sweep, in CUDA graphs of
CALLS launches (medians, CUDA events). Every configuration must give the default's bits.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decode_kernels import graph_ms  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402
from kernels.silu_mul_triton import choose_block, silu_mul_triton  # noqa: E402

SHAPES = [(256, 3072, 1024), (256, 6144, 2048), (64, 3072, 1024), (64, 6144, 2048), (8, 3072, 1024)]
SWEEP = [(1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16)]
EPS = 1e-6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    report = {"benchmark": "silu_mul_norm", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": git_commit(), "rows": []}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for rows, inter, hidden in SHAPES:
        gate_up = torch.randn(rows, 2 * inter, device="cuda", generator=gen).to(torch.bfloat16)
        h = (4.0 * torch.randn(rows, hidden, device="cuda", generator=gen)).to(torch.bfloat16)
        want = silu_mul_triton(gate_up, h, EPS)
        entry = {"rows": rows, "inter": inter, "hidden": hidden, "default_block": list(choose_block(inter)),
                 "plain_us": 1e3 * graph_ms(lambda: silu_mul_triton(gate_up)),
                 "norm_default_us": 1e3 * graph_ms(lambda: silu_mul_triton(gate_up, h, EPS)), "norm_us": {}}
        for block, warps in SWEEP:
            if block > 2 * triton_next_pow2(inter):
                continue
            got = silu_mul_triton(gate_up, h, EPS, block=(block, warps))
            if not torch.equal(got, want):
                raise SystemExit(f"BLOCK {block} x {warps} warps differs from the default at {rows}x{inter}")
            entry["norm_us"][f"{block}x{warps}"] = 1e3 * graph_ms(
                lambda: silu_mul_triton(gate_up, h, EPS, block=(block, warps)))
        best = min(entry["norm_us"], key=entry["norm_us"].get)
        print(f"{rows}x{inter} (H {hidden}): plain {entry['plain_us']:.2f} us, norm default "
              f"{entry['norm_default_us']:.2f} us, best {best} {entry['norm_us'][best]:.2f} us | "
              + " ".join(f"{k} {v:.2f}" for k, v in entry["norm_us"].items()))
        report["rows"].append(entry)
        args.out.write_text(json.dumps(report, indent=1))


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


if __name__ == "__main__":
    main()
