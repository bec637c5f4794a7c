"""`python -m gateway --workers N` on its own (gateway/workers.py): per-worker ports, a worker that
dies takes the group down (exit 1) so the orchestrator restarts it, a taken port is a start-up
error, and a supervisor killed outright leaves no worker behind."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from gateway.workers import for_worker, shifted_endpoint, shifted_port
from process_support import is_alive
from service_common.startup import EXIT_STARTUP_ERROR
from test_gateway_support import FakeTalker

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 60.0


def test_each_worker_has_its_own_audio_endpoint_and_metrics_port():
    assert shifted_endpoint("tcp://0.0.0.0:5801", 2) == "tcp://0.0.0.0:5803"
    assert shifted_endpoint("tcp://gateway:5801", 1) == "tcp://gateway:5802"
    assert shifted_endpoint("tcp://127.0.0.1:*", 3) == "tcp://127.0.0.1:*" and shifted_endpoint("", 3) == ""
    assert [shifted_port(p, 2) for p in (9090, 0, -1)] == [9092, 0, -1]
    config = GatewayConfig(audio_bind="tcp://0.0.0.0:5801", audio_advertise="tcp://gateway:5801", metrics_port=9090,
                           grpc_port=50051, http_port=8000, worker_index=3)
    worker = for_worker(config)
    assert (worker.audio_bind, worker.audio_advertise, worker.metrics_port) == (
        "tcp://0.0.0.0:5804", "tcp://gateway:5804", 9093)
    assert (worker.grpc_port, worker.http_port) == (50051, 8000)   # shared by all
    assert for_worker(GatewayConfig(metrics_port=9090)).metrics_port == 9090   # worker 0 as given
    with pytest.raises(ValueError, match="workers"):
        GatewayConfig(workers=0)


def start(tmp_path: Path, talker: FakeTalker, *extra: str) -> tuple[subprocess.Popen, Path]:
    ready = tmp_path / "gateway.ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--talkers", talker.endpoint, "--grpc-host", "127.0.0.1",
                             "--grpc-port", "0", "--metrics-port", "-1", "--http-port", "-1", "--workers", "2",
                             "--voices-dir", str(tmp_path / "voices"), "--drain-grace-s", "1",
                             "--ready-file", str(ready), *extra], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    return proc, ready


def wait_file(path: Path, proc: subprocess.Popen) -> dict:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the gateway group was not ready in time"
        time.sleep(0.1)
    return json.loads(path.read_text())


def test_a_worker_that_dies_ends_the_group_and_a_killed_supervisor_leaves_no_worker(tmp_path):
    talker = FakeTalker()
    try:
        proc, ready = start(tmp_path, talker)
        info = wait_file(ready, proc)
        pids = [w["pid"] for w in info["workers"]]
        assert len(pids) == 2 and info["pid"] == proc.pid
        os.kill(pids[1], signal.SIGKILL)
        assert proc.wait(timeout=30) == 1                  # the group ends: the orchestrator restarts it
        assert not any(is_alive(pid) for pid in pids)
        # a supervisor killed outright: its workers get SIGTERM from the kernel and drain
        (tmp_path / "again").mkdir()
        proc, ready = start(tmp_path / "again", talker)
        pids = [w["pid"] for w in wait_file(ready, proc)["workers"]]
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while any(is_alive(pid) for pid in pids):
            assert time.monotonic() < deadline, "workers outlived their supervisor"
            time.sleep(0.1)
    finally:
        talker.close()


def test_a_taken_port_is_a_start_up_error_of_the_group(tmp_path):
    talker = FakeTalker()
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        # the HTTP port is taken by a process that does not share it: worker 0 cannot bind it
        proc, _ = start(tmp_path, talker, "--http-port", str(port), "--http-host", "127.0.0.1")
        assert proc.wait(timeout=60) == EXIT_STARTUP_ERROR
        err = proc.stderr.read()
        assert f"127.0.0.1:{port}" in err and "could not start" in err
    finally:
        holder.close()
        talker.close()
