"""The vocoder's side of the array FRAMES format, in-process: no model, no talker, no gateway.

A `VocoderServer` with a stub runner gets raw FRAMES bodies through `dispatch` (exactly what its
loop hands it after the ROUTER envelope) and steps its engine; what it would send is recorded.
Every malformed message is refused with an ERROR naming the problem; the requests it can be traced
to fail (their gateway is told too); a stream that is not at fault - in the same message or not -
gets all of its audio, and the server goes on serving.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from protos import wire
from protos.pcm_split import split_pcm
from protos.tts.internal.v1 import common_pb2, vocoder_pb2
from vocoder_service.server.config import VocoderServiceConfig
from vocoder_service.server.loop import VocoderServer

SPF = 8            # samples per frame of the stub decoder
CODEBOOK = 2048
TALKER = b"talker-A"
OTHER = b"talker-B"
GATEWAY = "tcp://127.0.0.1:9"
DTYPES = {np.dtype("<u4"): common_pb2.DTYPE_UINT32, np.dtype("<i2"): common_pb2.DTYPE_INT16,
          np.dtype("<i4"): common_pb2.DTYPE_INT32, np.dtype("<f4"): common_pb2.DTYPE_FLOAT32,
          np.dtype("<u8"): common_pb2.DTYPE_UINT64}


class StubRunner:
    """Each frame decodes to SPF samples equal to its first code (so audio shows which frames came)."""

    samples_per_frame = SPF
    sample_rate_hz = 24000
    codebook_size = CODEBOOK
    last_step_is_graph = False

    def __init__(self) -> None:
        self.stats = SimpleNamespace(step_time=SimpleNamespace(recent_mean_ms=lambda: 0.0))

    def reset(self, slots) -> None:
        pass

    def decode(self, codes, slots, lengths) -> np.ndarray:
        return np.repeat(codes[:, 0, :].astype(np.float32), SPF, axis=1)   # [bs, t*SPF]


@dataclass
class Sent:
    to_talker: list = field(default_factory=list)    # (identity, request_id, code, message)
    to_gateway: list = field(default_factory=list)   # (reply_to, request_id, code, message)
    pcm: dict = field(default_factory=dict)          # request_id -> [PcmPart]

    def talker_errors(self, code: str | None = None) -> list:
        return [e for e in self.to_talker if code is None or e[2] == code]


@pytest.fixture
def vocoder():
    config = VocoderServiceConfig(bind="tcp://127.0.0.1:*", max_slots=8, first_chunk_frames=1, steady_chunk_frames=1,
                                  max_wait_ms=1.0, use_graphs=False)
    server = VocoderServer(config, StubRunner(), "stub")
    sent = Sent()
    server.outbox.error_to_talker = lambda identity, rid, code, message: sent.to_talker.append(
        (identity, rid, code, message)) or True
    server.outbox.error_to_gateway = lambda reply_to, rid, code, message: sent.to_gateway.append(
        (reply_to, rid, code, message)) or True
    server.outbox.heartbeat_to_talker = lambda *args: True

    def push(reply_to, frames):
        msg_type, header, arrays = wire.decode(frames)
        for part in split_pcm(header, arrays):
            sent.pcm.setdefault(part.request_id, []).append(part)

    server.outbox.pushes.send = push
    yield server, sent
    server.close()


def message(opens=(), closes=(), entries=(), talker_id="t") -> list:
    """A well-formed FRAMES body. opens: (handle, request_id[, num_context_frames]); closes: handles;
    entries: (handle, seq, codes [n, 16])."""
    header = vocoder_pb2.FramesChunk(talker_id=talker_id)
    for handle, rid, *context in opens:
        header.opens.add(handle=handle, request_id=rid, reply_to=GATEWAY, num_context_frames=context[0] if context else 0)
    for handle in closes:
        header.closes.add(handle=handle, summary=vocoder_pb2.GenerationSummary(num_frames=handle))
    rows = [np.asarray(c, np.int16).reshape(-1, 16) for _, _, c in entries]
    return wire.encode(wire.MessageType.FRAMES, header, wire.FramesArrays(
        wire.frames_entries([e[0] for e in entries], [e[1] for e in entries], [len(r) for r in rows]),
        np.concatenate(rows) if rows else np.zeros((0, 16), np.int16)))


def raw_message(header: vocoder_pb2.FramesChunk, arrays: list[np.ndarray]) -> list:
    """A FRAMES body whose array specs say exactly what `arrays` are, with no check at all."""
    header = vocoder_pb2.FramesChunk.FromString(header.SerializeToString())
    for array in arrays:
        header.arrays.add(dtype=DTYPES[array.dtype], shape=array.shape)
    return [b"FRAMES", header.SerializeToString(), *(array.tobytes() for array in arrays)]


def codes(value: int, num_frames: int = 1) -> np.ndarray:
    return np.full((num_frames, 16), value, np.int16)


def pump(server: VocoderServer, steps: int = 4) -> None:
    for _ in range(steps):
        server.emit(server.engine.step())


def audio(sent: Sent, rid: str) -> list[float]:
    """First sample of each frame the request got back (= the first code of that frame)."""
    parts = sent.pcm.get(rid, [])
    return [float(x) for p in parts for x in p.pcm[::SPF]]


def is_complete(sent: Sent, rid: str) -> bool:
    parts = sent.pcm.get(rid, [])
    return bool(parts) and parts[-1].is_final and [p.seq for p in parts] == list(range(len(parts)))


def open_steady_and_victim(server: VocoderServer) -> None:
    """Two streams of TALKER: 'steady' (handle 1) must never be disturbed, 'victim' (handle 2) may."""
    server.dispatch(TALKER, message(opens=[(1, "steady"), (2, "victim")], entries=[(1, 0, codes(10)), (2, 0, codes(20))]))


def finish_steady(server: VocoderServer, sent: Sent, seq: int) -> None:
    server.dispatch(TALKER, message(closes=[1], entries=[(1, seq, codes(12))]))
    pump(server)
    assert is_complete(sent, "steady"), sent.pcm.get("steady")
    assert audio(sent, "steady")[0] == 10 and audio(sent, "steady")[-1] == 12
    assert not [e for e in sent.to_gateway if e[1] == "steady"]
    assert sent.pcm["steady"][-1].generation.num_frames == 1   # FramesClose.summary made it through


def good_header() -> vocoder_pb2.FramesChunk:
    return vocoder_pb2.FramesChunk(talker_id="t")


def entries(*rows) -> np.ndarray:
    return np.array(rows, np.uint32).reshape(-1, 3)   # [E, 3]: handle, seq, num_frames


# Malformed array layouts: wire.decode refuses them; the victim, named by the entries frame, fails.
STRUCTURAL = {
    "entries not uint32": ([entries((2, 1, 1)).astype(np.float32), codes(1)],
                           "array 'entries' has dtype float32; expected one of: uint32"),   # names nobody
    "entries 64-bit": ([entries((2, 1, 1)).astype(np.uint64), codes(1)],   # read as uint32 it would name 2
                       "array 'entries' has dtype uint64; expected one of: uint32"),
    "entries two columns": ([np.array([[2, 1]], np.uint32), codes(1)],
                            "entries must be [rows, 3] (handle, seq, num_frames), got [1, 2]"),
    "entries one-dimensional": ([np.array([2, 1, 1], np.uint32), codes(1)],
                                "array 'entries' has shape (3,); expected 2 dimensions"),
    "codes float32": ([entries((2, 1, 1)), np.zeros((1, 16), np.float32)],
                      "array 'codes' has dtype float32; expected one of: int16, int32"),
    "codes one-dimensional": ([entries((2, 1, 1)), np.zeros(16, np.int16)],
                              "array 'codes' has shape (16,); expected 2 dimensions"),
    "codes 8 wide": ([entries((2, 1, 1)), np.zeros((1, 8), np.int16)], "codes must be [rows, 16], got [1, 8]"),
    "counts do not add up": ([entries((2, 1, 3)), codes(1, 2)], "num_frames add up to 3 rows but codes has 2"),
    "counts beyond uint32 sums": ([entries((2, 1, 2**32 - 1), (2, 2, 2)), codes(1)],
                                  "num_frames add up to 4294967297 rows but codes has 1"),
}


@pytest.mark.parametrize("case", list(STRUCTURAL))
def test_malformed_arrays_fail_the_named_request_only(vocoder, case):
    server, sent = vocoder
    open_steady_and_victim(server)
    arrays, problem = STRUCTURAL[case]
    server.dispatch(TALKER, raw_message(good_header(), arrays))
    (error,) = sent.talker_errors()
    # The entries frame names the victim, unless it is not the uint32 rows of 3 its spec must say.
    named = "" if case.startswith("entries") else "victim"
    assert error[:3] == (TALKER, named, "INVALID_ARGUMENT") and problem in error[3], error
    assert "malformed message" in error[3]
    if named:
        assert [e[1:3] for e in sent.to_gateway] == [("victim", "INVALID_ARGUMENT")]   # its gateway learns too
        assert "victim" not in server.engine.streams and "victim" not in server.intake.routes
    else:
        assert sent.to_gateway == [] and "victim" in server.engine.streams
    finish_steady(server, sent, seq=1)


def test_frames_whose_sizes_do_not_match_their_specs_are_refused(vocoder):
    server, sent = vocoder
    open_steady_and_victim(server)
    body = message(entries=[(2, 1, codes(21, 2))])
    server.dispatch(TALKER, [*body[:3], bytes(body[3])[:-2]])                  # codes frame 2 bytes short
    server.dispatch(TALKER, body[:3])                                          # codes frame missing
    header = vocoder_pb2.FramesChunk.FromString(bytes(body[1]))
    del header.arrays[1]
    server.dispatch(TALKER, [body[0], header.SerializeToString(), *body[2:]])  # 1 spec for 2 frames
    messages = [e[3] for e in sent.talker_errors()]
    assert "array 'codes' frame has 62 bytes; header says int16[2, 16] = 64 bytes" in messages[0]
    assert "FRAMES expects 4 frames (type, header, 2 arrays), got 3" in messages[1]
    assert "header describes 1 arrays; expected 2 (entries, codes)" in messages[2]
    assert [e[1] for e in sent.talker_errors()] == ["victim", "", ""]   # once failed, its handle names nobody
    finish_steady(server, sent, seq=1)


def test_an_undecodable_header_gets_a_bare_error(vocoder):
    server, sent = vocoder
    open_steady_and_victim(server)
    server.dispatch(TALKER, [b"FRAMES", b"\xff\xff\xff", b"", b""])
    assert [(e[1], e[2]) for e in sent.talker_errors()] == [("", "INVALID_ARGUMENT")]
    assert "malformed FRAMES header" in sent.to_talker[0][3]
    assert "victim" in server.engine.streams   # nothing could be traced to it
    finish_steady(server, sent, seq=1)


# Well-formed arrays that make no sense for this link: only the entry at fault is refused; steady's
# entry in the same message is applied.
def semantic_cases():
    return {
        "unknown handle": (message(entries=[(1, 1, codes(11)), (42, 3, codes(0))]),
                           "NOT_FOUND", "", "frames for unknown stream handle 42 (seq 3)"),
        "handle reuse": (message(opens=[(1, "intruder")], entries=[(1, 0, codes(0))]),
                         "INVALID_ARGUMENT", "intruder", "stream handle 1 is still in use by request 'steady'"),
        "two entries for one stream": (message(entries=[(1, 1, codes(11)), (2, 1, codes(21)), (2, 2, codes(22))]),
                                       "INVALID_ARGUMENT", "victim", "stream handle 2 has more than one entry"),
        "code beyond the codebook": (message(entries=[(1, 1, codes(11)), (2, 1, codes(CODEBOOK))]),
                                     "INVALID_ARGUMENT", "victim", "codes must lie in [0, 2048), got [2048, 2048]"),
        "negative code": (message(entries=[(2, 1, codes(-1)), (1, 1, codes(11))]),
                          "INVALID_ARGUMENT", "victim", "codes must lie in [0, 2048), got [-1, -1]"),
        "open at seq 1": (message(opens=[(3, "late-open")], entries=[(1, 1, codes(11)), (3, 1, codes(0))]),
                          "INVALID_ARGUMENT", "late-open", "opened by an entry with seq 1, expected 0"),
        "open without an entry": (message(opens=[(3, "no-entry")], entries=[(1, 1, codes(11))]),
                                  "INVALID_ARGUMENT", "no-entry", "holds no entry for it"),
        "close without an entry": (message(closes=[2], entries=[(1, 1, codes(11))]),
                                   "INVALID_ARGUMENT", "victim", "holds no entry for it"),
        "one stream opened twice": (message(opens=[(3, "twice"), (3, "twice-b")], entries=[(1, 1, codes(11)), (3, 0, codes(0))]),
                                    "INVALID_ARGUMENT", "twice-b", "stream handle 3 has more than one FramesOpen"),
        "sequence gap": (message(entries=[(1, 1, codes(11)), (2, 5, codes(0))]),
                         "DATA_LOSS", "victim", "frames seq 5 out of order, expected 1"),
        "context beyond the entry": (message(opens=[(3, "ctx", 4)], entries=[(1, 1, codes(11)), (3, 0, codes(0, 2))]),
                                     "INVALID_ARGUMENT", "ctx", "num_context_frames 4 not in [0, 2]"),
        "empty request id": (message(opens=[(3, "")], entries=[(3, 0, codes(0))]),
                             "INVALID_ARGUMENT", "", "FramesOpen of stream handle 3 has an empty request_id"),
    }


@pytest.mark.parametrize("case", list(semantic_cases()))
def test_a_bad_entry_fails_its_request_and_spares_the_rest_of_the_message(vocoder, case):
    server, sent = vocoder
    open_steady_and_victim(server)
    body, code, named, problem = semantic_cases()[case]
    server.dispatch(TALKER, body)
    errors = sent.talker_errors(code)
    assert any(e[1] == named and problem in e[3] for e in errors), sent.to_talker
    if named in ("victim", "steady"):   # a live request at fault fails at its gateway too
        assert (named, code) in [e[1:3] for e in sent.to_gateway]
    steady_entries = [e for e in sent.to_talker if e[1] == "steady"]
    assert not steady_entries and "steady" in server.engine.streams
    finish_steady(server, sent, seq=server.engine.streams["steady"].next_seq)


def test_handles_are_per_link_and_free_again_after_close(vocoder):
    server, sent = vocoder
    server.dispatch(TALKER, message(opens=[(1, "a")], entries=[(1, 0, codes(1))]))
    server.dispatch(OTHER, message(opens=[(1, "b")], entries=[(1, 0, codes(2))]))   # same number, other link
    server.dispatch(TALKER, message(closes=[1], entries=[(1, 1, codes(3))]))
    server.dispatch(TALKER, message(opens=[(1, "c")], entries=[(1, 0, codes(4))]))   # reused once closed
    server.dispatch(OTHER, message(closes=[1], entries=[(1, 1, codes(5))]))
    server.dispatch(TALKER, message(closes=[1], entries=[(1, 1, codes(6))]))
    pump(server, 6)
    assert sent.to_talker == [] and sent.to_gateway == []
    assert {rid: audio(sent, rid) for rid in "abc"} == {"a": [1, 3], "b": [2, 5], "c": [4, 6]}
    assert all(is_complete(sent, rid) for rid in "abc")
    server.intake.sweep()
    assert not server.intake.routes and not server.intake.handles


def test_abort_frees_the_handle_for_a_new_stream(vocoder):
    server, sent = vocoder
    server.dispatch(TALKER, message(opens=[(1, "a")], entries=[(1, 0, codes(1))]))
    server.dispatch(TALKER, wire.encode(wire.MessageType.ABORT, common_pb2.Abort(request_id="a")))
    server.dispatch(TALKER, message(opens=[(1, "b")], closes=[1], entries=[(1, 0, codes(7))]))
    pump(server)
    assert sent.to_talker == [] and audio(sent, "b") == [7] and is_complete(sent, "b") and "a" not in sent.pcm


def test_context_rows_prime_and_are_not_emitted(vocoder):
    server, sent = vocoder
    rows = np.concatenate([codes(1, 3), codes(9, 2)])   # 3 context frames, then 2 audio frames
    server.dispatch(TALKER, message(opens=[(5, "clone", 3)], closes=[5], entries=[(5, 0, rows)]))
    pump(server, 8)
    assert audio(sent, "clone") == [9, 9] and is_complete(sent, "clone")
    assert [p.sample_offset for p in sent.pcm["clone"]] == list(np.cumsum([0] + [p.num_samples for p in sent.pcm["clone"][:-1]]))


def test_many_streams_in_one_message_come_back_in_one_pcm_message_per_gateway(vocoder):
    server, sent = vocoder
    messages = []
    server.outbox.pushes.send = lambda reply_to, frames: messages.append(wire.decode(frames))
    handles = list(range(1, 7))
    server.dispatch(TALKER, message(opens=[(h, f"r{h}") for h in handles], closes=handles,
                                    entries=[(h, 0, codes(h)) for h in handles]))
    pump(server, 1)
    assert len(messages) == 1
    _, header, arrays = messages[0]
    parts = split_pcm(header, arrays)
    assert sorted(p.request_id for p in parts) == [f"r{h}" for h in handles]
    assert all(p.is_final and p.generation.num_frames == int(p.request_id[1:]) for p in parts)
    assert {p.request_id: float(p.pcm[0]) for p in parts} == {f"r{h}": float(h) for h in handles}
    assert all(p.timings.batch_size == 6 for p in parts)


def test_hop_marks_name_audio_frames_0_and_1_by_index(vocoder, tmp_path, monkeypatch):
    # (benchmarks/first_audio_hops.py's frame hops): frames 0 and 1 in one entry are both read then;
    # a clone's context frames, which open its stream, are not audio frames
    from benchmarks.first_audio_hops import load_marks
    from service_common import hop_trace
    monkeypatch.setattr(hop_trace, "_DIR", str(tmp_path))
    monkeypatch.setattr(hop_trace, "_file", None)
    server, _ = vocoder
    server.dispatch(TALKER, message(opens=[(1, "both"), (2, "clone", 3)],
                                    entries=[(1, 0, codes(5, 2)), (2, 0, codes(6, 3))]))
    marks = load_marks(tmp_path)
    assert set(marks["both"]) == {"v_frames0_in", "v_frames1_in"} and "clone" not in marks
    server.dispatch(TALKER, message(entries=[(1, 1, codes(5)), (2, 1, codes(6))]))   # later frames of "both"
    marks = load_marks(tmp_path)
    assert set(marks["clone"]) == {"v_frames0_in"}
    server.dispatch(TALKER, message(entries=[(2, 2, codes(6, 2))]))
    marks = load_marks(tmp_path)
    assert set(marks["clone"]) == {"v_frames0_in", "v_frames1_in"}
    hop_trace._file.close()
