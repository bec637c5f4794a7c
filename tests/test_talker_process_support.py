"""Helpers of the talker process tests: a gateway stand-in (DEALER to the talker's ROUTER plus the
PULL the vocoder pushes audio to); the talker process itself is `process_support.TalkerProcess`.
No tests here."""
from __future__ import annotations

import time

import zmq

from checkpoint.files import resolve_model_dir
from protos import wire
from protos.pcm_split import split_pcm
from protos.tts.internal.v1 import common_pb2, talker_pb2
from protos.tts.v1 import config_pb2
from talker_service.generate import Synthesizer
from talker_service.prompt import tokenize_target
from test_vocoder_process_support import Received, one_cpu_thread


def tiny_synth():
    """Module fixture body: the offline Synthesizer on the tiny checkpoint, one CPU thread."""
    with one_cpu_thread():
        yield Synthesizer.from_pretrained(resolve_model_dir("tiny"), max_slots=2, max_seq_len=256)


def ids_of(synth, text: str) -> list[int]:
    return tokenize_target(synth.tokenizer, text, expected_role_ids=synth.vocab.role_ids).text_ids


def start_fields(synth, seed: int, max_frames: int, text_ids=(), complete=True, streaming=True) -> dict:
    """Start fields as a gateway resolves them: vivian, English, the official sampling defaults."""
    ids = synth.vocab.ids
    return dict(speaker=talker_pb2.SpeakerVoice(speaker_codec_id=ids.speaker_ids["vivian"]),
                language_codec_id=ids.language_ids["english"],
                sampling=talker_pb2.Sampling(seed=seed, do_sample=True, temperature=0.9, top_k=50, top_p=1.0,
                                             repetition_penalty=1.05, subtalker_do_sample=True,
                                             subtalker_temperature=0.9, subtalker_top_k=50, subtalker_top_p=1.0,
                                             max_frames=max_frames),
                text_mode=config_pb2.TEXT_MODE_STREAMING if streaming else config_pb2.TEXT_MODE_NON_STREAMING,
                text_token_ids=list(text_ids), is_text_complete=complete)


def wait_healthy_vocoders(gateway: "GatewayStandIn", talker, num_healthy: int, timeout_s: float) -> None:
    """Pump the stand-in until the talker's heartbeat reports `num_healthy` vocoders."""
    deadline = time.monotonic() + timeout_s
    while not (gateway.last_beat and gateway.last_beat.num_healthy_vocoders == num_healthy):
        assert time.monotonic() < deadline, talker.log_tail()
        gateway.pump(50)


class GatewayStandIn:
    def __init__(self, requests_endpoint: str, name: str = "gateway-under-test") -> None:
        self.context = zmq.Context()
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.connect(requests_endpoint)
        self.audio = self.context.socket(zmq.PULL)
        self.audio.setsockopt(zmq.LINGER, 0)
        self.reply_to = f"tcp://127.0.0.1:{self.audio.bind_to_random_port('tcp://127.0.0.1')}"
        self.name = name
        self.replies: list = []           # (type, header) from the talker, heartbeats excluded
        self.last_beat: common_pb2.Heartbeat | None = None
        self.received: dict[str, Received] = {}
        self.heartbeat()

    def heartbeat(self) -> None:
        self.send(wire.MessageType.HEARTBEAT, common_pb2.Heartbeat(peer_id=self.name, role=common_pb2.PEER_ROLE_GATEWAY,
                                                                   interval_ms=200))

    def send(self, msg_type: wire.MessageType, header) -> None:
        self.dealer.send_multipart(wire.encode(msg_type, header))

    def start(self, request_id: str, **fields) -> None:
        self.send(wire.MessageType.START, talker_pb2.Start(request_id=request_id, reply_to=self.reply_to, **fields))

    def text(self, request_id: str, seq: int, ids: list[int]) -> None:
        self.send(wire.MessageType.TEXT, talker_pb2.Text(request_id=request_id, seq=seq, token_ids=ids))

    def end(self, request_id: str, num_text_messages: int) -> None:
        self.send(wire.MessageType.END, talker_pb2.End(request_id=request_id, num_text_messages=num_text_messages))

    def pump(self, timeout_ms: int = 0) -> None:
        """Read whatever arrived on both sockets; heartbeat back so the talker keeps us alive."""
        poller = zmq.Poller()
        poller.register(self.dealer, zmq.POLLIN)
        poller.register(self.audio, zmq.POLLIN)
        poller.poll(timeout_ms)
        while self.dealer.poll(0):
            msg_type, header, _ = wire.decode(self.dealer.recv_multipart())
            if msg_type == wire.MessageType.HEARTBEAT:
                self.last_beat = header
                self.heartbeat()
            else:
                self.replies.append((msg_type, header))
                if msg_type == wire.MessageType.ERROR:
                    self.received.setdefault(header.request_id, Received()).error = header
        while self.audio.poll(0):
            msg_type, header, arrays = wire.decode(self.audio.recv_multipart())
            for part in split_pcm(header, arrays) if msg_type == wire.MessageType.PCM else [header]:
                self.received.setdefault(part.request_id, Received()).add(msg_type, part)

    def reply(self, request_id: str, msg_type: wire.MessageType, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for got_type, header in self.replies:
                if got_type == msg_type and header.request_id == request_id:
                    return header
            self.pump(50)
        raise TimeoutError(f"no {msg_type.name} for {request_id!r} within {timeout_s} s; got {self.replies}")

    def wait_done(self, request_ids: list[str], timeout_s: float) -> dict[str, Received]:
        deadline = time.monotonic() + timeout_s
        while not all(rid in self.received and self.received[rid].is_done for rid in request_ids):
            if time.monotonic() > deadline:
                raise TimeoutError(f"requests not done after {timeout_s} s: "
                                   f"{ {rid: self.received.get(rid) for rid in request_ids} }")
            self.pump(50)
        return {rid: self.received[rid] for rid in request_ids}

    def close(self) -> None:
        self.dealer.close(linger=0)
        self.audio.close(linger=0)
        self.context.term()
