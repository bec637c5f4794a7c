"""One synthesis call: client messages in, talker messages out; vocoder PCM in, responses out.

A reader task consumes the client's messages (config already taken), tokenizes text
incrementally and sends TEXT/END to the talker; the call's own coroutine waits on the request's
mailbox (talker ACK/ERROR, vocoder PCM/ERROR, and the reader's local events) and yields
responses. Any exit other than a final PCM chunk (error, client cancel, deadline) sends an
idempotent ABORT, so talker and vocoder free the request's state.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Callable

import grpc
import numpy as np

from gateway.audio_encoding import StreamEncoder
from gateway.backend import Backend, Event, Mailbox, TalkerPeer
from gateway.errors import InvalidArgument, RequestError
from gateway.model_info import NATIVE_SAMPLE_RATE_HZ
from gateway.resolve import Resolved
from gateway.text_tokenizer import IncrementalTokenizer, TextTokenizer
from protos import status, wire
from protos.tts.internal.v1 import common_pb2, talker_pb2
from protos.tts.v1 import tts_pb2
from service_common import hop_trace
from service_common.audio_samples import SampleFaults
from service_common.playback import PlaybackClock

logger = logging.getLogger(__name__)

T = wire.MessageType
FLUSH_ACK, CLIENT_ERROR = "FLUSH_ACK", "CLIENT_ERROR"   # local mailbox events
_EMPTY = np.zeros(0, np.float32)


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


def check_size(msg, max_message_bytes: int) -> None:
    """InvalidArgument, naming the message's field, for a client message over the size limit."""
    num_bytes = msg.ByteSize()
    if num_bytes > max_message_bytes:
        raise InvalidArgument(msg.WhichOneof("request") or "request", f"message of {num_bytes} bytes is over the "
                              f"limit of {max_message_bytes} bytes")


def _after_config(msg: tts_pb2.StreamSynthesizeRequest, max_message_bytes: int) -> str:
    """What a client message after the config is: "text", "flush" or "end"; InvalidArgument for a
    message over the size limit, a second config or an empty message. (Checked here, in the
    reader's own loop, rather than by one more async generator around the client's stream: a layer
    of those costs every streamed word a loop of its own.)"""
    check_size(msg, max_message_bytes)
    kind = msg.WhichOneof("request")
    if kind == "config":
        raise InvalidArgument("config", "repeated config: it must be sent once, first")
    if kind not in ("text", "flush", "end"):
        raise InvalidArgument("request", "empty message: set config, text, flush or end")
    return kind


def vocoder_faults(header) -> SampleFaults | None:
    """What the vocoder found in a PCM chunk (a `protos.pcm_split.PcmPart`: it checks every chunk it
    sends, NaN/inf already 0); None for a chunk that came without that check."""
    if not hasattr(header, "num_nonfinite_samples"):
        return None
    return SampleFaults(header.num_nonfinite_samples, header.num_clipped_samples)


class Session:
    def __init__(self, backend: Backend, tokenizer: TextTokenizer, resolved: Resolved, talker: TalkerPeer,
                 max_text_chars: int, deadline_unix_ms: int, request_id: str, ack_timeout_s: float,
                 idle_timeout_s: float, encoder: StreamEncoder | None = None,
                 on_audio_faults: Callable[[str, int, SampleFaults, int], None] | None = None,
                 entered_s: float | None = None, max_message_bytes: int = 16 << 20) -> None:
        """`on_audio_faults(request_id, seq, faults, num_samples)`: a chunk had NaN/inf samples (found by
        the vocoder or the encoder, sent as 0) or samples at or past full scale (GatewayMetrics counts them).
        `entered_s`: the call's arrival at the gateway (monotonic), for the summary's admit_ms.
        `max_message_bytes`: the limit on each client message after the config (INVALID_ARGUMENT)."""
        self.backend, self.resolved, self.talker = backend, resolved, talker
        self.request_id = request_id
        self.max_text_chars = max_text_chars
        self.max_message_bytes = max_message_bytes
        self.deadline_unix_ms = deadline_unix_ms
        self.ack_timeout_s, self.idle_timeout_s = ack_timeout_s, idle_timeout_s
        self.text = IncrementalTokenizer(tokenizer)
        self.encoder = encoder or StreamEncoder(resolved.encoding, NATIVE_SAMPLE_RATE_HZ, resolved.sample_rate_hz,
                                                resolved.speed)
        self.box: Mailbox = backend.open_mailbox(request_id, talker)
        self.on_audio_faults = on_audio_faults
        self.num_text_messages = 0
        self.first_text_s: float | None = None
        self.entered_s = entered_s
        self.first_audio_s: float | None = None
        self.num_chunks = 0
        self.num_samples_out = 0
        self.encode_ms = 0.0
        self.voice_encode_start_s: float | None = None   # per-request clone: the TTFA clock starts here
        self.voice_encode_ms = 0.0
        self.is_finished = False
        # the listener's playback (starts at the first chunk); each later chunk's lateness, seconds
        self.playback = PlaybackClock()
        self.chunk_lateness_s: list[float] = []
        self.reader: asyncio.Task | None = None
        self.early: list[Event] = []

    # ---- talker side ---------------------------------------------------------------------
    async def _send(self, msg_type: T, header, array=None) -> None:
        await self.backend.send(self.talker, msg_type, header, array)

    async def _next_event(self, timeout_s: float) -> Event:
        if self.early:
            return self.early.pop(0)
        queue = self.box.queue
        if not queue.empty():   # under load the next event is often there: no task, no timer
            return queue.get_nowait()
        return await asyncio.wait_for(queue.get(), timeout_s)

    async def _expect(self, kinds: tuple[T, ...], timeout_s: float, what: str) -> Event:
        """The answer to `what`; audio and flush acks that overtake it (they come on other
        sockets) are kept for responses()."""
        deadline_s = time.monotonic() + timeout_s
        while True:
            try:
                event = await asyncio.wait_for(self.box.queue.get(), max(deadline_s - time.monotonic(), 0))
            except asyncio.TimeoutError:
                raise RequestError(grpc.StatusCode.UNAVAILABLE, f"talker {self.talker.peer_id} did not answer "
                                   f"{what} within {timeout_s:g} s") from None
            if event.kind == T.ERROR:
                raise RequestError(status.to_grpc(event.header.code), event.header.message)
            if event.kind in kinds:
                return event
            if event.kind == CLIENT_ERROR:
                raise event.header
            self.early.append(event)

    async def encode_clone(self) -> None:
        """Per-request clone: the talker computes the VoicePrompt first (ENCODE_VOICE)."""
        r = self.resolved
        if r.clone_audio is None:
            return
        self.voice_encode_start_s = time.monotonic()
        await self._move_if_talker_unhealthy()
        self.box.is_on_talker = True
        await self._send(T.ENCODE_VOICE, talker_pb2.EncodeVoice(
            request_id=self.request_id, model=self.talker.model or r.model.name, x_vector_only=r.clone_x_vector_only,
            reference_text_token_ids=r.clone_text_ids, sample_rate_hz=NATIVE_SAMPLE_RATE_HZ), r.clone_audio)
        event = await self._expect((T.VOICE_ENCODED,), self.ack_timeout_s + 60.0, "ENCODE_VOICE")
        r.clone_prompt = event.header.prompt
        self.box.is_on_talker = False   # the talker keeps nothing of it: START may go to any talker
        self.voice_encode_ms = (time.monotonic() - self.voice_encode_start_s) * 1e3

    async def start(self, text_ids: list[int], is_text_complete: bool) -> talker_pb2.Ack:
        await self.send_start(text_ids, is_text_complete)
        return await self.started()

    async def started(self) -> talker_pb2.Ack:
        """The talker's answer to START: its ACK, or the RequestError of its refusal."""
        ack = (await self._expect((T.ACK,), self.ack_timeout_s, "START")).header
        hop_trace.mark(self.request_id, "g_ack_in")
        return ack

    async def send_start(self, text_ids: list[int], is_text_complete: bool) -> None:
        """START to the talker. TEXT sent after it (same socket, so in order) may follow at once:
        the talker reads both in one turn and refuses the TEXT of a START it refused."""
        await self._move_if_talker_unhealthy()
        r = self.resolved
        start = talker_pb2.Start(
            request_id=self.request_id, reply_to=self.backend.reply_to, model=self.talker.model or r.model.name,
            language_codec_id=r.language_codec_id, sampling=r.sampling, text_mode=r.text_mode,
            text_token_ids=text_ids, is_text_complete=is_text_complete, deadline_unix_ms=self.deadline_unix_ms)
        if r.speaker is not None:
            start.speaker.CopyFrom(r.speaker)
        elif r.design is not None:
            start.design.CopyFrom(r.design)
        else:
            start.clone.CopyFrom(r.clone_prompt)
        self.box.is_on_talker = True
        hop_trace.mark(self.request_id, "g_start_out")   # (an "out" mark goes before its send)
        await self._send(T.START, start)

    async def _move_if_talker_unhealthy(self) -> None:
        """Nothing of this request is on its talker yet: if that talker was lost (or drains, or left
        DNS) while the gateway held the request (text being collected, a clone encoded), it goes to
        another one instead of failing."""
        if self.backend.is_usable(self.talker):
            return
        talker = self.backend.reroute(self.box)
        if talker is None:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, f"talker {self.talker.name} is not healthy and no "
                               "other healthy talker with a vocoder is reachable")
        self.talker = talker

    async def send_text(self, ids: list[int]) -> None:
        if ids:
            if not self.num_text_messages:
                hop_trace.mark(self.request_id, "g_text_out")
            await self._send(T.TEXT, talker_pb2.Text(request_id=self.request_id, seq=self.num_text_messages,
                                                      token_ids=ids))
            self.num_text_messages += 1

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        try:
            await self._send(T.ABORT, common_pb2.Abort(request_id=self.request_id, reason=status.from_grpc(code),
                                                       message=message))
        except Exception as exc:  # the talker socket may be gone; the abort is best effort by nature
            logger.warning("request %s: abort not sent: %s", self.request_id, exc)

    # ---- client side ---------------------------------------------------------------------
    def _note_text(self, delta: str) -> None:
        if self.first_text_s is None and delta.strip():
            self.first_text_s = time.monotonic()
            hop_trace.mark(self.request_id, "g_text_in")
        if self.text.num_chars + len(delta) > self.max_text_chars:
            raise InvalidArgument("text", f"text is over the limit of {self.max_text_chars} characters")

    async def read_client(self, messages: AsyncIterator[tts_pb2.StreamSynthesizeRequest]) -> None:
        """Reader task (streaming text mode): client text -> TEXT messages, then END."""
        try:
            async for msg in messages:
                kind = _after_config(msg, self.max_message_bytes)
                if kind == "text":
                    self._note_text(msg.text)
                    await self.send_text(self.text.feed(msg.text))
                elif kind == "flush":
                    await self.send_text(self.text.flush())
                    self.box.put(Event(FLUSH_ACK, tts_pb2.FlushAck(flush_id=msg.flush.flush_id,
                                                                   num_text_tokens=self.text.num_tokens)))
                else:
                    break
            if self.first_text_s is None:  # only whitespace (or nothing) arrived
                raise InvalidArgument("text", "empty text at end of input: nothing to synthesize")
            await self.send_text(self.text.flush())
            await self._send(T.END, talker_pb2.End(request_id=self.request_id,
                                                   num_text_messages=self.num_text_messages))
        except RequestError as exc:
            self.box.put(Event(CLIENT_ERROR, exc))
        except (grpc.aio.AbortError, grpc.aio.AioRpcError, grpc.RpcError) as exc:
            # The call is already ending (aborted or cancelled); responses() reports why.
            logger.debug("request %s: client stream closed: %r", self.request_id, exc)

    async def collect_text(self, messages: AsyncIterator[tts_pb2.StreamSynthesizeRequest]) -> str:
        """Non-streaming text mode: the whole text before Start (flushes are acknowledged at once)."""
        parts: list[str] = []
        acks: list[tts_pb2.FlushAck] = []
        async for msg in messages:
            kind = _after_config(msg, self.max_message_bytes)
            if kind == "text":
                self._note_text(msg.text)
                self.text.num_chars += len(msg.text)
                parts.append(msg.text)
            elif kind == "flush":
                acks.append(tts_pb2.FlushAck(flush_id=msg.flush.flush_id))
            else:
                break
        text = "".join(parts)
        if not text.strip():
            raise InvalidArgument("text", "empty text at end of input: nothing to synthesize")
        for ack in acks:
            self.box.put(Event(FLUSH_ACK, ack))
        return text

    # ---- audio out -----------------------------------------------------------------------
    def _audio_response(self, pcm, is_last: bool, seq: int = 0,
                        upstream_faults: SampleFaults | None = None) -> tts_pb2.StreamSynthesizeResponse | None:
        """The response carrying this PCM chunk's audio (None while an encoder holds it back);
        `upstream_faults`: the vocoder's check of this chunk (the encoder trusts it); None: unchecked."""
        t0 = time.perf_counter()
        encoded = self.encoder.encode(pcm, is_last, upstream_faults)
        self.encode_ms += (time.perf_counter() - t0) * 1e3
        faults = encoded.faults
        if faults and self.on_audio_faults is not None:
            self.on_audio_faults(self.request_id, seq, faults, len(pcm))
        if not encoded.audio:
            return None
        # the response built around its chunk: a chunk made first would be copied into it, audio and all
        response = tts_pb2.StreamSynthesizeResponse()
        chunk = response.audio
        chunk.audio = encoded.audio
        chunk.sequence_number = self.num_chunks
        chunk.sample_offset = self.num_samples_out
        chunk.num_samples = encoded.num_samples
        chunk.duration_ms = encoded.num_samples * 1e3 / self.resolved.sample_rate_hz
        self.num_chunks += 1
        self.num_samples_out += encoded.num_samples
        if self.first_audio_s is None:
            self.first_audio_s = time.monotonic()
            hop_trace.mark(self.request_id, "g_audio_out")
        is_first = not self.playback.is_started
        lateness_s = self.playback.on_chunk(time.monotonic(), encoded.num_samples / self.resolved.sample_rate_hz)
        if not is_first:
            self.chunk_lateness_s.append(lateness_s)
        return response

    def _summary(self, pcm_header) -> tts_pb2.SynthesisSummary:
        gen = pcm_header.generation
        audio_s = self.num_samples_out / self.resolved.sample_rate_hz
        start_s = self.first_text_s or time.monotonic()
        wall_s = time.monotonic() - start_s
        # the client's text waits (unread) while its clone is encoded: that wait is first-audio time
        ttfa_start_s = min(start_s, self.voice_encode_start_s or start_s)
        ttfa_ms = ((self.first_audio_s or time.monotonic()) - ttfa_start_s) * 1e3
        return tts_pb2.SynthesisSummary(
            audio_s=audio_s, time_to_first_audio_ms=ttfa_ms, real_time_factor=wall_s / audio_s if audio_s else 0.0,
            num_frames=gen.num_frames, num_text_tokens=gen.num_text_tokens or self.text.num_tokens,
            finish_reason=gen.finish_reason or tts_pb2.FINISH_REASON_END_OF_SPEECH,
            timings=tts_pb2.ServerTimings(queue_ms=gen.queue_ms, prefill_ms=gen.prefill_ms,
                                          first_frame_ms=gen.first_frame_ms, second_frame_ms=gen.second_frame_ms,
                                          encode_ms=self.encode_ms,
                                          voice_encode_ms=self.voice_encode_ms,
                                          admit_ms=max(0.0, ttfa_start_s - (self.entered_s or ttfa_start_s)) * 1e3),
            num_stalls=self.playback.num_stalls, longest_stall_ms=self.playback.longest_stall_s * 1e3)

    async def responses(self) -> AsyncIterator[tts_pb2.StreamSynthesizeResponse]:
        """Audio chunks and flush acks until the final chunk, then the summary."""
        vocoder_first_ms = vocoder_decode_ms = 0.0
        while True:
            try:
                event = await self._next_event(self.idle_timeout_s)
            except asyncio.TimeoutError:
                raise RequestError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                   f"no audio for {self.idle_timeout_s:g} s from talker {self.talker.peer_id}") from None
            if event.kind == CLIENT_ERROR:
                raise event.header
            if event.kind == T.ERROR:
                raise RequestError(status.to_grpc(event.header.code), event.header.message)
            if event.kind == FLUSH_ACK:
                yield tts_pb2.StreamSynthesizeResponse(flush_ack=event.header)
            elif event.kind == T.PCM:
                header = event.header
                vocoder_decode_ms += header.timings.decode_ms
                if header.seq == 0:
                    vocoder_first_ms = header.timings.queue_ms + header.timings.decode_ms
                pcm = event.array if event.array is not None else _EMPTY
                response = self._audio_response(pcm, header.is_final, header.seq, vocoder_faults(header))
                if response is not None:
                    yield response
                if header.is_final:
                    self.is_finished = True
                    summary = self._summary(header)
                    summary.timings.vocoder_first_chunk_ms = vocoder_first_ms
                    summary.timings.vocoder_decode_ms = vocoder_decode_ms
                    yield tts_pb2.StreamSynthesizeResponse(summary=summary)
                    return

    async def close(self, exc: BaseException | None) -> None:
        if self.reader is not None and not self.reader.done():
            self.reader.cancel()
        if not self.is_finished:
            if isinstance(exc, RequestError):
                code, message = exc.code, exc.message
            elif isinstance(exc, asyncio.CancelledError):
                code, message = grpc.StatusCode.CANCELLED, "client cancelled or deadline passed"
            else:
                code, message = grpc.StatusCode.CANCELLED, "call ended"
            await self.abort(code, message)
        self.encoder.close()
        self.backend.close_mailbox(self.box)

