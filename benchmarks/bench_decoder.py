"""Decoder (Code2Wav) throughput and latency: eager streaming step vs CUDA-graph replay.

    python benchmarks/bench_decoder.py --out benchmarks/results/decoder_h200.json       # GPU, full size
    python benchmarks/bench_decoder.py --smoke --out /tmp/decoder_smoke.json            # CPU, tiny

Full-size decoder config with random weights (speed does not depend on the values), bf16, CUDA.
Rows: streaming steps of `--chunk-frames` at each batch size (eager body vs graph replay),
first-chunk latency at batch 1, and the official-style windowed decode (a fresh forward over
context + new frames, context samples dropped) for reference. Medians over `--iters` timed
iterations after `--warmup`; CUDA events time the device work of each call.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint.configs import speech_tokenizer_config  # noqa: E402
from vocoder_service.codec import Code2Wav, DecoderConfig, StreamingDecoder  # noqa: E402
from vocoder_service.codec.graphs import GraphedStep  # noqa: E402

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


class Timer:
    """Milliseconds of one call: CUDA events on GPU, perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def median_ms(timer: Timer, fn, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        timer(fn)
    return statistics.median(timer(fn) for _ in range(iters))


def step_inputs(decoder: StreamingDecoder, bsz: int, frames: int):
    codes = torch.randint(0, decoder.codebook_size, (bsz, decoder.num_quantizers, frames), device=decoder.device)
    slots = torch.arange(bsz, device=decoder.device)
    lengths = torch.full((bsz,), frames, device=decoder.device, dtype=torch.int64)
    return codes, slots, lengths


def graph_vs_eager_max_abs(decoder: StreamingDecoder, graphed: GraphedStep, frames: int, num_chunks: int = 3) -> float:
    """Stream the same codes through the eager body (slot 0) and the replayed path (slot 1)."""
    decoder.reset([0, 1])
    worst = 0.0
    for _ in range(num_chunks):
        codes, _, lengths = step_inputs(decoder, 1, frames)
        eager = decoder.step_unchecked(codes, torch.tensor([0], device=decoder.device), lengths)
        replay = graphed(codes, torch.tensor([1], device=decoder.device), lengths, validate=False)
        worst = max(worst, (eager.float() - replay.float()).abs().max().item())
    return worst


def row(kind: str, path: str, bsz: int, frames: int, ms: float, new_frames: int | None = None) -> dict:
    new_frames = frames if new_frames is None else new_frames
    audio_s = bsz * new_frames * SAMPLES_PER_FRAME / SAMPLE_RATE_HZ
    return {"kind": kind, "path": path, "batch": bsz, "frames": frames, "new_frames": new_frames,
            "median_ms": round(ms, 4), "audio_s_per_s": round(audio_s / (ms / 1e3), 2)}


def run(args) -> dict:
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    size = "tiny" if args.smoke else "full"
    model = build_model(size, args.device, dtype)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    first_frames = [int(f) for f in args.first_chunk_frames.split(",")]
    decoder = StreamingDecoder(model, max_slots=max(batch_sizes))
    timer = Timer(device)
    bodies = {"eager": decoder.step_unchecked}
    if args.compile:
        # One specialisation per (bs, t) bucket: raise dynamo's per-function recompile limit (8).
        for name in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 64)
        bodies["compiled"] = torch.compile(decoder.step_unchecked, mode=args.compile_mode, dynamic=bool(args.compile_dynamic))
    rows, errors, checks = [], {}, {}
    for body_name, body in bodies.items():
        graphed = GraphedStep(decoder, batch_sizes + [1], [args.chunk_frames] + first_frames, body=body)
        graph_path = ("graph" if graphed.use_cuda_graphs else "static-eager") + ("" if body_name == "eager" else "+compile")
        try:
            graphed.capture()
        except Exception as exc:  # report, keep the eager rows
            errors[graph_path] = f"{type(exc).__name__}: {exc}"
            graphed = None
        if graphed is not None:
            checks[graph_path] = graph_vs_eager_max_abs(decoder, graphed, args.chunk_frames)
        cases = [("stream", b, args.chunk_frames) for b in batch_sizes] + [("first_chunk", 1, f) for f in first_frames]
        for kind, bsz, frames in cases:
            codes, slots, lengths = step_inputs(decoder, bsz, frames)
            try:
                ms = median_ms(timer, lambda: body(codes, slots, lengths), args.warmup, args.iters)
            except Exception as exc:  # only the optional compiled body is expected to fail here
                if body_name == "eager":
                    raise
                errors[body_name] = f"{type(exc).__name__}: {exc}"
                break
            rows.append(row(kind, body_name, bsz, frames, ms))
            if graphed is not None:
                ms = median_ms(timer, lambda: graphed(codes, slots, lengths, validate=False), args.warmup, args.iters)
                rows.append(row(kind, graph_path, bsz, frames, ms))
    with torch.no_grad():  # official-style: fresh forward over context + new frames per chunk
        for bsz in batch_sizes:
            total = args.context_frames + args.chunk_frames
            codes = torch.randint(0, 2048, (bsz, 16, total), device=device)
            ms = median_ms(timer, lambda: model(codes)[..., args.context_frames * SAMPLES_PER_FRAME :], args.warmup, args.iters)
            rows.append(row("windowed_reference", "eager", bsz, total, ms, new_frames=args.chunk_frames))
    return {
        "benchmark": "decoder", "device": _device_name(device), "torch": torch.__version__,
        "python": platform.python_version(), "git_commit": _git_commit(), "dtype": args.dtype,
        "config_size": size, "decoder_config": speech_tokenizer_config(size)["decoder_config"],
        "args": vars(args), "graph_vs_eager_max_abs": checks, "rows": rows, "errors": errors,
    }


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"


def _git_commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def print_table(result: dict) -> None:
    print(f"{result['device']}  torch {result['torch']}  {result['dtype']}  config={result['config_size']}  commit {result['git_commit']}")
    print(f"{'kind':<20}{'path':<22}{'batch':>6}{'frames':>7}{'median ms':>12}{'audio-s/s':>12}")
    for r in result["rows"]:
        print(f"{r['kind']:<20}{r['path']:<22}{r['batch']:>6}{r['frames']:>7}{r['median_ms']:>12.3f}{r['audio_s_per_s']:>12.1f}")
    for path, diff in result["graph_vs_eager_max_abs"].items():
        print(f"{path} vs eager body, same codes and fresh slots: max |diff| = {diff:.3g}")
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
