"""The code predictor's one-query attention at decode batches: the pair (q/k-norm + RoPE + KV write,
then the slot attention) against the one launch (kernels/norm_rope_attend_triton.py), and the one
launch over a (num_warps, num_stages) sweep. bf16, 16 query / 8 KV heads of 128, the 16-position frame
cache, the deferred input norm over H_model 1024, rows written at position `length - 1`.
Each case is a CUDA graph of CALLS calls (bench_decode_kernels.graph_ms); median us per call.

  python benchmarks/probe_predictor_attention.py --out predictor-attention.json
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
from kernels.norm_rope_attend_triton import norm_rope_attend_triton  # noqa: E402
from kernels.qk_norm_rope_triton import qk_norm_rope_write_kv_triton  # noqa: E402
from kernels.slot_attention_triton import slot_decode_attention_triton  # noqa: E402

WARPS = (1, 2, 4)
STAGES = (1, 2, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="64,128,256")
    parser.add_argument("--lengths", default="3,9,16")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    heads, kv, dim, positions, width = 16, 8, 128, 16, 1024
    report = {"benchmark": "predictor_attention", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "cases": []}
    for batch in (int(b) for b in args.batches.split(",")):
        fused = torch.randn(batch, 1, (heads + 2 * kv) * dim, generator=gen).bfloat16().cuda()
        q, k, v = (t.unflatten(-1, (-1, dim)) for t in fused.split((heads * dim, kv * dim, kv * dim), dim=-1))
        qw = torch.ones(dim).bfloat16().cuda()
        cos = torch.ones(batch, 1, dim).bfloat16().cuda()
        sin = torch.zeros(batch, 1, dim).bfloat16().cuda()
        norm = torch.randn(batch, 1, width, generator=gen).bfloat16().cuda()
        k_cache = torch.randn(batch, kv, positions, dim, generator=gen).bfloat16().cuda()
        v_cache = torch.randn(batch, kv, positions, dim, generator=gen).bfloat16().cuda()
        rows = torch.arange(batch, device="cuda")
        for length in (int(x) for x in args.lengths.split(",")):
            pos = torch.tensor(length - 1, device="cuda").expand(batch)
            lens = torch.tensor(length, device="cuda").expand(batch)
            common = (q, k, v, qw, qw, cos, sin, 1e-6, k_cache, v_cache, rows, pos)

            def pair():
                q_out = qk_norm_rope_write_kv_triton(*common, norm, 1e-6)
                return slot_decode_attention_triton(q_out[:, :, 0], k_cache, v_cache, rows, lens, 0.088)

            entry = {"batch": batch, "length": length, "pair_us": graph_ms(pair) * 1e3,
                     "one_launch_us": graph_ms(lambda: norm_rope_attend_triton(
                         *common, rows, lens, 0.088, norm, 1e-6, one_launch=True)) * 1e3, "sweep_us": {}}
            for warps in WARPS:
                for stages in STAGES:
                    entry["sweep_us"][f"{warps}w{stages}s"] = graph_ms(lambda: norm_rope_attend_triton(
                        *common, rows, lens, 0.088, norm, 1e-6, one_launch=True, num_warps=warps,
                        num_stages=stages)) * 1e3
            best = min(entry["sweep_us"], key=entry["sweep_us"].get)
            report["cases"].append(entry)
            print(f"batch {batch} length {length}: pair {entry['pair_us']:.1f} us, one launch "
                  f"{entry['one_launch_us']:.1f} us, best {best} {entry['sweep_us'][best]:.1f} us "
                  f"{json.dumps({a: round(b, 1) for a, b in entry['sweep_us'].items()})}", flush=True)
            Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
