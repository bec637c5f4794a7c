"""The HTTP face against gRPC on one stack: time to first audio and throughput seen by the client.

Starts the stack (`python -m launcher --http-port 0`), then per concurrency level runs the same
streams through StreamSynthesize (gRPC, whole text) and through POST /v1/audio/speech (HTTP,
response_format pcm, chunked), alternating the two transports for --rounds rounds so drift hits
both alike. The load comes from --client-procs processes, so a Python client's own cost per chunk
(higher over HTTP) is not what is measured. Every stream is fixed length (min_frames = max_frames), 24 kHz PCM16, fixed seeds.
TTFA is the time from sending the request to the first audio bytes, at the client. Each level also
records the gateway process's CPU seconds (/proc: all its threads) and the audio messages gRPC
received. Writes JSON (GPU name, commit, config) and prints a table. `--stack-dir` runs another
tree's services (an A/B base) under this load generator.

    python benchmarks/bench_http_vs_grpc.py --smoke                         # CPU, tiny, seconds
    python benchmarks/bench_http_vs_grpc.py --model <1.7B dir> --device cuda --concurrency 1,64
    python benchmarks/bench_http_vs_grpc.py --stack-dir /tmp/base ...      # the base tree's services
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.client_procs import round_robin, run_parts  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402
from benchmarks.device_name import stack_gpu_name  # noqa: E402
from benchmarks.proc_cpu import cpu_seconds  # noqa: E402
from benchmarks.stack_launch import launch_stack  # noqa: E402
from client import TtsClient, make_config  # noqa: E402
from protos.tts.v1 import config_pb2  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet green forest."
BYTES_PER_AUDIO_S = 24000 * 2


async def grpc_stream(client: TtsClient, seed: int, frames: int, voice: str) -> dict:
    config = make_config(voice, language="english", seed=seed, max_frames=frames, min_frames=frames,
                         text_mode=config_pb2.TEXT_MODE_NON_STREAMING)
    t0 = time.perf_counter()
    first_s, num_bytes, num_chunks = None, 0, 0
    async for response in client.stream([TEXT], config):
        if response.HasField("audio"):
            first_s = first_s if first_s is not None else time.perf_counter() - t0
            num_bytes += len(response.audio.audio)
            num_chunks += 1
    return {"ttfa_ms": first_s * 1e3, "wall_s": time.perf_counter() - t0, "audio_s": num_bytes / BYTES_PER_AUDIO_S,
            "chunks": num_chunks}


async def http_stream(http, url: str, seed: int, frames: int, voice: str) -> dict:
    body = {"model": "tts-1", "voice": voice, "input": TEXT, "response_format": "pcm", "language": "english",
            "seed": seed, "sampling": {"max_frames": frames, "min_frames": frames}}
    t0 = time.perf_counter()
    first_s, num_bytes = None, 0
    async with http.stream("POST", url, json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"HTTP {reply.status_code}: {(await reply.aread())[:300]!r}")
        async for chunk in reply.aiter_raw():
            first_s = first_s if first_s is not None else time.perf_counter() - t0
            num_bytes += len(chunk)
    return {"ttfa_ms": first_s * 1e3, "wall_s": time.perf_counter() - t0, "audio_s": num_bytes / BYTES_PER_AUDIO_S}


async def run_streams(transport: str, concurrency: int, seeds: list[int], args, grpc_target: str,
                      http_url: str) -> list[dict]:
    """`seeds` streams through one transport, `concurrency` at a time, from this process."""
    import httpx
    pending = iter(seeds)
    rows: list[dict] = []
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with TtsClient(grpc_target) as client, httpx.AsyncClient(timeout=600, limits=limits) as http:
        async def worker():
            for seed in pending:
                if transport == "grpc":
                    rows.append(await grpc_stream(client, seed, args.frames, args.voice))
                else:
                    rows.append(await http_stream(http, f"{http_url}/v1/audio/speech", seed, args.frames, args.voice))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return rows


def _client_process(job: tuple) -> dict:
    transport, concurrency, seeds, args, grpc_target, http_url = job
    started_s = time.time()
    rows = asyncio.run(run_streams(transport, concurrency, seeds, args, grpc_target, http_url))
    return {"rows": rows, "started_s": started_s, "ended_s": time.time()}


def gateway_cpu_seconds(pids: list[int]) -> float | None:
    """utime + stime of all `pids` together; None without any, or when one cannot be read."""
    seconds = [cpu_seconds(pid) for pid in pids]
    return None if not seconds or None in seconds else sum(seconds)


def run_level(transport: str, concurrency: int, num_streams: int, args, grpc_target: str, http_url: str,
              gateway_pids: list[int] = ()) -> dict:
    """One level from --client-procs processes (a Python client is slower per chunk over HTTP than
    over gRPC; several processes keep the client from being what is measured). `gateway_pids`: the
    gateway's processes (its worker supervisor and each worker), whose CPU seconds over the level are
    recorded together (None where /proc cannot be read)."""
    procs = max(1, min(args.client_procs, concurrency))
    widths = [len(part) for part in round_robin(list(range(concurrency)), procs)]
    jobs = [(transport, width, seeds, args, grpc_target, http_url)
            for width, seeds in zip(widths, round_robin(list(range(num_streams)), procs))]
    cpu_before_s = gateway_cpu_seconds(gateway_pids)
    parts = [done["result"] for done in run_parts(_client_process, [(job,) for job in jobs])]
    cpu_after_s = gateway_cpu_seconds(gateway_pids)
    gateway_cpu_s = cpu_after_s - cpu_before_s if cpu_before_s is not None and cpu_after_s is not None else None
    rows = [row for part in parts for row in part["rows"]]
    wall_s = max(p["ended_s"] for p in parts) - min(p["started_s"] for p in parts)
    ttfa = np.array([r["ttfa_ms"] for r in rows])
    return {"transport": transport, "concurrency": concurrency, "streams": len(rows), "client_procs": procs,
            "ttfa_p50_ms": float(np.percentile(ttfa, 50)), "ttfa_p95_ms": float(np.percentile(ttfa, 95)),
            "audio_s_per_s": sum(r["audio_s"] for r in rows) / wall_s,
            "audio_s_per_stream": sorted({round(r["audio_s"], 4) for r in rows}),
            "rtf_p50": float(np.median([r["wall_s"] / r["audio_s"] for r in rows])), "wall_s": wall_s,
            # audio messages received (gRPC only: HTTP's chunks are not visible through the client)
            "chunks": sum(r["chunks"] for r in rows) if transport == "grpc" else None,
            # the gateway's processes over the level (from spawning the clients to their end; ticks of 10 ms)
            "gateway_cpu_s": gateway_cpu_s,
            "gateway_cpu_ms_per_audio_s": (1e3 * gateway_cpu_s / sum(r["audio_s"] for r in rows)
                                           if gateway_cpu_s is not None else None)}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def start_stack(args, work: Path) -> tuple[subprocess.Popen, dict]:
    launcher_args = ["--model", args.model, "--device", args.device, "--grpc-port", "0", "--http-port", "0",
                     "--metrics-port", "-1", f"--gateway-arg=--max-streams={max(args.concurrency) * 2}"]
    launcher_args += [f"--talker-arg={a}" for a in args.talker_arg] + [f"--vocoder-arg={a}" for a in args.vocoder_arg]
    return launch_stack(launcher_args, work, Path(args.stack_dir).resolve() if args.stack_dir else ROOT)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--voice", default="vivian")
    p.add_argument("--concurrency", default="1,64", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--streams-per-level", type=int, default=0, help="default: max(8, 2 x concurrency)")
    p.add_argument("--frames", type=int, default=125, help="frames per stream (125 = 10 s)")
    p.add_argument("--rounds", type=int, default=2, help="grpc/http alternations per level")
    p.add_argument("--client-procs", type=int, default=4, help="client processes per level (at most its concurrency)")
    p.add_argument("--talker-arg", action="append", default=[])
    p.add_argument("--vocoder-arg", action="append", default=[])
    p.add_argument("--stack-dir", default="", help="run the services from this tree (an A/B base); default: this one")
    p.add_argument("--out", default="bench_http_vs_grpc.json")
    p.add_argument("--smoke", action="store_true", help="tiny model on CPU, a few short streams")
    args = p.parse_args()
    if args.smoke:
        args.concurrency, args.frames, args.rounds, args.streams_per_level, args.client_procs = [1, 2], 6, 1, 2, 2
        args.talker_arg += ["--cpu-threads=1"]
        args.vocoder_arg += ["--cpu-threads=1"]
    work = Path(tempfile.mkdtemp(prefix="bench-http-"))
    proc, ready = start_stack(args, work)
    # the gateway, and its workers when it runs several (launcher --gateway-workers: 4 beside a GPU)
    gateway_pids = [pid for name, pid in (ready.get("pids") or {}).items() if name.startswith("gateway")]
    rows = []
    try:
        # warm-up: graphs, caches and the first-request paths of both transports
        run_level("grpc", 1, 2, args, ready["grpc_target"], ready["http_url"])
        run_level("http", 1, 2, args, ready["grpc_target"], ready["http_url"])
        for concurrency in args.concurrency:
            num_streams = args.streams_per_level or max(8, 2 * concurrency)
            for round_index in range(args.rounds):
                for transport in ("grpc", "http"):
                    row = run_level(transport, concurrency, num_streams, args, ready["grpc_target"], ready["http_url"],
                                    gateway_pids)
                    row["round"] = round_index
                    rows.append(row)
                    print(f"{transport:4s} c={concurrency:<4d} round {round_index}: TTFA p50 {row['ttfa_p50_ms']:.1f} "
                          f"p95 {row['ttfa_p95_ms']:.1f} ms, {row['audio_s_per_s']:.1f} audio-s/s, "
                          f"RTF p50 {row['rtf_p50']:.3f}, gateway CPU {_fmt(row['gateway_cpu_s'], '.2f')} s", flush=True)
                    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1))
    finally:
        proc.send_signal(2)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    stack_dir = Path(args.stack_dir).resolve() if args.stack_dir else ROOT
    result = {"gpu": stack_gpu_name(args.device), "commit": git_commit(), "stack_dir": args.stack_dir,
              "stack_commit": git_commit(stack_dir), "model": args.model, "device": args.device,
              "frames": args.frames, "client_procs": args.client_procs, "voice": args.voice, "concurrency": args.concurrency, "rounds": args.rounds,
              "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("\n| transport | streams | TTFA p50 / p95 ms (median of rounds) | audio-s/s | gateway CPU ms / audio-s |"
          "\n|---|---|---|---|---|")
    for concurrency in args.concurrency:
        for transport in ("grpc", "http"):
            mine = [r for r in rows if r["transport"] == transport and r["concurrency"] == concurrency]
            print(f"| {transport} | {concurrency} | {np.median([r['ttfa_p50_ms'] for r in mine]):.1f} / "
                  f"{np.median([r['ttfa_p95_ms'] for r in mine]):.1f} | "
                  f"{np.median([r['audio_s_per_s'] for r in mine]):.1f} | "
                  f"{_fmt(_median([r['gateway_cpu_ms_per_audio_s'] for r in mine]), '.1f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
