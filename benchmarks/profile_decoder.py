"""Where a streaming decoder step spends its GPU time: top kernels of one (bs, t) step.

    python benchmarks/profile_decoder.py --batch 64 --frames 25 [--out trace.txt]
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.bench_decoder import build_model, step_inputs
from vocoder_service.codec.streaming import StreamingDecoder


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--frames", type=int, default=25)
    p.add_argument("--size", default="full")
    p.add_argument("--cudnn-benchmark", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    model = build_model(args.size, "cuda", torch.bfloat16)
    decoder = StreamingDecoder(model, max_slots=args.batch)
    codes, slots, lengths = step_inputs(decoder, args.batch, args.frames)
    for _ in range(3):
        decoder.step_unchecked(codes, slots, lengths)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            decoder.step_unchecked(codes, slots, lengths)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
