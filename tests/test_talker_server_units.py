"""The talker server's components, each on its own: no model, no sockets, no loop.

Every component is handed its parts, so a recording outbox and a stand-in engine are enough to
check what goes on the wire when a request ends, frames are batched, a vocoder refuses frames, a
gateway goes silent, or a heartbeat is due.
"""
from __future__ import annotations

import queue

import numpy as np
import pytest
import zmq

from talker_service.engine import ErrorOut, FramesOut
from talker_service.server.emit import Emitter
from talker_service.server.gateways import GatewayPeers
from talker_service.server.heartbeats import HELLO_INTERVAL_S, Heartbeats
from talker_service.server.housekeeping import Housekeeping
from talker_service.server.routes import Route, RouteTable
from talker_service.server.vocoders import VocoderLink

GATEWAY = b"gw-1"
INTERVAL_MS = 1000


class RecordingOutbox:
    """The Outbox's methods, recording (kind, destination, ...) instead of sending."""

    def __init__(self, refuse_frames: bool = False) -> None:
        self.sent: list[tuple] = []
        self.refuse_frames = refuse_frames

    def to_gateway(self, identity, msg_type, header) -> bool:
        self.sent.append(("gateway", identity, msg_type.name, header))
        return True

    def error_to_gateway(self, identity, request_id, code, message) -> None:
        self.sent.append(("error", identity, request_id, code))

    def frames_to_vocoder(self, link, batch) -> None:
        if self.refuse_frames:
            raise zmq.Again()
        self.sent.append(("frames", link.endpoint, batch))

    def abort_to_vocoder(self, link, request_id, reason, message) -> None:
        self.sent.append(("abort", link.endpoint, request_id, reason))

    def heartbeat_to_vocoder(self, link, beat) -> None:
        self.sent.append(("beat", link.endpoint))

    def of_kind(self, kind: str) -> list[tuple]:
        return [s for s in self.sent if s[0] == kind]


class StandInEngine:
    def __init__(self, live=()) -> None:
        self.live = set(live)
        self.failed: list[tuple[str, str]] = []
        self.aborted: list[str] = []

    def fail(self, request_id, code, message):
        self.failed.append((request_id, code))
        if request_id in self.live:
            self.live.discard(request_id)
            return ErrorOut(request_id, code, message)
        return None

    def abort(self, request_id) -> bool:
        self.aborted.append(request_id)
        return self.live.discard(request_id) is None

    def load(self) -> dict:
        return {"num_slots_total": 4, "num_slots_used": len(self.live)}


class StandInLinks:
    def __init__(self, links) -> None:
        self.links = list(links)

    def num_healthy(self, now_s: float) -> int:
        return sum(link.last_heartbeat_s is not None for link in self.links)


class StandInLinksWithLiveness(StandInLinks):
    """What Housekeeping asks of VocoderLinks, with no DNS and no vocoder ever expiring."""

    def refresh(self) -> None:
        pass

    def expire(self, now_s: float) -> list:
        return []


def link(name: str, heard_s: float | None = 0.0) -> VocoderLink:
    return VocoderLink(f"tcp://{name}:1", socket=None, last_heartbeat_s=heard_s)


@pytest.fixture
def parts():
    outbox, engine, gateways = RecordingOutbox(), StandInEngine({"r1", "r2"}), GatewayPeers(timeout_s=10.0)
    gateways.touch(GATEWAY, 0.0)
    routes = RouteTable(engine, outbox, gateways)
    voc = link("voc-a")
    for rid in ("r1", "r2"):
        routes.add(Route(rid, GATEWAY, "tcp://gw:9", voc))
    return outbox, engine, gateways, routes, voc


def test_a_request_ends_once_even_when_failed_twice(parts):
    outbox, engine, gateways, routes, voc = parts
    routes.fail("r1", "INTERNAL", "boom")
    routes.fail("r1", "UNAVAILABLE", "again")
    assert outbox.of_kind("error") == [("error", GATEWAY, "r1", "INTERNAL")]
    assert outbox.of_kind("abort") == [("abort", voc.endpoint, "r1", "INTERNAL")]
    assert "r1" not in routes and voc.streams == {"r2"} and gateways.peers[GATEWAY].requests == {"r2"}


def test_a_lost_vocoder_fails_its_requests_without_telling_it(parts):
    outbox, engine, _, routes, voc = parts
    routes.fail_vocoder(voc, "went silent")
    assert sorted(e[2:] for e in outbox.of_kind("error")) == [("r1", "UNAVAILABLE"), ("r2", "UNAVAILABLE")]
    assert outbox.of_kind("abort") == [] and len(routes) == 0 and not engine.live


def test_abort_tells_only_the_vocoder(parts):
    outbox, engine, _, routes, voc = parts
    routes.abort("r1", "CANCELLED", "gateway went away")
    assert outbox.sent == [("abort", voc.endpoint, "r1", "CANCELLED")] and engine.aborted == ["r1"]


def test_deadlines_fail_only_the_late_request(parts):
    outbox, _, _, routes, _ = parts
    routes.get("r1").deadline_s = 5.0
    routes.fail_expired(4.0)
    assert outbox.sent == []
    routes.fail_expired(6.0)
    assert [e[2:] for e in outbox.of_kind("error")] == [("r1", "DEADLINE_EXCEEDED")] and "r2" in routes


def frames(rid: str, seq: int, num: int, is_final: bool = False) -> FramesOut:
    return FramesOut(rid, seq, np.full((num, 16), seq, np.int64), first_frame_index=seq, is_final=is_final)


def test_one_frames_message_per_vocoder_with_context_first_and_summary_last(parts):
    outbox, _, _, routes, voc = parts
    routes.get("r2").context_codes = np.full((3, 16), 7, np.int64)   # [K, 16] clone reference codes
    Emitter(routes, outbox).emit([frames("r1", 0, 2), frames("r2", 0, 1, is_final=True)])
    (sent,) = outbox.of_kind("frames")
    _, endpoint, batch = sent
    # Both streams open in this message, each under a new handle of this link; arrays name them by it.
    assert endpoint == voc.endpoint and [o.request_id for o in batch.opens] == ["r1", "r2"]
    assert [o.handle for o in batch.opens] == batch.handles == [1, 2] and batch.seqs == [0, 0]
    assert all(o.reply_to == "tcp://gw:9" for o in batch.opens)
    assert batch.opens[1].num_context_frames == 3 and batch.opens[0].num_context_frames == 0
    assert batch.num_frames == [2, 4] and batch.codes[1].shape == (4, 16) and (batch.codes[1][:3] == 7).all()
    assert [c.handle for c in batch.closes] == [2] and batch.closes[0].summary.num_frames == 1
    assert "r2" not in routes and "r1" in routes   # a finished request is forgotten, no ERROR sent
    assert outbox.of_kind("error") == []
    # Later steps carry no protobuf entry for a stream that neither opens nor ends.
    Emitter(routes, outbox).emit([frames("r1", 1, 1)])
    _, _, later = outbox.of_kind("frames")[1]
    assert (later.handles, later.seqs, later.num_frames, later.opens, later.closes) == ([1], [1], [1], [], [])


def test_a_step_over_two_vocoders_sends_each_its_own_streams_in_step_order(parts):
    """Streams of two vocoders interleaved in one step: the running frames (the emitter's short
    branch) and a final one each land in their own vocoder's one message, in the step's order."""
    outbox, engine, _, routes, voc = parts
    other = link("voc-b")
    for rid in ("r3", "r4"):
        engine.live.add(rid)
        routes.add(Route(rid, GATEWAY, "tcp://gw:9", other))
    emitter = Emitter(routes, outbox)
    emitter.emit([frames(rid, 0, 1) for rid in ("r1", "r3", "r2", "r4")])   # opens all four
    emitter.emit([frames("r3", 1, 1), frames("r1", 1, 1), frames("r4", 1, 1, is_final=True), frames("r2", 1, 2)])
    later = {endpoint: batch for _, endpoint, batch in outbox.of_kind("frames")[2:]}
    assert set(later) == {voc.endpoint, other.endpoint}
    a, b = later[voc.endpoint], later[other.endpoint]
    assert (a.handles, a.seqs, a.num_frames, a.opens, a.closes) == ([1, 2], [1, 1], [1, 2], [], [])
    assert (b.handles, b.seqs, b.num_frames, b.opens) == ([1, 2], [1, 1], [1, 1], [])
    assert [c.handle for c in b.closes] == [2] and "r4" not in routes and "r3" in routes
    assert [r.request_id for r in a.routes] == ["r1", "r2"] and [r.request_id for r in b.routes] == ["r3", "r4"]


def test_a_clone_admitted_opens_its_vocoder_stream_with_the_context_before_its_first_frame(parts):
    outbox, _, _, routes, voc = parts
    routes.get("r2").context_codes = np.full((3, 16), 7, np.int64)   # [K, 16] clone reference codes
    emitter = Emitter(routes, outbox)
    emitter.open_primed(["r1", "r2", "gone"])   # r1 has no context, "gone" no route: nothing for them
    (sent,) = outbox.of_kind("frames")
    _, endpoint, primed = sent
    assert endpoint == voc.endpoint and [o.request_id for o in primed.opens] == ["r2"]
    assert primed.opens[0].num_context_frames == 3 and primed.seqs == [0] and primed.num_frames == [3]
    assert (primed.codes[0] == 7).all() and primed.closes == []
    # The frames follow as seq 1, 2, ... with no second open and no context again.
    emitter.emit([frames("r1", 0, 2), frames("r2", 0, 1)])
    _, _, first = outbox.of_kind("frames")[1]
    assert [o.request_id for o in first.opens] == ["r1"] and first.opens[0].num_context_frames == 0
    assert first.handles == [2, 1] and first.seqs == [0, 1] and first.num_frames == [2, 1]
    emitter.emit([frames("r2", 1, 1, is_final=True)])
    _, _, last = outbox.of_kind("frames")[2]
    assert last.seqs == [2] and [c.handle for c in last.closes] == [1] and "r2" not in routes
    emitter.open_primed(["r2"])   # already ended: nothing more is sent
    assert len(outbox.of_kind("frames")) == 3


def test_stream_handles_count_up_per_link_and_wrap_past_zero():
    a, b = link("voc-a"), link("voc-b")
    assert [a.new_stream_handle() for _ in range(3)] == [1, 2, 3] and b.new_stream_handle() == 1
    a.last_stream_handle = 2**32 - 2
    assert [a.new_stream_handle() for _ in range(3)] == [2**32 - 1, 1, 2]   # uint32, never 0


def test_credits_count_streams_routed_but_not_yet_opened_across_heartbeats():
    """A burst of STARTs is spread by credits. Streams open with their first frame, often after a
    heartbeat: the vocoder's load cannot count them yet, so the link must, or the vocoder heard
    from last looks empty and takes the rest of the burst (2 x 128 slots refused streams at 256)."""
    from protos.tts.internal.v1 import common_pb2
    from talker_service.server.vocoders import VocoderLinks

    outbox, engine, gateways = RecordingOutbox(), StandInEngine(), GatewayPeers(timeout_s=10.0)
    routes = RouteTable(engine, outbox, gateways)
    context = zmq.Context()
    # literal addresses (no DNS thread) and no poller; the DEALERs connect to nothing and send nothing
    links = VocoderLinks(context, ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"], snd_hwm=10, timeout_s=3.0)
    idle = common_pb2.Heartbeat(load=common_pb2.Load(num_slots_total=8, num_slots_used=0))
    for voc in links.links:
        links.heartbeat(voc, idle, 0.0)
    for i in range(8):   # queued for talker slots: none opened yet
        routes.add(Route(f"r{i}", None, "tcp://gw:9", links.pick(0.5)))
    assert [len(v.streams) for v in links.links] == [4, 4] and [v.credits for v in links.links] == [4, 4]
    links.heartbeat(links.links[0], idle, 1.0)   # voc-a's load, taken before any stream opened
    assert links.links[0].credits == 4
    routes.add(Route("r8", None, "tcp://gw:9", links.pick(1.0)))
    assert [len(v.streams) for v in links.links] == [5, 4]   # a tie broken by list order, not a pile-up
    # Opening moves a stream from unopened to opened-since-heartbeat; the next heartbeat's load has it.
    Emitter(routes, outbox).emit([frames("r0", 0, 1)])
    voc_a = routes.get("r0").vocoder
    handle = routes.get("r0").vocoder_handle
    assert "r0" not in voc_a.unopened and list(voc_a.opens_in_flight) == [handle] and voc_a.credits == 3
    # a load taken while the open waited in the vocoder's socket: its slot is not free
    links.heartbeat(voc_a, common_pb2.Heartbeat(load=common_pb2.Load(num_slots_total=8, num_slots_used=0,
                                                                      last_open_handle=0)), 1.5)
    assert voc_a.credits == 3
    links.heartbeat(voc_a, common_pb2.Heartbeat(load=common_pb2.Load(num_slots_total=8, num_slots_used=1,
                                                                      last_open_handle=handle)), 2.0)
    assert voc_a.credits == 3 and not voc_a.opens_in_flight
    # a vocoder that does not name its last open (an older build): its load counts every open sent
    voc_a.opened("rx", 99)
    links.heartbeat(voc_a, common_pb2.Heartbeat(load=common_pb2.Load(num_slots_total=8, num_slots_used=2)), 2.5)
    assert not voc_a.opens_in_flight
    links.heartbeat(voc_a, common_pb2.Heartbeat(load=common_pb2.Load(num_slots_total=8, num_slots_used=1)), 2.6)
    waiting = sorted(voc_a.unopened)[0]
    routes.abort(waiting, "CANCELLED", "gone")   # an ended stream that never opened frees its credit
    assert voc_a.credits == 4 and waiting not in voc_a.unopened
    links.close(linger_ms=0)
    context.term()


def test_refused_frames_fail_every_request_of_that_vocoder(parts):
    outbox, _, _, routes, voc = parts
    outbox.refuse_frames = True
    Emitter(routes, outbox).emit([frames("r1", 0, 1, is_final=True)])
    assert sorted(e[2:] for e in outbox.of_kind("error")) == [("r1", "UNAVAILABLE"), ("r2", "UNAVAILABLE")]
    assert voc.last_heartbeat_s is None and len(routes) == 0
    assert not voc.opens_in_flight   # r1's open never left: it holds no slot there


def test_admin_outputs_go_to_their_queue_and_errors_to_the_gateway(parts):
    outbox, engine, _, routes, _ = parts
    sink: queue.Queue = queue.Queue()
    routes.add(Route("admin-1", sink=sink))
    Emitter(routes, outbox).emit([frames("admin-1", 0, 1, is_final=True), ErrorOut("r1", "OUT_OF_RANGE", "long")])
    assert sink.get_nowait().is_final and "admin-1" not in routes
    assert outbox.of_kind("error") == [("error", GATEWAY, "r1", "OUT_OF_RANGE")]


def heartbeats(outbox, links, gateways, draining=lambda: False) -> Heartbeats:
    return Heartbeats(outbox, StandInLinks(links), gateways, StandInEngine().load, draining,
                      peer_id="talker-1", model="tiny", interval_ms=INTERVAL_MS)


def test_heartbeat_every_period_to_all_peers_and_hellos_to_unheard_vocoders_between():
    outbox, gateways = RecordingOutbox(), GatewayPeers(10.0)
    gateways.touch(GATEWAY, 0.0)
    heard, unheard = link("heard"), link("unheard", heard_s=None)
    beats = heartbeats(outbox, [heard, unheard], gateways)
    beats.tick(10.0)
    assert [s[:2] for s in outbox.sent] == [("gateway", GATEWAY), ("beat", heard.endpoint), ("beat", unheard.endpoint)]
    beat = outbox.sent[0][3]
    assert beat.peer_id == "talker-1" and beat.interval_ms == INTERVAL_MS and beat.num_healthy_vocoders == 1
    outbox.sent.clear()
    for now_s in (10.05, 10.0 + HELLO_INTERVAL_S + 0.01, 10.0 + HELLO_INTERVAL_S + 0.05):
        beats.tick(now_s)
    assert outbox.sent == [("beat", unheard.endpoint)]   # one hello: the second came too soon
    outbox.sent.clear()
    beats.tick(11.0)
    assert len(outbox.of_kind("beat")) == 2 and len(outbox.of_kind("gateway")) == 1


def test_every_beat_carries_the_same_incarnation_and_the_draining_flag():
    outbox, gateways = RecordingOutbox(), GatewayPeers(10.0)
    is_draining = [False]
    beats = heartbeats(outbox, [], gateways, draining=lambda: is_draining[0])
    first = beats.beat(0.0)
    is_draining[0] = True
    second = beats.beat(1.0)
    assert first.incarnation == second.incarnation != 0 and not first.is_draining and second.is_draining


def test_a_silent_gateway_gets_its_requests_aborted_and_no_more_beats(parts):
    outbox, engine, gateways, routes, voc = parts
    beats = heartbeats(outbox, [voc], gateways)
    keeping = Housekeeping(StandInLinksWithLiveness([voc]), gateways, routes, beats,
                           gateway_check_interval_s=INTERVAL_MS / 1e3)
    keeping.run(9.5)   # last heard at 0.0, timeout 10 s: still there
    assert len(routes) == 2 and len(outbox.of_kind("gateway")) == 1
    outbox.sent.clear()
    keeping.run(10.2)   # gone by now, but gateways are judged once per heartbeat period, as before
    assert len(routes) == 2
    keeping.run(10.5)
    assert len(routes) == 0 and sorted(engine.aborted) == ["r1", "r2"]
    assert sorted(s[2:] for s in outbox.of_kind("abort")) == [("r1", "CANCELLED"), ("r2", "CANCELLED")]
    assert outbox.of_kind("gateway") == [] and outbox.of_kind("error") == []


def test_the_phase_clock_leaves_out_each_phase_s_device_waits(monkeypatch):
    from service_common.host_copy import WaitClock
    from talker_service.server import loop as loop_module
    now = [100.0]
    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: now[0])
    waits = WaitClock()
    phases = loop_module._PhaseClock(waits)
    now[0] += 0.002
    phases.lap("intake")                      # 2 ms of host work
    now[0] += 0.010
    waits.total_s += 0.009
    phases.lap("decode")                      # 10 ms, 9 of them waiting for the device
    now[0] += 0.0005
    phases.lap("emit")
    assert phases.laps_ms == pytest.approx({"intake": 2.0, "decode": 1.0, "emit": 0.5, "intake_in_wait": 0.0})
    assert phases.total_ms == pytest.approx(3.5)


def test_the_phase_clock_files_messages_read_inside_device_waits_under_a_phase_of_their_own(monkeypatch):
    from service_common.host_copy import WaitClock
    from talker_service.server import loop as loop_module
    now = [100.0]
    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: now[0])
    waits = WaitClock(while_waiting=lambda: False)
    phases = loop_module._PhaseClock(waits)
    now[0] += 0.010
    waits.total_s += 0.006
    waits.worked_s += 0.003
    phases.lap("prefill")                     # 10 ms: 6 waiting, 3 reading messages, 1 of its own
    now[0] += 0.004
    waits.total_s += 0.002
    waits.worked_s += 0.001
    phases.lap("decode")
    assert phases.laps_ms == pytest.approx({"prefill": 1.0, "decode": 1.0, "intake_in_wait": 4.0})
    assert phases.total_ms == pytest.approx(6.0)


def test_host_time_is_filed_in_total_by_phase_and_under_the_launched_batch_bucket():
    from talker_service.engine.stats import EngineStats
    stats = EngineStats()
    stats.add_host_time(1.5, {"intake": 0.5, "decode": 1.0}, 256)
    stats.add_host_time(0.8, {"intake": 0.3, "decode": 0.5}, 256)
    stats.add_host_time(0.4, {"intake": 0.4, "decode": 0.0}, 0)   # prompt chunks only, no decode
    assert stats.host_time.summary()["count"] == 3
    assert stats.host_phases["decode"].summary()["mean_ms"] == pytest.approx(0.5)
    assert {b: w.summary()["count"] for b, w in stats.host_by_batch.items()} == {256: 2, 0: 1}
    assert stats.host_by_batch[256].summary()["max_ms"] == pytest.approx(1.5)
    stats.reset_windows()
    assert stats.host_by_batch == {} and stats.host_time.summary()["count"] == 0


def test_the_engine_names_the_bucket_of_the_decode_it_launched():
    from test_talker_engine_support import add, make_engine, text_ids
    engine = make_engine(max_slots=8, batch_buckets=(2, 4), pad_to_buckets=False)
    for i in range(3):
        add(engine, f"r{i}", text_ids(60 + i, 3), 70 + i, max_new_tokens=8)
    engine.prefill_phase()
    engine.decode_phase()
    assert engine.launched_bucket == 4   # 3 rows: bucket 4, though this CPU engine does not pad to it
    assert engine.runner.bucket_for(3) == 3 and engine.runner.batch_bucket(5) == 8
    engine.abort("r0")
    engine.abort("r1")
    engine.prefill_phase()
    engine.decode_phase()
    assert engine.launched_bucket == 2   # one row: the smallest bucket
    engine.abort("r2")
    engine.prefill_phase()
    engine.decode_phase()
    assert engine.launched_bucket == 0   # nothing ran
