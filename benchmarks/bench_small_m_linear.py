"""The talker's decode GEMMs at 1, 2, 4 and 8 rows: cuBLAS (F.linear, as the step runs them) against the
few-row Triton kernel (kernels/small_m_linear_triton.py), with a small sweep of its tiles.

Each case is timed as the frame step runs it, inside a CUDA graph: REPLAYS x calls on distinct
weight copies (more bytes than L2 holds, so every call streams its weights from HBM), per call =
replay time / calls (CUDA events, median). GB/s counts the weight bytes. Every kernel result is
checked against F.linear; the script exits non-zero on a mismatch.

  python benchmarks/bench_small_m_linear.py --out gemv.json          # GPU, bf16
  python benchmarks/bench_small_m_linear.py --smoke --out /tmp/g.json  # CPU, interpreter, tiny shapes
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first triton import
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.commit import git_commit  # noqa: E402
from benchmarks.device_name import gpu_name  # noqa: E402
from kernels.small_m_linear_triton import choose_blocks, small_m_linear_triton  # noqa: E402

# (name, N, K) of the 1.7B talker (28 layers) and code predictor (5 layers x 15 passes per frame)
SHAPES = [
    ("talker.qkv", 4096, 2048), ("talker.o", 2048, 2048), ("talker.gate_up", 12288, 2048), ("talker.down", 2048, 6144),
    ("predictor.qkv", 4096, 1024), ("predictor.o", 1024, 2048), ("predictor.gate_up", 6144, 1024),
    ("predictor.down", 1024, 3072),
]
CALLS_PER_FRAME = {"talker": 28, "predictor": 75}
SMOKE_SHAPES = [("tiny.a", 24, 40), ("tiny.b", 7, 130)]
SWEEP = [(1, 4), (2, 4), (4, 4), (4, 8), (8, 8), (16, 8)]   # (block_n, num_warps)
L2_BYTES = 64 * 2**20   # more weight bytes than this per replay: H100 L2 is 50 MB, H200 the same
ROWS = (1, 2, 4, 8)
REPLAYS = 20


def time_calls(calls, device) -> float:
    """ms per call: the calls captured as one CUDA graph, its replay timed (median); CPU: one pass."""
    if device.type != "cuda":
        for call in calls:
            call()
        return 0.0
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:   # warm-up outside the capture (compiles, picks cuBLAS algorithms)
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    times = []
    for _ in range(REPLAYS + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times[3:]) / len(calls)


def bench_case(name: str, n: int, k: int, m: int, device, dtype, smoke: bool) -> dict:
    gen = torch.Generator().manual_seed(0)
    weight_bytes = n * k * torch.empty((), dtype=dtype).element_size()
    copies = 1 if smoke else max(2, -(-2 * L2_BYTES // weight_bytes))
    weights = [(torch.randn(n, k, generator=gen) / k ** 0.5).to(device, dtype) for _ in range(copies)]
    x = torch.randn(m, k, generator=gen).to(device, dtype)
    want = F.linear(x.float(), weights[0].float())
    scale = 1 + want.abs()

    def check(y):
        err = ((y.float() - want).abs() / scale).max().item()
        if err > 2 ** -7:
            raise SystemExit(f"mismatch at {name} m={m}: max rel err {err:.3g}")
        return err

    row = {"name": name, "m": m, "n": n, "k": k, "weight_bytes": weight_bytes, "copies": copies,
           "default_blocks": list(choose_blocks(m, n, k))}
    row["cublas_us"] = 1e3 * time_calls([lambda w=w: F.linear(x, w) for w in weights], device)
    row["max_rel_err"] = check(small_m_linear_triton(x, weights[0]))
    row["triton_us"] = 1e3 * time_calls([lambda w=w: small_m_linear_triton(x, w) for w in weights], device)
    sweep = []
    for block_n, num_warps in ([] if smoke else SWEEP):
        kwargs = {"block_n": block_n, "num_warps": num_warps}
        try:
            check(small_m_linear_triton(x, weights[0], **kwargs))
            us = 1e3 * time_calls([lambda w=w: small_m_linear_triton(x, w, **kwargs) for w in weights], device)
            sweep.append({**kwargs, "us": us})
        except SystemExit:
            raise
        except Exception as exc:  # a tile this GPU cannot hold: note it, go on
            sweep.append({**kwargs, "error": f"{type(exc).__name__}: {exc}"[:200]})
    row["sweep"] = sweep
    timed = [s for s in sweep if "us" in s]
    if timed:
        row["best"] = min(timed, key=lambda s: s["us"])
    for key in ("cublas_us", "triton_us"):
        if row[key] > 0:
            row[key.replace("_us", "_gb_per_s")] = weight_bytes / (row[key] * 1e-6) / 1e9
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    rows: list[dict] = []
    report = {"bench": "small_m_linear", "commit": git_commit(), "smoke": args.smoke,
              "gpu": gpu_name(device),
              "dtype": str(dtype).removeprefix("torch."), "results": rows, "frame_totals_us": {}}
    with torch.no_grad():
        for name, n, k in SMOKE_SHAPES if args.smoke else SHAPES:
            for m in ROWS:
                row = bench_case(name, n, k, m, device, dtype, args.smoke)
                rows.append(row)
                best = row.get("best", {})
                print(f"{name:18s} m={m} N={n:5d} K={k:5d}  cublas {row['cublas_us']:7.2f} us  triton "
                      f"{row['triton_us']:7.2f} us  best {best.get('us', float('nan')):7.2f} us "
                      f"(block_n {best.get('block_n')}, warps {best.get('num_warps')})", flush=True)
                args.out.write_text(json.dumps(report, indent=1))
    # what one frame step's GEMMs of these shapes cost each way (calls per frame x per-call time)
    for m in ROWS:
        for key in ("cublas_us", "triton_us"):
            total = sum(r[key] * CALLS_PER_FRAME.get(r["name"].split(".")[0], 1) for r in rows if r["m"] == m)
            report["frame_totals_us"][f"m{m}_{key}"] = total
    args.out.write_text(json.dumps(report, indent=1))
    print("per frame:", {k: round(v, 1) for k, v in report["frame_totals_us"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
