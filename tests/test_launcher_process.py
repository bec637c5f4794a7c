"""`python -m launcher` supervising real processes on loopback (tiny checkpoint, CPU).

A backend killed with SIGKILL comes back on the same ports while the others keep running, and
the next request succeeds through it; a child that crashes on every restart (its port is taken)
stops the whole stack with its log tail and a non-zero exit.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path

import grpc
import pytest

from client import TtsClient, make_config
from process_support import LauncherProcess, is_alive
from protos.tts.v1 import config_pb2

pytestmark = pytest.mark.timeout(300)
READY_S = 100.0
BACK_S = 90.0


def launch(work: Path, *extra: str) -> LauncherProcess:
    return LauncherProcess(work, ["--grpc-port", "0", "--metrics-port", "-1", "--health-timeout-s", "90",
                                  "--drain-grace-s", "2", "--restart-backoff-s", "0.2",
                                  "--vocoder-arg=--cpu-threads=1", "--talker-arg=--cpu-threads=1", *extra])


def ready_of(work: Path, name: str) -> dict:
    path = work / f"{name}.ready.json"
    return json.loads(path.read_text()) if path.exists() else {}


def kill_leftovers(work: Path) -> None:
    """The launcher stops its children itself; this only covers a launcher that was killed."""
    for name in ("gateway", "talker", "vocoder"):
        pid = ready_of(work, name).get("pid")
        if pid and is_alive(pid):
            os.kill(pid, signal.SIGKILL)


def wait_for(condition, what: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for: {what}"
        time.sleep(0.1)
    return value


def synthesize_until_ok(target: str, timeout_s: float):
    """Requests fail UNAVAILABLE while peers notice the restart; the first success is returned."""
    cfg = make_config("vivian", language="english", encoding=config_pb2.AUDIO_ENCODING_FLOAT32, seed=3, max_frames=8)

    async def body():
        deadline = time.monotonic() + timeout_s
        async with TtsClient(target) as client:
            while True:
                try:
                    return await client.synthesize("Back again.", cfg, timeout_s=20)
                except grpc.aio.AioRpcError as exc:
                    if time.monotonic() > deadline or exc.code() not in (
                            grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                        raise
                await asyncio.sleep(0.3)

    return asyncio.run(asyncio.wait_for(body(), timeout_s + 30))


def test_a_killed_vocoder_or_talker_is_restarted_on_its_ports_and_the_next_request_succeeds(tmp_path):
    launcher = launch(tmp_path)
    try:
        stack = launcher.wait_ready(READY_S)
        assert synthesize_until_ok(stack["grpc_target"], 30).summary.num_frames == 8
        for name, endpoint_key in (("vocoder", "codes_endpoint"), ("talker", "requests_endpoint")):
            before = ready_of(tmp_path, name)
            gateway_pid = ready_of(tmp_path, "gateway")["pid"]
            os.kill(before["pid"], signal.SIGKILL)
            after = wait_for(lambda: (r := ready_of(tmp_path, name)) and r["pid"] != before["pid"] and r,
                             f"{name} restarted and ready", BACK_S)
            assert after[endpoint_key] == before[endpoint_key] and after["grpc_port"] == before["grpc_port"]
            response = synthesize_until_ok(stack["grpc_target"], BACK_S)
            assert response.summary.num_frames == 8 and len(response.audio) > 0
            assert launcher.proc.poll() is None and ready_of(tmp_path, "gateway")["pid"] == gateway_pid
        pids = json.loads(launcher.ready_file.read_text())["pids"]
        assert pids["talker"] == ready_of(tmp_path, "talker")["pid"]   # the stack file follows restarts
        log = launcher.log_tail(200_000)
        assert "vocoder (pid" in log and "killed by SIGKILL; restarting it" in log
        assert launcher.stop(40) == 0, launcher.log_tail()
    except BaseException:
        print(launcher.log_tail())
        raise
    finally:
        launcher.kill()
        kill_leftovers(tmp_path)


def test_a_child_that_crashes_on_every_restart_stops_the_stack_with_its_log_tail(tmp_path):
    launcher = launch(tmp_path, "--max-restarts", "2", "--restart-window-s", "120")
    blocker = socket.socket()
    try:
        launcher.wait_ready(READY_S)
        vocoder = ready_of(tmp_path, "vocoder")
        others = [ready_of(tmp_path, name)["pid"] for name in ("talker", "gateway")]
        os.kill(vocoder["pid"], signal.SIGKILL)
        # take its side port as soon as it is free: every restart then fails to bind and exits
        wait_for(lambda: _try_bind(blocker, vocoder["grpc_port"]), "the vocoder's port free to take", 10)
        code = launcher.proc.wait(timeout=120)
        log = launcher.log_tail(200_000)
        assert code != 0
        assert "vocoder exited with" in log and "after 2 restarts" in log
        assert "could not be bound" in log, log[-3000:]   # the child's own log tail, printed by the launcher
        assert not any(is_alive(pid) for pid in others)
    except BaseException:
        print(launcher.log_tail())
        raise
    finally:
        blocker.close()
        launcher.kill()
        kill_leftovers(tmp_path)


def _try_bind(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("0.0.0.0", port))   # no SO_REUSEADDR: nothing else can bind it while we hold it
    except OSError:
        return False
    return True
