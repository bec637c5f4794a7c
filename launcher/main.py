"""`python -m launcher`: vocoder, talker and gateway on one machine, ready when health says SERVING.

    python -m launcher                       # tiny checkpoint on CPU, gRPC on 127.0.0.1:50051
    python -m launcher --model Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice --device cuda

Backends bind free loopback ports; the launcher passes each one's endpoint (from its ready file)
to the next. A child that dies is restarted on the same ports with backoff while the others keep
serving (launcher/supervisor.py); one that keeps dying (--max-restarts within --restart-window-s)
stops the stack with its log tail and exit status 1. A child that fails on its first start with a
start-up error (taken port, no such model: service_common/startup.py) is not retried: the
launcher prints that child's one line and exits 2, never "stack ready". Ctrl-C / SIGTERM stops
the gateway first (it drains live streams for --drain-grace-s), then the talker, then the vocoder.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from launcher.processes import Child
from launcher.supervisor import CrashLoop, RestartPolicy, Supervisor
from service_common.memory_sizing import shared_gpu_fractions
from service_common.startup import run_main

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m launcher", description="Start the Qwen3-TTS stack locally.")
    p.add_argument("--model", default="tiny", help="checkpoint dir, hub id, or an embedded tiny name")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 (talker and vocoder share it)")
    p.add_argument("--host", default="127.0.0.1", help="address the gateway's gRPC port listens on")
    p.add_argument("--grpc-port", type=int, default=50051, help="gateway port; 0 picks a free one")
    p.add_argument("--metrics-port", type=int, default=0, help="Prometheus port; 0 picks a free one, -1 off")
    p.add_argument("--http-port", type=int, default=8000,
                   help="OpenAI-compatible HTTP API, WebSocket and page (on --host); 0 picks a free one, -1 off")
    p.add_argument("--gateway-workers", type=int, default=0,
                   help="the gateway's --workers: processes sharing its gRPC and HTTP ports (SO_REUSEPORT: the kernel "
                        "spreads client connections among them; one Python event loop is what a burst of word-by-word "
                        "streams saturates first). 0 (default): 4 on a GPU (at most a quarter of the host's cores), "
                        "1 on CPU")
    p.add_argument("--health-timeout-s", type=float, default=600.0, help="deadline for the stack to be SERVING")
    p.add_argument("--drain-grace-s", type=float, default=10.0)
    p.add_argument("--work-dir", help="logs and ready files (default: a new temp dir)")
    p.add_argument("--ready-file", help="JSON with the gateway address, written once SERVING")
    p.add_argument("--max-restarts", type=int, default=5,
                   help="restarts of one child within --restart-window-s before the whole stack stops")
    p.add_argument("--restart-window-s", type=float, default=60.0)
    p.add_argument("--restart-backoff-s", type=float, default=0.5,
                   help="delay before a dead child's restart; doubles with each recent restart (at most 10 s)")
    for role in ("vocoder", "talker", "gateway"):
        p.add_argument(f"--{role}-arg", action="append", default=[], metavar="ARG",
                       help=f"extra argument for the {role} process (repeatable), e.g. --{role}-arg=--max-slots=8")
    return p


def wait_serving(target: str, deadline_s: float, children: list[Child]) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        last = "unreachable"
        while time.monotonic() < deadline_s:
            for child in children:
                if not child.is_alive():
                    raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{child.log_tail()}")
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
            except grpc.RpcError as exc:
                last = exc.code().name
            time.sleep(0.1)
    raise TimeoutError(f"gateway {target} not SERVING before the deadline (last: {last})")


def metrics_pin(info: dict) -> list[str]:
    """The bound Prometheus port, when the child serves one (every role reports it, 0 when off;
    talker and vocoder serve one when asked: --vocoder-arg=--metrics-port=0)."""
    return ["--metrics-port", str(info["metrics_port"])] if (info.get("metrics_port") or 0) > 0 else []


# Arguments that bring a restarted child back on the addresses its first run bound (later flags
# win). The gateway's audio PULL endpoint may change: each request tells its vocoder where to push.
PINS = {
    "vocoder": lambda info: ["--bind", info["codes_endpoint"], "--grpc-port", str(info["grpc_port"]),
                             *metrics_pin(info)],
    "talker": lambda info: ["--bind", info["requests_endpoint"], "--grpc-port", str(info["grpc_port"]),
                            *metrics_pin(info)],
    "gateway": lambda info: ["--grpc-port", str(info["grpc_port"]), *metrics_pin(info)] + (
        ["--http-port", str(info["http_port"])] if (info.get("http_port") or 0) > 0 else []),
}


def default_gateway_workers(device: str, num_cpus: int | None = None) -> int:
    """4 gateway processes beside a GPU stack, at most a quarter of the host's cores (H200, 256
    word-by-word streams in a closed loop: a call waited p95 1.19 s between the client opening it and
    the gateway starting it with one process, 0.02-0.06 s with four); 1 on CPU, where the model
    services need the cores."""
    if not device.startswith("cuda"):
        return 1
    return max(1, min(4, (num_cpus or os.cpu_count() or 1) // 4))


def memory_share(device: str, role: str) -> list[str]:
    """Talker and vocoder share the launcher's one GPU: each gets its part (a --<role>-arg given
    later on the command line still wins)."""
    if not device.startswith("cuda"):
        return []
    return ["--gpu-memory-fraction", str(shared_gpu_fractions()[role])]


def stream_limit(talker_info: dict) -> list[str]:
    """The gateway admits what the talker can hold: its slots plus its queue; beyond that a call
    is refused RESOURCE_EXHAUSTED at once instead of queueing where nothing can serve it."""
    if "max_slots" not in talker_info:
        return []
    return ["--max-streams", str(talker_info["max_slots"] + talker_info["max_queued"])]


def write_ready(path: str | None, ready: dict, children: list[Child]) -> None:
    if not path:
        return
    ready["pids"] = {c.name: c.proc.pid for c in children}
    for child in children:   # a gateway with workers: the supervisor above, each worker here
        for index, worker in enumerate(child.info.get("workers") or []):
            ready["pids"][f"{child.name}-worker-{index}"] = worker["pid"]
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(ready))
    os.replace(tmp, path)


def stop_all(children: list[Child], grace_s: float) -> None:
    """Gateway first (drains), then talker, then vocoder; each is killed if it overstays."""
    for child in reversed(children):
        child.terminate()
        code = child.wait_or_kill(grace_s + 5.0 if child.name == "gateway" else 15.0)
        logger.info("%s stopped (exit %s)", child.name, code)


def run(args) -> int:
    from checkpoint.files import resolve_model_dir  # may generate the tiny checkpoint (torch) once

    try:
        policy = RestartPolicy(max_restarts=args.max_restarts, window_s=args.restart_window_s,
                               backoff_s=args.restart_backoff_s, ready_timeout_s=args.health_timeout_s)
    except ValueError as exc:
        logger.error("%s", exc)
        return 2
    if args.gateway_workers < 0:
        logger.error("--gateway-workers must be 0 (automatic) or more, got %d", args.gateway_workers)
        return 2
    args.gateway_workers = args.gateway_workers or default_gateway_workers(args.device)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    model_dir = resolve_model_dir(args.model)
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="qwen3-tts-stack-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    deadline_s = time.monotonic() + args.health_timeout_s
    common = ["--model", str(model_dir), "--device", args.device, "--bind", "tcp://127.0.0.1:*", "--grpc-port", "0"]
    children: list[Child] = []
    try:
        vocoder = Child("vocoder", "vocoder_service", common + memory_share(args.device, "vocoder") + args.vocoder_arg,
                        work_dir)
        children.append(vocoder)
        codes_endpoint = vocoder.wait_ready(deadline_s, stop.is_set)["codes_endpoint"]
        talker = Child("talker", "talker_service", common + memory_share(args.device, "talker") +
                       ["--vocoders", codes_endpoint] + args.talker_arg, work_dir)
        children.append(talker)
        talker_info = talker.wait_ready(deadline_s, stop.is_set)
        gateway = Child("gateway", "gateway", [   # (with --workers N it supervises its worker processes)
            "--model", str(model_dir), "--model-name", Path(args.model).name,
            "--talkers", talker_info["requests_endpoint"], *stream_limit(talker_info), "--workers", str(args.gateway_workers),
            "--grpc-host", args.host, "--grpc-port", str(args.grpc_port), "--metrics-port", str(args.metrics_port),
            "--metrics-host", args.host, "--http-port", str(args.http_port), "--http-host", args.host,
            "--drain-grace-s", str(args.drain_grace_s), *args.gateway_arg], work_dir)
        children.append(gateway)
        info = gateway.wait_ready(deadline_s, stop.is_set)
        target = f"{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{info['grpc_port']}"
        wait_serving(target, deadline_s, children)
        ready = {"grpc_target": target, "metrics_port": info["metrics_port"], "work_dir": str(work_dir)}
        http = ""
        if (info.get("http_port") or -1) >= 0:
            ready["http_url"] = f"http://{target.rsplit(':', 1)[0]}:{info['http_port']}"
            http = f", HTTP {ready['http_url']} (page at /, OpenAI API at /v1)"
        write_ready(args.ready_file, ready, children)
        print(f"stack ready: gRPC {target}{http}, metrics :{info['metrics_port']}, logs in {work_dir}", flush=True)
        print(f'try: python -m client "Hello from Qwen3 TTS." --target {target} -o hello.wav', flush=True)
        supervisor = Supervisor(policy, on_ready=lambda child: write_ready(args.ready_file, ready, children))
        for child in children:
            supervisor.add(child, PINS[child.name])
        while not stop.wait(0.2):
            supervisor.poll()
        logger.info("stopping: draining the gateway for up to %.1f s", args.drain_grace_s)
        return 0
    except (CrashLoop, RuntimeError, TimeoutError) as exc:
        logger.error("%s", exc)
        return 1
    finally:
        stop_all(children, args.drain_grace_s)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s launcher: %(message)s")
    args = build_parser().parse_args(argv)
    return run_main("python -m launcher", lambda: run(args))
