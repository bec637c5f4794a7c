"""Does one thread reading a CUDA graph's output back stall another thread's kernel launches?

    python benchmarks/probe_stream_starvation.py --out /tmp/probe.json      # CUDA only

A "loop" thread replays a ~5 ms CUDA graph (a matmul chain, standing in for the talker's decode
step) and reads its output back, over and over; meanwhile the main thread times an
"encoder": 400 small eager kernels on a stream of its own (standing in for the voice encoders).
Read-back modes: `idle` (no loop thread), `cpu` (`tensor.cpu()`, a pageable copy), `event`
(event record + synchronize, no copy) and `to_host` (service_common.host_copy: pinned async copy
+ event wait, what the talker uses). On the H200 (2026-11-25, `39ae1e5`): idle 27.8 ms, cpu 3639 ms,
event 43.0 ms, to_host 42.7 ms (benchmarks/results/2026-11-25-probe-stream-starvation-h200.json).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service_common.host_copy import to_host  # noqa: E402

MODES = ("idle", "cpu", "event", "to_host")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--encoder-ops", type=int, default=400)
    args = p.parse_args()
    dev = torch.device("cuda")
    x = torch.randn(64, 4096, device=dev, dtype=torch.bfloat16)
    weights = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) for _ in range(8)]

    def body() -> torch.Tensor:
        y = x
        for _ in range(40):
            for w in weights:
                y = torch.tanh(y @ w)
        return y[:, :16].float()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = body()
    torch.cuda.synchronize()
    started = time.perf_counter()
    graph.replay()
    to_host(out)
    step_ms = (time.perf_counter() - started) * 1e3

    stop = threading.Event()

    def loop(mode: str) -> None:
        while not stop.is_set():
            graph.replay()
            if mode == "cpu":
                out.cpu()
            elif mode == "event":
                done = torch.cuda.Event()
                done.record()
                done.synchronize()
            else:
                to_host(out)

    audio = torch.randn(8, 512, 1000, device=dev)
    conv = torch.nn.Conv1d(512, 512, 7, padding=3).to(dev)
    encoder_stream = torch.cuda.Stream()

    def encoder_like() -> float:
        started_s = time.perf_counter()
        with torch.no_grad(), torch.cuda.stream(encoder_stream):
            y = audio
            for _ in range(args.encoder_ops // 2):
                y = torch.relu(conv(y)) * 0.5
            encoder_stream.synchronize()
        return (time.perf_counter() - started_s) * 1e3

    result = {"gpu": torch.cuda.get_device_name(), "graph_step_ms": step_ms, "encoder_ops": args.encoder_ops,
              "encoder_ms": {}}
    for mode in MODES:
        stop.clear()
        thread = None
        if mode != "idle":
            thread = threading.Thread(target=loop, args=(mode,))
            thread.start()
            time.sleep(0.2)
        encoder_like()   # warm
        result["encoder_ms"][mode] = encoder_like()
        stop.set()
        if thread is not None:
            thread.join()
        print(f"loop read-back {mode:>8}: encoder-like {args.encoder_ops} kernels {result['encoder_ms'][mode]:8.1f} ms")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
