"""Vocoder service throughput and latency: engine + runner in-process (no sockets), eager vs CUDA graphs.

    python benchmarks/bench_vocoder_service.py --out benchmarks/results/vocoder_service_h200.json   # GPU
    python benchmarks/bench_vocoder_service.py --smoke --out /tmp/vocoder_service_smoke.json        # CPU

N synthetic streams start staggered over `--stagger-s`; each talker delivers `--audio-s` of frames
at a fixed rate (`--rates-fps`; 0 = every frame available at once, which measures capacity: those
runs start within `--capacity-stagger-s`, 0 by default). The
engine batches their chunks exactly as in the server. Full-size decoder config with random weights
(speed does not depend on the values) built on the GPU in the service's dtype (float16). Per run: audio-seconds per second
of wall time, chunk latency (scheduled arrival of a chunk's oldest frame -> its PCM returned),
first-chunk latency, graph hit rate and the batch-size histogram; plus first-chunk latency of a
lone stream (batch 1). With --smoke the "graphs" mode runs the same padded static shapes eagerly
(CPU has no graphs).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit as read_commit  # noqa: E402
from benchmarks.device_name import device_name  # noqa: E402

from checkpoint.configs import speech_tokenizer_config  # noqa: E402
from checkpoint.tiny_init import init_tensor  # noqa: E402
from vocoder_service.codec import Code2Wav, DecoderConfig  # noqa: E402
from vocoder_service.engine.chunk_policy import ChunkPolicy, batch_buckets  # noqa: E402
from vocoder_service.engine.config import VocoderEngineConfig  # noqa: E402
from vocoder_service.engine.engine import ErrorOut, VocoderEngine  # noqa: E402
from vocoder_service.runtime.runner import DecoderRunner, parse_dtype  # noqa: E402
from vocoder_service.runtime.stats import LatencyWindow  # noqa: E402

FRAME_S = 0.08   # 1920 samples at 24 kHz


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON results path")
    p.add_argument("--smoke", action="store_true", help="tiny config on CPU, short runs (checks the script)")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --smoke)")
    p.add_argument("--dtype", default=None, help="default: float16, the service's on CUDA (float32 with --smoke)")
    p.add_argument("--streams", default="1,4,16,64,128")
    p.add_argument("--rates-fps", default="25,0", help="talker frames/s per stream; 0 = all frames at once")
    p.add_argument("--audio-s", type=float, default=10.0, help="audio per stream")
    p.add_argument("--stagger-s", type=float, default=0.5, help="stream starts spread over this window")
    # With every frame there at once, a 0.5 s stagger bounds the wall-clock rate (64 streams x 10 s
    # over >= 0.5 s is <= 1280 audio-s/s whatever the decoder does): capacity runs start together.
    p.add_argument("--capacity-stagger-s", type=float, default=0.0, help="stagger of the rate-0 (capacity) runs")
    p.add_argument("--modes", default="eager,graphs",
                   help="comma list of eager, graphs, graphs+compile (graphs, the shapes below compiled)")
    p.add_argument("--first-chunk-frames", type=int, default=2)
    p.add_argument("--steady-chunk-frames", type=int, default=25)
    p.add_argument("--max-wait-ms", type=float, default=200.0)
    p.add_argument("--quick-first-chunk-frames", type=int, default=1)
    p.add_argument("--quick-first-max-streams", type=int, default=2, help="0: every first chunk is first-chunk-frames")
    p.add_argument("--graph-budget-mb", type=float, default=32768.0)
    p.add_argument("--first-chunk-repeats", type=int, default=50)
    # graphs+compile: which shapes replay a compiled step (vocoder_service/runtime/compile_plan.py)
    p.add_argument("--compile-max-row-frames", type=int, default=0,
                   help="graphs+compile: a static compile for each shape of at most this many rows x frames")
    p.add_argument("--compile-dynamic-frames", default="",
                   help="graphs+compile: comma list of frame counts whose >= 2-row shapes share one dynamic compile")
    p.add_argument("--capture-batch-sizes", default="", help="comma list; empty: powers of two up to max streams")
    p.add_argument("--capture-frame-sizes", default="", help="comma list; empty: the chunk policy's frame buckets")
    p.add_argument("--cudnn-benchmark-min-row-frames", type=int, default=0,
                   help="graphs of at least this many rows x frames get cuDNN-timed conv algorithms (0: none)")
    args = p.parse_args(argv)
    if args.smoke:
        args.device = args.device or "cpu"
        args.dtype = args.dtype or "float32"
        args.streams, args.rates_fps, args.audio_s, args.stagger_s = "1,4", "25,0", 0.8, 0.1
        args.steady_chunk_frames, args.first_chunk_repeats = 4, 3
    args.device = args.device or "cuda"
    args.dtype = args.dtype or "float16"
    return args


def build_random_decoder(size: str, device: str, dtype: torch.dtype, seed: int = 0) -> Code2Wav:
    """The checkpoint tool's random values (sane activations), straight onto the device: no file."""
    config = DecoderConfig.from_dict(speech_tokenizer_config(size)["decoder_config"])
    with torch.device("meta"):
        model = Code2Wav(config)
    model.to_empty(device="cpu")
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(init_tensor("decoder." + name, tuple(param.shape), seed))
    model.prepare()
    return model.requires_grad_(False).eval().to(device=device, dtype=dtype)


def make_runner(model, max_slots, mode, policy, budget_bytes, is_cuda, args=None) -> tuple[DecoderRunner, dict]:
    runner = DecoderRunner(model, max_slots)
    report = {}
    if mode in ("graphs", "graphs+compile"):
        batch_sizes = _int_list(getattr(args, "capture_batch_sizes", "")) or batch_buckets(max_slots)
        frame_sizes = _int_list(getattr(args, "capture_frame_sizes", "")) or policy.frame_buckets()
        plan = None
        if mode == "graphs+compile" and is_cuda:
            plan = runner.compile_plan(getattr(args, "compile_max_row_frames", 1),
                                       tuple(_int_list(getattr(args, "compile_dynamic_frames", ""))))
        min_row_frames = getattr(args, "cudnn_benchmark_min_row_frames", 0)
        cap = runner.capture_graphs(batch_sizes, frame_sizes, budget_bytes, emulate=not is_cuda, compile_plan=plan,
                                    cudnn_benchmark_min_row_frames=min_row_frames)
        report = {"num_graphs": len(cap.captured), "skipped": cap.skipped, "graph_memory_bytes": cap.graph_memory_bytes,
                  "allocated_bytes": cap.allocated_bytes, "capture_s": cap.capture_s,
                  "reserved_bytes_after_shape": cap.reserved_after,
                  "cudnn_benchmark_min_row_frames": min_row_frames,
                  "num_cudnn_benchmarked": len(cap.cudnn_benchmarked),
                  "compile_plan": plan.describe() if plan is not None else None, "compiled": cap.compiled,
                  "compile_failed": cap.compile_failed}
    # Warm-up: every (batch, frames) bucket once, so kernel compilation is not timed.
    for bs in batch_buckets(max_slots):
        for t in policy.frame_buckets():
            runner.decode(np.zeros((bs, 16, t), np.int64), np.arange(bs), np.full(bs, t))
    runner.reset(range(max_slots))
    runner.reset_stats()
    return runner, report


def _int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def run_streams(runner: DecoderRunner, policy: ChunkPolicy, num_streams: int, rate_fps: float, audio_s: float,
                stagger_s: float, seed: int = 0) -> dict:
    engine = VocoderEngine(runner, VocoderEngineConfig(max_slots=runner.max_slots, chunk=policy,
                                                       samples_per_frame=runner.samples_per_frame))
    spf, num_frames = runner.samples_per_frame, max(1, round(audio_s / FRAME_S))
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, runner.codebook_size, (num_streams, num_frames, 16))
    t0 = time.monotonic() + 0.01
    starts = t0 + np.arange(num_streams) * (stagger_s / num_streams)

    def arrival_s(i: int, frame: int) -> float:   # when the talker delivers frame `frame` of stream i
        return starts[i] if rate_fps <= 0 else starts[i] + frame / rate_fps

    sent, seqs, done = np.zeros(num_streams, int), np.zeros(num_streams, int), np.zeros(num_streams, bool)
    chunk_latency, first_chunk = LatencyWindow(1 << 20), LatencyWindow(1 << 20)
    samples = 0
    while not done.all():
        now = time.monotonic()
        for i in range(num_streams):
            if sent[i] == num_frames or now < starts[i]:
                continue
            if seqs[i] == 0:
                engine.open(f"s{i}")
            due = num_frames if rate_fps <= 0 else min(num_frames, int((now - starts[i]) * rate_fps) + 1)
            if due > sent[i]:
                engine.add_frames(f"s{i}", int(seqs[i]), codes[i, sent[i]:due], is_final=due == num_frames)
                sent[i], seqs[i] = due, seqs[i] + 1
        outs = engine.step()
        returned_s = time.monotonic()
        for out in outs:
            if isinstance(out, ErrorOut):
                raise RuntimeError(f"{out.request_id}: {out.code} {out.message}")
            i = int(out.request_id[1:])
            if len(out.pcm):
                latency_ms = (returned_s - arrival_s(i, out.sample_offset // spf)) * 1e3
                chunk_latency.add(latency_ms)
                if out.seq == 0:
                    first_chunk.add(latency_ms)
            samples += len(out.pcm)
            done[i] |= out.is_final
        if not outs:
            pending = [arrival_s(i, sent[i]) for i in range(num_streams) if sent[i] < num_frames]
            wake_s = min(pending + [returned_s + policy.max_wait_ms / 1e3])
            time.sleep(min(max(0.0, wake_s - time.monotonic()), 0.002))
    wall_s = time.monotonic() - t0
    stats = runner.stats.as_dict()
    decode_s = stats["step_time"]["mean_ms"] * stats["step_time"]["count"] / 1e3   # decode calls, host-timed
    audio_s = samples / runner.sample_rate_hz
    return {
        "streams": num_streams, "rate_fps": rate_fps, "stagger_s": stagger_s, "frames_per_stream": num_frames,
        "wall_s": wall_s, "audio_s": audio_s, "audio_s_per_s": audio_s / wall_s,
        # the rate if decode calls ran back to back (no waiting for frames, no engine host time)
        "decode_s": decode_s, "audio_s_per_decode_s": audio_s / decode_s if decode_s else 0.0,
        "chunk_latency": chunk_latency.summary(), "first_chunk": first_chunk.summary(),
        "hit_rate": stats["hit_rate"], "graph_steps": stats["num_graph_steps"], "eager_steps": stats["num_eager_steps"],
        "uncaptured": stats["uncaptured_shapes"], "batch_size_histogram": stats["batch_size_histogram"],
        "step_time": stats["step_time"],
        # Host time per decode call (runner: check/stage/launch/wait) and per step() (engine: plan/gather/emit).
        "runner_host_ms_per_step": stats["host_ms_per_step"], "engine_host_ms_per_step": engine.host_times.per_call_ms(),
    }


def first_chunk_alone(runner: DecoderRunner, policy: ChunkPolicy, repeats: int) -> dict:
    """A lone stream's first chunk: frames in -> PCM out through engine.step(), batch 1."""
    engine = VocoderEngine(runner, VocoderEngineConfig(max_slots=runner.max_slots, chunk=policy,
                                                       samples_per_frame=runner.samples_per_frame))
    window = LatencyWindow(repeats)
    num_frames = policy.chunk_frames(0, 1)   # a lone stream's first chunk (the quick one, if any)
    frames = np.random.default_rng(1).integers(0, runner.codebook_size, (num_frames, 16))
    for r in range(repeats):
        engine.open(f"first{r}")
        started = time.perf_counter()
        engine.add_frames(f"first{r}", 0, frames)
        [out] = engine.step()
        window.add((time.perf_counter() - started) * 1e3)
        assert len(out.pcm) == num_frames * runner.samples_per_frame
        engine.abort(f"first{r}", "benchmark")
    return window.summary()


def git_commit() -> str:
    return read_commit()


def main(argv=None) -> int:
    args = parse_args(argv)
    is_cuda = args.device.startswith("cuda")
    if not is_cuda:
        torch.set_num_threads(1)   # a shared CPU box: OpenMP spinning only slows the tiny decoder down
    streams = [int(s) for s in args.streams.split(",")]
    policy = ChunkPolicy(args.first_chunk_frames, args.steady_chunk_frames, args.max_wait_ms,
                         args.quick_first_chunk_frames, args.quick_first_max_streams)
    model = build_random_decoder("tiny" if args.smoke else "full", args.device, parse_dtype(args.dtype))
    result = {
        "benchmark": "vocoder_service", "gpu": device_name(args.device),
        "commit": git_commit(), "torch": torch.__version__, "time_unix_s": time.time(),
        "config": {k: v for k, v in vars(args).items() if k != "out"}, "modes": {},
    }
    print(f"{'mode':>7} {'streams':>7} {'rate':>5} {'audio-s/s':>10} {'/decode-s':>10} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'first p50':>9} {'hit':>5} {'steps':>6}")
    for mode in args.modes.split(","):
        runner, capture = make_runner(model, max(streams), mode, policy, int(args.graph_budget_mb * 2**20), is_cuda, args)
        first = first_chunk_alone(runner, policy, args.first_chunk_repeats)
        runs = []
        for rate in (float(r) for r in args.rates_fps.split(",")):
            for n in streams:
                runner.reset_stats()
                stagger_s = args.capacity_stagger_s if rate <= 0 else args.stagger_s
                run = run_streams(runner, policy, n, rate, args.audio_s, stagger_s)
                runs.append(run)
                print(f"{mode:>7} {n:>7} {rate:>5.0f} {run['audio_s_per_s']:>10.1f} {run['audio_s_per_decode_s']:>10.1f} "
                      f"{run['chunk_latency']['p50_ms']:>8.2f} "
                      f"{run['chunk_latency']['p99_ms']:>8.2f} {run['first_chunk']['p50_ms']:>9.2f} "
                      f"{run['hit_rate']:>5.2f} {run['graph_steps'] + run['eager_steps']:>6}")
        print(f"{mode:>7} first chunk alone (batch 1, {policy.chunk_frames(0, 1)} frames): "
              f"p50 {first['p50_ms']:.2f} ms, p99 {first['p99_ms']:.2f} ms")
        result["modes"][mode] = {"capture": capture, "first_chunk_batch1": first, "runs": runs}
        del runner
        if is_cuda:
            torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
