"""Real service processes for the tests: `python -m <module>` on loopback, waited for through its
ready file, stopped or killed in the fixture's finally. No tests here.

Start-up, the ready-file wait and the log tail are the launcher's own `Child` (one copy of that
logic); this adds timeouts relative to now and the hard kill a teardown wants. Every wait has a
deadline.
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from launcher.processes import Child

KILL_WAIT_S = 10.0


def is_alive(pid: int) -> bool:
    """Whether process `pid` still exists (a zombie counts: it has not been reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def free_port() -> int:
    """A loopback TCP port nobody listens on right now (racy by nature; fine for tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dead_port() -> Iterator[int]:
    """A loopback port that stays dead while the block runs: bound (so no process under test can be
    handed it by a bind to port 0) but never listening (so connecting to it is refused)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


class ServiceProcess:
    """One process under test; its output goes to `<work_dir>/<name>.log`, its ready file next to it."""

    def __init__(self, work_dir: Path, name: str, module: str, args: list[str]) -> None:
        self.child = Child(name, module, args, work_dir)
        self.proc = self.child.proc
        self.ready_file = self.child.ready_file
        self.info: dict = {}

    def wait_ready(self, timeout_s: float) -> dict:
        """The ready file's JSON; RuntimeError if the process exits first, TimeoutError after `timeout_s`."""
        self.info = self.child.wait_ready(time.monotonic() + timeout_s)
        return self.info

    def log_tail(self, num_chars: int = 6000) -> str:
        return self.child.log_tail(num_chars)

    def kill(self) -> None:
        """SIGKILL (no drain) and reap; safe to call again or after the process has exited."""
        if self.child.is_alive():
            self.proc.kill()
        self.child.wait_or_kill(KILL_WAIT_S)

    def stop(self, timeout_s: float) -> int:
        """SIGTERM (a clean shutdown), SIGKILL if it is still running after `timeout_s`; the exit code."""
        self.child.terminate()
        return self.child.wait_or_kill(timeout_s)


@contextlib.contextmanager
def ready_with_channel(proc: ServiceProcess, timeout_s: float) -> Iterator[ServiceProcess]:
    """`proc` once its ready file is there, with `proc.channel` open on its gRPC side port; the
    channel closed and the process killed when the block ends (a start-up failure too)."""
    import grpc

    try:
        proc.wait_ready(timeout_s)
        proc.channel = grpc.insecure_channel(f"127.0.0.1:{proc.info['grpc_port']}")
        try:
            yield proc
        finally:
            proc.channel.close()
    finally:
        proc.kill()


class VocoderProcess(ServiceProcess):
    def __init__(self, work_dir: Path, args: list[str]) -> None:
        super().__init__(work_dir, "vocoder", "vocoder_service", args)


class TalkerProcess(ServiceProcess):
    def __init__(self, work_dir: Path, args: list[str]) -> None:
        super().__init__(work_dir, "talker", "talker_service", args)


class LauncherProcess(ServiceProcess):
    """`python -m launcher`: its children's logs and ready files land in the same `work_dir`."""

    def __init__(self, work_dir: Path, args: list[str]) -> None:
        # The launcher serves HTTP on 8000 by default; tests ask for a port (0) or none, never a fixed one.
        http = [] if any(a.startswith("--http-port") for a in args) else ["--http-port", "-1"]
        # Registered voices in the work dir, not the user's ~/.cache default that every stack (and
        # parallel test workers) would share across runs.
        voices = [] if any(a.startswith("--gateway-arg=--voices-dir") for a in args) else [
            f"--gateway-arg=--voices-dir={work_dir / 'voices'}"]
        super().__init__(work_dir, "launcher", "launcher", ["--work-dir", str(work_dir), *http, *voices, *args])


def http_stack(work_dir: Path, *extra_args: str) -> LauncherProcess:
    """The tiny stack on CPU with the gateway's HTTP face on a free port (one thread per model
    service: tests share two cores); its ready file then names `http_url`."""
    return LauncherProcess(work_dir, ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "-1",
                                      "--health-timeout-s", "120", "--drain-grace-s", "2",
                                      "--vocoder-arg=--cpu-threads=1", "--talker-arg=--cpu-threads=1", *extra_args])
