"""The launcher's supervisor without processes: a fake child and a fake clock. Restarts with
backoff on the pinned addresses, resets as restarts leave the window, crash loops stop the stack
with the log tail, a restarted child that never gets ready counts as crashed."""
from __future__ import annotations

from pathlib import Path

import pytest

from launcher.supervisor import CrashLoop, RestartPolicy, Supervisor


class FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode = None

    def kill(self) -> None:
        self.returncode = -9

    def wait(self, timeout=None) -> int:
        return self.returncode


class FakeChild:
    def __init__(self, name: str = "vocoder") -> None:
        self.name = name
        self.log_path = Path(f"/nowhere/{name}.log")
        self.num_starts = 1
        self.proc = FakeProc(100)
        self.info = {"codes_endpoint": "tcp://127.0.0.1:7001", "grpc_port": 7002}
        self.restart_args: list[list[str]] = []
        self.is_ready = True

    def is_alive(self) -> bool:
        return self.proc.returncode is None

    def exit_description(self) -> str:
        return "running" if self.is_alive() else f"exited with {self.proc.returncode}"

    def crash(self, code: int = 1) -> None:
        self.proc.returncode = code

    def restart(self, extra_args: list[str]) -> None:
        assert not self.is_alive()
        self.restart_args.append(list(extra_args))
        self.num_starts += 1
        self.proc = FakeProc(100 + self.num_starts)
        self.is_ready = False

    def poll_ready(self):
        return self.info if self.is_ready else None

    def log_tail(self, num_chars: int = 3000) -> str:
        return "Traceback: boom"


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def pin(info: dict) -> list[str]:
    return ["--bind", info["codes_endpoint"], "--grpc-port", str(info["grpc_port"])]


def supervised(**policy):
    clock, child, readied = Clock(), FakeChild(), []
    sup = Supervisor(RestartPolicy(**policy), on_ready=readied.append, clock=clock)
    sup.add(child, pin)
    return sup, child, clock, readied


def test_a_dead_child_is_restarted_after_the_backoff_on_its_first_addresses():
    sup, child, clock, readied = supervised(backoff_s=0.5, max_restarts=3, window_s=60)
    sup.poll()
    assert child.restart_args == []
    child.crash()
    sup.poll()                       # death noticed: restart scheduled, not yet done
    assert child.restart_args == []
    clock.now_s = 0.4
    sup.poll()
    assert child.restart_args == []
    clock.now_s = 0.5
    sup.poll()
    assert child.restart_args == [["--bind", "tcp://127.0.0.1:7001", "--grpc-port", "7002"]]
    assert child.is_alive() and readied == []
    child.is_ready = True
    sup.poll()
    assert readied == [child]
    # the second death within the window waits twice as long
    child.crash()
    sup.poll()
    clock.now_s = 1.4
    sup.poll()
    assert len(child.restart_args) == 1
    clock.now_s = 1.5
    sup.poll()
    assert len(child.restart_args) == 2


def test_more_restarts_than_the_limit_within_the_window_is_a_crash_loop_with_the_log_tail():
    sup, child, clock, _ = supervised(backoff_s=0.0, max_restarts=2, window_s=60)
    for _ in range(2):
        child.crash()
        sup.poll()
        sup.poll()
        clock.now_s += 1
    assert len(child.restart_args) == 2
    child.crash()
    with pytest.raises(CrashLoop) as info:
        sup.poll()
    assert "vocoder exited with 1 after 2 restarts" in str(info.value) and "Traceback: boom" in str(info.value)


def test_restarts_that_left_the_window_no_longer_count():
    sup, child, clock, _ = supervised(backoff_s=0.0, max_restarts=1, window_s=10)
    child.crash()
    sup.poll()
    sup.poll()
    child.is_ready = True
    clock.now_s = 11.0               # up longer than the window: the restart is forgotten
    child.crash()
    sup.poll()
    sup.poll()
    assert len(child.restart_args) == 2


def test_a_restarted_child_not_ready_in_time_is_killed_and_counts_as_a_crash():
    sup, child, clock, _ = supervised(backoff_s=0.0, max_restarts=1, window_s=600, ready_timeout_s=30)
    child.crash()
    sup.poll()
    sup.poll()
    clock.now_s = 31.0
    with pytest.raises(CrashLoop, match="not ready within 30 s"):
        sup.poll()
    assert not child.is_alive()


def test_backoff_is_capped():
    policy = RestartPolicy(backoff_s=0.5, max_backoff_s=10.0)
    assert [policy.delay_s(n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    with pytest.raises(ValueError):
        RestartPolicy(max_restarts=-1)
