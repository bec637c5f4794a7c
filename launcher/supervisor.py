"""Keeps the local stack's children running, as compose and Helm restart a crashed container.

A child that dies is restarted after a backoff (doubling with each recent restart) while the
others keep serving. It comes back on the same addresses: its first run bound free ports, and
every restart pins them (`pin`, from the first ready file), because its peers know it by them:
the talker reconnects to a vocoder endpoint on its own, the gateway to a talker endpoint, and
clients to the gateway's port. A child that needs more than `max_restarts` restarts within
`window_s`, or that is not ready again within `ready_timeout_s`, is a crash loop: `poll` raises
CrashLoop with its log tail, and the launcher stops the whole stack.

No threads: the launcher's loop calls `poll` every few hundred milliseconds, so a stop signal
is never kept waiting by a child that is slow to come back.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.processes import Child

logger = logging.getLogger(__name__)


class CrashLoop(RuntimeError):
    """A child keeps dying: the message names it and carries its log tail."""


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5            # within window_s; one more death stops the stack
    window_s: float = 60.0
    backoff_s: float = 0.5           # first restart's delay; doubles with each restart in the window
    max_backoff_s: float = 10.0
    ready_timeout_s: float = 600.0   # a restarted child not ready by then counts as crashed

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.window_s <= 0 or self.backoff_s < 0 or self.ready_timeout_s <= 0:
            raise ValueError(f"invalid restart policy: {self}")

    def delay_s(self, num_recent_restarts: int) -> float:
        return min(self.backoff_s * 2 ** num_recent_restarts, self.max_backoff_s)


@dataclass
class _Watch:
    child: Child
    pin: Callable[[dict], list[str]]        # first ready info -> arguments that keep its addresses
    pinned_args: list[str] = field(default_factory=list)
    restarts_s: deque = field(default_factory=deque)   # times of restarts inside the window
    restart_at_s: float | None = None       # dead, restart due then
    ready_by_s: float | None = None         # restarted, must be ready by then


class Supervisor:
    def __init__(self, policy: RestartPolicy, on_ready: Callable[[Child], None] = lambda child: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.on_ready = on_ready             # a restarted child is ready again (e.g. rewrite the stack file)
        self.clock = clock
        self.watches: list[_Watch] = []

    def add(self, child: Child, pin: Callable[[dict], list[str]]) -> None:
        """Supervise a child that is running and ready (its ready info gives the addresses to pin)."""
        self.watches.append(_Watch(child, pin, pin(child.info)))

    def poll(self) -> None:
        """Notice deaths, restart what is due, check restarted children got ready. CrashLoop when a
        child exceeds the policy."""
        now_s = self.clock()
        for watch in self.watches:
            self._poll_one(watch, now_s)

    def _poll_one(self, watch: _Watch, now_s: float) -> None:
        child, policy = watch.child, self.policy
        while watch.restarts_s and now_s - watch.restarts_s[0] > policy.window_s:
            watch.restarts_s.popleft()
        if watch.restart_at_s is not None:
            if now_s >= watch.restart_at_s:
                self._restart(watch, now_s)
            return
        if not child.is_alive():
            self._died(watch, now_s, child.exit_description())
            return
        if watch.ready_by_s is not None:
            if child.poll_ready() is not None:
                watch.ready_by_s = None
                logger.info("%s is back (pid %d, start #%d)", child.name, child.proc.pid, child.num_starts)
                self.on_ready(child)
            elif now_s > watch.ready_by_s:
                logger.error("%s not ready %.0f s after its restart; killing it", child.name, policy.ready_timeout_s)
                child.proc.kill()
                child.proc.wait(timeout=10)
                self._died(watch, now_s, f"not ready within {policy.ready_timeout_s:g} s")

    def _died(self, watch: _Watch, now_s: float, how: str) -> None:
        child, policy = watch.child, self.policy
        if len(watch.restarts_s) >= policy.max_restarts:
            raise CrashLoop(f"{child.name} {how} after {len(watch.restarts_s)} restarts within "
                            f"{policy.window_s:g} s (limit {policy.max_restarts}); stopping the stack. "
                            f"Last lines of {child.log_path}:\n{child.log_tail()}")
        delay_s = policy.delay_s(len(watch.restarts_s))
        logger.error("%s (pid %d) %s; restarting it in %.1f s on the same addresses. Last lines of its log:\n%s",
                     child.name, child.proc.pid, how, delay_s, child.log_tail(1500))
        watch.ready_by_s = None
        watch.restart_at_s = now_s + delay_s

    def _restart(self, watch: _Watch, now_s: float) -> None:
        watch.restart_at_s = None
        watch.restarts_s.append(now_s)
        watch.child.restart(watch.pinned_args)
        watch.ready_by_s = now_s + self.policy.ready_timeout_s
