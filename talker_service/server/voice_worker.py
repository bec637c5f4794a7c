"""The encoder thread of ENCODE_VOICE: everything queued at that moment is encoded as one batch.

Under load one encode at a time made every clone request wait for all before it: on an H200
beside a busy talker a 5 s in-context reference took p50 186 ms and up to 1.7 s (an x-vector alone
is 8 ms on an idle GPU), so clone TTFA p95 grew from 2.3 s at 4 streams to 13 s at 32. Most of
that wait turned out to be the decode loop's pageable read-backs holding up this thread's kernel
launches (fixed by service_common/host_copy.py); what is left per forward is paid once per batch.
So the thread blocks for the first job, takes every other job already queued (up to
`max_batch_jobs`) and encodes them together (`ReferenceEncoder`: one mel, speaker-encoder and
codec-encoder forward per padded-audio budget). Per job, the cache is asked first, as before;
copies of one clip in the same batch are encoded once and the copies answered from the cache, as
if they had come one after the other. Each request gets its own answer or its own error: a bad
clip fails only itself.

On CUDA the encoders run on a stream of their own, so their kernels overlap the talker's decode
steps instead of queueing between them on the default stream.
"""
from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from checkpoint.errors import CheckpointError
from protos.tts.internal.v1 import talker_pb2
from talker_service.engine import EngineError
from talker_service.server.voice_cache import VoiceCache
from talker_service.server.voice_stats import VoiceStats
from talker_service.voice.batch_encode import EncodedReference, ReferenceClip, ReferenceEncoder
from talker_service.voice.clone_prompt import VoiceClonePrompt

logger = logging.getLogger(__name__)


@dataclass
class VoiceJob:
    identity: bytes                       # the gateway's ROUTER identity: the answer goes back there
    request: talker_pb2.EncodeVoice
    audio: np.ndarray                     # [num_samples] float32 at request.sample_rate_hz
    key: bytes = b""                      # VoiceCache key of (audio, rate, mode, transcript)
    submitted_s: float = field(default_factory=time.perf_counter)


@dataclass
class VoiceAnswer:
    identity: bytes
    request_id: str
    encoded: talker_pb2.VoiceEncoded | None = None
    error: EngineError | None = None


class VoiceWorker:
    def __init__(self, jobs: queue.Queue, answers: queue.SimpleQueue, cache: VoiceCache, stats: VoiceStats,
                 load_encoder: Callable[[], ReferenceEncoder], model_name: str, hidden_size: int,
                 max_batch_jobs: int, warm_up_shapes: list[tuple[int, int]] | None = None) -> None:
        self.jobs = jobs                  # VoiceJob, or None: stop
        self.answers = answers
        self.cache = cache
        self.stats = stats
        self.load_encoder = load_encoder  # called on this thread, once per batch until it succeeds
        self.model_name = model_name
        self.hidden_size = hidden_size
        self.max_batch_jobs = max_batch_jobs
        self._stream = None               # CUDA: the encoders' own stream, made with the encoder
        self._unanswered: dict[int, VoiceJob] = {}   # id -> job of the batch being encoded, until answered
        self.warm_up_left = list(warm_up_shapes or [])   # (clips, samples) not yet run; requests go first
        self.warm_up_s = 0.0
        self.warmed = threading.Event()   # set once no shape is left (or the warm-up gave up)
        if not self.warm_up_left:
            self.warmed.set()

    def run(self) -> None:
        while self.warm_up_left and self.jobs.empty():
            self.warm_up_some()
        while (batch := self.take_batch()) is not None:
            jobs, stop = batch
            self._unanswered = {id(job): job for job in jobs}
            try:
                self.encode_jobs(jobs)
            except Exception as exc:   # a fault of ours: the batch's requests fail, the thread goes on
                logger.exception("voice batch of %d crashed", len(jobs))
                for job in list(self._unanswered.values()):
                    self._fail(job, "INTERNAL", f"{type(exc).__name__}: {exc}")
            if stop:
                return
            while self.warm_up_left and self.jobs.empty():   # between requests, where it stopped
                self.warm_up_some()

    def warm_up_some(self) -> None:
        """Encoder shapes run once each until a job is queued (or all are done)."""
        started_s = time.perf_counter()
        try:
            encoder = self.load_encoder()
            with self._on_encoder_stream(encoder):
                done = encoder.warm_up(self.warm_up_left, should_pause=lambda: not self.jobs.empty())
        except Exception:   # noqa: BLE001 - requests still run (and report what is wrong); only speed is lost
            logger.exception("voice encoder warm-up failed; encoder shapes stay cold")
            self.warm_up_left = []
            self.warmed.set()
            return
        self.warm_up_left = self.warm_up_left[done:]
        self.warm_up_s += time.perf_counter() - started_s
        if not self.warm_up_left:
            logger.info("voice encoders warmed in %.1f s", self.warm_up_s)
            self.warmed.set()

    def take_batch(self) -> tuple[list[VoiceJob], bool] | None:
        """(jobs, stop after them): blocks for the first job, then takes what is already queued."""
        first = self.jobs.get()
        if first is None:
            return None
        jobs = [first]
        while len(jobs) < self.max_batch_jobs:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def encode_jobs(self, jobs: list[VoiceJob]) -> None:
        started_s = time.perf_counter()
        self.stats.add_queue_waits([(started_s - job.submitted_s) * 1e3 for job in jobs])
        copies: dict[bytes, list[VoiceJob]] = {}   # key -> jobs of that clip; the first is encoded
        for job in jobs:
            if job.key in copies:
                copies[job.key].append(job)
            elif (prompt := self.cache.get(job.key)) is not None:   # the same clip may have been queued twice
                self._answer(job, prompt, started_s)
            else:
                copies[job.key] = [job]
        if not copies:
            return
        unique = [same[0] for same in copies.values()]
        try:
            encoder = self.load_encoder()
        except CheckpointError as exc:   # before ValueError: it is one, but not the caller's fault
            for job in _jobs_of(copies):
                self._fail(job, "FAILED_PRECONDITION", f"voice encoders could not be loaded: {exc}")
            return
        clips = [ReferenceClip(job.audio, job.request.sample_rate_hz, job.request.x_vector_only) for job in unique]
        with self._on_encoder_stream(encoder):
            results, times = encoder.encode(clips)
        num_encoded = 0
        for job, result in zip(unique, results):
            prompt, error = self._prompt(job.request, result)
            same = copies[job.key]
            if error is not None:
                for copy in same:
                    self._fail(copy, *error)
                continue
            num_encoded += 1
            self.cache.put(job.key, prompt)
            self._answer(job, prompt, started_s)
            for copy in same[1:]:   # from the cache where it keeps entries, so hits count as before
                cached = self.cache.get(job.key)
                self._answer(copy, cached if cached is not None else _copy(prompt), started_s)
        batch_ms = (time.perf_counter() - started_s) * 1e3
        self.stats.add_batch(num_encoded, batch_ms, times, len(unique))
        logger.info("voice batch of %d (%d distinct) in %.0f ms: prepare %.1f, mel %.1f, speaker %.1f, codec %.1f ms, "
                    "%d forwards", len(jobs), len(unique), batch_ms, times.prepare_ms, times.mel_ms, times.speaker_ms,
                    times.codec_ms, times.num_forwards)

    def _on_encoder_stream(self, encoder: ReferenceEncoder) -> contextlib.AbstractContextManager:
        if encoder.device.type != "cuda":
            return contextlib.nullcontext()
        if self._stream is None:
            self._stream = torch.cuda.Stream(encoder.device)
            # the weights were copied on the default stream: they must have landed before first use
            self._stream.wait_stream(torch.cuda.default_stream(encoder.device))
        return torch.cuda.stream(self._stream)

    def _prompt(self, request: talker_pb2.EncodeVoice, result: EncodedReference
                ) -> tuple[talker_pb2.VoicePrompt | None, tuple[str, str] | None]:
        """The request's VoicePrompt, or (code, message) of its error."""
        try:
            if result.error is not None:
                raise result.error
            # the same checks a saved prompt gets (finite x-vector, codes in range), and the size
            text_ids = None if request.x_vector_only else list(request.reference_text_token_ids)
            clone = VoiceClonePrompt(x_vector=result.x_vector, ref_codes=result.codes, ref_text_ids=text_ids)
            clone.check_hidden_size(self.hidden_size, "this talker")
        except ValueError as exc:
            return None, ("INVALID_ARGUMENT", str(exc))
        except Exception as exc:   # a device fault: this request fails, the talker goes on
            logger.error("request %s: voice encoding crashed: %s: %s", request.request_id, type(exc).__name__, exc,
                         exc_info=exc)
            return None, ("INTERNAL", f"{type(exc).__name__}: {exc}")
        prompt = talker_pb2.VoicePrompt(model=self.model_name, x_vector_only=request.x_vector_only,
                                        speaker_embedding=clone.x_vector.tolist())
        if clone.icl_mode:
            prompt.reference_codes.extend(clone.ref_codes.reshape(-1).tolist())    # [K, 16] frame-major
            prompt.num_reference_frames = clone.num_ref_frames
            prompt.reference_text_token_ids.extend(clone.ref_text_ids)
        return prompt, None

    def _answer(self, job: VoiceJob, prompt: talker_pb2.VoicePrompt, started_s: float) -> None:
        self._unanswered.pop(id(job), None)
        rid = job.request.request_id
        encode_ms = (time.perf_counter() - started_s) * 1e3
        self.answers.put(VoiceAnswer(job.identity, rid, encoded=talker_pb2.VoiceEncoded(
            request_id=rid, prompt=prompt, encode_ms=encode_ms)))
        logger.info("request %s: voice encoded in %.0f ms (%d reference frames)", rid, encode_ms,
                    prompt.num_reference_frames)

    def _fail(self, job: VoiceJob, code: str, message: str) -> None:
        self._unanswered.pop(id(job), None)
        self.stats.add_failed()
        rid = job.request.request_id
        logger.warning("request %s: voice encoding failed (%s): %s", rid, code, message)
        self.answers.put(VoiceAnswer(job.identity, rid, error=EngineError(code, f"request {rid!r}: {message}")))


def _jobs_of(copies: dict[bytes, list[VoiceJob]]) -> list[VoiceJob]:
    return [job for same in copies.values() for job in same]


def _copy(prompt: talker_pb2.VoicePrompt) -> talker_pb2.VoicePrompt:
    out = talker_pb2.VoicePrompt()
    out.CopyFrom(prompt)
    return out

