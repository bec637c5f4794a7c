"""ENCODE_VOICE: reference audio -> VoicePrompt, computed on a worker thread beside the loop.

Encoding runs the speaker encoder (and, for in-context cloning, the codec encoder) over up to
`max_duration_s` of audio: far longer than a decode step, so it never runs on the loop thread.
The loop checks the request at once (model, sizes, capacity) and answers refusals itself; the
worker (`VoiceWorker`, voice_worker.py) loads both encoders on its first job (Base checkpoints
only, once), encodes whatever is queued together as one batch, and hands finished answers back
through `take_finished()`, which the loop drains every iteration. A clip encoded before (same
content, mode and transcript: `VoiceCache`) is answered from the cache at once on the loop
thread, and checked again by the worker, so a burst of one clip is encoded once. At most
`max_pending` encodings are queued or running (64: a burst of clone requests waits its turn, as
vllm-omni's refusal-free path does); beyond that the request is refused with RESOURCE_EXHAUSTED
instead of waiting without bound. `VoiceRequests` is the loop's side: the ENCODE_VOICE handler
and the answers sent back to each gateway.
"""
from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path

import numpy as np
import torch

from protos import wire
from protos.tts.internal.v1 import admin_pb2, talker_pb2
from talker_service.engine import EngineError
from talker_service.server.outbox import Outbox
from talker_service.server.voice_cache import VoiceCache, voice_key
from talker_service.server.voice_stats import VoiceStats
from talker_service.server.voice_worker import VoiceAnswer, VoiceJob, VoiceWorker
from talker_service.voice.batch_encode import ReferenceEncoder
from talker_service.voice.reference_audio import TARGET_SAMPLE_RATE_HZ, ReferenceAudioLimits
from talker_service.voice.shape_buckets import ShapeBuckets

logger = logging.getLogger(__name__)


class VoiceEncoding:
    def __init__(self, model_dir: str | Path | None, model_type: str, model_name: str, hidden_size: int,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 limits: ReferenceAudioLimits = ReferenceAudioLimits(), max_pending: int = 64,
                 max_cached: int = 256, max_batch_jobs: int = 16, max_batch_audio_s: float = 80.0,
                 warm_up: bool = False, bucket_s: float = 2.5) -> None:
        if max_batch_jobs < 1 or max_batch_audio_s <= 0:
            raise ValueError(f"need max_batch_jobs >= 1 and max_batch_audio_s > 0, got {max_batch_jobs}, "
                             f"{max_batch_audio_s}")
        self.model_dir = model_dir
        self.model_type = model_type
        self.model_name = model_name
        self.hidden_size = hidden_size
        self.device = device
        self.dtype = dtype
        self.limits = limits
        self.max_pending = max_pending
        self.max_batch_jobs = max_batch_jobs
        self.max_batch_samples = int(max_batch_audio_s * TARGET_SAMPLE_RATE_HZ)
        self.cache = VoiceCache(max_cached)
        self.stats = VoiceStats()
        self._encoder: ReferenceEncoder | None = None   # loaded by the worker on first use
        self._jobs: queue.Queue[VoiceJob | None] = queue.Queue()
        self._answers: queue.SimpleQueue[VoiceAnswer] = queue.SimpleQueue()
        self._num_pending = 0             # loop thread only: submitted, answer not taken yet
        self._worker: threading.Thread | None = None
        self.worker: VoiceWorker | None = None   # what that thread runs
        # warm-up: encoders loaded and every bucketed shape run once on the worker thread from the
        # start (shape_buckets.py: a new shape's first forward cost up to 1 s on the H200)
        self.buckets = ShapeBuckets(max_batch_jobs, int(bucket_s * TARGET_SAMPLE_RATE_HZ), self.max_batch_samples,
                                    int(limits.max_duration_s * TARGET_SAMPLE_RATE_HZ)) if warm_up else None
        if warm_up and model_type == "base" and model_dir is not None:
            self._start_worker(self.buckets.warm_up_order())

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
            self._start_worker()
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

    @property
    def num_encoded(self) -> int:
        return self.stats.num_encoded

    @property
    def num_failed(self) -> int:
        return self.stats.num_failed

    def stats_proto(self, reset: bool) -> admin_pb2.VoiceEncodingStats:
        return self.stats.to_proto(self.cache.num_hits, self._num_pending, reset)

    def _start_worker(self, warm_up_shapes: list[tuple[int, int]] | None = None) -> None:
        self.worker = VoiceWorker(self._jobs, self._answers, self.cache, self.stats, self.encoder, self.model_name,
                                  self.hidden_size, self.max_batch_jobs, warm_up_shapes)
        self._worker = threading.Thread(target=self.worker.run, name="voice-encoder", daemon=True)
        self._worker.start()

    def wait_until_warm(self, timeout_s: float) -> bool:
        """Block until the encoders' background warm-up is done (True), or timeout_s passed (False);
        True at once when there is none (not a Base model, warm-up off)."""
        return self.worker is None or self.worker.warmed.wait(timeout_s)

    def close(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(timeout=5.0)

    def encoder(self) -> ReferenceEncoder:
        """Both encoders, loaded on first use (worker thread); a CheckpointError if they cannot be."""
        if self._encoder is None:
            from talker_service.voice.codec_encoder import load_codec_encoder
            from talker_service.voice.xvector import load_speaker_encoder
            self._encoder = ReferenceEncoder(load_speaker_encoder(self.model_dir, self.device, self.dtype),
                                             load_codec_encoder(self.model_dir, self.device, self.dtype),
                                             self.limits, self.max_batch_samples, self.buckets)
        return self._encoder


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
