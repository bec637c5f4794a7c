"""Where the talker's frame step spends GPU time: kernels of its captured graph at each batch size.

    python benchmarks/profile_talker.py --batch-sizes 1,64,256 --out talker-profile.json [--by-op ops.txt]

Per batch size: the graph's replay time (CUDA events, median; also with replays queued back to back,
bench_talker.time_calls with QUEUE_DEPTH, as the engine runs its steps), the sum of its kernels' own times
and their count per replay (kernel time far below the replay time means launch gaps dominate;
close to it means the kernels themselves do), and the kernels by name with ms and calls per replay.
`--by-op` also profiles one eager step at the largest batch with the ATen ops behind the kernels.
Random full-size weights, rows spread over positions below --context-len, EOS suppressed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_talker import QUEUE_DEPTH, FrameStep, build_random, capture, time_calls  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402
from checkpoint.configs import model_config  # noqa: E402
from talker_service.engine.graphs import captures_with_pdl  # noqa: E402
from talker_service.model import TalkerConfig  # noqa: E402

NUM_PROFILED_REPLAYS = 10
TOP_KERNELS = 30


def kernel_table(prof, num_calls: int) -> list[dict]:
    """Device kernels by name: ms and launches per call, largest first."""
    total_us: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time_total > 0:
            total_us[event.name] += event.device_time_total
            count[event.name] += 1
    rows = [{"kernel": name, "ms_per_call": us / 1e3 / num_calls, "launches_per_call": count[name] / num_calls}
            for name, us in total_us.items()]
    return sorted(rows, key=lambda r: -r["ms_per_call"])


def profile_graph(decoder, batch: int, context_len: int, prompt_len: int, warmup: int, iters: int) -> dict:
    step = FrameStep(decoder, batch, context_len, prompt_len)
    replay = capture(step, warmup, use_pdl=captures_with_pdl(batch, "cuda"))
    timing = time_calls(replay, "cuda", warmup, iters)
    queued = time_calls(replay, "cuda", warmup, iters, QUEUE_DEPTH)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(NUM_PROFILED_REPLAYS):
            replay()
        torch.cuda.synchronize()
    kernels = kernel_table(prof, NUM_PROFILED_REPLAYS)
    kernel_ms = sum(k["ms_per_call"] for k in kernels)
    return {"batch": batch, "replay_ms_median": timing["median_ms"], "queued_replay_ms_median": queued["median_ms"],
            "kernel_ms_per_replay": kernel_ms,
            "kernels_per_replay": sum(k["launches_per_call"] for k in kernels),
            "gap_ms_per_replay": timing["median_ms"] - kernel_ms, "top_kernels": kernels[:TOP_KERNELS]}


def eager_ops(decoder, batch: int, context_len: int, prompt_len: int) -> str:
    step = FrameStep(decoder, batch, context_len, prompt_len)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    return prof.key_averages(group_by_input_shape=True).table(
        sort_by="device_time_total", row_limit=60, max_name_column_width=40, max_shapes_column_width=90)


def print_entry(entry: dict) -> None:
    print(f"batch {entry['batch']}: replay {entry['replay_ms_median']:.3f} ms "
          f"(queued {entry['queued_replay_ms_median']:.3f} ms), "
          f"kernels {entry['kernel_ms_per_replay']:.3f} ms in {entry['kernels_per_replay']:.0f} launches, "
          f"gaps {entry['gap_ms_per_replay']:.3f} ms")
    for k in entry["top_kernels"]:
        print(f"  {k['ms_per_call']:8.3f} ms {k['launches_per_call']:7.1f}x  {k['kernel'][:110]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="1b7", choices=["1b7", "0b6"])
    p.add_argument("--batch-sizes", default="1,64,256")
    p.add_argument("--context-len", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=40)
    p.add_argument("--candidate-k", type=int, default=64)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--by-op", type=Path, default=None)
    args = p.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    config = TalkerConfig.from_dict(model_config("custom_voice", args.size)["talker_config"])
    report = {"benchmark": "talker_profile", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": git_commit(), "config": vars(args) | {"out": str(args.out), "by_op": str(args.by_op)},
              "batches": []}
    with torch.no_grad():
        decoder = build_random(config, "cuda", torch.bfloat16, max(batches), args.context_len, args.candidate_k or None)
        for batch in batches:
            entry = profile_graph(decoder, batch, args.context_len, args.prompt_len, args.warmup, args.iters)
            print_entry(entry)
            report["batches"].append(entry)
            args.out.write_text(json.dumps(report, indent=1))   # as it goes: a later failure keeps these
        if args.by_op:
            table = eager_ops(decoder, max(batches), args.context_len, args.prompt_len)
            args.by_op.write_text(table)
            print(table)
    print("median replay ms:", statistics.median(e["replay_ms_median"] for e in report["batches"]))


if __name__ == "__main__":
    main()
