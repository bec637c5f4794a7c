"""The metrics plumbing the talker and vocoder share (service_common/metrics.py): the busy clock
behind `qwen3_tts_{talker,vocoder}_busy_ratio` on a clock the test moves, under a reader on
another thread, and the HTTP endpoint's bind, failure and stop; the launcher pins a restarted
child's metrics port."""
from __future__ import annotations

import socket
import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from launcher.main import PINS
from metrics_support import scrape
from service_common.metrics import BusyClock, MetricFamilies, MetricsServer
from service_common.startup import StartupError


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def busy_step(busy: BusyClock, clock: FakeClock, seconds: float, worked: bool = True) -> None:
    busy.begin()
    clock.now += seconds
    busy.end(worked)


def test_an_idle_loop_reads_zero_and_a_step_its_share_of_the_window():
    clock = FakeClock()
    busy = BusyClock(10.0, clock)
    clock.now = 10.0
    assert busy.ratio() == 0.0 and busy.total_s() == 0.0
    busy_step(busy, clock, 2.0)                 # busy 10 -> 12
    assert busy.ratio() == pytest.approx(0.2) and busy.total_s() == pytest.approx(2.0)
    clock.now = 13.0
    busy_step(busy, clock, 0.5)                 # busy 13 -> 13.5
    assert busy.ratio() == pytest.approx(0.25)  # (2 + 0.5) of the 10 s up to 13.5


def test_steps_that_found_nothing_to_do_are_not_busy():
    clock = FakeClock()
    busy = BusyClock(10.0, clock)
    for _ in range(5):
        busy_step(busy, clock, 1.0, worked=False)
    assert busy.ratio() == 0.0 and busy.total_s() == 0.0


def test_before_a_whole_window_has_passed_the_share_is_of_the_time_so_far():
    clock = FakeClock(100.0)
    busy = BusyClock(10.0, clock)
    busy_step(busy, clock, 1.0)
    clock.now += 1.0
    assert busy.ratio() == pytest.approx(0.5)


def test_the_window_slides_and_the_counter_keeps_its_total():
    clock = FakeClock()
    busy = BusyClock(10.0, clock)
    clock.now = 10.0
    busy_step(busy, clock, 2.0)                 # busy 10 -> 12
    clock.now = 21.0                            # window (11, 21]: half of that step is still in it
    assert busy.ratio() == pytest.approx(0.1)
    clock.now = 22.0
    assert busy.ratio() == 0.0                  # slid out entirely
    clock.now = 40.0
    assert busy.ratio() == 0.0 and busy.total_s() == pytest.approx(2.0)


def test_a_step_in_progress_counts_in_the_ratio_and_in_the_total_once_it_ends():
    clock = FakeClock()
    busy = BusyClock(10.0, clock)
    clock.now = 50.0
    busy.begin()
    clock.now = 55.0
    assert busy.ratio() == pytest.approx(0.5) and busy.total_s() == 0.0
    clock.now = 80.0                            # a loop stuck in one step reads wholly busy
    assert busy.ratio() == 1.0
    busy.end()
    assert busy.total_s() == pytest.approx(30.0) and busy.ratio() == 1.0
    clock.now = 85.0
    assert busy.ratio() == pytest.approx(0.5)


def test_the_window_must_be_positive():
    with pytest.raises(ValueError, match="window_s"):
        BusyClock(0.0)


def test_a_reader_thread_sees_a_ratio_within_bounds_and_a_total_that_never_goes_back():
    busy = BusyClock(0.05)
    stop = threading.Event()
    seen: list[tuple[float, float]] = []

    def read() -> None:
        while not stop.is_set():
            seen.append((busy.ratio(), busy.total_s()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            busy.begin()
            time.sleep(0.0005)
            busy.end(worked=True)
            busy.begin()
            busy.end(worked=False)
    finally:
        stop.set()
        reader.join(timeout=5)
    assert not reader.is_alive() and len(seen) > 100
    assert all(0.0 <= ratio <= 1.0 for ratio, _ in seen)
    totals = [total for _, total in seen]
    assert totals == sorted(totals) and totals[-1] > 0
    assert max(ratio for ratio, _ in seen) > 0.1   # the loop above is mostly asleep in busy steps


class OneGauge:
    def collect(self):
        families = MetricFamilies("qwen3_tts_test_")
        families.gauge("answer", "a constant", 42.0)
        families.counter("events", "a count", 7)
        return families.families


def test_the_endpoint_serves_its_registry_refuses_a_taken_port_and_frees_its_own_on_stop():
    registry = CollectorRegistry()
    registry.register(OneGauge())
    server = MetricsServer(registry, "127.0.0.1", 0)
    try:
        assert server.port > 0
        values = scrape(server.port)
        assert values["qwen3_tts_test_answer"] == 42.0 and values["qwen3_tts_test_events_total"] == 7.0
        with pytest.raises(StartupError, match=f"metrics port 127.0.0.1:{server.port} could not be bound"):
            MetricsServer(registry, "127.0.0.1", server.port)
    finally:
        server.stop()
    with socket.socket() as again:   # nothing listens there any more
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", server.port))


@pytest.mark.parametrize("role, endpoint_key", [("vocoder", "codes_endpoint"), ("talker", "requests_endpoint")])
def test_a_restarted_backend_keeps_its_metrics_port_when_it_had_one(role, endpoint_key):
    info = {endpoint_key: "tcp://127.0.0.1:7000", "grpc_port": 7001, "metrics_port": 7002}
    assert PINS[role](info)[-2:] == ["--metrics-port", "7002"]
    assert "--metrics-port" not in PINS[role](info | {"metrics_port": 0})   # off: nothing to pin
