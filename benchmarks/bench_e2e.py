"""End-to-end load generator through the public gRPC API (StreamSynthesize).

Starts the local stack with `python -m launcher` (or uses --target), then for each concurrency
level keeps that many streams in flight, each a fixed-length utterance: fixed text streamed word
by word, seeds fixed per stream, and min_frames = max_frames so end of speech is never sampled and
every stream has the same length (each row still reports the frames produced). Reports TTFA
p50/p95, RTF p50/p95 and audio-s/s, and next to TTFA the server's own timings per stage (queue,
prefill, first frame, vocoder first chunk, vocoder decode, encode; p50/p95) from the summaries
the streams end with; writes JSON.

Stalls as the listener hears them (service_common/playback.py): a player that starts at a stream's
first chunk and plays in real time; a chunk that arrives after its audio was needed is a stall
(the player waits, then resumes). Per level: streams with a stall over 50 ms and over 100 ms, the
longest, and the same from the servers' summaries. Arrivals (`--arrivals`): `closed` keeps
`concurrency` streams in flight (a burst, or spread with --stagger-starts); `burst` is the closed
loop started all at once whatever --stagger-starts says; `poisson` starts the
same number of streams open loop, at exponential gaps with a rate that holds about `concurrency`
open (concurrency / the mean stream wall time of the closed or burst level at that concurrency,
which runs first: `arrival_order`); its row says how many were open on average. That
rate is what the closed loop sustains, i.e. the service's capacity at that concurrency, where any
open loop queues; `--poisson-load F` offers F times it (e.g. 0.9: steady arrivals with headroom).

    python benchmarks/bench_e2e.py --smoke                     # CPU, tiny, seconds
    python benchmarks/bench_e2e.py --model <1.7B dir> --device cuda --concurrency 1,4,16,64,128,256
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import first_audio_hops  # noqa: E402
from benchmarks.client_procs import round_robin, run_parts  # noqa: E402
from benchmarks.gpu_busy import GpuBusySampler  # noqa: E402
from benchmarks.proc_cpu import ProcCpu  # noqa: E402
from benchmarks.commit import git_commit as read_commit  # noqa: E402
from benchmarks.device_name import stack_gpu_name  # noqa: E402
from benchmarks.e2e_workloads import MODEL_TYPES, WORKLOADS, ConfigFor, prepare  # noqa: E402
from benchmarks.stack_launch import launch_stack  # noqa: E402
from benchmarks.stack_stats import collect, collect_replicas, load_split, one_line  # noqa: E402
from client import TtsClient  # noqa: E402
from protos.tts.v1 import tts_pb2  # noqa: E402
from service_common.playback import PlaybackClock, stall_report  # noqa: E402

# ServerTimings fields: talker queue, prefill (with the first frame), first frame sent, vocoder first
# chunk, vocoder decode (summed), gateway encode (summed), a per-request clone's voice encoding
STAGES = tuple(f.name for f in tts_pb2.ServerTimings.DESCRIPTOR.fields)
TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet "
        "green forest where nobody can see it anymore.")


async def one_stream(client: TtsClient, seed: int, args, config_for: ConfigFor, whole_text: bool = False) -> dict:
    cfg = config_for(seed, args.frames)
    t0, t0_unix_s = time.monotonic(), time.time()
    first_s, start_s, summary, request_id = None, None, None, ""
    player, stalls_s = PlaybackClock(), []   # the listener: every chunk's arrival against its deadline
    words = TEXT.split(" ")
    texts = [TEXT] if whole_text else [w + " " for w in words[:-1]] + [words[-1]]
    async for r in client.stream(texts, cfg, timeout_s=args.timeout_s):
        if r.HasField("audio"):
            now_s = time.monotonic()
            if first_s is None:
                first_s = now_s - t0
            lateness_s = player.on_chunk(now_s, r.audio.duration_ms / 1e3)
            if lateness_s > 0:
                stalls_s.append(lateness_s)
        elif r.HasField("start"):
            start_s = time.monotonic() - t0
            request_id = r.start.request_id
        elif r.HasField("summary"):
            summary = r.summary
    # client_start_ms: the gateway's start message (the call accepted, the talker's ACK) as the client
    # saw it. The server's TTFA clock starts at the first text read, which is before that ACK, so
    # client TTFA <= client_start_ms + server TTFA (gapless5: within ~1 ms at p95)
    # start_unix_s and request_id: the stream's start on the wall clock, to be joined with the gateway's
    # log of the request on the same host (benchmarks/gateway_entry_lag.py)
    return {"client_ttfa_ms": (first_s or 0) * 1e3, "client_start_ms": (start_s or 0) * 1e3,
            "start_unix_s": t0_unix_s, "request_id": request_id,
            "ttfa_ms": summary.time_to_first_audio_ms,
            "rtf": summary.real_time_factor, "audio_s": summary.audio_s, "frames": summary.num_frames,
            "start_s": t0, "wall_s": time.monotonic() - t0,
            "timings": {name: getattr(summary.timings, name) for name in STAGES},
            "stalls_ms": [x * 1e3 for x in stalls_s],
            "server_num_stalls": summary.num_stalls, "server_longest_stall_ms": summary.longest_stall_ms}


async def first_requests(target: str, args, repeats: int = 8) -> dict:
    """The first request after start (nothing has run yet: any shape or kernel left cold shows here),
    then `repeats` lone streams with the text word by word and as one message (the steady values)."""
    async with TtsClient(target) as client:
        config_for = await prepare(client, args.workload, args.work_dir, args.voice, args.distinct_clips)
        first = await one_stream(client, 0, args, config_for)
        words = [await one_stream(client, 1 + i, args, config_for) for i in range(repeats)]
        whole = [await one_stream(client, 100 + i, args, config_for, whole_text=True) for i in range(repeats)]
    def steady(rows: list[dict]) -> dict:
        return {"ttfa_ms_p50": float(np.median([r["ttfa_ms"] for r in rows])),
                "client_ttfa_ms_p50": float(np.median([r["client_ttfa_ms"] for r in rows])),
                "stages_p50_ms": {n: float(np.median([r["timings"][n] for r in rows])) for n in STAGES}}

    return {"first": {k: first[k] for k in ("ttfa_ms", "client_ttfa_ms", "timings")},
            "steady_words": steady(words), "steady_whole_text": steady(whole)}


def streams_for_level(concurrency: int, streams_per_level: int = 0, streams_factor: int = 2,
                      min_streams: int = 0) -> int:
    """Streams one level runs: `streams_per_level` when set, else `streams_factor` x concurrency but
    at least `min_streams`. The level is closed loop and its streams start together, so with
    2 x concurrency its median rests on two waves; a larger factor gives the percentiles more
    streams (less run-to-run noise), and a floor keeps the small levels from resting on a handful
    (4 x 1 streams: one slow stream moves the median by ~1 ms of ~16)."""
    if streams_per_level:
        return streams_per_level
    if streams_factor < 1:
        raise ValueError(f"streams factor must be at least 1, got {streams_factor}")
    return max(streams_factor * concurrency, min_streams)


def start_offsets_s(concurrency: int, period_s: float) -> list[float]:
    """When each of a level's workers starts its first stream: all at 0 (period 0, a burst), or
    spread evenly over `period_s` (worker k at k/concurrency of it). The level is closed loop, so
    streams of equal length keep their workers' phases: started together they arrive in waves of
    `concurrency` at once, and where a wave lands against the talker's steps moves a level's TTFA
    by up to ~20% from run to run; spread, arrivals look like a service's steady state."""
    if period_s < 0:
        raise ValueError(f"stagger period must be >= 0 s, got {period_s}")
    return [period_s * k / concurrency for k in range(concurrency)]


def poisson_offsets_s(num_streams: int, rate_hz: float, seed: int = 0) -> list[float]:
    """Open-loop arrival times: exponential gaps at `rate_hz` (seeded: runs compare), the first at 0."""
    if rate_hz <= 0:
        raise ValueError(f"arrival rate must be > 0 Hz, got {rate_hz}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_hz, num_streams)
    return [0.0] + np.cumsum(gaps[:-1]).tolist()


def mean_open_streams(results: list[dict], wall_s: float) -> float:
    """Streams open on average over the level's wall time (the concurrency an open loop held)."""
    return sum(r["wall_s"] for r in results) / wall_s if wall_s > 0 else 0.0


def stall_summary(results: list[dict]) -> dict:
    """Client-side stalls of a level's streams, and what the servers' summaries said."""
    report = stall_report([[x / 1e3 for x in r["stalls_ms"]] for r in results])
    report["server_streams_with_stalls"] = sum(1 for r in results if r["server_num_stalls"])
    report["server_longest_stall_ms"] = max((r["server_longest_stall_ms"] for r in results), default=0.0)
    return report


async def warm_stream(target: str, args) -> dict:
    """One stream before a level (warm-up; its wall time sets the stagger and a Poisson rate)."""
    async with TtsClient(target) as client:
        config_for = await prepare(client, args.workload, args.work_dir, args.voice, args.distinct_clips)
        return await one_stream(client, 0, args, config_for)


async def run_jobs(target: str, args, jobs: list[tuple[float, list[int], bool]], start_at_s: float) -> dict:
    """This process's share of a level: each job (offset from `start_at_s` on the monotonic clock,
    seeds run one after another, whether it is an open-loop arrival that may be refused) in flight
    at once. -> {"results": per-stream dicts, "refused": RESOURCE_EXHAUSTED details}."""
    results: list[dict] = []
    refused: list[str] = []   # open-loop arrivals turned away: counted, not an error
    # several connections per process when asked: gateway processes sharing a port get connections
    clients = [TtsClient(target, own_connection=args.client_channels > 1) for _ in range(args.client_channels)]
    try:
        # the voice is registered once, by the parent, before the parts start
        config_for = await prepare(clients[0], args.workload, args.work_dir, args.voice, args.distinct_clips,
                                   register=False)

        async def job(client: TtsClient, offset_s: float, seeds: list[int], may_refuse: bool):
            await asyncio.sleep(max(0.0, start_at_s + offset_s - time.monotonic()))
            for seed in seeds:
                try:
                    results.append(await one_stream(client, 1000 + seed, args, config_for))
                except grpc.aio.AioRpcError as exc:
                    if not may_refuse or exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    refused.append(exc.details())

        await asyncio.gather(*(job(clients[i % len(clients)], *j) for i, j in enumerate(jobs)))
    finally:
        for client in clients:
            await client.close()
    return {"results": results, "refused": refused}


def _run_part(target: str, args, jobs: list, start_at_s: float) -> dict:
    return asyncio.run(run_jobs(target, args, jobs, start_at_s))


def arrival_order(arrivals: list[str]) -> list[str]:
    """The modes of one level in the order they run: poisson after the others, whose mean stream wall
    time sets its rate. Run first, it took the lone warm-up stream's (several times shorter under
    load) and offered ~2x what the level sustains: 440 of 1024 refused on an H200 (2026-11-28)."""
    if arrivals and set(arrivals) == {"poisson"}:
        raise ValueError("poisson arrivals take their rate from a closed or burst level at the same concurrency: "
                         "give --arrivals closed,poisson (or burst,poisson)")
    return [a for a in arrivals if a != "poisson"] + [a for a in arrivals if a == "poisson"]


def level_jobs(concurrency: int, total: int, arrivals: str, period_s: float,
               rate_hz: float | None) -> list[tuple[float, list[int], bool]]:
    """(offset s, seeds, may be refused) per job: `poisson` one open-loop arrival per stream;
    otherwise `concurrency` closed-loop workers, worker k starting at its stagger offset and running
    streams k, k + concurrency, ... (streams of equal length: the same as a shared queue)."""
    if arrivals == "poisson":
        return [(offset_s, [seed], True) for seed, offset_s in enumerate(poisson_offsets_s(total, rate_hz))]
    offsets = start_offsets_s(concurrency, period_s)
    return [(offsets[k], list(range(k, total, concurrency)), False) for k in range(min(concurrency, total))]


def level(target: str, concurrency: int, args, arrivals: str = "closed",
          stream_wall_s: float | None = None, pids: dict[str, int] | None = None) -> dict:
    """One level: `closed` keeps `concurrency` streams in flight; `poisson` starts them open loop
    at a rate that holds about that many open given streams of `stream_wall_s` (the closed or burst
    level's mean; required). The streams are driven from `--client-procs` processes."""
    if arrivals == "poisson" and not stream_wall_s:
        raise ValueError("poisson arrivals need the mean stream wall time of a closed or burst level")
    warm = asyncio.run(warm_stream(target, args))
    total = streams_for_level(concurrency, args.streams_per_level, args.streams_factor, args.min_streams)
    rate_hz = args.poisson_load * concurrency / stream_wall_s if arrivals == "poisson" else None
    period_s = warm["wall_s"] if args.stagger_starts and arrivals == "closed" else 0.0
    jobs = level_jobs(concurrency, total, arrivals, period_s, rate_hz)
    parts = round_robin(jobs, max(1, min(args.client_procs, len(jobs))))
    # the parts start together: spawned processes take ~1 s to import and connect
    start_at_s = time.monotonic() + (2.0 if len(parts) > 1 else 0.0)
    with GpuBusySampler() as busy, ProcCpu(pids or {}) as cpu:
        done = run_parts(_run_part, [(target, args, part, start_at_s) for part in parts])
    results = [r for d in done for r in d["result"]["results"]]
    refused = [x for d in done for x in d["result"]["refused"]]
    t0 = min(r["start_s"] for r in results)
    wall_s = max(r["start_s"] + r["wall_s"] for r in results) - t0
    client_cpu_pct = 100 * sum(d["cpu_s"] for d in done) / wall_s
    pct = lambda key, q: float(np.percentile([r[key] for r in results], q))  # noqa: E731
    stage_pct = lambda name, q: float(np.percentile([r["timings"][name] for r in results], q))  # noqa: E731
    if arrivals == "closed" and not period_s:   # (a burst whatever it was called)
        arrivals = "burst"
    return {"concurrency": concurrency, "arrivals": arrivals, "num_streams": len(results),
            "num_refused": len(refused), "refused_reasons": sorted(set(refused)), "wall_s": wall_s,
            "stagger_period_s": period_s, "arrival_rate_hz": rate_hz,
            "poisson_load": args.poisson_load if arrivals == "poisson" else None,
            "mean_open_streams": mean_open_streams(results, wall_s),
            "mean_stream_wall_s": float(np.mean([r["wall_s"] for r in results])),
            "stalls": stall_summary(results),
            "ttfa_ms_p50": pct("ttfa_ms", 50), "ttfa_ms_p95": pct("ttfa_ms", 95),
            "client_ttfa_ms_p50": pct("client_ttfa_ms", 50), "client_ttfa_ms_p95": pct("client_ttfa_ms", 95),
            "client_start_ms_p50": pct("client_start_ms", 50), "client_start_ms_p95": pct("client_start_ms", 95),
            "rtf_p50": pct("rtf", 50), "rtf_p95": pct("rtf", 95),
            "rtf_max": max(r["rtf"] for r in results),
            "stages": {name: {"p50_ms": stage_pct(name, 50), "p95_ms": stage_pct(name, 95)} for name in STAGES},
            "audio_s_per_s": sum(r["audio_s"] for r in results) / wall_s,
            "gpu_busy": busy.summary(),   # nvidia-smi utilization while the level ran (None without one)
            # CPU of each service process and of the client parts (near 100: that loop sets the pace)
            "cpu": {**cpu.summary(), "client": {"cpu_pct": round(client_cpu_pct, 1), "procs": len(parts)}},
            "raw": results}


def start_stack(args, work: Path) -> tuple[subprocess.Popen, str, dict[str, int]]:
    stack_dir = Path(args.stack_dir).resolve() if args.stack_dir else ROOT   # whose services run
    launcher_args = ["--model", args.model, "--device", args.device, "--grpc-port", "0",
                     f"--gateway-arg=--max-streams={max(args.concurrency) * 4}"]   # headroom for an open loop's peaks
    # gRPC only: the launcher's HTTP default is the fixed port 8000, which two stacks (parallel tests)
    # share; a tree from before the HTTP face (an A/B base) has no such flag
    if "--http-port" in (stack_dir / "launcher" / "main.py").read_text():
        launcher_args += ["--http-port", "-1"]
    launcher_args += [f"--talker-arg={a}" for a in args.talker_arg] + [f"--vocoder-arg={a}" for a in args.vocoder_arg]
    launcher_args += args.launcher_arg
    proc, ready = launch_stack(launcher_args, work, stack_dir)
    return proc, ready["grpc_target"], ready.get("pids") or {}


def write_result(args, header: dict, single: dict | None, rows: list[dict], work: Path) -> str:
    """The run so far as JSON (after every level: a run cut short by its time limit keeps its levels);
    `header`: its commit and GPU, read once."""
    result = {"bench": "e2e", **header, "stack_dir": args.stack_dir, "model": args.model, "device": args.device,
              "compose_ready": json.loads(args.compose_ready.read_text()) if args.compose_ready else None,
              "workload": args.workload, "distinct_clips": args.distinct_clips,
              "frames_per_utterance": args.frames, "streams_per_level": args.streams_per_level,
              "streams_factor": args.streams_factor, "min_streams": args.min_streams,
              "stagger_starts": args.stagger_starts, "arrivals": args.arrivals, "text": TEXT,
              "single_stream": single, "levels": rows}
    out = args.out or str(work / "bench_e2e.json")
    Path(out).write_text(json.dumps(result, indent=1))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="a running gateway host:port (default: start the stack)")
    p.add_argument("--compose-ready", type=Path,
                   help="the ready file of a launcher.compose_run stack: its gateway is the target, and every "
                        "replica's stats (the vocoders' load split) are collected per level")
    p.add_argument("--stack-dir", default="",
                   help="start the stack of another tree (e.g. an A/B base) with this client and its measures")
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cuda")
    p.add_argument("--voice", default="vivian", help="speaker of the custom-voice workload")
    p.add_argument("--workload", default="custom-voice", choices=WORKLOADS,
                   help="how each request picks its voice (benchmarks/e2e_workloads.py); the model must match")
    p.add_argument("--distinct-clips", action="store_true",
                   help="clone workloads: a different reference clip per stream (no encoding cache hits)")
    p.add_argument("--concurrency", default="1,4,16,64,128,256")
    p.add_argument("--frames", type=int, default=125, help="frames per utterance (125 = 10 s of audio)")
    p.add_argument("--streams-per-level", type=int, default=0,
                   help="streams per level (default: --streams-factor x concurrency); overrides --streams-factor")
    p.add_argument("--streams-factor", type=int, default=2,
                   help="streams per level as a multiple of its concurrency (default 2)")
    p.add_argument("--min-streams", type=int, default=0,
                   help="at least this many streams per level (with --streams-factor; default 0: no floor)")
    p.add_argument("--stagger-starts", action="store_true",
                   help="spread each level's first streams over one lone stream's wall time instead of starting "
                        "them together (steady-state arrivals; see start_offsets_s)")
    p.add_argument("--arrivals", default="closed",
                   help="comma-separated arrival modes per concurrency, in order (poisson after the others, which set "
                        "its rate): closed (a burst, or spread with "
                        "--stagger-starts), burst (closed, all at once), poisson (open loop holding about that "
                        "many streams open)")
    p.add_argument("--poisson-load", type=float, default=1.0,
                   help="poisson arrivals at this fraction of the rate that holds about `concurrency` streams "
                        "(the closed loop's own throughput; default 1.0)")
    p.add_argument("--single-repeats", type=int, default=8,
                   help="lone streams (word by word, then whole text) after the first request, for the steady TTFA")
    p.add_argument("--timeout-s", type=float, default=600)
    p.add_argument("--client-channels", type=int, default=1,
                   help="gRPC connections per client process (gateway processes sharing one port each serve whole "
                        "connections: launcher --gateway-workers)")
    p.add_argument("--client-procs", type=int, default=1,
                   help="client processes a level's streams are spread over (one Python process driving hundreds "
                        "of streams delays what it measures; 4 at 256 streams)")
    p.add_argument("--talker-arg", action="append", default=[])
    p.add_argument("--vocoder-arg", action="append", default=[])
    p.add_argument("--launcher-arg", action="append", default=[],
                   help="a flag for the launcher itself (e.g. --launcher-arg=--http-port=-1)")
    p.add_argument("--hop-trace-dir", default="",
                   help="the stack started here marks each request's way to first audio in this folder "
                        "(service_common/hop_trace.py); each level's row then has its hops (first_audio_hops)")
    p.add_argument("--out", default="")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny model, concurrency 1,2, 8 frames")
    args = p.parse_args()
    if args.smoke:
        args.model = "tiny-" + MODEL_TYPES[args.workload].replace("_", "-")
        args.device, args.concurrency, args.frames, args.single_repeats = "cpu", "1,2", 8, 2
        args.talker_arg += ["--cpu-threads=1"]
        args.vocoder_arg += ["--cpu-threads=1"]
    args.concurrency = [int(c) for c in str(args.concurrency).split(",")]
    args.arrivals = [a.strip() for a in args.arrivals.split(",") if a.strip()]
    if not args.arrivals or set(args.arrivals) - {"closed", "burst", "poisson"}:
        p.error(f"--arrivals takes closed, burst and poisson, got {args.arrivals}")
    try:
        args.arrivals = arrival_order(args.arrivals)
    except ValueError as e:
        p.error(str(e))
    if args.compose_ready:
        if args.target:
            p.error("--compose-ready names the target already; give one of --target and --compose-ready")
        args.target = json.loads(args.compose_ready.read_text())["grpc_target"]
    if not 0 < args.poisson_load <= 4:
        p.error(f"--poisson-load must be in (0, 4], got {args.poisson_load}")
    if not args.streams_per_level and args.streams_factor < 1:
        p.error(f"--streams-factor must be at least 1, got {args.streams_factor}")
    proc = None
    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    args.work_dir = work
    try:
        target, pids = args.target, {}
        if args.hop_trace_dir:   # the services read it when they start (a --target stack must have it already)
            os.environ["QWEN3_TTS_HOP_TRACE_DIR"] = str(Path(args.hop_trace_dir).resolve())
        if not target:
            proc, target, pids = start_stack(args, work)
        rows = []
        header = {"commit": read_commit(ROOT), "gpu": stack_gpu_name(args.device)}
        stats_dir = None if args.target else work   # the launcher's ready files name the admin ports
        single = None
        if not args.target:   # a stack of our own: its very first request is measurable
            single = asyncio.run(first_requests(target, args, args.single_repeats))
            print(f"first request TTFA {single['first']['ttfa_ms']:.1f} ms (client {single['first']['client_ttfa_ms']:.1f})"
                  f" | steady p50 word by word {single['steady_words']['ttfa_ms_p50']:.1f} ms, whole text "
                  f"{single['steady_whole_text']['ttfa_ms_p50']:.1f} ms", flush=True)
        for c, arrivals in ((c, a) for c in args.concurrency for a in args.arrivals):
            collect(stats_dir)   # reset the services' windows: the level's stats are its own
            before = collect_replicas(args.compose_ready)
            closed_wall_s = next((r["mean_stream_wall_s"] for r in rows
                                  if r["concurrency"] == c and r["arrivals"] != "poisson"), None)
            row = level(target, c, args, arrivals, closed_wall_s, pids)
            row["server_stats"] = collect(stats_dir) or collect_replicas(args.compose_ready)
            if args.hop_trace_dir:
                row["first_audio_hops"] = first_audio_hops.summarize(first_audio_hops.load_marks(args.hop_trace_dir),
                                                                     [r["request_id"] for r in row["raw"]])
            if args.compose_ready:
                row["vocoder_load_split"] = load_split(before, row["server_stats"])
                row["talker_load_split"] = load_split(before, row["server_stats"], "talker")
            rows.append(row)
            write_result(args, header, single, rows, work)
            stalls = row["stalls"]
            print(f"c={c:4d} TTFA p50 {row['ttfa_ms_p50']:8.1f} ms p95 {row['ttfa_ms_p95']:8.1f} ms (client p95 "
                  f"{row['client_ttfa_ms_p95']:.1f}, its start message p95 {row['client_start_ms_p95']:.1f}) | RTF p50 "
                  f"{row['rtf_p50']:.3f} p95 {row['rtf_p95']:.3f} max {row['rtf_max']:.3f} | "
                  f"{row['audio_s_per_s']:8.1f} audio-s/s", flush=True)
            print(f"        {row['arrivals']} ({row['mean_open_streams']:.1f} open on average, {row['num_refused']} "
                  f"refused): stalls > 50 ms in "
                  f"{stalls['streams_stall_over_50ms']} of {stalls['num_streams']} streams, > 100 ms in "
                  f"{stalls['streams_stall_over_100ms']}, longest {stalls['longest_stall_ms']:.1f} ms (server: "
                  f"{stalls['server_streams_with_stalls']} streams, longest {stalls['server_longest_stall_ms']:.1f})",
                  flush=True)
            print("        cpu %: " + ", ".join(f"{name} {v['cpu_pct']:.0f}" for name, v in row["cpu"].items())
                  + f" ({row['cpu']['client']['procs']} client procs)", flush=True)
            print("        server p50/p95 ms: " + " | ".join(
                f"{name.removesuffix('_ms')} {s['p50_ms']:.1f}/{s['p95_ms']:.1f}" for name, s in row["stages"].items()),
                flush=True)
            if row.get("first_audio_hops"):
                print(f"        {first_audio_hops.one_line(row['first_audio_hops'])}", flush=True)
            if row["server_stats"]:
                print(f"       {one_line(row['server_stats'])}", flush=True)
            if row.get("vocoder_load_split"):
                print("        vocoder load split: " + ", ".join(
                    f"{name} {s['streams']} streams / {s['audio_s']:.0f} audio-s ({s['audio_share']:.0%})"
                    for name, s in row["vocoder_load_split"].items()), flush=True)
            if len(row.get("talker_load_split") or {}) > 1:
                print("        talker load split: " + ", ".join(
                    f"{name} {s['streams']} streams ({s['stream_share']:.0%})"
                    for name, s in row["talker_load_split"].items()), flush=True)
        out = write_result(args, header, single, rows, work)
        print(f"wrote {out}")
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
