"""Where a vocoder decode call spends its GPU time: top kernels of one (bs, t) step.

    python benchmarks/profile_decoder.py --batch 64 --frames 25 [--graphs 1] [--out trace.txt]

The call profiled is `DecoderRunner.decode`, what the vocoder service runs per batch (host codes
in, H2D, step, D2H, host PCM out). `--graphs 0` runs the step eagerly, so every kernel launch is
attributed by name; `--graphs 1` replays the service's captured graph of that shape instead.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decoder import build_model, host_inputs  # noqa: E402
from vocoder_service.runtime.runner import DecoderRunner  # noqa: E402

NUM_WARMUP_CALLS = 3
NUM_PROFILED_CALLS = 3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--frames", type=int, default=25)
    p.add_argument("--size", default="full")
    p.add_argument("--graphs", type=int, default=0, help="1: replay the captured graph of this shape")
    p.add_argument("--cudnn-benchmark", type=int, default=1)
    p.add_argument("--out", default=None)
    p.add_argument("--by-op", default=None,
                   help="also write the ATen ops (with input shapes) that launched the GPU time here, "
                        "so a kernel such as the generic elementwise one can be traced to the op behind it")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    runner = DecoderRunner(build_model(args.size, "cuda", torch.bfloat16), max_slots=args.batch)
    if args.graphs:
        runner.capture_graphs([args.batch], [args.frames], budget_bytes=1 << 40)
    codes, slots, lengths = host_inputs(runner, args.batch, args.frames)
    for _ in range(NUM_WARMUP_CALLS):
        runner.decode(codes, slots, lengths)
    if runner.last_step_is_graph != bool(args.graphs):
        raise RuntimeError(f"expected a {'graph' if args.graphs else 'eager'} step, the runner chose otherwise")
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.by_op else [])
    with profile(activities=activities, record_shapes=bool(args.by_op)) as prof:
        for _ in range(NUM_PROFILED_CALLS):
            runner.decode(codes, slots, lengths)   # returns host PCM: every call has synced
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    if args.by_op:
        # CPU-side ATen events carry the device time of the kernels they launched (device_time_total).
        ops = prof.key_averages(group_by_input_shape=True).table(
            sort_by="device_time_total", row_limit=60, max_name_column_width=40, max_shapes_column_width=90)
        print(ops)
        with open(args.by_op, "w") as f:
            f.write(ops)


if __name__ == "__main__":
    main()
