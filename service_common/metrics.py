"""Prometheus plumbing shared by the services: the HTTP endpoint and the busy clock of a service loop.

The endpoint is prometheus_client's own HTTP server, on a daemon thread of its own: a scrape never
runs on a loop that owns an engine. What it reports is read at scrape time by a custom collector
(talker_service/server/metrics.py, vocoder_service/server/metrics.py) from state the loop already
keeps; the loop's only extra work is `BusyClock.begin()` / `end()` around each engine step.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from service_common.startup import StartupError

logger = logging.getLogger(__name__)

# The sliding window of the busy ratios: one Prometheus scrape interval of the chart's
# ServiceMonitor (15 s), so successive scrapes cover all the time between them and overlap nowhere.
DEFAULT_BUSY_WINDOW_S = 15.0


class MetricsServer:
    """A running /metrics endpoint; `port` is the bound one (a request for port 0 picks a free one)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        try:
            self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise StartupError(f"metrics port {host}:{port} could not be bound: {exc.strerror or exc}") from None
        self.host = host
        self.port: int = self._httpd.server_address[1]
        logger.info("metrics on http://%s:%d/metrics", host, self.port)

    def stop(self) -> None:
        """Stops serving and closes the socket (waits for the server thread's poll, under a second)."""
        self._httpd.shutdown()
        self._httpd.server_close()


class BusyClock:
    """Wall time a service loop spends in engine steps that did work.

    The loop thread calls `begin()` before an engine step and `end(worked)` after it; any other
    thread may read `ratio()` (the busy share of the last `window_s` seconds, or of the time since
    this clock was made when that is shorter) and `total_s()` (lifetime busy seconds, for a
    Prometheus counter whose rate() is the same ratio over any range). A step still running counts
    in the ratio from its start, so a loop stuck in one long step reads busy; it counts in the total
    once it ends (a counter must never go back, and a step that found nothing to do is dropped).

    Costs the loop two clock reads, a lock and an append per busy step (one clock read per idle
    one); memory is one entry per busy step within the window.
    """

    def __init__(self, window_s: float = DEFAULT_BUSY_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._spans: deque[tuple[float, float]] = deque()   # finished busy steps (start, end), oldest first
        self._spans_s = 0.0                                 # their summed length
        self._total_s = 0.0
        self._open_since: float | None = None
        self._created_s = clock()

    def begin(self) -> None:
        self._open_since = self.clock()

    def end(self, worked: bool = True) -> None:
        """Closes the step `begin()` opened; `worked` False: it found nothing to do (idle, not counted)."""
        if not worked:   # the common idle turn: no clock read, no lock (one attribute store is atomic)
            self._open_since = None
            return
        now = self.clock()
        with self._lock:
            start, self._open_since = self._open_since, None
            if start is None:
                return
            self._spans.append((start, now))
            self._spans_s += now - start
            self._total_s += now - start
            self._prune(now - self.window_s)

    def total_s(self) -> float:
        with self._lock:
            return self._total_s

    def ratio(self) -> float:
        with self._lock:
            now = self.clock()
            window_start = now - self.window_s
            self._prune(window_start)
            busy_s = self._spans_s
            if self._spans and self._spans[0][0] < window_start:   # the oldest step began before the window
                busy_s -= window_start - self._spans[0][0]
            open_since = self._open_since   # read once: the loop sets it without the lock
            if open_since is not None:
                busy_s += now - max(open_since, window_start)
            elapsed_s = min(self.window_s, now - self._created_s)
        if elapsed_s <= 0:
            return 0.0
        return min(1.0, max(0.0, busy_s / elapsed_s))

    def _prune(self, window_start: float) -> None:
        while self._spans and self._spans[0][1] <= window_start:
            start, end = self._spans.popleft()
            self._spans_s -= end - start
        if not self._spans:
            self._spans_s = 0.0   # no drift from adding and taking away floats for ever


class MetricFamilies:
    """Builds the families of one scrape under a common name prefix (`qwen3_tts_vocoder_`)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.families: list = []

    def gauge(self, name: str, documentation: str, value: float) -> None:
        self.families.append(GaugeMetricFamily(self.prefix + name, documentation, value=value))

    def counter(self, name: str, documentation: str, value: float) -> None:
        """`name` without `_total`: the exposition adds it."""
        self.families.append(CounterMetricFamily(self.prefix + name, documentation, value=value))

    def busy(self, clock: BusyClock, steps: str, note: str = "") -> None:
        """busy_ratio, busy_seconds and busy_window_seconds of a loop's BusyClock; `steps`: what it times."""
        self.gauge("busy_ratio", f"Share of wall time the loop spent in {steps}, over the last {clock.window_s:g} s"
                   f"{note}", clock.ratio())
        self.counter("busy_seconds", f"Wall time spent in {steps} (rate() = busy ratio)", clock.total_s())
        self.gauge("busy_window_seconds", "Sliding window of busy_ratio", clock.window_s)


class ServerCollector(Collector):
    """A service's metrics, read at scrape time from its server object: one registry per instance
    (tests run several services in one process). The endpoint comes up before the model loads;
    until `attach(server)` the subclass reports only that it is not serving yet."""

    def __init__(self) -> None:
        self.server = None
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def attach(self, server) -> None:
        self.server = server
