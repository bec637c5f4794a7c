"""Child processes of the local stack: start with a ready file, wait with a deadline, restart with
extra arguments (the supervisor pins the ports the first run bound), stop in order."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from service_common.startup import StartupError, startup_error_line

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]


class Child:
    """One service process; its output goes to `<work_dir>/<name>.log`."""

    def __init__(self, name: str, module: str, args: list[str], work_dir: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.ready_file = work_dir / f"{name}.ready.json"
        self.log_path = work_dir / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.env = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1")
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p)
        self.command = [sys.executable, "-m", module, "--ready-file", str(self.ready_file), *args]
        self.num_starts = 0
        self.info: dict = {}
        self.proc = self._spawn([])

    def _spawn(self, extra_args: list[str]) -> subprocess.Popen:
        self.ready_file.unlink(missing_ok=True)
        self.info = {}
        command = self.command + extra_args   # later flags win: extra_args override the first run's
        self.num_starts += 1
        logger.info("starting %s: %s", self.name, " ".join(command))
        # Own process group: a terminal Ctrl-C reaches the launcher only, which then stops the
        # children in order (gateway first, so it can drain while the backends still run).
        return subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def restart(self, extra_args: list[str]) -> None:
        """Start the process again (the old one must have exited); its log continues."""
        if self.is_alive():
            raise RuntimeError(f"{self.name} is still running (pid {self.proc.pid}); it cannot be restarted")
        if self.log.closed:
            self.log = open(self.log_path, "ab")
        self.log.write(f"\n---- launcher: start #{self.num_starts + 1} of {self.name} ----\n".encode())
        self.log.flush()
        self.proc = self._spawn(extra_args)

    def exit_description(self) -> str:
        """"exited with 1", "killed by SIGKILL", or "running"."""
        code = self.proc.poll()
        if code is None:
            return "running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with {code}"

    def startup_error(self) -> str | None:
        """The child's one-line start-up error (a taken port, no such model) once it exited with one."""
        return startup_error_line(self.proc.poll(), self.log_tail)

    def poll_ready(self) -> dict | None:
        """The ready file's JSON once the process wrote it (kept in `info`); None before."""
        if not self.info and self.ready_file.exists():
            self.info = json.loads(self.ready_file.read_text())
            logger.info("%s ready: %s", self.name, self.info)
        return self.info or None

    def wait_ready(self, deadline_s: float, should_stop=lambda: False) -> dict:
        while time.monotonic() < deadline_s and not should_stop():
            if self.proc.poll() is not None:
                if (line := self.startup_error()) is not None:   # the same arguments would fail again
                    raise StartupError(f"{self.name} could not start: {line}")
                raise RuntimeError(f"{self.name} {self.exit_description()} before it was ready:\n"
                                   f"{self.log_tail()}")
            if self.poll_ready() is not None:
                return self.info
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not ready before the deadline:\n{self.log_tail()}")

    def log_tail(self, num_chars: int = 3000) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")[-num_chars:]

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        if self.is_alive():
            self.proc.send_signal(signal.SIGTERM)

    def wait_or_kill(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop in %.1f s; killing it", self.name, timeout_s)
            self.proc.kill()
            return self.proc.wait(timeout=10)
        finally:
            self.log.close()
