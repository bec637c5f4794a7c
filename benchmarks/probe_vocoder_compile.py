"""What a torch.compile of the vocoder step buys per captured shape, and what it costs at start-up.

For each variant (plain step: the graphs served today; a compile per shape, one dynamic-shape compile) and each (batch,
frames) shape: the seconds until the shape's graph is captured (compile + warm-up + capture), then
the graph's replay time (CUDA events, median of `--iters` after a warm-up) and the audio-s/s it
implies. Inductor's caches live in TORCHINDUCTOR_CACHE_DIR (set it to a fixed folder and run the
probe twice to see a restart with a warm cache). Writes the JSON after every shape.

    python benchmarks/probe_vocoder_compile.py --plan "plain:1x1,64x25;static:1x1;dynamic:2x25,64x25" --out o.json

A compiled variant also reports how far its output is from the plain step's for the same inputs
and state (max abs difference over a batch of random codes, first shape), and how many graphs
dynamo compiled for the whole variant (a dynamic compile that covers several batch sizes shows 1).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch._dynamo.utils

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_vocoder_service import build_random_decoder  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402
from vocoder_service.runtime.graphs import CapturedStep  # noqa: E402
from vocoder_service.runtime.runner import DecoderRunner  # noqa: E402

FRAME_S = 0.08


def parse_shapes(text: str) -> list[tuple[int, int]]:
    return [(int(b), int(t)) for b, t in (part.split("x") for part in text.split(",") if part.strip())]


def parse_plan(text: str) -> list[tuple[str, list[tuple[int, int]]]]:
    """"plain:1x1,64x25;static:1x1" -> [("plain", [(1, 1), (64, 25)]), ("static", [(1, 1)])]"""
    plan = []
    for part in text.split(";"):
        name, _, shapes = part.partition(":")
        if name.strip() not in ("plain", "static", "dynamic"):
            raise SystemExit(f"unknown variant {name!r}: plain, static or dynamic")
        plan.append((name.strip(), parse_shapes(shapes)))
    return plan


def max_difference(runner: DecoderRunner, body, batch: int, frames: int) -> float:
    """max |compiled - plain| over one step of random codes, both from fresh state on the same slots."""
    decoder = runner.decoder
    codes = torch.randint(0, decoder.codebook_size, (batch, decoder.num_quantizers, frames), device="cuda")
    slots = torch.arange(batch, device="cuda")
    lengths = torch.full((batch,), frames, device="cuda")
    decoder.reset(list(range(batch)))
    plain = decoder.step_unchecked(codes, slots, lengths).float()
    decoder.reset(list(range(batch)))
    compiled = body(codes, slots, lengths).float()
    decoder.reset(list(range(batch)))
    return float((compiled - plain).abs().max())


def replay_ms(step: CapturedStep, iters: int) -> float:
    for _ in range(5):
        step.graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        step.graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plan", default="plain:1x1,64x25;static:1x1,64x25;dynamic:2x25,64x25,128x25")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--max-slots", type=int, default=256)
    p.add_argument("--mode", default="default", help="torch.compile mode")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    plan = parse_plan(args.plan)
    result = {"probe": "vocoder_compile", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": git_commit(), "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "(default)"),
              "mode": args.mode, "variants": {}}
    model = build_random_decoder("full", "cuda", torch.bfloat16)
    for index, (variant, shapes) in enumerate(plan):
        torch._dynamo.reset()   # each variant compiles from its own start (the on-disk caches stay)
        runner = DecoderRunner(model, args.max_slots)
        body = None
        if variant != "plain":
            body = runner.compiled_step(mode=args.mode, dynamic=variant == "dynamic")
        rows = []
        result["variants"][f"{index}-{variant}"] = {"shapes": rows}
        pool = torch.cuda.graph_pool_handle()
        steps = []   # every graph of the pool lives to the variant's end (freeing one mid-pool trips the allocator)
        for batch, frames in shapes:
            started = time.perf_counter()
            try:
                step = CapturedStep(runner.decoder, batch, frames, pool, body)
            except Exception as exc:  # report and go on: one shape failing must not lose the others
                rows.append({"batch": batch, "frames": frames, "error": f"{type(exc).__name__}: {exc}"[:500]})
                print(variant, batch, frames, "FAILED", rows[-1]["error"], flush=True)
                continue
            ready_s = time.perf_counter() - started
            ms = replay_ms(step, args.iters)
            audio_s = batch * frames * FRAME_S
            rows.append({"batch": batch, "frames": frames, "ready_s": ready_s, "replay_ms": ms,
                         "audio_s_per_s": audio_s / (ms / 1e3)})
            print(f"{variant:8s} {batch:4d}x{frames:<3d} ready {ready_s:7.1f} s  replay {ms:7.3f} ms  "
                  f"{audio_s / (ms / 1e3):8.1f} audio-s/s", flush=True)
            Path(args.out).write_text(json.dumps(result, indent=1))
            steps.append(step)
        entry = result["variants"][f"{index}-{variant}"]
        if body is not None and shapes:
            entry["max_abs_diff_vs_plain"] = max_difference(runner, body, *shapes[0])
            entry["dynamo_graphs"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
            torch._dynamo.utils.counters.clear()
            print(f"{variant}: max |compiled - plain| {entry['max_abs_diff_vs_plain']:.3g}, "
                  f"{entry['dynamo_graphs']} dynamo graphs", flush=True)
        del runner, body, steps
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
