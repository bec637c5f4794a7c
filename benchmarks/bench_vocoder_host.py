"""Host-side cost of the vocoder engine + runner per decode step, with a stub in place of the decoder.

    python benchmarks/bench_vocoder_host.py --out /tmp/vocoder_host.json               # CPU, 64 x 25
    python benchmarks/bench_vocoder_host.py --smoke --out /tmp/vocoder_host_smoke.json
    python benchmarks/bench_vocoder_host.py --device cuda --out vocoder_host_h200.json  # stub graph on GPU

The step body is a stub that writes a marker into a static [B, T*spf] output (as a captured graph
does), so what is timed is everything around the decoder: talker frames intake, batch planning,
gathering codes, staging/H2D/replay/sync/D2H in the runner, per-row PCM copies and PcmOut
bookkeeping, and the consumer's view of the chunk (what the outbox does before a send). Every
stream sends `--frames` frames per step in messages of `--frames-per-message`, so each step
decodes one batch of (`--batch`, `--frames`).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_vocoder_service import build_random_decoder, git_commit  # noqa: E402
from vocoder_service.engine.chunk_policy import ChunkPolicy  # noqa: E402
from vocoder_service.engine.config import VocoderEngineConfig  # noqa: E402
from vocoder_service.engine.engine import ErrorOut, VocoderEngine  # noqa: E402
from vocoder_service.runtime.runner import DecoderRunner  # noqa: E402


class StubStep:
    """Stands in for `StreamingDecoder.step_unchecked`: a static output, a marker per row (cheap)."""

    def __init__(self, batch_size: int, num_samples: int, device: torch.device) -> None:
        self.out = torch.zeros((batch_size, num_samples), dtype=torch.float32, device=device)  # [B, T*spf]

    def __call__(self, codes: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        self.out[:, 0] = codes[:, 0, 0].float()   # row i of the output belongs to row i's codes
        return self.out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON results path")
    p.add_argument("--smoke", action="store_true", help="few steps (checks the script)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--frames", type=int, default=25, help="frames per row per step (the steady chunk)")
    p.add_argument("--frames-per-message", default="25,1", help="comma list: talker message sizes to run")
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args(argv)
    if args.smoke:
        args.batch, args.steps = 4, 5
    return args


def run(runner: DecoderRunner, batch: int, frames: int, frames_per_message: int, steps: int) -> dict:
    policy = ChunkPolicy(frames, frames, 200.0, quick_first_max_streams=0)   # fixed-size chunks only
    engine = VocoderEngine(runner, VocoderEngineConfig(max_slots=batch, chunk=policy,
                                                       samples_per_frame=runner.samples_per_frame))
    codes = np.random.default_rng(0).integers(0, runner.codebook_size, (batch, frames, 16))
    ids = [f"s{i}" for i in range(batch)]
    for rid in ids:
        engine.open(rid)
    seq = 0
    totals = {"intake": 0.0, "step": 0.0, "consume": 0.0}
    clock = time.perf_counter
    num_warmup = min(5, steps)
    for index in range(num_warmup + steps):
        if index == num_warmup:
            totals = dict.fromkeys(totals, 0.0)
            engine.host_times.clear()
            runner.reset_stats()
        started = clock()
        for start in range(0, frames, frames_per_message):
            for i, rid in enumerate(ids):
                engine.add_frames(rid, seq, codes[i, start:start + frames_per_message])
            seq += 1
        stepped = clock()
        outs = engine.step()
        returned = clock()
        num_samples = 0
        for out in outs:
            if isinstance(out, ErrorOut):
                raise RuntimeError(f"{out.request_id}: {out.code} {out.message}")
            num_samples += np.asarray(out.pcm, dtype="<f4").nbytes // 4
        if len(outs) != batch or num_samples != batch * frames * runner.samples_per_frame:
            raise RuntimeError(f"step returned {len(outs)} chunks / {num_samples} samples, expected {batch} chunks")
        totals["intake"] += stepped - started
        totals["step"] += returned - stepped
        totals["consume"] += clock() - returned
    per_step_ms = {k: v * 1e3 / steps for k, v in totals.items()}
    return {"batch": batch, "frames": frames, "frames_per_message": frames_per_message, "steps": steps,
            "per_step_ms": per_step_ms, "engine_ms_per_step": engine.host_times.per_call_ms(),
            "runner_ms_per_step": runner.stats.host_times.per_call_ms()}


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    runner = DecoderRunner(build_random_decoder("tiny", args.device, torch.float32), args.batch)
    stub = StubStep(args.batch, args.frames * runner.samples_per_frame, device)
    runner.capture_graphs([args.batch], [args.frames], budget_bytes=1 << 40, emulate=device.type != "cuda", body=stub)
    result = {"benchmark": "vocoder_host", "device": args.device, "cpu": platform.processor() or platform.machine(),
              "commit": git_commit(), "torch": torch.__version__, "runs": []}
    for fpm in (int(x) for x in args.frames_per_message.split(",")):
        r = run(runner, args.batch, args.frames, fpm, args.steps)
        result["runs"].append(r)
        parts = " ".join(f"{k} {v:.3f}" for k, v in {**r["engine_ms_per_step"], **r["runner_ms_per_step"]}.items())
        print(f"bs {args.batch} t {args.frames} frames/msg {fpm}: intake {r['per_step_ms']['intake']:.3f} ms, "
              f"step {r['per_step_ms']['step']:.3f} ms, consume {r['per_step_ms']['consume']:.3f} ms | {parts}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
