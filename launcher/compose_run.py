"""Run a compose file of this project on one host without Docker (see launcher.compose_plan).

    python -m launcher.compose_run deploy/compose/multi-gpu.yml --ready-file stack.json
    python -m launcher.compose_run deploy/compose/single-gpu.yml --set device=cpu --set model=tiny

Starts every replica in dependency order with the compose file's commands and environment, waits
until each answers its compose health check (SERVING) within the deadline, writes the gateway's
gRPC target to the ready file, and on SIGTERM / Ctrl-C stops them in reverse order, each within its
`stop_grace_period`. A replica whose service has a `restart` policy (the project's files say
`unless-stopped`) is started again when it dies, as the container engine would, on the same
addresses (launcher.supervisor: backoff, crash-loop limit); the ready file is rewritten with its new
pid once it is ready. A replica with `restart: "no"` that exits, or one in a crash loop, stops the
whole run (exit 1).
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

from launcher.compose_plan import ComposePlan, ReplicaPlan, load_plan
from launcher.processes import Child
from launcher.supervisor import CrashLoop, RestartPolicy, Supervisor

logger = logging.getLogger(__name__)
HEALTH_POLL_S = 0.2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m launcher.compose_run", description=__doc__.splitlines()[0])
    p.add_argument("compose_file", help="deploy/compose/single-gpu.yml or multi-gpu.yml")
    p.add_argument("--work-dir", help="logs, ready files and named volumes (default: a new temp dir)")
    p.add_argument("--ready-file", help="JSON with the gateway's gRPC target, written once all are SERVING")
    p.add_argument("--health-timeout-s", type=float, default=900.0,
                   help="deadline for every replica to be SERVING (weights load, graphs capture)")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="replace a flag's value wherever a command has it, e.g. --set device=cpu (repeatable)")
    return p


def is_serving(target: str, timeout_s: float = 2.0) -> bool:
    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def start(plan: ComposePlan, work_dir: Path, deadline_s: float, stop: threading.Event) -> list[tuple[ReplicaPlan, Child]]:
    """Start every replica in order; each must write its ready file before the next one starts (a
    dependency's ports are then bound), then wait until all answer SERVING."""
    running: list[tuple[ReplicaPlan, Child]] = []
    try:
        for replica in plan.replicas:
            child = Child(replica.name, replica.module, replica.args, work_dir, env=replica.env)
            running.append((replica, child))
            child.wait_ready(deadline_s, stop.is_set)
        for replica, child in running:
            while not is_serving(replica.health_target):
                if not child.is_alive():
                    raise RuntimeError(f"{replica.name} exited with {child.proc.returncode}:\n{child.log_tail()}")
                if stop.is_set() or time.monotonic() > deadline_s:
                    raise TimeoutError(f"{replica.name} not SERVING at {replica.health_target} before the deadline")
                time.sleep(HEALTH_POLL_S)
            logger.info("%s SERVING at %s", replica.name, replica.health_target)
    except BaseException:
        stop_all(running)
        raise
    return running


def stop_all(running: list[tuple[ReplicaPlan, Child]]) -> None:
    """Reverse start order (gateway first, so it drains while the backends still run)."""
    for _, child in reversed(running):
        child.terminate()
    for replica, child in reversed(running):
        code = child.wait_or_kill(replica.stop_grace_s)
        logger.info("%s stopped (exit %s)", replica.name, code)


def run(args) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    overrides = dict(item.split("=", 1) for item in args.set)
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="qwen3-tts-compose-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    plan = load_plan(args.compose_file, work_dir, flag_overrides=overrides)
    for replica in plan.replicas:
        logger.info("%s: python -m %s %s  (address %s, env %s)", replica.name, replica.module, " ".join(replica.args),
                    replica.address, replica.env)
    try:
        running = start(plan, work_dir, time.monotonic() + args.health_timeout_s, stop)
    except (RuntimeError, TimeoutError) as exc:
        logger.error("%s", exc)
        return 1
    try:
        write_ready(args.ready_file, plan, work_dir, running)
        print(f"compose stack ready: gRPC {gateway_target(plan)}, logs in {work_dir}", flush=True)
        supervisor = Supervisor(RestartPolicy(ready_timeout_s=args.health_timeout_s),
                                on_ready=lambda child: write_ready(args.ready_file, plan, work_dir, running))
        for replica, child in running:
            if replica.restarts:
                supervisor.add(child, pin=lambda info: [])   # compose flags fix every address already
        while not stop.wait(HEALTH_POLL_S):
            supervisor.poll()
            for replica, child in running:
                if not replica.restarts and not child.is_alive():
                    logger.error("%s exited with %s and its restart policy is \"no\"; stopping:\n%s", replica.name,
                                 child.proc.returncode, child.log_tail())
                    return 1
        return 0
    except CrashLoop as exc:
        logger.error("%s", exc)
        return 1
    finally:
        stop_all(running)


def gateway_target(plan: ComposePlan) -> str:
    gateways = [r for r in plan.replicas if r.role == "gateway"]
    return gateways[0].health_target if gateways else ""


def write_ready(path: str | None, plan: ComposePlan, work_dir: Path, running: list[tuple[ReplicaPlan, Child]]) -> None:
    """The gateway's target and every replica's pid and addresses (a restart changes the pid)."""
    if not path:
        return
    ready = {"grpc_target": gateway_target(plan), "work_dir": str(work_dir),
             "replicas": {r.name: {"pid": c.proc.pid, "address": r.address, "health": r.health_target,
                                   "role": r.role, "num_starts": c.num_starts,
                                   "cuda_visible_devices": r.env.get("CUDA_VISIBLE_DEVICES", "")}
                          for r, c in running}}
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(ready))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s compose_run: %(message)s")
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
