"""tts.v1.TextToSpeech on grpc.aio: converts protobuf <-> sessions, maps failures to statuses.

Admission is a counter checked before any work: a call beyond `max_streams` ends at once with
RESOURCE_EXHAUSTED, and a call that cannot reach a healthy talker ends with UNAVAILABLE.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import grpc
import numpy as np

from gateway.audio_encoding import StreamEncoder, whole_file
from gateway.backend import Backend
from gateway.config import GatewayConfig
from gateway.errors import InvalidArgument, RequestError
from gateway.metrics import GatewayMetrics
from gateway.model_info import NATIVE_SAMPLE_RATE_HZ, ModelInfo
from gateway.reference_audio import decode_reference_audio
from gateway.resolve import Resolver
from gateway.session import Session, check_size, new_request_id
from gateway.text_tokenizer import TextTokenizer
from gateway.unary_limit import check_unary_audio
from gateway.voices import VOICE_ID, VoiceRecord, VoiceRegistry
from protos import wire
from protos.tts.internal.v1 import talker_pb2
from protos.tts.v1 import config_pb2, tts_pb2, tts_pb2_grpc, voices_pb2

logger = logging.getLogger(__name__)


class _Scope:
    """What a call has acquired so far: its session, once created."""
    session: Session | None = None


class TextToSpeechServicer(tts_pb2_grpc.TextToSpeechServicer):
    def __init__(self, config: GatewayConfig, model: ModelInfo, tokenizer: TextTokenizer, backend: Backend,
                 voices: VoiceRegistry, metrics: GatewayMetrics) -> None:
        self.config, self.model, self.tokenizer = config, model, tokenizer
        self.backend, self.voices, self.metrics = backend, voices, metrics
        self.resolver = Resolver(model, tokenizer, voices, config.min_reference_audio_s, config.max_reference_audio_s)
        self.num_active = 0
        self.is_draining = False
        # (ServerTimings field, its tts_stage_seconds child): looked up once, not per request
        self._stages = [(f.name, metrics.stage_s.labels(stage=f.name.removesuffix("_ms")))
                        for f in tts_pb2.ServerTimings.DESCRIPTOR.fields]

    # ---- shared pieces -------------------------------------------------------------------
    @contextlib.contextmanager
    def _admit(self, method: str):
        self.metrics.requests.labels(method).inc()
        if self.is_draining:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
        if self.num_active >= self.config.max_streams:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"over capacity: {self.num_active} of {self.config.max_streams} streams busy")
        self.num_active += 1
        self.metrics.active_streams.set(self.num_active)
        self.metrics.queue_depth.set(sum(t.load.num_requests_queued for t in self.backend.talkers))
        try:
            yield
        finally:
            self.num_active -= 1
            self.metrics.active_streams.set(self.num_active)

    async def _resolve(self, cfg: config_pb2.SynthesisConfig, is_unary: bool):
        """The config checked and resolved: in this loop when that is quick (cheaper than a loop turn
        for a thread's answer under load), else in a thread so the loop keeps serving."""
        if self.resolver.is_quick(cfg):
            return self.resolver.resolve(cfg, is_unary)
        return await asyncio.to_thread(self.resolver.resolve, cfg, is_unary)

    def _session(self, resolved, context, entered_s: float, encoder=None) -> Session:
        talker = self.backend.pick_talker()
        if talker is None:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "no healthy talker with a vocoder is reachable")
        remaining_s = context.time_remaining()
        deadline_unix_ms = int((time.time() + remaining_s) * 1e3) if remaining_s is not None else 0
        return Session(self.backend, self.tokenizer, resolved, talker, self.config.max_text_chars, deadline_unix_ms,
                       new_request_id(), self.config.ack_timeout_s, self.config.audio_idle_timeout_s, encoder,
                       self.metrics.count_audio_faults, entered_s, self.config.max_message_bytes)

    async def _fail(self, context, exc: RequestError, request_id: str = "-") -> None:
        self.metrics.errors.labels(exc.code.name).inc()
        logger.info("request %s: %s %s", request_id, exc.code.name, exc.message)
        await context.abort(exc.code, exc.message)

    @contextlib.asynccontextmanager
    async def _request(self, method: str, context):
        """One synthesis call: admission, a RequestError turned into its gRPC status, and the
        session (set on the yielded scope once created) closed whatever way the call ends."""
        scope = _Scope()
        error: BaseException | None = None
        try:
            with self._admit(method):
                yield scope
        except RequestError as exc:
            error = exc
            await self._fail(context, exc, scope.session.request_id if scope.session else "-")
        except BaseException as exc:
            error = exc
            raise
        finally:
            if scope.session is not None:
                await scope.session.close(error)

    def _observe(self, summary: tts_pb2.SynthesisSummary, chunk_lateness_s: list[float] = ()) -> None:
        """A finished request's summary; `chunk_lateness_s`: a stream's chunks against their playback
        deadlines (negative: early), each observed as its lateness past the deadline or 0."""
        self.metrics.ttfa_s.observe(summary.time_to_first_audio_ms / 1e3)
        for lateness_s in chunk_lateness_s:
            self.metrics.chunk_lateness_s.observe(max(lateness_s, 0.0))
        if summary.audio_s:
            self.metrics.rtf.observe(summary.real_time_factor)
        self.metrics.audio_s.inc(summary.audio_s)
        timings = summary.timings
        for name, stage in self._stages:   # every stage, so the counts match
            stage.observe(getattr(timings, name) / 1e3)

    # ---- StreamSynthesize ----------------------------------------------------------------
    async def StreamSynthesize(self, request_iterator, context) -> AsyncIterator[tts_pb2.StreamSynthesizeResponse]:
        entered_s = time.monotonic()
        async with self._request("StreamSynthesize", context) as scope:
            messages = request_iterator.__aiter__()
            try:
                first = await messages.__anext__()
            except StopAsyncIteration:
                raise InvalidArgument("config", "no messages: the first message must be a config") from None
            check_size(first, self.config.max_message_bytes)
            if first.WhichOneof("request") != "config":
                raise InvalidArgument("config", f"the first message must be a config, got "
                                      f"{first.WhichOneof('request') or 'an empty message'}")
            resolved = await self._resolve(first.config, False)
            session = scope.session = self._session(resolved, context, entered_s)
            logger.info("request %s: stream on talker %s (%s, %s)", session.request_id, session.talker.peer_id,
                        resolved.voice_field, config_pb2.TextMode.Name(resolved.text_mode))
            await session.encode_clone()
            if resolved.text_mode == config_pb2.TEXT_MODE_NON_STREAMING:
                text = await session.collect_text(messages)
                ids = self.tokenizer.target_ids(text)
                session.text.num_tokens = len(ids)
                await session.start(ids, True)
                yield tts_pb2.StreamSynthesizeResponse(start=resolved.start_message(session.request_id))
            else:
                # the client's text goes to the talker right behind START, not after its ACK: under
                # load the round trip was a talker step and two gateway loop turns of first audio
                # that the server's TTFA clock (from the first text read) did not see
                await session.send_start([], False)
                session.reader = asyncio.get_running_loop().create_task(session.read_client(messages))
                await session.started()
                yield tts_pb2.StreamSynthesizeResponse(start=resolved.start_message(session.request_id))
            async for response in session.responses():
                if response.HasField("summary"):
                    self._observe(response.summary, session.chunk_lateness_s)
                yield response

    # ---- Synthesize ----------------------------------------------------------------------
    async def Synthesize(self, request: tts_pb2.SynthesizeRequest, context) -> tts_pb2.SynthesizeResponse:
        entered_s = time.monotonic()
        async with self._request("Synthesize", context) as scope:
            if not request.HasField("config"):
                raise InvalidArgument("config", "required")
            resolved = await self._resolve(request.config, True)
            if not request.text.strip():
                raise InvalidArgument("text", "empty text: nothing to synthesize")
            if len(request.text) > self.config.max_text_chars:
                raise InvalidArgument("text", f"text is over the limit of {self.config.max_text_chars} characters")
            ids = self.tokenizer.target_ids(request.text)
            # the whole reply must be receivable: refused here, before a talker or vocoder works on it
            check_unary_audio(resolved, len(ids), self.config.max_unary_audio_bytes)
            # Collect float PCM at the output rate; WAV/Opus are then written as whole files.
            is_file = resolved.encoding in (config_pb2.AUDIO_ENCODING_WAV, config_pb2.AUDIO_ENCODING_OGG_OPUS)
            encoder = (StreamEncoder(config_pb2.AUDIO_ENCODING_FLOAT32, NATIVE_SAMPLE_RATE_HZ,
                                     resolved.sample_rate_hz, resolved.speed) if is_file else None)
            session = scope.session = self._session(resolved, context, entered_s, encoder)
            session.first_text_s = time.monotonic()
            await session.encode_clone()
            session.text.num_tokens = len(ids)
            await session.start(ids, True)
            parts, summary = [], None
            async for response in session.responses():
                if response.HasField("audio"):
                    parts.append(response.audio.audio)
                elif response.HasField("summary"):
                    summary = response.summary
            audio = b"".join(parts)
            if is_file:
                t0 = time.perf_counter()
                audio = whole_file(np.frombuffer(audio, "<f4"), resolved.sample_rate_hz, resolved.encoding)
                summary.timings.encode_ms += (time.perf_counter() - t0) * 1e3
            self._observe(summary)
            return tts_pb2.SynthesizeResponse(start=resolved.start_message(session.request_id), audio=audio,
                                              summary=summary)

    # ---- voices --------------------------------------------------------------------------
    async def ListVoices(self, request, context) -> voices_pb2.ListVoicesResponse:
        if request.model and request.model != self.model.name:
            await self._fail(context, InvalidArgument("model", f"unknown model {request.model!r}; served: {self.model.name}"))
        return voices_pb2.ListVoicesResponse(models=[self.model.describe(is_default=True)],
                                             registered_voices=await asyncio.to_thread(self.voices.list,
                                                                                       self.model.name))

    async def RegisterVoice(self, request, context) -> voices_pb2.RegisterVoiceResponse:
        try:
            return await self._register(request)
        except RequestError as exc:
            await self._fail(context, exc)

    async def _register(self, request) -> voices_pb2.RegisterVoiceResponse:
        if request.model and request.model != self.model.name:
            raise InvalidArgument("model", f"unknown model {request.model!r}; served: {self.model.name}")
        if self.model.model_type != "base":
            raise InvalidArgument("model", f"voice cloning needs a base model; {self.model.name} is {self.model.model_type}")
        voice_id = request.voice_id or self.voices.new_id()
        if not VOICE_ID.match(voice_id):
            raise InvalidArgument("voice_id", f"{voice_id!r} must be 1-64 chars of [a-z0-9_-]")
        if await asyncio.to_thread(self.voices.get, voice_id) is not None and not request.overwrite:
            raise RequestError(grpc.StatusCode.ALREADY_EXISTS, f"voice_id: {voice_id!r} exists (set overwrite)")
        clone = request.clone
        if not clone.x_vector_only and not clone.reference_text.strip():
            raise InvalidArgument("clone.reference_text", "required unless x_vector_only is true")
        audio = await asyncio.to_thread(decode_reference_audio, clone.reference_audio, "clone.reference_audio",
                                        self.config.min_reference_audio_s, self.config.max_reference_audio_s)
        talker = self.backend.pick_talker()
        if talker is None:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "no healthy talker is reachable to encode the voice")
        request_id = new_request_id()
        box = self.backend.open_mailbox(request_id, talker)
        box.is_on_talker = True   # the talker lost while it encodes: UNAVAILABLE naming it, not a 70 s wait
        try:
            ids = [] if clone.x_vector_only else self.tokenizer.encode(clone.reference_text)
            await self.backend.send(talker, wire.MessageType.ENCODE_VOICE, talker_pb2.EncodeVoice(
                request_id=request_id, model=talker.model or self.model.name, x_vector_only=clone.x_vector_only,
                reference_text_token_ids=ids, sample_rate_hz=NATIVE_SAMPLE_RATE_HZ), audio)
            try:
                event = await asyncio.wait_for(box.queue.get(), self.config.ack_timeout_s + 60.0)
            except asyncio.TimeoutError:
                raise RequestError(grpc.StatusCode.UNAVAILABLE, "talker did not answer ENCODE_VOICE") from None
        finally:
            self.backend.close_mailbox(box)
        if event.kind == wire.MessageType.ERROR:
            from protos.status import to_grpc
            raise RequestError(to_grpc(event.header.code), event.header.message)
        voice = voices_pb2.RegisteredVoice(
            voice_id=voice_id, model=self.model.name, display_name=request.display_name,
            reference_text="" if clone.x_vector_only else clone.reference_text, x_vector_only=clone.x_vector_only,
            reference_audio_s=audio.size / NATIVE_SAMPLE_RATE_HZ, created_unix_ms=int(time.time() * 1e3))
        await asyncio.to_thread(self.voices.put, VoiceRecord(voice, event.header.prompt))
        logger.info("registered voice %s (%.1f s reference)", voice_id, voice.reference_audio_s)
        return voices_pb2.RegisterVoiceResponse(voice=voice)

    async def DeleteVoice(self, request, context) -> voices_pb2.DeleteVoiceResponse:
        record = await asyncio.to_thread(self.voices.delete, request.voice_id)
        if record is None:
            await self._fail(context, RequestError(grpc.StatusCode.NOT_FOUND,
                                                   f"voice_id: no registered voice {request.voice_id!r}"))
        return voices_pb2.DeleteVoiceResponse(voice=record.voice)
