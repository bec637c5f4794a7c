"""A vocoder step that takes in messages between its batches (issue #36).

At 256 streams on an H200 a new stream's first frames waited for the step in progress (20-45 ms,
several batches) and then for their own step. With `VocoderEngine.between_batches` set, the engine
queues at most `batches_in_flight` batches at a time and, after each read-back, calls the hook (the
server reads its socket) and plans the first chunks that became ready before the step's batches not
queued yet. Streams may end meanwhile (an abort, a rejected entry): their rows are left out, and a
slot they freed may already serve a new stream.

The fake decoder is exact and stateful (tests/test_vocoder_engine.py): any lost, doubled or
misplaced frame, or a slot not reset before a new stream's first decode, changes the audio.
"""
from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import zmq

from test_vocoder_engine import SPF, FakeRunner, drain, offline
from vocoder_service.engine.batcher import ReadyRow, plan_batches
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.engine import VocoderEngine
from vocoder_service.server import loop as loop_module


class OrderRunner(FakeRunner):
    """Logs each reset and decode (a decode runs when it is launched: its place is its launch)."""

    def __init__(self, max_slots):
        super().__init__(max_slots)
        self.log = []

    def reset(self, slots):
        self.log.append(("reset", sorted(int(s) for s in slots)))
        super().reset(slots)

    def decode(self, codes, slots, lengths):
        self.log.append(("decode", sorted(int(s) for s in slots)))
        return super().decode(codes, slots, lengths)


def make(max_slots=8, in_flight=1, **kw):
    # no launch cost: rows of one frame bucket split into the captured sizes, so a step has batches
    cfg = VocoderEngineConfig(max_slots=max_slots, samples_per_frame=SPF, sample_rate_hz=int(SPF * 12.5),
                              launch_cost_row_frames=0.0, batches_in_flight=in_flight, fill_padding=False, **kw)
    runner = OrderRunner(max_slots)
    clock = [0.0]
    return VocoderEngine(runner, cfg, clock=lambda: clock[0]), runner, clock


def codes_for(seed, n):
    return np.random.default_rng(seed).integers(0, 2048, (n, 16))


def collect(outs, got):
    for o in got:
        outs.setdefault(o.request_id, []).append(o)


def audio(outs, rid):
    return np.concatenate([o.pcm for o in outs[rid]])


def test_a_stream_that_arrives_mid_step_starts_before_the_step_s_batches_not_yet_queued():
    eng, runner, _ = make(in_flight=1)
    want = {f"s{i}": codes_for(i, 6) for i in range(3)}
    for rid, c in want.items():
        eng.open(rid)
        eng.add_frames(rid, 0, c[:2])
    # three first chunks of 2 frames: 2 + 1 rows, two batches
    assert [b.batch_size for b in plan_batches([ReadyRow(r, 0, 2, True, False) for r in want], eng.config.chunk,
                                               eng.batch_sizes, 0.0)] == [2, 1]
    want["late"] = codes_for(9, 6)
    calls = []

    def hook():
        calls.append(len(runner.log))
        if len(calls) == 1:   # after the first batch's read-back, a new stream's first two frames came
            eng.open("late")
            eng.add_frames("late", 0, want["late"][:2])

    eng.between_batches = hook
    outs = {}
    sent = []
    collect(outs, eng.step(on_outputs=sent.extend))
    late_slot = eng.streams["late"].slot
    # the step's first batch, then the late stream's reset and first chunk, then the step's second batch
    assert runner.log == [("reset", [0, 1, 2]), ("decode", [0, 1]), ("reset", [late_slot]),
                          ("decode", [late_slot]), ("decode", [2])]
    assert [o.request_id for o in sent] == ["s0", "s1", "late", "s2"]   # each batch's chunks as it is read
    assert eng.between_batch_rows == 1 and len(calls) == 2              # no look after the step's last batch
    for rid, c in want.items():
        eng.add_frames(rid, 1, c[2:], is_final=True)
    drain(eng, outs)
    for rid, c in want.items():
        assert np.array_equal(audio(outs, rid), offline(c)), rid
    assert eng.num_active == 0 and eng.slots.num_free == 8


def test_a_stream_that_ends_mid_step_is_left_out_and_its_slot_serves_a_new_one():
    eng, runner, _ = make(in_flight=1)
    want = {f"s{i}": codes_for(10 + i, 4) for i in range(3)}
    for rid, c in want.items():
        eng.open(rid)
        eng.add_frames(rid, 0, c[:2])
    victim_slot = eng.streams["s2"].slot      # its row is in the step's second batch
    want["next"] = codes_for(20, 4)
    runner.state[:] = 0.0

    def hook():
        if "s2" in eng.streams:
            assert eng.abort("s2", "client went away")
            eng.open("next")                  # takes the slot s2 just freed
            assert eng.streams["next"].slot == victim_slot
            eng.add_frames("next", 0, want["next"][:2])
            runner.state[victim_slot] = 99.0  # what s2's decode would have left there

    eng.between_batches = hook
    outs = {}
    collect(outs, eng.step())
    assert "s2" not in outs                   # its row was dropped at launch: nothing decoded for it
    decodes = [slots for kind, slots in runner.log if kind == "decode"]
    assert decodes == [[0, 1], [victim_slot]]  # next's first chunk; s2's batch left out whole
    assert ("reset", [victim_slot]) in runner.log[2:]
    for rid in ("s0", "s1", "next"):
        eng.add_frames(rid, 1, want[rid][2:], is_final=True)
    drain(eng, outs)
    for rid in ("s0", "s1", "next"):
        assert np.array_equal(audio(outs, rid), offline(want[rid])), rid
    assert eng.num_active == 0 and eng.slots.num_free == 8


def test_without_the_hook_every_batch_is_queued_before_the_first_is_read():
    class Launching(OrderRunner):
        def launch(self, codes, slots, lengths):
            self.log.append(("launch", sorted(int(s) for s in slots)))
            pcm = FakeRunner.decode(self, codes, slots, lengths)
            log = self.log

            class Pending:
                is_graph = False

                def wait(self):
                    log.append(("read", sorted(int(s) for s in slots)))
                    return pcm
            return Pending()

    def order(hook, in_flight):
        cfg = VocoderEngineConfig(max_slots=8, samples_per_frame=SPF, sample_rate_hz=int(SPF * 12.5),
                                  launch_cost_row_frames=0.0, batches_in_flight=in_flight, fill_padding=False)
        runner = Launching(8)
        eng = VocoderEngine(runner, cfg, clock=lambda: 0.0)
        eng.between_batches = hook
        for i in range(7):   # 7 first chunks of 2 frames: several batches
            eng.open(f"s{i}")
            eng.add_frames(f"s{i}", 0, codes_for(i, 2))
        eng.step()
        return [kind for kind, _ in runner.log if kind != "reset"]

    n = len(plan_batches([ReadyRow(f"s{i}", i, 2, True, False) for i in range(7)],
                         VocoderEngineConfig().chunk, [1, 2, 4, 8], 0.0))
    assert n >= 3
    assert order(None, 1) == ["launch"] * n + ["read"] * n
    assert order(lambda: None, 1) == ["launch", "read"] * n
    assert order(lambda: None, 2) == ["launch", "launch"] + ["read", "launch"] * (n - 2) + ["read", "read"]


@pytest.mark.parametrize("seed", range(6))
def test_random_arrivals_frames_and_aborts_between_batches_keep_every_stream_exact(seed):
    rng = random.Random(seed)
    eng, runner, clock = make(max_slots=6, in_flight=rng.choice([1, 2]))
    want, sent, active, aborted = {}, {}, set(), set()
    todo = list(range(24))

    def act():   # what a talker's messages do, between steps or between a step's batches
        if todo and eng.num_active < 6 and rng.random() < 0.5:
            rid = f"r{todo.pop()}"
            want[rid] = codes_for(rng.randrange(1 << 30), rng.randint(1, 40))
            eng.open(rid)
            sent[rid] = 0
            active.add(rid)
        for rid in list(active):
            r = rng.random()
            if r < 0.05:
                eng.abort(rid, "gone")
                active.discard(rid)
                aborted.add(rid)
            elif r < 0.6:
                k = min(rng.randint(1, 5), len(want[rid]) - sent[rid])
                final = sent[rid] + k == len(want[rid])
                seq = eng.streams[rid].next_seq
                eng.add_frames(rid, seq, want[rid][sent[rid]:sent[rid] + k], is_final=final)
                sent[rid] += k
                if final:
                    active.discard(rid)

    eng.between_batches = lambda: act() if rng.random() < 0.7 else None
    outs = {}
    while todo or active:
        act()
        clock[0] += rng.random() * 0.1
        collect(outs, eng.step())
    drain(eng, outs)
    assert eng.num_active == 0 and eng.slots.num_free == 6
    for rid, codes in want.items():
        chunks = outs.get(rid, [])
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        got = np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)
        if rid in aborted:   # what it got before the abort, exactly
            assert np.array_equal(got, offline(codes)[:len(got)]), rid
        else:
            assert chunks[-1].is_final and np.array_equal(got, offline(codes)), rid


class RecordingServer:
    """What receive_between_batches uses: a real ROUTER and a dispatch that records."""

    def __init__(self, router) -> None:
        self.recv_from_talkers = router
        self.sockets_lock = threading.Lock()
        self.config = type("Config", (), {"max_messages_per_poll": 4})()
        self.got = []

    def dispatch(self, identity, body) -> None:
        assert self.sockets_lock.locked()
        self.got.append(body[0].bytes)


def test_the_server_reads_what_is_queued_between_batches_without_waiting():
    context = zmq.Context()
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        receive = loop_module.VocoderServer.receive_between_batches
        server = RecordingServer(router)
        receive(server)                        # nothing queued: back at once
        assert server.got == []
        for i in range(6):
            dealer.send_multipart([b"m%d" % i])
        while len(server.got) < 6:
            assert router.poll(5000)
            before = len(server.got)
            receive(server)
            assert len(server.got) - before <= 4   # at most max_messages_per_poll a look
        assert server.got == [b"m%d" % i for i in range(6)]
    finally:
        router.close(0)
        dealer.close(0)
        context.term()
