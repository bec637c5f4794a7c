"""The door from gRPC handler threads into the loop thread, and admin Decode streams in the engine.

The engine and the runner belong to the loop thread. A gRPC handler puts a job on a bounded queue,
wakes the loop through a socket pair the loop polls next to its ZeroMQ sockets, and waits on a
Future with a deadline. Decode jobs with `chunk_frames > 0` become ordinary engine requests fed
`chunk_frames` frames per loop iteration, so they are batched with live traffic exactly like a
talker's stream; `chunk_frames == 0` runs the one-pass offline decode.
"""
from __future__ import annotations

import logging
import queue
import socket
import time
import uuid
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service_common.audio_samples import repaired
from vocoder_service.engine.engine import ErrorOut, EngineError, PcmOut, VocoderEngine
from vocoder_service.runtime.runner import DecoderRunner

logger = logging.getLogger(__name__)


class BridgeClosed(RuntimeError):
    """The loop has stopped; no job will run."""


@dataclass
class AdminJob:
    kind: str                   # "stats" | "decode"
    payload: Any
    future: Future
    deadline_s: float           # time.monotonic() after which the loop gives up on it


class AdminBridge:
    def __init__(self, max_queued: int) -> None:
        self._jobs: queue.Queue[AdminJob] = queue.Queue(maxsize=max_queued)
        self._wake_recv, self._wake_send = socket.socketpair()
        self._wake_recv.setblocking(False)
        self._wake_send.setblocking(False)
        self.is_closed = False

    def fileno(self) -> int:
        """Readable when a job is waiting (register with the loop's poller)."""
        return self._wake_recv.fileno()

    def submit(self, kind: str, payload: Any, timeout_s: float) -> Any:
        """Run a job on the loop thread and return its result (called from gRPC threads).

        Raises queue.Full, TimeoutError, BridgeClosed, or whatever the job raised.
        """
        if self.is_closed:
            raise BridgeClosed("the vocoder is shutting down")
        job = AdminJob(kind, payload, Future(), time.monotonic() + timeout_s)
        self._jobs.put_nowait(job)
        try:
            self._wake_send.send(b"\0")
        except BlockingIOError:
            pass  # the pipe already holds wake-up bytes: the loop will look at the queue
        return job.future.result(timeout=timeout_s + 1.0)

    def take_all(self) -> list[AdminJob]:
        """Jobs waiting now (loop thread)."""
        try:
            while self._wake_recv.recv(4096):
                pass
        except BlockingIOError:
            pass
        jobs = []
        while True:
            try:
                jobs.append(self._jobs.get_nowait())
            except queue.Empty:
                return jobs

    def close(self) -> None:
        """Refuse new jobs and fail queued ones (loop thread, at shutdown)."""
        self.is_closed = True
        for job in self.take_all():
            job.future.set_exception(BridgeClosed("the vocoder is shutting down"))
        self._wake_recv.close()
        self._wake_send.close()


@dataclass
class AdminDecode:
    future: Future
    deadline_s: float
    pieces: deque = field(default_factory=deque)   # (codes [n,16], num_context_frames, is_final)
    next_seq: int = 0
    chunks: list[np.ndarray] = field(default_factory=list)
    started_s: float = field(default_factory=time.perf_counter)


class AdminDecodes:
    """Admin Decode calls running as engine requests (loop thread only)."""

    def __init__(self, engine: VocoderEngine, runner: DecoderRunner) -> None:
        self.engine = engine
        self.runner = runner      # for the one-pass decode
        self.streams: dict[str, AdminDecode] = {}

    def start(self, job: AdminJob) -> None:
        """job.payload = (codes [n, 16] int64, num_context_frames, chunk_frames)."""
        codes, num_context_frames, chunk_frames = job.payload
        if chunk_frames == 0:
            started = time.perf_counter()
            spf = self.runner.samples_per_frame
            pcm = self.runner.decode_offline(codes)[num_context_frames * spf:] if len(codes) > num_context_frames \
                else np.zeros(0, np.float32)
            pcm, faults = repaired(pcm)   # NaN/inf -> 0, as for streamed chunks (audio_samples.py)
            if faults:
                logger.warning("admin one-pass decode: %d non-finite samples (sent as 0), %d beyond full scale, of %d",
                               faults.num_nonfinite, faults.num_clipped, len(pcm))
            job.future.set_result((pcm, (time.perf_counter() - started) * 1e3))
            return
        # Pieces of chunk_frames rows, context first (one piece may end the context and start the audio).
        rid = f"admin/{uuid.uuid4().hex}"
        self.engine.open(rid, None, "admin")
        stream = AdminDecode(job.future, job.deadline_s)
        for start in range(0, max(len(codes), 1), chunk_frames):
            piece = codes[start:start + chunk_frames]
            num_context = min(max(num_context_frames - start, 0), len(piece))
            stream.pieces.append((piece, num_context, start + chunk_frames >= len(codes)))
        self.streams[rid] = stream
        logger.info("admin decode %s: %d frames (%d context) in pieces of %d",
                    rid, len(codes), num_context_frames, chunk_frames)

    def feed(self) -> None:
        """One piece per stream per loop iteration, like a talker sending frames as it makes them."""
        for rid, stream in list(self.streams.items()):
            if not stream.pieces:
                continue
            piece, num_context, is_final = stream.pieces.popleft()
            try:
                self.engine.add_frames(rid, stream.next_seq, piece, num_context_frames=num_context, is_final=is_final)
                stream.next_seq += 1
            except EngineError as exc:
                self.engine.fail(rid, exc.code, exc.message)
                self._end(rid).future.set_exception(exc)

    def owns(self, request_id: str) -> bool:
        return request_id in self.streams

    def on_output(self, out: PcmOut | ErrorOut) -> None:
        if isinstance(out, ErrorOut):
            self._end(out.request_id).future.set_exception(EngineError(out.code, out.message))
            return
        stream = self.streams[out.request_id]
        stream.chunks.append(out.pcm)
        if out.is_final:
            self._end(out.request_id)
            pcm = np.concatenate(stream.chunks) if stream.chunks else np.zeros(0, np.float32)
            stream.future.set_result((pcm, (time.perf_counter() - stream.started_s) * 1e3))

    def expire(self, now_s: float) -> None:
        for rid, stream in list(self.streams.items()):
            if now_s > stream.deadline_s:
                self.engine.abort(rid, "admin decode deadline passed")
                self._end(rid).future.set_exception(TimeoutError(f"admin decode {rid} did not finish in time"))

    def fail_all(self, message: str) -> None:
        for rid in list(self.streams):
            self.engine.abort(rid, message)
            self._end(rid).future.set_exception(BridgeClosed(message))

    def _end(self, request_id: str) -> AdminDecode:
        return self.streams.pop(request_id)
