"""Helpers of the gateway tests: a talker stand-in speaking the ZeroMQ protocol (it also plays the
vocoder, pushing PCM to reply_to) and an in-process gateway on loopback. No tests here.

The fake turns each text token into one 1920-sample "frame" whose value encodes the token id,
so a test can check that every token arrived, in order, and that audio flows before the text
ends. Every wait has a deadline; the thread stops in `close()`.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zmq

from protos import wire
from protos.tts.internal.v1 import common_pb2, talker_pb2, vocoder_pb2

T = wire.MessageType
SAMPLES_PER_FRAME = 1920
# Polled waits end as soon as their condition holds: the limit is only there for a hang, so it is
# one that a slow (loaded 2-core, parallel tests) machine does not reach.
POLL_TIMEOUT_S = 30.0


def frame_pcm(token_id: int) -> np.ndarray:
    return np.full(SAMPLES_PER_FRAME, (token_id % 1000) / 1000.0, np.float32)


def tokens_from_pcm(pcm: np.ndarray) -> list[int]:
    return [int(round(float(pcm[i]) * 1000)) for i in range(0, len(pcm), SAMPLES_PER_FRAME)]


@dataclass
class FakeRequest:
    start: talker_pb2.Start
    tokens: list[int] = field(default_factory=list)
    num_pcm: int = 0
    num_samples: int = 0          # samples pushed so far (the next chunk's sample_offset)
    is_ended: bool = False
    abort: common_pb2.Abort | None = None
    ack_to: bytes | None = None   # hold_ack_for_text: the gateway whose ACK waits for this request's first TEXT


class FakeTalker:
    """ROUTER on loopback; ACKs Starts (or refuses beyond `num_slots`), streams one frame per token."""

    def __init__(self, num_slots: int = 4, num_vocoders: int = 1, model: str = "fake-model",
                 refuse_code: int = 0, delay_ack_s: float = 0.0, delay_encode_s: float = 0.0,
                 peer_id: str = "fake-talker", port: int = 0, hold_ack_for_text: bool = False) -> None:
        """`port`: bind this one (a talker restarted on its address), else a free one.
        `hold_ack_for_text`: a streaming START is acknowledged only once its first TEXT arrived (a
        gateway that waits for the ACK before it sends text never gets one)."""
        self.num_slots, self.num_vocoders, self.model = num_slots, num_vocoders, model
        self.hold_ack_for_text = hold_ack_for_text
        self.text_before_ack: list[str] = []   # requests whose first TEXT came before their ACK went out
        self.peer_id = peer_id
        self.refuse_code = refuse_code
        self.delay_ack_s = delay_ack_s
        self.delay_encode_s = delay_encode_s   # a slow voice encoding (VOICE_ENCODED sent this late)
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        if port:
            self.router.bind(f"tcp://127.0.0.1:{port}")
        else:
            port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.pushes: dict[str, zmq.Socket] = {}
        self.gateways: set[bytes] = set()
        self.requests: dict[str, FakeRequest] = {}
        self.encoded_voices: list[talker_pb2.EncodeVoice] = []
        self.is_silent = False
        self.is_draining = False      # reported in heartbeats: no new work, live streams finish
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    # ---- loop -----------------------------------------------------------------------------
    def _run(self) -> None:
        last_hb = 0.0
        while not self._stop.is_set():
            if self.router.poll(20):
                identity, *frames = self.router.recv_multipart()
                self.gateways.add(identity)
                msg_type, header, array = wire.decode(frames)
                with self._lock:
                    self._handle(identity, msg_type, header, array)
            if time.monotonic() - last_hb > 0.2 and not self.is_silent:
                last_hb = time.monotonic()
                self._heartbeat()

    def _heartbeat(self) -> None:
        live = sum(1 for r in self.requests.values() if not r.is_ended and r.abort is None)
        hb = common_pb2.Heartbeat(peer_id=self.peer_id, role=common_pb2.PEER_ROLE_TALKER, incarnation=7,
                                  interval_ms=200, model=self.model, num_healthy_vocoders=self.num_vocoders,
                                  is_draining=self.is_draining,
                                  load=common_pb2.Load(num_slots_total=self.num_slots, num_slots_used=live))
        for identity in self.gateways:
            self.router.send_multipart([identity, *wire.encode(T.HEARTBEAT, hb)])

    def _reply(self, identity: bytes, msg_type: T, header) -> None:
        self.router.send_multipart([identity, *wire.encode(msg_type, header)])

    def _push(self, req: FakeRequest, header: vocoder_pb2.PcmBatch, arrays: wire.PcmArrays) -> None:
        reply_to = req.start.reply_to
        if reply_to not in self.pushes:
            sock = self.context.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(reply_to)
            self.pushes[reply_to] = sock
        self.pushes[reply_to].send_multipart(wire.encode(T.PCM, header, arrays))

    def _emit(self, req: FakeRequest, ids: list[int], is_final: bool) -> None:
        """One PCM message holding this request's one chunk (a vocoder would batch several)."""
        if not ids and not is_final:
            return
        pcm = np.concatenate([frame_pcm(i) for i in ids]).astype(np.float32) if ids else np.zeros(0, np.float32)
        header = vocoder_pb2.PcmBatch(sample_rate_hz=24000, request_ids=[req.start.request_id])
        if is_final:
            header.finals.add(chunk_index=0, generation=vocoder_pb2.GenerationSummary(
                finish_reason=1, num_frames=len(req.tokens), num_text_tokens=len(req.tokens), queue_ms=1.0))
        # one row of wire.PCM_CHUNK_COLUMNS: seq, sample_offset, num_samples, num_frames, queue_us, decode_us,
        # batch_size, is_graph
        chunks = np.array([[req.num_pcm, req.num_samples, pcm.size, len(ids), 500, 1000, 1, 0]], np.uint64)
        arrays = wire.PcmArrays(chunks, pcm)
        req.num_pcm += 1
        req.num_samples += pcm.size
        self._push(req, header, arrays)

    def _handle(self, identity: bytes, msg_type: T, header, array) -> None:
        if msg_type == T.START:
            if self.delay_ack_s:
                time.sleep(self.delay_ack_s)
            live = sum(1 for r in self.requests.values() if not r.is_ended and r.abort is None)
            if self.refuse_code or live >= self.num_slots:
                self._reply(identity, T.ERROR, common_pb2.Error(
                    request_id=header.request_id, code=self.refuse_code or common_pb2.STATUS_CODE_RESOURCE_EXHAUSTED,
                    message="fake talker: all slots busy", origin="fake-talker"))
                return
            req = FakeRequest(header)
            self.requests[header.request_id] = req
            if self.hold_ack_for_text and not header.is_text_complete:
                req.ack_to = identity
            else:
                self._reply(identity, T.ACK, talker_pb2.Ack(request_id=header.request_id, talker_id=self.peer_id))
            if header.text_token_ids:
                req.tokens += header.text_token_ids
                self._emit(req, list(header.text_token_ids), False)
            if header.is_text_complete:
                req.is_ended = True
                self._emit(req, [], True)
        elif msg_type == T.TEXT:
            req = self.requests.get(header.request_id)
            if req is not None and req.ack_to is not None:
                self.text_before_ack.append(header.request_id)
                self._reply(req.ack_to, T.ACK, talker_pb2.Ack(request_id=header.request_id, talker_id=self.peer_id))
                req.ack_to = None
            if req is not None and req.abort is None:
                req.tokens += header.token_ids
                self._emit(req, list(header.token_ids), False)
        elif msg_type == T.END:
            req = self.requests.get(header.request_id)
            if req is not None and req.abort is None:
                req.is_ended = True
                self._emit(req, [], True)
        elif msg_type == T.ABORT:
            req = self.requests.get(header.request_id)
            if req is not None:
                req.abort = header
        elif msg_type == T.ENCODE_VOICE:
            self.encoded_voices.append(header)
            time.sleep(self.delay_encode_s)
            prompt = talker_pb2.VoicePrompt(model=header.model, x_vector_only=header.x_vector_only,
                                            speaker_embedding=[float(np.mean(array))] * 4,
                                            reference_text_token_ids=header.reference_text_token_ids)
            self._reply(identity, T.VOICE_ENCODED, talker_pb2.VoiceEncoded(request_id=header.request_id, prompt=prompt))

    # ---- test helpers ---------------------------------------------------------------------
    def wait_for(self, predicate, timeout_s: float = POLL_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                value = predicate(self)
            if value:
                return value
            time.sleep(0.01)
        raise TimeoutError("fake talker: condition not met in time")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.context.destroy(linger=0)


@contextlib.asynccontextmanager
async def running_gateway(model_dir: Path, talkers: list[str], tmp_path: Path, **overrides):
    """An in-process GatewayServer on a free port; yields it once health is SERVING (or not, if asked)."""
    from gateway.config import GatewayConfig
    from gateway.server import GatewayServer

    wait_serving = overrides.pop("wait_serving", True)
    config = GatewayConfig(model=str(model_dir), model_name=overrides.pop("model_name", "tiny"), talkers=tuple(talkers),
                           grpc_host="127.0.0.1", grpc_port=0, metrics_port=0, voices_dir=str(tmp_path / "voices"),
                           **{"heartbeat_interval_ms": 200, "peer_timeout_ms": 1000, **overrides})
    server = GatewayServer(config, model_dir)
    await server.start()
    try:
        if wait_serving:
            deadline = time.monotonic() + POLL_TIMEOUT_S
            while not server.backend.is_serving:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"gateway did not see a healthy talker in {POLL_TIMEOUT_S} s")
                await asyncio.sleep(0.02)
        yield server
    finally:
        await server.drain(0.5)
