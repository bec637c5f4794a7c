"""ENCODE_VOICE: reference audio -> VoicePrompt, computed on a worker thread beside the loop.

Encoding runs the speaker encoder (and, for in-context cloning, the codec encoder) over up to
`max_duration_s` of audio: far longer than a decode step, so it never runs on the loop thread.
The loop checks the request at once (model, sizes, capacity) and answers refusals itself; the
worker loads both encoders on its first job (Base checkpoints only, once) and hands finished
answers back through `take_finished()`, which the loop drains every iteration. A clip encoded
before (same content, mode and transcript: `VoiceCache`) is answered from the cache at once on
the loop thread, and checked again by the worker, so a burst of one clip is encoded once. At most
`max_pending` encodings are queued or running (64: a burst of clone requests waits its turn, as
vllm-omni's refusal-free path does); beyond that the request is refused with RESOURCE_EXHAUSTED
instead of waiting without bound. `VoiceRequests` is the loop's side: the
ENCODE_VOICE handler and the answers sent back to each gateway.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from checkpoint.errors import CheckpointError
from protos import wire
from protos.tts.internal.v1 import talker_pb2
from talker_service.engine import EngineError
from talker_service.server.outbox import Outbox
from talker_service.server.voice_cache import VoiceCache, voice_key
from talker_service.voice.builder import build_clone_prompt
from talker_service.voice.reference_audio import ReferenceAudioLimits, resample_to_24k, validate_reference_audio

logger = logging.getLogger(__name__)


@dataclass
class VoiceJob:
    identity: bytes                       # the gateway's ROUTER identity: the answer goes back there
    request: talker_pb2.EncodeVoice
    audio: np.ndarray                     # [num_samples] float32 at request.sample_rate_hz
    key: bytes = b""                      # VoiceCache key of (audio, rate, mode, transcript)


@dataclass
class VoiceAnswer:
    identity: bytes
    request_id: str
    encoded: talker_pb2.VoiceEncoded | None = None
    error: EngineError | None = None


class VoiceEncoding:
    def __init__(self, model_dir: str | Path | None, model_type: str, model_name: str, hidden_size: int,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 limits: ReferenceAudioLimits = ReferenceAudioLimits(), max_pending: int = 64,
                 max_cached: int = 256) -> None:
        self.model_dir = model_dir
        self.model_type = model_type
        self.model_name = model_name
        self.hidden_size = hidden_size
        self.device = device
        self.dtype = dtype
        self.limits = limits
        self.max_pending = max_pending
        self.cache = VoiceCache(max_cached)
        self._encoders = None             # (speaker, codec), loaded by the worker on first use
        self._jobs: queue.Queue[VoiceJob | None] = queue.Queue()
        self._answers: queue.SimpleQueue[VoiceAnswer] = queue.SimpleQueue()
        self._num_pending = 0             # loop thread only: submitted, answer not taken yet
        self._worker: threading.Thread | None = None
        self.num_encoded = 0
        self.num_failed = 0

    # ---- loop thread ----------------------------------------------------------------------------
    def submit(self, identity: bytes, request: talker_pb2.EncodeVoice, audio: np.ndarray | None) -> None:
        """Queue one encoding; EngineError (answered by the caller) when it is refused at once."""
        self.check(request, audio)
        key = voice_key(request, audio)
        cached = self.cache.get(key)
        if cached is not None:   # answered through the same queue, so answers keep one path
            self._num_pending += 1
            self._answers.put(VoiceAnswer(identity, request.request_id, encoded=talker_pb2.VoiceEncoded(
                request_id=request.request_id, prompt=cached, encode_ms=0.0)))
            logger.info("request %s: voice answered from the cache", request.request_id)
            return
        if self._num_pending >= self.max_pending:
            raise EngineError("RESOURCE_EXHAUSTED", f"request {request.request_id!r}: {self._num_pending} voice "
                                                    "encodings already in progress; retry later")
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="voice-encoder", daemon=True)
            self._worker.start()
        self._num_pending += 1
        self._jobs.put(VoiceJob(identity, request, np.array(audio, dtype=np.float32), key))   # copy: the frame is reused
        logger.info("request %s: voice encoding queued (%.2f s of audio at %d Hz, %s)", request.request_id,
                    len(audio) / request.sample_rate_hz, request.sample_rate_hz,
                    "x-vector only" if request.x_vector_only else "in-context")

    def check(self, request: talker_pb2.EncodeVoice, audio: np.ndarray | None) -> None:
        rid = request.request_id
        if not rid:
            raise EngineError("INVALID_ARGUMENT", "EncodeVoice.request_id is empty")
        if request.model and request.model != self.model_name:
            raise EngineError("NOT_FOUND", f"request {rid!r}: model {request.model!r} is not served here "
                                           f"(this talker serves {self.model_name!r})")
        if self.model_type != "base":
            raise EngineError("FAILED_PRECONDITION", f"request {rid!r}: voice cloning needs a Base model; "
                                                     f"{self.model_name!r} is a {self.model_type} model")
        if self.model_dir is None:
            raise EngineError("FAILED_PRECONDITION", f"request {rid!r}: this talker has no checkpoint to load the "
                                                     "voice encoders from")
        if audio is None or audio.ndim != 1 or audio.dtype != np.float32:
            got = "none" if audio is None else f"{audio.dtype} {list(audio.shape)}"
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: the reference audio frame must be float32 "
                                                  f"[num_samples], got {got}")
        rate = request.sample_rate_hz
        if not self.limits.min_sample_rate_hz <= rate <= self.limits.max_sample_rate_hz:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: sample_rate_hz {rate} not in "
                                                  f"[{self.limits.min_sample_rate_hz}, {self.limits.max_sample_rate_hz}]")
        # refused here so an oversized clip never reaches the worker (the full checks run there)
        if len(audio) > self.limits.max_duration_s * rate:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: reference audio is {len(audio) / rate:.1f} s; "
                                                  f"at most {self.limits.max_duration_s:g} s")
        if not request.x_vector_only and not request.reference_text_token_ids:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: reference_text_token_ids is empty; in-context "
                                                  "cloning needs the transcript (or set x_vector_only)")

    def take_finished(self) -> list[VoiceAnswer]:
        answers = []
        while True:
            try:
                answers.append(self._answers.get_nowait())
            except queue.Empty:
                self._num_pending -= len(answers)
                return answers

    @property
    def num_pending(self) -> int:
        return self._num_pending

    def close(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(timeout=5.0)

    # ---- worker thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            rid = job.request.request_id
            started_s = time.perf_counter()
            try:
                prompt = self.cache.get(job.key)   # the same clip may have been queued twice
                if prompt is None:
                    prompt = self.encode(job.request, job.audio)
                    self.cache.put(job.key, prompt)
                    self.num_encoded += 1
                encode_ms = (time.perf_counter() - started_s) * 1e3
                answer = VoiceAnswer(job.identity, rid, encoded=talker_pb2.VoiceEncoded(
                    request_id=rid, prompt=prompt, encode_ms=encode_ms))
                logger.info("request %s: voice encoded in %.0f ms (%d reference frames)", rid, encode_ms,
                            prompt.num_reference_frames)
            except CheckpointError as exc:   # before ValueError: it is one, but not the caller's fault
                answer = self._failed(job, "FAILED_PRECONDITION", f"voice encoders could not be loaded: {exc}")
            except ValueError as exc:
                answer = self._failed(job, "INVALID_ARGUMENT", str(exc))
            except Exception as exc:   # a device fault: this request fails, the talker goes on
                logger.exception("request %s: voice encoding crashed", rid)
                answer = self._failed(job, "INTERNAL", f"{type(exc).__name__}: {exc}")
            self._answers.put(answer)

    def _failed(self, job: VoiceJob, code: str, message: str) -> VoiceAnswer:
        self.num_failed += 1
        rid = job.request.request_id
        logger.warning("request %s: voice encoding failed (%s): %s", rid, code, message)
        return VoiceAnswer(job.identity, rid, error=EngineError(code, f"request {rid!r}: {message}"))

    def encoders(self):
        if self._encoders is None:
            from talker_service.voice.codec_encoder import load_codec_encoder
            from talker_service.voice.xvector import load_speaker_encoder
            self._encoders = (load_speaker_encoder(self.model_dir, self.device, self.dtype),
                              load_codec_encoder(self.model_dir, self.device, self.dtype))
        return self._encoders

    def encode(self, request: talker_pb2.EncodeVoice, audio: np.ndarray) -> talker_pb2.VoicePrompt:
        """The VoicePrompt of one request (worker thread; also usable directly)."""
        speaker_encoder, codec_encoder = self.encoders()
        rate = request.sample_rate_hz
        # The transcript arrives as token ids (the gateway tokenized it), so only the audio goes
        # through build_clone_prompt; the codes come from the same checked, resampled audio.
        clone = build_clone_prompt(audio, rate, None, speaker_encoder, None, None, x_vector_only=True,
                                   limits=self.limits)
        clone.check_hidden_size(self.hidden_size, "this talker")
        prompt = talker_pb2.VoicePrompt(model=self.model_name, x_vector_only=request.x_vector_only,
                                        speaker_embedding=clone.x_vector.float().tolist())
        if not request.x_vector_only:
            codes = codec_encoder.encode(resample_to_24k(validate_reference_audio(audio, rate, self.limits), rate))
            prompt.reference_codes.extend(codes.reshape(-1).tolist())    # [K, 16] frame-major
            prompt.num_reference_frames = codes.shape[0]
            prompt.reference_text_token_ids.extend(request.reference_text_token_ids)
        return prompt


class VoiceRequests:
    """ENCODE_VOICE on the loop thread: refusals answered at once, finished encodings sent back."""

    def __init__(self, voices: VoiceEncoding, outbox: Outbox) -> None:
        self.voices = voices
        self.outbox = outbox

    def on_encode_voice(self, identity: bytes, request: talker_pb2.EncodeVoice, audio: np.ndarray | None) -> None:
        try:
            self.voices.submit(identity, request, audio)
        except EngineError as exc:
            logger.warning("request %s: ENCODE_VOICE refused: %s", request.request_id or "-", exc.message)
            self.outbox.error_to_gateway(identity, request.request_id, exc.code, exc.message)

    def send_answers(self) -> None:
        for answer in self.voices.take_finished():
            if answer.error is not None:
                self.outbox.error_to_gateway(answer.identity, answer.request_id, answer.error.code,
                                             answer.error.message)
            else:
                self.outbox.to_gateway(answer.identity, wire.MessageType.VOICE_ENCODED, answer.encoded)
