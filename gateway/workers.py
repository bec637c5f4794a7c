"""`python -m gateway --workers N`: N gateway processes serving one gRPC port (and one HTTP port).

One gateway is one Python event loop, and a burst of word-by-word streams fills it first: at 256
streams on an H200 a wave of calls waited up to ~1.5 s between the client opening a call and the
gateway starting it with one process, p95 18-58 ms with four (benchmarks/results/
2026-11-28-gapless2-h200.md). The workers bind their ports with SO_REUSEPORT and the kernel gives
each whole connections, so under compose, Helm or the launcher one flag spreads the gateway over
cores. A client that multiplexes all its streams on one connection still reaches one worker.

This process only supervises: it starts worker 0 (which binds the ports, any free one for port 0),
then the others on the same ports; each worker has its own audio endpoint and metrics port (a
fixed port p becomes p + its index: the vocoders push PCM to the worker that asked, by address).
Its ready file holds worker 0's ports and every worker's pid; every worker's /metrics serves all
workers' values together (a shared PROMETHEUS_MULTIPROC_DIR), and each log line says which worker
wrote it. SIGTERM / SIGINT are passed on (each worker drains its own streams); a worker that dies
ends the group with exit status 1, so the orchestrator (compose, Kubernetes, the launcher) restarts
the whole gateway.
"""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from gateway.config import GatewayConfig
from service_common.process import write_ready_file
from service_common.startup import EXIT_STARTUP_ERROR, StartupError

logger = logging.getLogger(__name__)
POLL_S = 0.1
READY_TIMEOUT_S = 300.0
_PORT = re.compile(r":(\d+)$")


def shifted_port(port: int, index: int) -> int:
    """A fixed port p as worker `index`'s p + index; 0 (any free) and -1 (off) as they are."""
    return port + index if port > 0 else port


def shifted_endpoint(endpoint: str, index: int) -> str:
    """tcp://host:5801 as worker `index`'s tcp://host:(5801 + index); a wildcard port or an empty
    endpoint as it is."""
    match = _PORT.search(endpoint)
    if not endpoint or match is None:
        return endpoint
    return endpoint[:match.start()] + f":{int(match.group(1)) + index}"


def for_worker(config: GatewayConfig) -> GatewayConfig:
    """The config a worker runs: its own audio endpoint and metrics port by its index."""
    i = config.worker_index
    if i == 0:
        return config
    return replace(config, audio_bind=shifted_endpoint(config.audio_bind, i),
                   audio_advertise=shifted_endpoint(config.audio_advertise, i),
                   metrics_port=shifted_port(config.metrics_port, i))


def _terminate_with_parent() -> None:
    """In the child before exec: Linux delivers SIGTERM to it when its parent (this supervisor)
    dies, so a supervisor killed outright leaves no worker behind (elsewhere: nothing)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Worker:
    def __init__(self, index: int, argv: list[str], ports: list[str], ready_dir: Path) -> None:
        self.index = index
        self.ready_file = ready_dir / f"worker-{index}.ready.json"
        # their metrics together: every worker's /metrics serves all workers' values (gateway/metrics.py)
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(ready_dir / "metrics"))
        # later flags win: the supervisor's own flags (and --workers N) are overridden per worker
        command = [sys.executable, "-m", "gateway", *argv, "--workers", "1", "--worker-index", str(index),
                   "--reuse-port", "--ready-file", str(self.ready_file), *ports]
        # its logs go where ours go (the container's output); it gets SIGTERM if we die, even by SIGKILL
        self.proc = subprocess.Popen(command, env=env, preexec_fn=_terminate_with_parent)

    def wait_ready(self, deadline_s: float, stop: threading.Event) -> dict:
        while time.monotonic() < deadline_s and not stop.is_set():
            if self.ready_file.exists():
                return json.loads(self.ready_file.read_text())
            if self.proc.poll() is not None:
                if self.proc.returncode == EXIT_STARTUP_ERROR:   # its one-line reason is on stderr already
                    raise StartupError(f"gateway worker {self.index} could not start (its error is above)")
                raise RuntimeError(f"gateway worker {self.index} exited with {self.proc.returncode} while starting")
            time.sleep(POLL_S)
        raise RuntimeError(f"gateway worker {self.index} was not ready in time")


def supervise(config: GatewayConfig, argv: list[str]) -> int:
    """Run `config.workers` worker processes until SIGTERM / SIGINT or until one dies."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    workers: list[_Worker] = []
    try:
        with tempfile.TemporaryDirectory(prefix="gateway-workers-") as ready_dir:
            (Path(ready_dir) / "metrics").mkdir()
            deadline_s = time.monotonic() + READY_TIMEOUT_S
            first = _Worker(0, argv, ["--grpc-port", str(config.grpc_port), "--http-port", str(config.http_port)],
                            Path(ready_dir))
            workers.append(first)
            info = first.wait_ready(deadline_s, stop)
            ports = ["--grpc-port", str(info["grpc_port"]), "--http-port", str(info["http_port"])]
            workers += [_Worker(i, argv, ports, Path(ready_dir)) for i in range(1, config.workers)]
            infos = [info] + [w.wait_ready(deadline_s, stop) for w in workers[1:]]
            if stop.is_set():
                return 0
            if config.ready_file:
                write_ready_file(config.ready_file, {**info, "pid": os.getpid(), "workers": infos})
            logger.info("gateway: %d workers on gRPC port %d (pids %s)", len(workers), info["grpc_port"],
                        ", ".join(str(w.proc.pid) for w in workers))
            while not stop.wait(POLL_S):
                dead = [w for w in workers if w.proc.poll() is not None]
                if dead:
                    logger.error("gateway worker %d (pid %d) exited with %s: stopping the others", dead[0].index,
                                 dead[0].proc.pid, dead[0].proc.returncode)
                    return 1
            return 0
    finally:
        _stop_all(workers, config.drain_grace_s)


def _stop_all(workers: list[_Worker], grace_s: float) -> None:
    """SIGTERM to every live worker (each drains for up to grace_s), SIGKILL to any that overstays."""
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGTERM)
    deadline_s = time.monotonic() + grace_s + 10.0
    for worker in workers:
        try:
            worker.proc.wait(timeout=max(0.1, deadline_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.warning("gateway worker %d did not stop in time: killed", worker.index)
            worker.proc.kill()
            worker.proc.wait()
