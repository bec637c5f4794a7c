"""Helpers of the vocoder tests: a talker stand-in that drives a vocoder over ZeroMQ, and the
offline reference decode (the vocoder process itself is `process_support.VocoderProcess`).

No tests here. Every wait has a deadline.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
import zmq

from protos import wire
from protos.pcm_split import split_pcm
from protos.tts.internal.v1 import common_pb2, vocoder_pb2


@contextlib.contextmanager
def one_cpu_thread():
    """One intra-op thread: on a loaded 2-core box OpenMP spinning makes a tiny step ~50x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def offline_pcm(model, codes: np.ndarray) -> np.ndarray:
    """Code2Wav.decode of a whole utterance: codes [n, 16] -> pcm [n * 1920]."""
    return model.decode(torch.from_numpy(np.ascontiguousarray(codes.T[None], dtype=np.int64)))[0].numpy()


def random_codes(seed: int, num_frames: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2048, (num_frames, 16))


@dataclass
class Entry:
    """One request's part of a FRAMES message, as a test talker means it (TalkerStandIn.send_frames
    turns it into arrays, a FramesOpen at seq 0 and a FramesClose when final)."""

    request_id: str
    seq: int
    num_frames: int
    num_context_frames: int = 0
    is_final: bool = False
    reply_to: str = ""
    summary: vocoder_pb2.GenerationSummary | None = None
    handle: int | None = None   # None: the stand-in's handle for the request (a fresh one if it has none)


def entry(request_id: str, seq: int, num_frames: int, *, context: int = 0, final: bool = False,
          reply_to: str = "", summary: vocoder_pb2.GenerationSummary | None = None, handle: int | None = None) -> Entry:
    return Entry(request_id, seq, num_frames, context, final, reply_to, summary, handle)


def frames_message(talker_id: str, entries: list[tuple[Entry, np.ndarray]], handles: dict[str, int],
                   new_handle) -> tuple[vocoder_pb2.FramesChunk, wire.FramesArrays]:
    """The FRAMES header and arrays for `entries`; `handles` (request id -> handle) is updated:
    seq 0 with reply_to opens a stream under `new_handle()`, a final entry closes it."""
    chunk = vocoder_pb2.FramesChunk(talker_id=talker_id)
    columns, rows = [], []
    for e, codes in entries:
        if e.seq == 0 and e.reply_to:
            handles[e.request_id] = e.handle if e.handle is not None else new_handle()
            chunk.opens.add(handle=handles[e.request_id], request_id=e.request_id, reply_to=e.reply_to,
                            num_context_frames=e.num_context_frames)
        handle = e.handle if e.handle is not None else handles.get(e.request_id)
        if handle is None:   # never opened by this talker: a handle the vocoder has never seen
            handle = new_handle()
        if e.is_final:
            close = chunk.closes.add(handle=handle)
            if e.summary is not None:
                close.summary.CopyFrom(e.summary)
            handles.pop(e.request_id, None)
        block = np.asarray(codes, dtype=np.int16).reshape(-1, 16)
        columns.append((handle, e.seq, len(block)))
        rows.append(block)
    entries = np.array(columns, "<u4").reshape(-1, 3)   # [E, 3]: handle, seq, num_frames
    return chunk, wire.FramesArrays(entries, np.concatenate(rows) if rows else np.zeros((0, 16), np.int16))


@dataclass
class Received:
    """What the gateway side got for one request."""

    chunks: list = field(default_factory=list)     # protos.pcm_split.PcmPart per chunk
    pcm: list = field(default_factory=list)        # float32 arrays
    error: common_pb2.Error | None = None

    @property
    def is_done(self) -> bool:
        return self.error is not None or bool(self.chunks and self.chunks[-1].is_final)

    def audio(self) -> np.ndarray:
        return np.concatenate(self.pcm) if self.pcm else np.zeros(0, np.float32)

    def add(self, msg_type: wire.MessageType, header) -> None:
        """File one message from the audio path: an ERROR, or one PCM chunk (a PcmPart)."""
        if msg_type == wire.MessageType.ERROR:
            self.error = header
        else:
            self.chunks.append(header)
            self.pcm.append(np.array(header.pcm))


class TalkerStandIn:
    """A DEALER to the vocoder's ROUTER (the talker side) plus a PULL playing the gateway."""

    def __init__(self, codes_endpoint: str, name: str = "talker-under-test") -> None:
        self.name = name
        self.context = zmq.Context()
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.connect(codes_endpoint)
        self.gateway = self.context.socket(zmq.PULL)
        self.gateway.setsockopt(zmq.LINGER, 0)
        self.reply_to = f"tcp://127.0.0.1:{self.gateway.bind_to_random_port('tcp://127.0.0.1')}"
        self.last_load: common_pb2.Load | None = None
        self.vocoder_draining = False
        self.num_heartbeats = 0
        self.received: dict[str, Received] = {}
        self.handles: dict[str, int] = {}   # open streams: request id -> FramesOpen.handle
        self.last_handle = 0
        self.send(wire.MessageType.HEARTBEAT, common_pb2.Heartbeat(peer_id=name, role=common_pb2.PEER_ROLE_TALKER,
                                                                   interval_ms=200))

    def send(self, msg_type: wire.MessageType, header, array: np.ndarray | None = None) -> None:
        self.dealer.send_multipart(wire.encode(msg_type, header, array), copy=False)

    def send_raw(self, frames: list[bytes]) -> None:
        self.dealer.send_multipart(frames)

    def send_frames(self, entries: list[tuple[Entry, np.ndarray]]) -> None:
        """One FRAMES message (one talker step); each entry's rows are placed back to back."""
        self.send(wire.MessageType.FRAMES, *frames_message(self.name, entries, self.handles, self.new_handle))

    def new_handle(self) -> int:
        self.last_handle += 1
        return self.last_handle

    def next_from_vocoder(self, msg_type: wire.MessageType, timeout_s: float):
        """Next message of `msg_type` on the DEALER (heartbeats are recorded on the way)."""
        deadline = time.monotonic() + timeout_s
        while (left_ms := int((deadline - time.monotonic()) * 1e3)) > 0:
            if not self.dealer.poll(left_ms):
                break
            got_type, header, _ = wire.decode(self.dealer.recv_multipart())
            if got_type == wire.MessageType.HEARTBEAT:
                self.last_load = header.load
                self.num_heartbeats += 1
            if got_type == msg_type:
                return header
        raise TimeoutError(f"no {msg_type.name} from the vocoder within {timeout_s} s")

    def drain_gateway(self) -> None:
        """Gateway side, non-blocking: file every PCM/ERROR already received under its request id."""
        while self.gateway.poll(0):
            msg_type, header, arrays = wire.decode(self.gateway.recv_multipart())
            parts = split_pcm(header, arrays) if msg_type == wire.MessageType.PCM else [header]
            for part in parts:
                self.received.setdefault(part.request_id, Received()).add(msg_type, part)

    def is_done(self, request_id: str) -> bool:
        self.drain_gateway()
        return request_id in self.received and self.received[request_id].is_done

    def collect(self, request_ids: list[str], timeout_s: float) -> dict[str, Received]:
        """Gateway side: read PCM/ERROR until every listed request is done (final chunk or error)."""
        deadline = time.monotonic() + timeout_s
        while not all(self.is_done(rid) for rid in request_ids):
            left_ms = int((deadline - time.monotonic()) * 1e3)
            if left_ms <= 0:
                raise TimeoutError(f"gateway side incomplete after {timeout_s} s: "
                                   f"{ {rid: self.received.get(rid) for rid in request_ids} }")
            self.gateway.poll(left_ms)
        return {rid: self.received[rid] for rid in request_ids}

    def drain_dealer(self) -> list:
        """Talker side, non-blocking: every message received so far (heartbeats also update last_load)."""
        out = []
        while self.dealer.poll(0):
            msg_type, header, _ = wire.decode(self.dealer.recv_multipart())
            if msg_type == wire.MessageType.HEARTBEAT:
                self.last_load = header.load
                self.num_heartbeats += 1
                self.vocoder_draining = header.is_draining
            out.append((msg_type, header))
        return out

    def close(self) -> None:
        self.dealer.close(linger=0)
        self.gateway.close(linger=0)
        self.context.term()


@pytest.fixture(scope="module")
def runner_factory():
    """max_slots -> the tiny decoder's runner on one CPU thread (in-process vocoder servers)."""
    from checkpoint.files import resolve_model_dir
    from vocoder_service.runtime.runner import DecoderRunner

    model_dir = resolve_model_dir("tiny")
    with one_cpu_thread():
        yield lambda max_slots: DecoderRunner.from_pretrained(model_dir, max_slots)


def pump(server, until, timeout_s: float = 30.0) -> None:
    """Run an in-process VocoderServer's loop (run_once) until `until()` holds; fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "condition not reached in time"
        server.run_once()
