"""Does the order of rows change the talker's slot attention time at batch 256? The kernel's grid is
(rows, kv heads) and the GPU starts programs in index order, so rows of mixed lengths in arbitrary
order can leave SMs idle at the end (a tail); longest-first order is the classic cure.

Times slot_decode_attention_triton (and the one-launch kernel kernels/norm_rope_attend_triton.py,
which the talker's layers run at this batch) over the same rows in three orders: as given, lengths
descending, lengths ascending. Each case is a CUDA graph of CALLS calls; median us per call.

  python benchmarks/probe_attention_order.py --out attention-order.json
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
from kernels.slot_attention_triton import slot_decode_attention_triton  # noqa: E402


def lengths_of(kind: str, batch: int, positions: int, gen: torch.Generator) -> torch.Tensor:
    if kind == "profile":   # benchmarks/profile_talker.py's rows: prompt 40, spread below the context
        return 40 + (torch.arange(batch) * 7) % (positions - 41) + 1
    return torch.randint(1, positions + 1, (batch,), generator=gen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--positions", type=int, default=256)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    batch, heads, kv, dim, positions = args.batch, 16, 8, 128, args.positions
    report = {"benchmark": "attention_order", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "batch": batch, "positions": positions, "cases": []}
    k_cache = torch.randn(batch, kv, positions, dim, generator=gen).bfloat16().cuda()
    v_cache = torch.randn(batch, kv, positions, dim, generator=gen).bfloat16().cuda()
    fused = torch.randn(batch, 1, (heads + 2 * kv) * dim, generator=gen).bfloat16().cuda()
    q, k, v = (t.unflatten(-1, (-1, dim)) for t in fused.split((heads * dim, kv * dim, kv * dim), dim=-1))
    qw = torch.ones(dim).bfloat16().cuda()
    cos = torch.ones(batch, 1, dim).bfloat16().cuda()
    sin = torch.zeros(batch, 1, dim).bfloat16().cuda()
    norm = torch.randn(batch, 1, 2048, generator=gen).bfloat16().cuda()
    for kind in ("profile", "uniform"):
        lengths = lengths_of(kind, batch, positions, gen)
        for order in ("given", "descending", "ascending"):
            if order == "given":
                index = torch.arange(batch)
            else:
                index = torch.argsort(lengths, descending=order == "descending", stable=True)
            slots, lens = index.cuda(), lengths[index].cuda()
            q_attn = q[:, 0]
            attn_us = graph_ms(lambda: slot_decode_attention_triton(q_attn, k_cache, v_cache, slots, lens, 0.088)) * 1e3
            fused_us = graph_ms(lambda: norm_rope_attend_triton(q, k, v, qw, qw, cos, sin, 1e-6, k_cache, v_cache,
                                                                slots, lens - 1, slots, lens, 0.088, norm, 1e-6,
                                                                one_launch=True)) * 1e3
            entry = {"lengths": kind, "order": order, "attention_us": attn_us, "fused_us": fused_us,
                     "mean_length": float(lengths.float().mean())}
            report["cases"].append(entry)
            print(f"{kind} lengths, {order}: attention {attn_us:.1f} us, one-launch {fused_us:.1f} us", flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
