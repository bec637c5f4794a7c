"""Decoder (Code2Wav) throughput and latency: the step body's device time, and the service's decode call.

    python benchmarks/bench_decoder.py --out benchmarks/results/decoder_h200.json       # GPU, full size
    python benchmarks/bench_decoder.py --smoke --out /tmp/decoder_smoke.json            # CPU, tiny

Full-size decoder config with random weights (speed does not depend on the values), bf16, CUDA.
Rows: streaming steps of `--chunk-frames` at each batch size and first chunks at batch 1, each
timed two ways. `body:*` is the device time (CUDA events) of the bare step on device tensors: the
kernels alone, what kernel work changes. `runner:*` is the wall time of `DecoderRunner.decode`,
exactly what the vocoder service runs per batch: host codes in, checks, pinned staging, H2D, graph
replay (or the eager step when no captured graph covers the shape), D2H, host PCM out. The graph
rows replay the service's own captured graphs (vocoder_service/runtime/graphs.py). Plus the
official-style windowed decode (a fresh forward over context + new frames, context samples
dropped) for reference. Medians over `--iters` timed iterations after `--warmup`.
"""
from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit as read_commit  # noqa: E402
from benchmarks.device_name import device_name  # noqa: E402

from checkpoint.configs import speech_tokenizer_config  # noqa: E402
from vocoder_service.codec import Code2Wav, DecoderConfig, StreamingDecoder  # noqa: E402
from vocoder_service.runtime.graphs import StepBody  # noqa: E402
from vocoder_service.runtime.runner import DecoderRunner  # noqa: E402

SAMPLE_RATE_HZ = 24000
SAMPLES_PER_FRAME = 1920


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON results path")
    p.add_argument("--smoke", action="store_true", help="tiny config on CPU, few iterations (checks the script)")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --smoke)")
    p.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"], help="default: bfloat16 (float32 with --smoke)")
    p.add_argument("--batch-sizes", default="1,4,16,64")
    p.add_argument("--chunk-frames", type=int, default=25)
    p.add_argument("--first-chunk-frames", default="2,4", help="first-chunk latency sizes at batch 1")
    p.add_argument("--context-frames", type=int, default=25, help="left context of the windowed reference decode")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the step body")
    p.add_argument("--compile-mode", default="default", help="torch.compile mode (max-autotune-no-cudagraphs tunes for minutes per shape)")
    p.add_argument("--compile-dynamic", type=int, default=0, help="1: one symbolic-shape compile for every (bs, t) instead of one per shape")
    p.add_argument("--cudnn-benchmark", type=int, default=1, help="1: let cuDNN pick conv algorithms by timing (the runner does)")
    args = p.parse_args(argv)
    if args.smoke:
        args.device = args.device or "cpu"
        args.dtype = args.dtype or "float32"
        args.batch_sizes = "1,2"
        args.chunk_frames = 3
        args.first_chunk_frames = "2"
        args.context_frames = 3
        args.iters = min(args.iters, 2)
        args.warmup = min(args.warmup, 1)
    args.device = args.device or "cuda"
    args.dtype = args.dtype or "bfloat16"
    return args


def build_model(size: str, device: str, dtype: torch.dtype, seed: int = 0) -> Code2Wav:
    torch.manual_seed(seed)
    config = DecoderConfig.from_dict(speech_tokenizer_config(size)["decoder_config"])
    with torch.device(device):
        model = Code2Wav(config)
    with torch.no_grad():  # default init leaves codebooks at zero: give them values
        for name, param in model.named_parameters():
            if name.endswith("embedding_sum"):
                param.normal_()
    model.prepare()
    return model.requires_grad_(False).eval().to(dtype=dtype)


def device_ms(device: torch.device, fn) -> float:
    """Milliseconds of one call's device work: CUDA events on GPU, perf_counter on CPU."""
    if device.type != "cuda":
        return wall_ms(fn)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def wall_ms(fn) -> float:
    """Milliseconds of one call on the host clock (DecoderRunner.decode returns host PCM: it has synced)."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def median_ms(timer, fn, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        timer(fn)
    return statistics.median(timer(fn) for _ in range(iters))


def step_inputs(decoder: StreamingDecoder, bsz: int, frames: int):
    """Device tensors for the bare step body."""
    codes = torch.randint(0, decoder.codebook_size, (bsz, decoder.num_quantizers, frames), device=decoder.device)
    slots = torch.arange(bsz, device=decoder.device)
    lengths = torch.full((bsz,), frames, device=decoder.device, dtype=torch.int64)
    return codes, slots, lengths


def host_inputs(runner: DecoderRunner, bsz: int, frames: int, seed: int = 0):
    """Host arrays for DecoderRunner.decode, as the engine hands them over."""
    codes = np.random.default_rng(seed).integers(0, runner.codebook_size, (bsz, runner.num_quantizers, frames))
    return codes, np.arange(bsz), np.full(bsz, frames)


def graph_vs_eager_max_abs(runner: DecoderRunner, frames: int, num_chunks: int = 3) -> float:
    """Stream the same codes through the eager step body (slot 0) and the runner's decode (slot 1)."""
    decoder = runner.decoder
    runner.reset([0, 1])
    worst = 0.0
    for chunk in range(num_chunks):
        codes, _, lengths = host_inputs(runner, 1, frames, seed=100 + chunk)
        eager = decoder.step_unchecked(torch.from_numpy(codes).to(decoder.device),
                                       torch.tensor([0], device=decoder.device),
                                       torch.from_numpy(lengths).to(decoder.device))
        served = runner.decode(codes, np.array([1]), lengths)
        if not runner.last_step_is_graph:
            raise RuntimeError(f"a (1, {frames}) decode ran eagerly: no captured graph covers it")
        worst = max(worst, float(np.abs(eager.float().cpu().numpy() - served).max()))
    return worst


def row(kind: str, path: str, bsz: int, frames: int, ms: float, new_frames: int | None = None) -> dict:
    new_frames = frames if new_frames is None else new_frames
    audio_s = bsz * new_frames * SAMPLES_PER_FRAME / SAMPLE_RATE_HZ
    return {"kind": kind, "path": path, "batch": bsz, "frames": frames, "new_frames": new_frames,
            "median_ms": round(ms, 4), "audio_s_per_s": round(audio_s / (ms / 1e3), 2)}


def graphed_runner(model: Code2Wav, max_slots: int, shapes: tuple[list[int], list[int]], is_cuda: bool,
                   compile_args: dict | None = None) -> tuple[DecoderRunner, StepBody | None, dict]:
    """A runner with the service's graphs captured for `shapes` (emulated on CPU); optionally compiled."""
    runner = DecoderRunner(model, max_slots)
    body = runner.compiled_step(**compile_args) if compile_args is not None else None
    report = runner.capture_graphs(*shapes, budget_bytes=1 << 40, emulate=not is_cuda, body=body)
    if report.skipped:
        raise RuntimeError(f"shapes left uncaptured: {report.skipped}")
    return runner, body, {"num_graphs": len(report.captured), "capture_s": round(report.capture_s, 3)}


def run(args) -> dict:
    device = torch.device(args.device)
    is_cuda = device.type == "cuda"
    dtype = getattr(torch, args.dtype)
    size = "tiny" if args.smoke else "full"
    model = build_model(size, args.device, dtype)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    first_frames = [int(f) for f in args.first_chunk_frames.split(",")]
    max_slots = max(batch_sizes)
    shapes = (sorted(set(batch_sizes + [1])), sorted(set([args.chunk_frames] + first_frames)))
    graph_name = "graph" if is_cuda else "emulated"   # CPU: the same padded static shapes, run eagerly
    eager = DecoderRunner(model, max_slots)            # no graphs: the service's path for uncovered shapes
    # path -> (runner, the bare body timed on device tensors or None)
    paths: dict[str, tuple[DecoderRunner, StepBody | None]] = {"eager": (eager, eager.decoder.step_unchecked)}
    rows, errors, checks, captures = [], {}, {}, {}
    variants = {graph_name: None}
    if args.compile:
        variants[graph_name + "+compile"] = {"mode": args.compile_mode, "dynamic": bool(args.compile_dynamic)}
    for name, compile_args in variants.items():
        try:
            runner, body, capture = graphed_runner(model, max_slots, shapes, is_cuda, compile_args)
            checks[name] = graph_vs_eager_max_abs(runner, args.chunk_frames)
        except Exception as exc:  # report, keep the other rows (only the compiled variant is expected to fail)
            if compile_args is None:
                raise
            errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        paths[name], captures[name] = (runner, body), capture
    cases = [("stream", b, args.chunk_frames) for b in batch_sizes] + [("first_chunk", 1, f) for f in first_frames]
    device_timer = functools.partial(device_ms, device)
    for name, (runner, body) in paths.items():
        try:
            for kind, bsz, frames in cases:
                if body is not None:
                    codes, slots, lengths = step_inputs(runner.decoder, bsz, frames)
                    ms = median_ms(device_timer, lambda: body(codes, slots, lengths), args.warmup, args.iters)
                    rows.append(row(kind, "body:" + ("compile" if name.endswith("+compile") else "eager"),
                                    bsz, frames, ms))
                codes, slots, lengths = host_inputs(runner, bsz, frames)
                ms = median_ms(wall_ms, lambda: runner.decode(codes, slots, lengths), args.warmup, args.iters)
                rows.append({**row(kind, "runner:" + name, bsz, frames, ms), "is_graph": runner.last_step_is_graph})
        except Exception as exc:  # only the optional compiled variant is expected to fail here
            if not name.endswith("+compile"):
                raise
            errors[name] = f"{type(exc).__name__}: {exc}"
    with torch.no_grad():  # official-style: fresh forward over context + new frames per chunk
        for bsz in batch_sizes:
            total = args.context_frames + args.chunk_frames
            codes = torch.randint(0, 2048, (bsz, 16, total), device=device)
            ms = median_ms(device_timer, lambda: model(codes)[..., args.context_frames * SAMPLES_PER_FRAME :], args.warmup, args.iters)
            rows.append(row("windowed_reference", "eager", bsz, total, ms, new_frames=args.chunk_frames))
    return {
        "benchmark": "decoder", "device": device_name(device), "torch": torch.__version__,
        "python": platform.python_version(), "git_commit": _git_commit(), "dtype": args.dtype,
        "config_size": size, "decoder_config": speech_tokenizer_config(size)["decoder_config"],
        "args": vars(args), "graph_vs_eager_max_abs": checks, "captures": captures, "rows": rows, "errors": errors,
    }


def _git_commit() -> str:
    return read_commit(mark_dirty=True)


def print_table(result: dict) -> None:
    print(f"{result['device']}  torch {result['torch']}  {result['dtype']}  config={result['config_size']}  commit {result['git_commit']}")
    print(f"{'kind':<20}{'path':<24}{'batch':>6}{'frames':>7}{'median ms':>12}{'audio-s/s':>12}")
    for r in result["rows"]:
        print(f"{r['kind']:<20}{r['path']:<24}{r['batch']:>6}{r['frames']:>7}{r['median_ms']:>12.3f}{r['audio_s_per_s']:>12.1f}")
    for path, diff in result["graph_vs_eager_max_abs"].items():
        print(f"runner:{path} vs eager body, same codes and fresh slots: max |diff| = {diff:.3g}")
    for path, error in result["errors"].items():
        print(f"error in {path}: {error}")


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    result = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
