"""Gateway messages handled while the talker's loop waits for a device read-back (issue #36).

On a GPU the loop spends most of a step in `HostCopy.wait`; a wave of word-by-word calls queued
more messages than a turn's intake took, and STARTs waited behind them. Now the wait runs the
loop's `receive_while_waiting`. On CPU nothing waits, so these tests give each read-back a stand-in
event that is not done at the first look: the hook runs inside every read-back, as on a GPU.

- `HostCopy.wait` runs the hook until it has nothing (or the device is done) and books its time
  as work, not as waiting;
- the engine takes what the handlers do inside a read-back (a request queued, text added, a text
  ended, a request aborted) and every stream's codes are what they are alone;
- `receive_while_waiting` reads the vocoders first, then at most a batch of gateway messages.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import zmq

from service_common.host_copy import HostCopy, WaitClock
from talker_service.server import loop as loop_module
from test_talker_engine import alone
from test_talker_engine_support import Collector, add, make_engine, run_until_idle, text_ids
from test_vocoder_process_support import one_cpu_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


class NotDoneAt:
    """A CUDA event stand-in: not done for the first `num_busy` looks."""

    def __init__(self, num_busy: int = 1) -> None:
        self.num_busy, self.num_queries, self.num_syncs = num_busy, 0, 0

    def query(self) -> bool:
        self.num_queries += 1
        return self.num_queries > self.num_busy

    def synchronize(self) -> None:
        self.num_syncs += 1


@pytest.fixture
def busy_read_backs(monkeypatch):
    """Every HostCopy of a CPU tensor behaves as a device copy the first look finds unfinished."""
    made = []
    original = HostCopy.__init__

    def init(self, tensor):
        original(self, tensor)
        if self._done is None:
            self._host = torch.from_numpy(np.array(self._host))   # a copy the caller owns, as the pinned one
            self._done = NotDoneAt()
            made.append(self)

    monkeypatch.setattr(HostCopy, "__init__", init)
    return made


def test_wait_runs_the_hook_until_it_has_nothing_and_books_its_time_as_work(monkeypatch):
    from service_common import host_copy
    now = [10.0]
    monkeypatch.setattr(host_copy.time, "perf_counter", lambda: now[0])
    answers = [True, True, False, True]

    def hook() -> bool:
        now[0] += 0.001   # 1 ms of host work a call
        return answers.pop(0)

    clock = WaitClock(while_waiting=hook)
    copy = HostCopy(torch.arange(4))
    copy._host, copy._done = torch.arange(4), NotDoneAt(num_busy=10)
    assert copy.wait(clock).tolist() == [0, 1, 2, 3]
    assert answers == [True]                  # called until it said "nothing at hand"
    assert copy._done.num_syncs == 1          # then waited for the device as before
    assert clock.worked_s == pytest.approx(0.003) and clock.total_s == pytest.approx(0.0)


def test_wait_stops_calling_the_hook_once_the_device_is_done():
    calls = []
    clock = WaitClock(while_waiting=lambda: calls.append(1) or True)
    copy = HostCopy(torch.arange(3))
    copy._host, copy._done = torch.arange(3), NotDoneAt(num_busy=2)
    copy.wait(clock)
    assert len(calls) == 2                    # the hook always has more, the device decides
    plain = HostCopy(torch.arange(3))
    plain._host, plain._done = torch.arange(3), NotDoneAt(num_busy=2)
    plain.wait(WaitClock())                   # no hook: straight to the wait
    assert plain._done.num_queries == 0 and plain._done.num_syncs == 1


@pytest.mark.parametrize("async_decode", [False, True])
def test_requests_queued_fed_ended_and_aborted_inside_read_backs_keep_their_codes(busy_read_backs, async_decode):
    reference = make_engine(max_slots=4, async_decode=async_decode)
    ids_a, ids_c = text_ids(61, 8), text_ids(63, 5)
    expected_a = alone(reference, "a", ids_a, 21, max_new_tokens=30)
    expected_c = alone(reference, "c", ids_c, 23)
    busy_read_backs.clear()

    engine = make_engine(max_slots=4, async_decode=async_decode)
    feed_a = add(engine, "a", ids_a[:2], 21, max_new_tokens=30, close=False)   # its text drips in
    add(engine, "b", text_ids(62, 9), 22, max_new_tokens=40)
    done: list[str] = []

    def handlers() -> bool:   # what a gateway's messages do, one per read-back wait
        n = len(done)
        if n < 6:
            engine.push_text("a", ids_a[2 + n:3 + n])
            done.append("text a")
        elif n == 6:
            engine.end_text("a")
            done.append("end a")
        elif n == 7:
            add(engine, "c", ids_c, 23)
            done.append("start c")
        elif n == 8:
            frames_b = engine.scheduler.get("b").num_frames
            assert engine.abort("b")
            done.append(f"abort b at {frames_b}")
        return False

    engine.runner.wait_clock.while_waiting = handlers
    got = Collector()
    run_until_idle(engine, got)
    assert done[:8] == ["text a"] * 6 + ["end a", "start c"] and done[8].startswith("abort b")
    assert len(busy_read_backs) > 9           # the hook ran inside read-backs
    assert feed_a.is_closed
    assert np.array_equal(got.codes("a"), expected_a)
    assert np.array_equal(got.codes("c"), expected_c)
    frames_b_at_abort = int(done[8].rsplit(" ", 1)[1])
    assert "b" not in got.final and len(got.codes("b")) <= frames_b_at_abort + 1
    assert engine.load()["num_slots_used"] == 0
    engine.scheduler.check_invariants()


class RecordingServer:
    """The attributes receive_while_waiting uses: a real ROUTER, stand-in vocoders and dispatch."""

    def __init__(self, router: zmq.Socket) -> None:
        self.recv_from_gateways = router
        self.sockets_lock = threading.Lock()
        self.vocoders = type("Links", (), {"links": ["v1", "v2"]})()
        self.log: list = []
        self._is_in_wait_intake = False

    def receive_from_vocoder(self, link) -> None:
        self.log.append(("vocoder", link))

    receive_from_gateways = loop_module.TalkerServer.receive_from_gateways   # the one receive() uses too

    def dispatch_gateway(self, identity, body) -> None:
        assert self.sockets_lock.locked()
        self.log.append(("gateway", body[0].bytes))


def test_receive_while_waiting_reads_vocoders_first_then_a_batch_of_gateway_messages():
    context = zmq.Context()
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        num_sent = loop_module.WAIT_INTAKE_BATCH + 5
        for i in range(num_sent):
            dealer.send_multipart([b"m%d" % i])
        assert router.poll(5000)
        server = RecordingServer(router)
        receive = loop_module.TalkerServer.receive_while_waiting
        got = []
        while len(got) < num_sent:   # the rest may still be on its way: look until all came
            assert receive(server) or router.poll(5000)
            got = [body for kind, body in server.log if kind == "gateway"]
        assert got == [b"m%d" % i for i in range(num_sent)]
        assert server.log[:2] == [("vocoder", "v1"), ("vocoder", "v2")]
        first_batch = server.log[2:2 + loop_module.WAIT_INTAKE_BATCH]
        assert all(kind == "gateway" for kind, _ in first_batch)   # one batch a look, then the device is asked again
        assert server.log[2 + loop_module.WAIT_INTAKE_BATCH][0] == "vocoder"
        assert receive(server) is False        # nothing queued: the caller goes back to waiting
        server._is_in_wait_intake = True       # inside a handler of its own: no nested read
        dealer.send_multipart([b"late"])
        assert router.poll(5000)
        assert receive(server) is False and server.log[-1] != ("gateway", b"late")
    finally:
        router.close(0)
        dealer.close(0)
        context.term()
