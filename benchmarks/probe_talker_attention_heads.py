"""The talker's slot attention with several kv heads of a row per program
(kernels/slot_attention_triton._slot_decode_attn_heads_kernel: one flattened key loop, so a program
pays its start-up once for several heads) against the one-head kernel, over tiles, warps and
pipeline depths. bf16, 16 query / 8 KV heads of 128, rows as benchmarks/profile_talker.py spreads
them below the context (prompt 40). Each case is a CUDA graph of CALLS calls; median us per call.

  python benchmarks/probe_talker_attention_heads.py --out talker-attention-heads.json
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
from kernels.slot_attention_triton import slot_decode_attention_triton  # noqa: E402

HEADS_PER_PROGRAM = (1, 2, 4, 8)
TILES = ((64, 4), (32, 4), (64, 8), (128, 8))
STAGES = (None, 2, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="64,128,256")
    parser.add_argument("--context", type=int, default=256)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    heads, kv, dim, positions = 16, 8, 128, args.context
    report = {"benchmark": "talker_attention_heads", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "context": positions, "cases": []}
    for batch in (int(b) for b in args.batches.split(",")):
        q = torch.randn(batch, heads, dim, generator=gen).bfloat16().cuda()
        k = torch.randn(batch, kv, positions, dim, generator=gen).bfloat16().cuda()
        v = torch.randn(batch, kv, positions, dim, generator=gen).bfloat16().cuda()
        slots = torch.arange(batch, device="cuda")
        lengths = (40 + (torch.arange(batch) * 7) % (positions - 41) + 1).cuda()
        want = slot_decode_attention_triton(q, k, v, slots, lengths, 0.088, num_splits=1)
        entry = {"batch": batch, "default_us": graph_ms(
            lambda: slot_decode_attention_triton(q, k, v, slots, lengths, 0.088)) * 1e3, "sweep_us": {}}
        for hpp in HEADS_PER_PROGRAM:
            for block_n, warps in TILES:
                for stages in STAGES:
                    name = f"h{hpp}-{block_n}x{warps}-s{stages or 'd'}"
                    run = lambda: slot_decode_attention_triton(q, k, v, slots, lengths, 0.088, num_splits=1,  # noqa: E731
                                                              block_n=block_n, num_warps=warps, num_stages=stages,
                                                              heads_per_program=hpp)
                    try:
                        got = run()
                    except Exception as exc:  # noqa: BLE001 (deep pipelines of big tiles run out of shared memory)
                        print(f"batch {batch} {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
                        continue
                    err = float((got.float() - want.float()).abs().max())
                    if err > 2e-2:
                        raise SystemExit(f"batch {batch} {name}: max error {err}")
                    entry["sweep_us"][name] = graph_ms(run) * 1e3
        best = sorted(entry["sweep_us"], key=entry["sweep_us"].get)[:6]
        report["cases"].append(entry)
        print(f"batch {batch}: default {entry['default_us']:.1f} us; best "
              + ", ".join(f"{n} {entry['sweep_us'][n]:.1f}" for n in best)
              + "; one head per program: "
              + ", ".join(f"{n} {t:.1f}" for n, t in entry["sweep_us"].items() if n.startswith("h1-")), flush=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
