"""The multi-array messages (FRAMES, PCM) of protos.wire, the PCM split, and the gateway's audio
intake: arrays round-trip without copies, every malformed layout is refused with a ValueError
naming the array at fault, and a malformed PCM message fails only the requests it names."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.backend import Backend
from protos import wire
from protos.pcm_split import split_pcm
from protos.tts.internal.v1 import common_pb2, vocoder_pb2

MT = wire.MessageType
DTYPES = {np.dtype("<u4"): common_pb2.DTYPE_UINT32, np.dtype("<u8"): common_pb2.DTYPE_UINT64,
          np.dtype("<u1"): common_pb2.DTYPE_UINT8, np.dtype("<i2"): common_pb2.DTYPE_INT16,
          np.dtype("<f4"): common_pb2.DTYPE_FLOAT32, np.dtype("<i8"): common_pb2.DTYPE_INT64}


def pcm_batch(chunks: list[tuple[str, int, int]], finals: dict[int, int] | None = None):
    """Header and arrays of a PCM message; chunks: (request_id, seq, num_samples); finals: index -> num_frames.
    Sample k of chunk i is i + k / 1000, so a split shows where each sample came from."""
    header = vocoder_pb2.PcmBatch(sample_rate_hz=24000, request_ids=[c[0] for c in chunks])
    for index, num_frames in (finals or {}).items():
        header.finals.add(chunk_index=index, generation=vocoder_pb2.GenerationSummary(num_frames=num_frames))
    n = len(chunks)
    pcm = np.concatenate([i + np.arange(c[2], dtype=np.float32) / 1000 for i, c in enumerate(chunks)]) if n \
        else np.zeros(0, np.float32)
    # wire.PCM_CHUNK_COLUMNS: seq, sample_offset, num_samples, num_frames, queue_us, decode_us, batch_size, is_graph
    table = np.array([(seq, 100 * i, num, num // 8, 500, 2000, n, 1) for i, (_, seq, num) in enumerate(chunks)],
                     np.uint64).reshape(-1, 8)
    return header, wire.PcmArrays(table, pcm)


def raw(msg_type: MT, header, arrays: list[np.ndarray]) -> list:
    """A body whose specs describe `arrays` exactly, with no consistency check."""
    header = type(header).FromString(header.SerializeToString())
    for array in arrays:
        header.arrays.add(dtype=DTYPES[array.dtype], shape=array.shape)
    return [msg_type.value, header.SerializeToString(), *(a.tobytes() for a in arrays)]


# ---- codec -------------------------------------------------------------------------------------

def test_frames_arrays_round_trip_as_views_on_the_received_frames():
    header = vocoder_pb2.FramesChunk(talker_id="t", opens=[vocoder_pb2.FramesOpen(handle=3, request_id="a")])
    codes = np.arange(5 * 16, dtype=np.int16).reshape(5, 16)
    arrays = wire.FramesArrays(wire.frames_entries([3, 9], [0, 12], [2, 3]), codes)
    assert arrays.entries.tolist() == [[3, 0, 2], [9, 12, 3]]
    frames = wire.encode(MT.FRAMES, header, arrays)
    assert len(frames) == 4 and np.shares_memory(np.frombuffer(frames[3], np.int16), codes)   # no copy on send
    received = [bytes(f) for f in frames]
    msg_type, got_header, got = wire.decode(received)
    assert msg_type is MT.FRAMES and got_header.opens[0].request_id == "a" and len(got_header.arrays) == 2
    assert isinstance(got, wire.FramesArrays)
    for name in ("entries", "codes", "handles", "seqs", "num_frames"):
        np.testing.assert_array_equal(getattr(got, name), getattr(arrays, name))
        assert not getattr(got, name).flags.writeable
    assert got.handles.tolist() == [3, 9] and got.seqs.tolist() == [0, 12] and got.num_frames.tolist() == [2, 3]
    assert np.shares_memory(got.codes, np.frombuffer(received[3], np.uint8))   # no copy on receipt


def table(*rows) -> np.ndarray:
    return np.array(rows, np.uint32).reshape(-1, 3)


@pytest.mark.parametrize("arrays, problem", [
    ([table((1, 0, 1)).astype(np.int64), np.zeros((1, 16), np.int16)],
     "FRAMES array 'entries' has dtype int64; expected one of: uint32"),
    ([np.zeros(3, np.uint32), np.zeros((1, 16), np.int16)], "FRAMES array 'entries' has shape (3,); expected 2 dimensions"),
    ([np.zeros((1, 4), np.uint32), np.zeros((1, 16), np.int16)],
     "FRAMES entries must be [rows, 3] (handle, seq, num_frames), got [1, 4]"),
    ([table((1, 0, 2)), np.zeros((1, 16), np.int16)], "num_frames add up to 2 rows but codes has 1"),
    ([table((1, 0, 2**31), (2, 0, 2**31)), np.zeros((1, 16), np.int16)], "num_frames add up to 4294967296 rows"),
    ([table((1, 0, 1)), np.zeros((1, 17), np.int16)], "codes must be [rows, 16], got [1, 17]"),
    ([table((1, 0, 1)), np.zeros((1, 16), np.float32)], "FRAMES array 'codes' has dtype float32; expected one of: int16, int32"),
])
def test_decode_refuses_frames_arrays_that_disagree(arrays, problem):
    with pytest.raises(ValueError) as info:
        wire.decode(raw(MT.FRAMES, vocoder_pb2.FramesChunk(), arrays))
    assert problem in str(info.value)


def test_encode_checks_the_arrays_like_decode_does():
    header = vocoder_pb2.FramesChunk()
    good = wire.FramesArrays(table((1, 0, 1)), np.zeros((1, 16), np.int16))
    with pytest.raises(ValueError, match="num_frames add up to 2 rows but codes has 1"):
        wire.encode(MT.FRAMES, header, good._replace(entries=table((1, 0, 2))))
    with pytest.raises(ValueError, match="'entries' has dtype int64"):
        wire.encode(MT.FRAMES, header, good._replace(entries=table((1, 0, 1)).astype(np.int64)))
    with pytest.raises(TypeError, match="FRAMES needs its 2 arrays as a FramesArrays"):
        wire.encode(MT.FRAMES, header, good[:1])
    with pytest.raises(TypeError, match="FRAMES array 'codes' must be a numpy.ndarray, got list"):
        wire.encode(MT.FRAMES, header, good._replace(codes=[[0] * 16]))
    preset = vocoder_pb2.FramesChunk(arrays=[common_pb2.ArraySpec(dtype=common_pb2.DTYPE_UINT32, shape=[1])])
    with pytest.raises(ValueError, match="header.arrays is set by encode"):
        wire.encode(MT.FRAMES, preset, good)
    header_before = header.SerializeToString()
    wire.encode(MT.FRAMES, header, good)
    assert header.SerializeToString() == header_before   # the caller's header is not touched


def test_pcm_arrays_disagreeing_with_the_header_are_refused():
    header, arrays = pcm_batch([("a", 0, 16), ("b", 4, 8)], finals={1: 3})
    assert len(wire.decode(wire.encode(MT.PCM, header, arrays))[2].pcm) == 24
    wrapped = arrays.chunks.copy()
    wrapped[:, 2] = [2**64 - 1, 25]   # adds up to 24 modulo 2**64
    cases = {
        "PCM has 1 request_ids for 2 chunks": (vocoder_pb2.PcmBatch(request_ids=["a"]), list(arrays)),
        "PCM num_samples add up to 24 samples but pcm has 23": (header, [arrays.chunks, arrays.pcm[:-1]]),
        "PCM num_samples add up to 24 samples but pcm has 24": (header, [wrapped, arrays.pcm]),
        "PCM chunks must be [rows, 8]": (header, [arrays.chunks[:, :7].copy(), arrays.pcm]),
        "PCM final chunk_index 2 is out of range for 2 chunks": (
            vocoder_pb2.PcmBatch(request_ids=["a", "b"], finals=[vocoder_pb2.PcmFinal(chunk_index=2)]), list(arrays)),
        "PCM array 'pcm' has dtype int64": (header, [arrays.chunks, np.zeros(24, np.int64)]),
        "PCM array 'chunks' has dtype uint32": (header, [arrays.chunks.astype(np.uint32), arrays.pcm]),
    }
    for problem, (bad_header, bad_arrays) in cases.items():
        with pytest.raises(ValueError) as info:
            wire.decode(raw(MT.PCM, bad_header, bad_arrays))
        assert problem in str(info.value), (problem, str(info.value))


# ---- PCM split -----------------------------------------------------------------------------------

def test_split_gives_each_request_its_samples_and_numbers_without_copies():
    header, arrays = pcm_batch([("a", 0, 16), ("b", 4, 8), ("c", 1, 0)], finals={1: 3, 2: 7})
    _, header, got = wire.decode([bytes(f) for f in wire.encode(MT.PCM, header, arrays)])
    parts = split_pcm(header, got)
    assert [(p.request_id, p.seq, p.num_samples, p.is_final) for p in parts] == [
        ("a", 0, 16, False), ("b", 4, 8, True), ("c", 1, 0, True)]
    assert [p.sample_offset for p in parts] == [0, 100, 200] and {p.sample_rate_hz for p in parts} == {24000}
    assert [p.generation.num_frames for p in parts] == [0, 3, 7] and parts[0].num_frames == 2
    assert parts[1].timings.batch_size == 3 and parts[1].timings.is_graph
    assert (parts[1].timings.queue_ms, parts[1].timings.decode_ms) == (0.5, 2.0)   # sent as whole microseconds
    np.testing.assert_array_equal(parts[0].pcm, np.arange(16, dtype=np.float32) / 1000)
    np.testing.assert_array_equal(parts[1].pcm, 1 + np.arange(8, dtype=np.float32) / 1000)
    assert parts[2].pcm.shape == (0,)
    assert all(np.shares_memory(p.pcm, got.pcm) for p in parts[:2])


def test_split_refuses_an_empty_request_id_and_a_chunk_ended_twice():
    header, arrays = pcm_batch([("a", 0, 8), ("", 0, 8)])
    with pytest.raises(ValueError, match="PCM chunk 1 has an empty request_id"):
        split_pcm(header, arrays)
    header, arrays = pcm_batch([("a", 0, 8)], finals={0: 1})
    header.finals.add(chunk_index=0)
    with pytest.raises(ValueError, match="PCM ends chunk 0 \\('a'\\) twice"):
        split_pcm(header, arrays)


# ---- the gateway's audio intake --------------------------------------------------------------------

def drain(box) -> list:
    out = []
    while not box.queue.empty():
        out.append(box.queue.get_nowait())
    return out


def test_gateway_delivers_each_chunk_and_fails_only_the_requests_of_a_malformed_message():
    async def scenario():
        backend = Backend(talkers=(), audio_bind="tcp://127.0.0.1:*")
        try:
            boxes = {rid: backend.open_mailbox(rid, None) for rid in ("a", "b", "c")}
            header, arrays = pcm_batch([("a", 0, 16), ("b", 0, 8)], finals={1: 2})
            backend.audio.on_message(wire.encode(MT.PCM, header, arrays))
            got_a, got_b = drain(boxes["a"]), drain(boxes["b"])
            assert [e.kind for e in got_a] == [MT.PCM] and got_a[0].header.seq == 0 and len(got_a[0].array) == 16
            assert got_b[0].header.is_final and got_b[0].header.generation.num_frames == 2
            # Malformed: the header still names "a" and "b"; their audio is lost, so they fail; "c" is untouched.
            bad_header, bad_arrays = pcm_batch([("a", 1, 16), ("b", 1, 8)])
            backend.audio.on_message(raw(MT.PCM, bad_header, [bad_arrays.chunks, bad_arrays.pcm[:-3]]))
            # Undecodable even as a header: counted and logged, nobody to fail.
            backend.audio.on_message([b"PCM", b"\xff\xff", b"", b""])
            assert backend.audio.num_malformed_messages == 2
            for rid in ("a", "b"):
                (event,) = drain(boxes[rid])
                assert event.kind is MT.ERROR and event.header.code == common_pb2.STATUS_CODE_INTERNAL
                assert "malformed audio" in event.header.message and "num_samples add up to 24" in event.header.message
            assert drain(boxes["c"]) == []
            error = common_pb2.Error(request_id="c", code=common_pb2.STATUS_CODE_DATA_LOSS, message="gap")
            backend.audio.on_message(wire.encode(MT.ERROR, error))
            assert [e.header.code for e in drain(boxes["c"])] == [common_pb2.STATUS_CODE_DATA_LOSS]
        finally:
            await backend.stop()

    asyncio.run(scenario())
