"""Kill one vocoder or talker replica of a compose run mid-load and record what happens (issues #13, #38).

    python benchmarks/replica_kill.py --compose-ready /tmp/compose-ready.json --kill vocoder-1 --out kill.json
    python benchmarks/replica_kill.py --compose-ready /tmp/compose-ready.json --kill talker-a-1 --out kill.json

Against a stack started by `python -m launcher.compose_run` (its ready file lists every replica's
pid, role and admin address):
1. `during`: --streams streams start together; after --kill-after-s the talkers are asked how many
   streams each holds and each of their vocoders holds, and the replica named by --kill gets
   SIGKILL (no drain, as a crashed node or an OOM kill). Every stream's end is recorded: finished,
   or its gRPC status and message, how much audio it got, and how long after the kill it ended.
2. `after`: as soon as the killed replica is dropped (a stream on it failed, or - a vocoder - the
   talkers call it unhealthy), --streams new streams, while `during` still runs. They should all
   finish, and the replicas' own counters show which took them (the killed one is down).
3. `rejoin` (unless --rejoin-timeout-s 0): once compose_run has started the killed replica again,
   it answers SERVING and its peers count it healthy (the talkers' links to a vocoder; every
   gateway's healthy talkers, for a talker), --streams more; the load split shows whether it takes
   work again.
Writes one JSON with each phase's outcomes, the load split over the killed replica's role (and
over the talkers), and the talkers' views of themselves and their vocoders.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_e2e import TEXT  # noqa: E402  (the e2e sweep's utterance, word by word here too)
from benchmarks.commit import git_commit  # noqa: E402
from benchmarks.stack_stats import collect_replicas, load_split  # noqa: E402
from client import TtsClient, make_config  # noqa: E402
from launcher.compose_run import is_serving  # noqa: E402
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from protos.tts.v1 import config_pb2  # noqa: E402


async def one_stream(client: TtsClient, seed: int, frames: int, voice: str, timeout_s: float) -> dict:
    """One fixed-length stream, word by word; its outcome whether it finishes or fails."""
    cfg = make_config(voice, language="english", encoding=config_pb2.AUDIO_ENCODING_PCM16, seed=seed,
                      min_frames=frames, max_frames=frames)
    words = TEXT.split(" ")
    started_s = time.monotonic()
    audio_ms, first_audio_s, code, details = 0.0, None, "OK", ""
    try:
        async for reply in client.stream([w + " " for w in words[:-1]] + [words[-1]], cfg, timeout_s=timeout_s):
            if reply.HasField("audio"):
                audio_ms += reply.audio.duration_ms
                first_audio_s = first_audio_s or time.monotonic()
    except grpc.aio.AioRpcError as exc:
        code, details = exc.code().name, exc.details() or ""
    return {"seed": seed, "code": code, "details": details, "started_s": started_s, "ended_s": time.monotonic(),
            "first_audio_s": first_audio_s, "audio_s": round(audio_ms / 1e3, 3), "expected_audio_s": frames / 12.5}


def _each_talker(ready: dict, timeout_s: float):
    """(replica name, its TalkerAdmin stats or None, a row with its error or None) per talker."""
    for name, info in sorted(ready["replicas"].items()):
        if info.get("role") != "talker":
            continue
        with grpc.insecure_channel(info["health"]) as channel:
            try:
                yield name, admin_pb2_grpc.TalkerAdminStub(channel).GetStats(admin_pb2.GetStatsRequest(),
                                                                             timeout=timeout_s), None
            except grpc.RpcError as exc:
                yield name, None, {"talker": name, "error": f"{exc.code().name}: {exc.details()}"}


def talker_view(ready: dict, timeout_s: float = 5.0) -> list[dict]:
    """Every talker's vocoder links: endpoint, healthy, streams it routed there (one row per talker
    and vocoder; a talker that does not answer is one row with its error)."""
    rows = []
    for name, stats, error in _each_talker(ready, timeout_s):
        rows += [error] if stats is None else [
            {"talker": name, "endpoint": v.endpoint, "is_healthy": v.is_healthy, "num_streams": v.num_streams,
             "last_heartbeat_age_ms": round(v.last_heartbeat_age_ms, 1)} for v in stats.vocoders]
    return rows


def talkers_load(ready: dict, timeout_s: float = 5.0) -> list[dict]:
    """Each talker's own load: its peer id and the streams it holds (in slots or queued)."""
    return [error if stats is None else
            {"talker": name, "peer_id": stats.peer_id, "num_started": stats.requests.num_started,
             "num_streams": stats.load.num_slots_used + stats.load.num_requests_queued}
            for name, stats, error in _each_talker(ready, timeout_s)]


def summarize(rows: list[dict], kill_s: float | None) -> dict:
    """Counts by status, audio received, and for the failed: when they ended relative to the kill."""
    out = {"num_streams": len(rows), "by_code": dict(Counter(r["code"] for r in rows)),
           "num_full_length": sum(r["code"] == "OK" and r["audio_s"] >= r["expected_audio_s"] - 1e-3 for r in rows),
           "messages": sorted({r["details"] for r in rows if r["code"] != "OK"})[:5]}
    failed = [r for r in rows if r["code"] != "OK"]
    if failed and kill_s is not None:
        after_kill_s = sorted(r["ended_s"] - kill_s for r in failed)
        out["failed_end_after_kill_s"] = {"min": round(after_kill_s[0], 3), "p50": round(after_kill_s[len(failed) // 2], 3),
                                          "max": round(after_kill_s[-1], 3)}
        out["failed_audio_s_received"] = {"min": min(r["audio_s"] for r in failed),
                                          "max": max(r["audio_s"] for r in failed)}
    return out


async def phase(target: str, args, seed0: int) -> list[dict]:
    """`args.streams` streams at once, to their ends."""
    async with TtsClient(target) as client:
        rows = await asyncio.wait_for(asyncio.gather(
            *(one_stream(client, seed0 + i, args.frames, args.voice, args.timeout_s) for i in range(args.streams))),
            args.timeout_s + 30)
    return list(rows)


async def kill_under_load(target: str, args, kill, victim_endpoint: str, ready: dict, compose_ready: Path) -> dict:
    """The `during` streams; the kill; then, as soon as the victim is dropped (a stream on it failed,
    or the talkers call the vocoder `victim_endpoint` unhealthy), the `after` streams, while the
    victim is still down (a replica restarts in seconds on a CPU, before long streams end)."""
    async with TtsClient(target) as client:
        def start(seed0: int) -> list[asyncio.Task]:
            return [asyncio.create_task(one_stream(client, seed0 + i, args.frames, args.voice, args.timeout_s))
                    for i in range(args.streams)]

        during = start(10_000)
        await asyncio.sleep(args.kill_after_s)
        killed = await asyncio.to_thread(kill)
        deadline_s = time.monotonic() + args.drop_timeout_s
        while time.monotonic() < deadline_s:
            if any(t.done() and t.result()["code"] != "OK" for t in during):
                break
            view = await asyncio.to_thread(talker_view, ready) if victim_endpoint else []
            if any(v.get("endpoint") == victim_endpoint and not v["is_healthy"] for v in view):
                break
            await asyncio.sleep(0.05)
        killed["after_started_s_after_kill"] = round(time.monotonic() - killed["kill_s"], 3)
        before = await asyncio.to_thread(collect_replicas, compose_ready, False)
        after = start(20_000)
        during_rows = await asyncio.wait_for(asyncio.gather(*during), args.timeout_s + 30)
        after_rows = await asyncio.wait_for(asyncio.gather(*after), args.timeout_s + 30)
    killed.update(during=list(during_rows), after=list(after_rows), before_after=before)
    return killed


def read_ready(path: Path) -> dict:
    return json.loads(path.read_text())


def poll_until(condition, timeout_s: float, interval_s: float = 0.2) -> float | None:
    """The monotonic time at which `condition()` first held; None if it did not within `timeout_s`."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        if condition():
            return time.monotonic()
        if time.monotonic() >= deadline_s:
            return None
        time.sleep(interval_s)


def wait_rejoined(path: Path, name: str, starts_before: int, timeout_s: float) -> float | None:
    """The monotonic time at which compose_run had started `name` again and it answered SERVING;
    None if that did not happen within `timeout_s`."""
    def is_back() -> bool:
        info = read_ready(path)["replicas"][name]
        return info.get("num_starts", 1) > starts_before and is_serving(info["health"], timeout_s=1.0)
    return poll_until(is_back, timeout_s, 0.5)


def gateway_healthy_talkers(address: str, metrics_port: int, timeout_s: float = 2.0) -> float | None:
    """The gateway's `tts_healthy_talkers` gauge from its Prometheus port; None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{address}:{metrics_port}/metrics", timeout=timeout_s) as reply:
            lines = reply.read().decode().splitlines()
    except OSError:
        return None
    return next((float(line.split()[1]) for line in lines if line.startswith("tts_healthy_talkers ")), None)


def is_healthy_at_peers(ready: dict, role: str, victim_endpoint: str, gateway_metrics_port: int) -> bool:
    """Whether the peers that send the restarted replica work count it healthy again: for a vocoder,
    every talker linked to it (`victim_endpoint`); for a talker, every gateway (all talkers healthy)."""
    if role == "vocoder":
        if not victim_endpoint:   # no talker linked to it before the kill: none to wait for
            return True
        links = [v for v in talker_view(ready) if v.get("endpoint") == victim_endpoint]
        return bool(links) and all(v["is_healthy"] for v in links)
    replicas = ready["replicas"].values()
    num_talkers = sum(1 for info in replicas if info.get("role") == "talker")
    return all(gateway_healthy_talkers(info["address"], gateway_metrics_port) == num_talkers
               for info in replicas if info.get("role") == "gateway")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compose-ready", type=Path, required=True, help="launcher.compose_run's ready file")
    p.add_argument("--kill", default="vocoder-1", help="the replica to SIGKILL (a talker or a vocoder)")
    p.add_argument("--streams", type=int, default=64, help="streams in each phase, all started together")
    p.add_argument("--frames", type=int, default=250, help="frames per stream (250 = 20 s of audio)")
    p.add_argument("--kill-after-s", type=float, default=3.0, help="seconds into the first phase")
    p.add_argument("--drop-timeout-s", type=float, default=15.0,
                   help="after the kill, start the next streams once the talker has dropped the replica, or after this")
    p.add_argument("--rejoin-timeout-s", type=float, default=300.0,
                   help="wait this long for the killed replica to be SERVING again (0: no rejoin phase)")
    p.add_argument("--healthy-timeout-s", type=float, default=30.0,
                   help="after the restart, wait this long for its peers to count it healthy before the rejoin phase")
    p.add_argument("--gateway-metrics-port", type=int, default=9090,
                   help="the gateways' Prometheus port (the compose files' --metrics-port): a restarted talker is "
                        "healthy again once every gateway's tts_healthy_talkers counts every talker")
    p.add_argument("--voice", default="vivian")
    p.add_argument("--timeout-s", type=float, default=300.0, help="each stream's gRPC deadline")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    ready = read_ready(args.compose_ready)
    if args.kill not in ready["replicas"]:
        p.error(f"no replica {args.kill!r} in {args.compose_ready}: {sorted(ready['replicas'])}")
    target, victim = ready["grpc_target"], ready["replicas"][args.kill]
    role = victim.get("role", "vocoder")
    if role not in ("talker", "vocoder"):
        p.error(f"--kill {args.kill}: a {role} replica; this kills a talker or a vocoder")
    result: dict = {"bench": "replica_kill", "commit": git_commit(ROOT), "killed": args.kill, "killed_role": role,
                    "streams_per_phase": args.streams, "frames": args.frames, "kill_after_s": args.kill_after_s,
                    "replicas": ready["replicas"], "phases": {}}

    def kill() -> dict:
        view, loads = talker_view(ready), talkers_load(ready)
        os.kill(victim["pid"], signal.SIGKILL)
        return {"kill_s": time.monotonic(), "talker_view_at_kill": view, "talkers_at_kill": loads}

    def splits(before: dict, now: dict) -> dict:
        return {"load_split": load_split(before, now, role), "talker_load_split": load_split(before, now, "talker")}

    before = collect_replicas(args.compose_ready, reset=False)
    victim_endpoint = "" if role == "talker" else next(
        (v["endpoint"] for v in talker_view(ready) if v.get("endpoint", "").startswith(f"tcp://{victim['address']}:")), "")
    run = asyncio.run(kill_under_load(target, args, kill, victim_endpoint, ready, args.compose_ready))
    now = collect_replicas(args.compose_ready, reset=False)
    result["phases"]["during"] = {"outcome": summarize(run["during"], run["kill_s"]), "rows": run["during"],
                                  "talker_view_at_kill": run["talker_view_at_kill"],
                                  "talkers_at_kill": run["talkers_at_kill"], **splits(before, now)}
    # the after streams' split: streams started (audio also counts the during streams' remainder)
    result["phases"]["after"] = {"outcome": summarize(run["after"], None), "rows": run["after"],
                                 "started_s_after_kill": run["after_started_s_after_kill"],
                                 **splits(run["before_after"], now), "talker_view": talker_view(ready)}
    at_kill = run["talkers_at_kill"] if role == "talker" else run["talker_view_at_kill"]
    print("during:", json.dumps(result["phases"]["during"]["outcome"]), f"| {role}s at kill:", at_kill, flush=True)
    print(f"after (started {run['after_started_s_after_kill']} s after the kill):",
          json.dumps(result["phases"]["after"]["outcome"]), "| split:", result["phases"]["after"]["load_split"],
          flush=True)

    if args.rejoin_timeout_s > 0:
        rejoined_s = wait_rejoined(args.compose_ready, args.kill, victim.get("num_starts", 1), args.rejoin_timeout_s)
        result["kill_to_serving_again_s"] = None if rejoined_s is None else round(rejoined_s - run["kill_s"], 2)
        if rejoined_s is not None:
            print(f"{args.kill} SERVING again {result['kill_to_serving_again_s']} s after the kill", flush=True)
            # its peers (talkers or gateway) count it healthy at its first heartbeat over the new link
            healthy_s = poll_until(lambda: is_healthy_at_peers(ready, role, victim_endpoint, args.gateway_metrics_port),
                                   args.healthy_timeout_s)
            result["kill_to_healthy_at_peers_s"] = None if healthy_s is None else round(healthy_s - run["kill_s"], 2)
            if healthy_s is None:
                print(f"{args.kill}'s peers did not count it healthy within {args.healthy_timeout_s:g} s; "
                      "the rejoin phase runs anyway", flush=True)
            before = collect_replicas(args.compose_ready, reset=False)
            rows = asyncio.run(phase(target, args, 30_000))
            result["phases"]["rejoin"] = {"outcome": summarize(rows, None), "rows": rows,
                                          **splits(before, collect_replicas(args.compose_ready, reset=False)),
                                          "talker_view": talker_view(ready)}
            print("rejoin:", json.dumps(result["phases"]["rejoin"]["outcome"]), "| split:",
                  result["phases"]["rejoin"]["load_split"], flush=True)
        else:
            print(f"{args.kill} was not SERVING again within {args.rejoin_timeout_s:g} s", flush=True)
    out = args.out or "replica_kill.json"
    Path(out).write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
