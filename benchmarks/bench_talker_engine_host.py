"""The talker engine's own host time per step at N running streams, CPU only (issue #11 item 2).

The talker loop's host time per step (`TalkerStats.host_time`) is the engine's bookkeeping
(`prefill_phase` + `decode_phase`: picking the runnable streams, building the step's rows, reading
its codes back, accepting frames, one FramesOut per stream) plus the loop's socket work
(benchmarks/bench_host_path.py times the FRAMES emit). This times the first part alone: the real
TalkerEngine on the tiny checkpoint with N streams running (prefilled for real), and the decode
step replaced by a stub that returns random codes at once, so only host work is left. Median and
p90 ms per step over --steps steps after a warm-up; with --profile, the top functions.

  python benchmarks/bench_talker_engine_host.py [--streams 256] [--steps 200] [--out host.json]
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit  # noqa: E402
from checkpoint.files import resolve_model_dir  # noqa: E402
from service_common.host_copy import HostCopy  # noqa: E402
from talker_service.engine import EngineConfig, ModelRunner, TalkerEngine  # noqa: E402
from talker_service.model import SamplingParams  # noqa: E402
from talker_service.prompt import PromptRequest, new_text_feed  # noqa: E402

TEXT_TOKENS = 40
FRAMES = 400   # far more than the steps timed: nobody finishes while timed


def running_engine(streams: int) -> TalkerEngine:
    config = EngineConfig(max_slots=streams, max_seq_len=FRAMES + 128, async_decode=True)
    engine = TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir("tiny"), config))
    rng = np.random.default_rng(0)
    for i in range(streams):
        prompt = PromptRequest(language="english", speaker="vivian")
        feed = new_text_feed(engine.vocab, prompt, max_text_tokens=engine.config.max_text_tokens)
        feed.push(rng.integers(300, 5000, size=TEXT_TOKENS).tolist())
        feed.close()
        engine.add_request(f"request-{i:05d}-0123456789abcdef", prompt, feed,
                           SamplingParams(max_new_tokens=FRAMES, min_new_tokens=FRAMES - 1, seed=i))
    for _ in range(100):   # real prefills, until every stream decodes
        engine.step()
        if len(engine.scheduler.running) == streams and not engine.scheduler.queued and not engine._prefilling:
            break
    else:
        raise RuntimeError("the streams did not all start")
    codes_rng = np.random.default_rng(1)
    # no EOS (code 0 of a frame stays below the codec's special ids): every stream keeps running
    engine.runner.launch_decode = lambda slots, *_: HostCopy(
        torch.from_numpy(codes_rng.integers(0, 1024, size=(len(slots), 16))))
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    engine = running_engine(args.streams)
    for _ in range(10):
        engine.prefill_phase()
        engine.decode_phase()
    times_ms = []
    profiler = cProfile.Profile() if args.profile else None
    for _ in range(args.steps):
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        engine.prefill_phase()
        outs = engine.decode_phase()
        if profiler:
            profiler.disable()
        times_ms.append((time.perf_counter() - started) * 1e3)
        if len(outs) != args.streams:
            raise RuntimeError(f"a step gave {len(outs)} outputs for {args.streams} streams")
    times_ms.sort()
    result = {"bench": "talker_engine_host", "commit": git_commit(), "streams": args.streams, "steps": args.steps,
              "median_ms": statistics.median(times_ms), "p90_ms": times_ms[int(0.9 * (len(times_ms) - 1))]}
    print(f"{args.streams} streams: engine host time per step median {result['median_ms']:.3f} ms, "
          f"p90 {result['p90_ms']:.3f} ms ({args.steps} steps)")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
