"""The vocoder engine: request lifecycle, chunk scheduling and decode, without sockets.

The ZeroMQ server and the tests drive it the same way: `open` / `add_frames` / `abort`, then
`step()` which decodes one round of ready chunks and returns what must be sent (PCM chunks and
errors). `expire()` fails requests whose talker went silent (no message of any kind). All methods run on one thread.

This module is the engine's state machine; its parts live beside it: `outputs` (what it returns
and raises), `codes` (frame validation), `liveness` (talker silence), `gather` (batch inputs).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import Callable

import numpy as np

from service_common.audio_samples import NO_FAULTS, FaultLog, SampleFaults, repaired
from service_common.playback import AUDIBLE_STALL_S
from vocoder_service.engine.batch_fill import fill_batches, spare_streams
from vocoder_service.engine.batcher import PlannedBatch, ReadyRow, plan_batches
from vocoder_service.engine.chunk_policy import batch_buckets
from vocoder_service.engine.codes import NUM_CODE_GROUPS, validate_codes
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.deadlines import DeadlineScheduler, urgency_key_s
from vocoder_service.engine.gather import gather_batch
from vocoder_service.engine.liveness import silent_streams
from vocoder_service.engine.outputs import ChunkTiming, EngineError, ErrorOut, PcmOut
from vocoder_service.engine.slots import SlotPool, SlotPoolFull
from vocoder_service.engine.step_trace import StepTrace
from vocoder_service.engine.stream_state import StreamState
from vocoder_service.runtime.stats import HostTimes


class _Decoded:
    """A runner without launch(): its decode() already ran; wait() hands the result over."""

    def __init__(self, pcm: np.ndarray, is_graph: bool) -> None:
        self.pcm, self.is_graph = pcm, is_graph

    def wait(self) -> np.ndarray:
        return self.pcm


def launch_decode(runner, codes: np.ndarray, slots: np.ndarray, lengths: np.ndarray):
    """runner.launch(...) (queued: `.wait()` -> pcm, `.is_graph`), or runner.decode(...) at once for
    a runner that has only that (test and benchmark stand-ins)."""
    launch = getattr(runner, "launch", None)
    if launch is not None:
        return launch(codes, slots, lengths)
    pcm = runner.decode(codes, slots, lengths)
    return _Decoded(pcm, bool(getattr(runner, "last_step_is_graph", False)))


# The output types and NUM_CODE_GROUPS live in sibling modules; re-exported because the server,
# tests and benchmarks import them from here.
__all__ = ["NUM_CODE_GROUPS", "ChunkTiming", "EngineError", "ErrorOut", "PcmOut", "VocoderEngine"]

logger = logging.getLogger(__name__)
LOG_LATE_S = 0.05   # a chunk this late (an audible gap) is logged with where its time went


def late_cause(timing: ChunkTiming, deadline_s: float) -> str:
    """Where a late chunk's time went: "talker" (its first frame came after the deadline), "queued"
    (its frames were there; its decode started after the deadline), "decode" (it started in time
    and ended too late)."""
    if timing.oldest_frame_s >= deadline_s:
        return "talker"
    if timing.decode_start_s >= deadline_s:
        return "queued"
    return "decode"


class VocoderEngine:
    def __init__(self, runner, config: VocoderEngineConfig, clock=time.monotonic) -> None:
        """`runner.decode(codes [bs,16,t] int, slots [bs], lengths [bs]) -> pcm [bs, t*spf]` and
        `runner.reset(slots)`; it owns the device and the CUDA graphs. decode's result must be fresh
        memory (no later decode may overwrite it): emitted chunks are views of its rows. An optional
        `runner.launch` (same arguments -> an object with `.wait()` -> that pcm and `.is_graph`)
        queues a decode instead, so a step can queue all its batches before reading any.
        An optional `runner.covering_shape(bs, t) -> (B, T) | None` lets batch planning cost a
        batch by the captured graph it would really replay."""
        self.runner = runner
        self.config = config
        self.clock = clock
        self.slots = SlotPool(config.max_slots)
        self.streams: dict[str, StreamState] = {}
        self.batch_sizes = batch_buckets(config.max_slots)
        self.stats = {"opened": 0, "completed": 0, "aborted": 0, "failed": 0, "refused": 0,
                      "frames_decoded": 0, "chunks_emitted": 0, "decode_calls": 0, "duplicates_dropped": 0,
                      # chunks with NaN/inf samples (sent as 0) or samples at or past full scale (|x| >= 1)
                      "nonfinite_chunks": 0, "nonfinite_samples": 0, "clipped_chunks": 0, "clipped_samples": 0}
        self.fault_log = FaultLog(logger, "vocoder")
        # plan / gather / emit host time per step() that decoded something.
        self.host_times = HostTimes()
        self._covering_shape = getattr(runner, "covering_shape", None)
        self._split_cache: dict[tuple[int, int], list[int]] = {}   # batcher.cheapest_split per (rows, frames)
        # which rows a step decodes and how big: by each listener's playback deadline (deadlines.py)
        self.scheduler = DeadlineScheduler(config.chunk, config.deadline,
                                           config.sample_rate_hz / config.samples_per_frame,
                                           config.launch_cost_row_frames)
        self._last_plan_deferred = 0
        self._last_plan_due = 0
        self.trace: StepTrace | None = None   # --step-trace: a JSON line per step (step_trace.py)
        self._traced_late: list = []
        self._late_at_s: deque[float] = deque(maxlen=4096)   # when audible late chunks left (num_late_recent)
        # slot -> request id, opened since the last decode: their slots are reset together before the
        # next step's first decode (bounded by the slots). A reset per open made the loop wait on the
        # device once per stream (~2 ms each behind the talker's kernels): 150 arrivals between two
        # steps held every running stream's next chunk ~300 ms (results/2026-11-28-gapless4-h200.md).
        self._opened_unreset: dict[int, str] = {}
        self.deadline_stats: dict = {}
        self.reset_deadline_stats()

    def reset_deadline_stats(self) -> None:
        """Counters of the deadline scheduling (GetStats' window: reset with the other windows)."""
        self.deadline_stats.update(due_rows=0, deferred_rows=0, late_chunks=0, max_lateness_ms=0.0,
                                   late_talker=0, late_queued=0, late_decode=0, filled_row_frames=0)

    # ---- request lifecycle -------------------------------------------------------------------
    def open(self, request_id: str, reply_to: str | None = None, talker_id: str | None = None) -> None:
        if request_id in self.streams:
            raise EngineError("ALREADY_EXISTS", f"request {request_id!r} is already open on this vocoder")
        try:
            slot = self.slots.acquire(request_id)
        except SlotPoolFull as exc:
            self.stats["refused"] += 1
            raise EngineError("RESOURCE_EXHAUSTED", f"request {request_id!r} refused: {exc}") from None
        now = self.clock()
        self._opened_unreset[slot] = request_id
        self.streams[request_id] = StreamState(request_id, slot, reply_to, talker_id, now, now)
        self.stats["opened"] += 1
        logger.debug("request %s opened in slot %d", request_id, slot)

    def add_frames(self, request_id: str, seq: int, codes: np.ndarray, *, is_context: bool = False,
                   is_final: bool = False, num_context_frames: int = 0, is_checked: bool = False) -> None:
        """Append frames [n,16] (n may be 0 for a bare final marker) carrying sequence number `seq`.

        The first `num_context_frames` rows (all rows with `is_context`) only prime the decoder
        state; one wire entry may carry the last context rows followed by the first audio rows.
        `is_checked`: the caller already checked shape, integer dtype and codebook range (the
        server does it once per FRAMES message for every entry); the rows are kept as given (a
        read-only view is fine: they are only copied out when gathered).
        """
        stream = self.streams.get(request_id)
        if stream is None:
            raise EngineError("NOT_FOUND", f"frames for unknown request {request_id!r}")
        if seq < stream.next_seq:
            self.stats["duplicates_dropped"] += 1
            logger.warning("request %s: dropped duplicate frames seq %d (expected %d)", request_id, seq, stream.next_seq)
            return
        if seq > stream.next_seq:
            self._fail(stream, "DATA_LOSS", f"request {request_id!r}: frames seq {seq} out of order, expected {stream.next_seq}")
            raise EngineError("DATA_LOSS", f"request {request_id!r}: frames seq {seq} out of order, expected {stream.next_seq}")
        if stream.ended:
            raise EngineError("FAILED_PRECONDITION", f"request {request_id!r}: frames after the final frames")
        if not is_checked:
            codes = validate_codes(request_id, codes, self.runner.codebook_size)
        num_context = len(codes) if is_context else num_context_frames
        if num_context:   # (most entries carry none: then the rows are the audio rows as they are)
            if not 0 <= num_context <= len(codes):
                raise EngineError("INVALID_ARGUMENT", f"request {request_id!r}: num_context_frames {num_context} not in [0, {len(codes)}]")
            if stream.num_pending or stream.num_chunks_emitted:
                raise EngineError("FAILED_PRECONDITION", f"request {request_id!r}: context frames must come before audio frames")
            if stream.num_context_pending + num_context > self.config.max_context_frames:
                raise EngineError("INVALID_ARGUMENT", f"request {request_id!r}: more than {self.config.max_context_frames} context frames")
            context, codes = codes[:num_context], codes[num_context:]
        if stream.num_pending + len(codes) > self.config.max_pending_frames:
            self._fail(stream, "RESOURCE_EXHAUSTED", f"request {request_id!r}: more than {self.config.max_pending_frames} undecoded frames buffered")
            raise EngineError("RESOURCE_EXHAUSTED", f"request {request_id!r}: vocoder buffer full")
        now = self.clock()
        stream.next_seq += 1
        stream.last_activity_s = now
        if num_context:
            stream.context.append(context)
            stream.num_context_pending += num_context
        if len(codes):
            stream.pending.append(codes)
            if stream.num_pending == 0:
                stream.oldest_pending_s = now
            stream.num_pending += len(codes)
            stream.num_audio_frames_in += len(codes)
        if is_final:
            stream.ended_at_s = now

    def abort(self, request_id: str, reason: str = "") -> bool:
        """Free a request's state. Idempotent: aborting an unknown or finished request is a no-op."""
        stream = self.streams.get(request_id)
        if stream is None:
            logger.info("abort of unknown or finished request %s ignored (%s)", request_id, reason)
            return False
        self._release(stream)
        self.stats["aborted"] += 1
        logger.info("request %s aborted: %s", request_id, reason)
        return True

    def fail(self, request_id: str, code: str, message: str) -> ErrorOut | None:
        """End a live request with an error (e.g. the server rejected one of its messages); None if not live."""
        stream = self.streams.get(request_id)
        return None if stream is None else self._fail(stream, code, message)

    def expire(self, talker_last_heard_s: Callable[[str], float | None] | None = None) -> list[ErrorOut]:
        """Fail the open requests whose talker has been silent past the timeout (it probably died).

        Liveness is the talker's, not the request's: a request parked for minutes waiting for
        streamed text lives on while its talker keeps sending anything (heartbeats included).
        `talker_last_heard_s(request_id)` gives when that request's talker was last heard from
        (engine clock), or None when unknown; then only the request's own frames count.
        """
        silent = silent_streams(list(self.streams.values()), self.clock(), self.config.talker_timeout_s,
                                talker_last_heard_s)
        return [self._fail(stream, "UNAVAILABLE", why) for stream, why in silent]

    # ---- scheduling and decode ---------------------------------------------------------------
    def ready_rows(self, plan_stats: dict | None = None) -> list[ReadyRow]:
        """This step's rows (deadlines.py: due streams, then earliest deadline first within the step's
        budget), after the empty closing rows of streams whose final marker came with no frames left."""
        streams = list(self.streams.values())
        closing = [ReadyRow(s.request_id, s.slot, 0, True, True) for s in streams
                   if s.ended and not s.num_pending and not s.num_context_pending]
        plan = self.scheduler.plan(streams, self.clock())
        self._last_plan_deferred = plan.num_deferred
        self._last_plan_due = plan.num_due
        if plan_stats is not None:
            plan_stats["due_rows"] += plan.num_due
            plan_stats["deferred_rows"] += plan.num_deferred
        return closing + plan.rows

    def _next_ready(self) -> tuple[bool, float | None]:
        streams = list(self.streams.values())
        if any(s.ended and not s.num_pending and not s.num_context_pending for s in streams):
            return True, None   # a closing row
        return self.scheduler.next_ready(streams, self.clock())

    def has_work(self) -> bool:
        return self._next_ready()[0]

    def idle_timeout_s(self, longest_s: float) -> float:
        """How long the caller may wait for messages before a step is due by itself (a stream's
        deadline or first-chunk wait), at most `longest_s`; 0 when a step has work now."""
        is_ready, wake_s = self._next_ready()
        if is_ready:
            return 0.0
        return longest_s if wake_s is None else min(longest_s, max(0.0, wake_s - self.clock()))

    def step(self, on_outputs: Callable[[list[PcmOut | ErrorOut]], None] | None = None) -> list[PcmOut | ErrorOut]:
        """Decode every ready chunk once (one or more batches); return the PCM and errors to send.
        `on_outputs`: called with each batch's outputs as soon as that batch is read back (the
        server sends them then: a due chunk in a small first batch does not wait for the step's big
        ones); the return value still holds them all."""
        started, step_start_s = time.perf_counter(), self.clock()
        rows = self.ready_rows(self.deadline_stats)
        out: list[PcmOut | ErrorOut] = []
        empty = [r for r in rows if r.num_frames == 0]
        for row in empty:
            out.append(self._emit(self.streams[row.request_id], np.zeros(0, np.float32), True))
        if out and on_outputs is not None:
            on_outputs(list(out))
        rows = [r for r in rows if r.num_frames > 0]
        batches = plan_batches(rows, self.config.chunk, self.batch_sizes, self.config.launch_cost_row_frames,
                               self._covering_shape, self._split_cache)
        if batches and self.config.fill_padding:   # audio into the rows and frames the graphs pad anyway
            spare = spare_streams(list(self.streams.values()), {r.request_id for r in rows}, step_start_s,
                                  self.config.chunk.chunk_frames(0, len(self.streams)))
            self.deadline_stats["filled_row_frames"] += fill_batches(batches, self.streams, spare, self.batch_sizes,
                                                                     self._covering_shape)
        # the most urgent batch first: each batch's chunks leave when it is read back, so a due
        # 16-frame chunk must not queue behind a batch of first chunks planned in bucket order
        batches.sort(key=lambda b: min(urgency_key_s(self.streams[r.request_id], step_start_s) for r in b.rows))
        if batches:
            self.host_times.add("plan", time.perf_counter() - started)
            self.host_times.count_call()
        failed = self._reset_opened_slots() if batches else []
        if failed:   # only on a device fault: the batches holding those streams wait for the next step
            out.extend(failed)
            if on_outputs is not None:
                on_outputs(failed)
            batches = [b for b in batches if all(r.request_id in self.streams for r in b.rows)]
        # every batch queued first, then read in order: the device goes from one to the next while
        # the host gathers the next batch's codes and emits the previous one's chunks
        trace = self.trace
        if trace is not None:
            traced = self._trace_plan(batches, step_start_s)
            self._traced_late = []
        launched = [self._launch_batch(batch) for batch in batches]
        for i, (batch, launch) in enumerate(zip(batches, launched)):
            done = self._finish_batch(batch, *launch)
            out.extend(done)
            if trace is not None:
                traced["b"][i].append(round((self.clock() - step_start_s) * 1e3, 2))
            if done and on_outputs is not None:
                on_outputs(done)
        ended_s = self.clock()
        if batches:   # what a step of this many padded frames takes: the deadline scheduler's budget
            self.scheduler.observe_step(sum(b.frames_bucket * b.batch_size for b in batches), len(batches),
                                        ended_s - step_start_s, ended_s, work_left=self._last_plan_deferred > 0)
        if trace is not None and (batches or empty):
            traced["late_chunks"] = self._traced_late   # [ms late, cause, frames, the chunk's index in its stream]
            trace.step(step_start_s, ended_s, traced)
        return out

    def _reset_opened_slots(self) -> list[ErrorOut]:
        """Fresh decoder state for every slot opened since the last step, in one runner call (before
        any decode: a batch may hold those streams, or fill its padding with them). If the device
        fails it, those streams fail and the rest keep serving."""
        if not self._opened_unreset:
            return []
        opened, self._opened_unreset = self._opened_unreset, {}
        try:
            self.runner.reset(list(opened))
        except Exception as exc:  # noqa: BLE001 - a device fault ends these streams, not the service
            logger.exception("resetting the decoder state of %d new streams failed", len(opened))
            return [self._fail(self.streams[rid], "INTERNAL", f"request {rid!r}: decoder state reset failed: "
                               f"{type(exc).__name__}: {exc}")
                    for slot, rid in opened.items() if rid in self.streams and self.streams[rid].slot == slot]
        return []

    def _trace_plan(self, batches: list[PlannedBatch], step_start_s: float) -> dict:
        """The step's plan for the trace: rows, due rows, first chunks (with how long each stream
        had waited, ms: since it opened, since its oldest and newest frames), batches [rows, frames,
        first-chunk rows] (the read-back time is appended as each finishes)."""
        firsts, shapes = [], []
        for batch in batches:
            num_first = 0
            for row in batch.rows:
                stream = self.streams[row.request_id]
                if row.emit and not stream.playback.is_started:
                    num_first += 1
                    firsts.append([round((step_start_s - t) * 1e3, 1) for t in
                                   (stream.opened_at_s, stream.oldest_pending_s or step_start_s, stream.last_activity_s)])
            shapes.append([batch.batch_size, batch.frames_bucket, num_first])
        return {"plan_ms": round((self.clock() - step_start_s) * 1e3, 2), "open": len(self.streams),
                "rows": sum(b.batch_size for b in batches), "due": self._last_plan_due,
                "deferred": self._last_plan_deferred, "step_est_ms": round(self.scheduler.step_s * 1e3, 1),
                "b": shapes, "firsts": firsts}

    def _launch_batch(self, batch: PlannedBatch) -> tuple:
        """-> (pending decode or the exception that stopped it, the rows' arrival times, decode start)."""
        clock = time.perf_counter
        gather_started = clock()
        codes, slots, lengths, arrivals = gather_batch(batch, self.streams, self.clock)
        decode_start_s, started = self.clock(), clock()
        self.host_times.add("gather", started - gather_started)
        try:
            pending = launch_decode(self.runner, codes, slots, lengths)
        except Exception as exc:  # noqa: BLE001 - reported for this batch in _finish_batch
            pending = exc
        return pending, arrivals, decode_start_s, started

    def _finish_batch(self, batch: PlannedBatch, pending, arrivals, decode_start_s: float,
                      started: float) -> list[PcmOut | ErrorOut]:
        clock = time.perf_counter
        t, spf = batch.frames_bucket, self.config.samples_per_frame
        try:
            if isinstance(pending, Exception):
                raise pending
            pcm = pending.wait()   # [bs, t*spf] float32, fresh memory
        except Exception as exc:  # a device or runner fault: fail this batch's requests, keep serving the rest
            logger.exception("decode of a batch of %d x %d frames failed", batch.batch_size, t)
            return [self._fail(self.streams[row.request_id], "INTERNAL", f"request {row.request_id!r}: decode failed: "
                               f"{type(exc).__name__}: {exc}") for row in batch.rows]
        emit_started = clock()
        decode_ms = (emit_started - started) * 1e3
        is_graph = pending.is_graph
        # [bs, 2] non-finite and full-scale samples per row, counted on the device (a runner with
        # launch()); None: every chunk is looked at on the host
        row_faults = getattr(pending, "row_faults", None)
        is_faulty = None if row_faults is None else row_faults.any(axis=1).tolist()   # [bs] bool
        self.stats["decode_calls"] += 1
        out: list[PcmOut | ErrorOut] = []
        for i, row in enumerate(batch.rows):
            stream = self.streams[row.request_id]
            stream.num_frames_decoded += row.num_frames
            self.stats["frames_decoded"] += row.num_frames
            if row.emit:
                timing = ChunkTiming(*arrivals[i], decode_start_s, decode_ms, batch.batch_size, is_graph)
                # A view, no copy: `pcm` is fresh per decode and lives as long as its chunks do.
                chunk = pcm[i, : row.num_frames * spf]
                faults = NO_FAULTS
                if is_faulty is None or is_faulty[i]:
                    chunk, faults = self._checked(stream, chunk, None if row_faults is None else row_faults[i])
                out.append(self._emit(stream, chunk, row.is_final, row.num_frames, timing, faults))
        self.host_times.add("emit", clock() - emit_started)
        return out

    def _checked(self, stream: StreamState, chunk: np.ndarray, counts: np.ndarray | None):
        """A chunk with NaN/inf or full-scale samples (device `counts` [2]), or not counted yet (None):
        NaN/inf -> 0 in place and counted on the host (rare); clipped samples as the device counted
        them (a random-weight decoder clips in every chunk: no host pass over those)."""
        if counts is None or counts[0]:
            chunk, faults = repaired(chunk)
        else:
            faults = SampleFaults(0, int(counts[1]))
        if faults:
            for kind, num in (("nonfinite", faults.num_nonfinite), ("clipped", faults.num_clipped)):
                if num:
                    self.stats[f"{kind}_chunks"] += 1
                    self.stats[f"{kind}_samples"] += num
            self.fault_log.chunk(stream.request_id, stream.pcm_seq, faults, len(chunk))
        return chunk, faults

    def _emit(self, stream: StreamState, pcm: np.ndarray, is_final: bool, num_frames: int = 0,
              timing: ChunkTiming | None = None, faults=NO_FAULTS) -> PcmOut:
        chunk = PcmOut(stream.request_id, stream.reply_to, stream.pcm_seq, stream.num_samples_emitted, pcm,
                       is_final, num_frames, timing, faults, stream.ended_at_s if is_final else None)
        stream.pcm_seq += 1
        stream.num_chunks_emitted += 1
        stream.num_samples_emitted += len(pcm)
        deadline_s = stream.playback.deadline_s
        lateness_s = stream.playback.on_chunk(self.clock(), len(pcm) / self.config.sample_rate_hz) if len(pcm) else 0.0
        if lateness_s > 0:   # as the vocoder sees it (the gateway measures what the listener gets)
            self._late(stream, lateness_s, deadline_s, num_frames, timing)
        self.stats["chunks_emitted"] += 1
        if is_final:
            self._release(stream)
            self.stats["completed"] += 1
        return chunk

    def _late(self, stream: StreamState, lateness_s: float, deadline_s: float, num_frames: int,
              timing: ChunkTiming | None) -> None:
        """Count a chunk that left after its listener's deadline, by where its time went."""
        stats = self.deadline_stats
        stats["late_chunks"] += 1
        stats["max_lateness_ms"] = max(stats["max_lateness_ms"], lateness_s * 1e3)
        if timing is None:
            return
        if lateness_s >= AUDIBLE_STALL_S:
            self._late_at_s.append(self.clock())
        cause = late_cause(timing, deadline_s)
        stats[f"late_{cause}"] += 1
        if self.trace is not None:
            self._traced_late.append([round(lateness_s * 1e3, 1), cause, num_frames, stream.num_chunks_emitted - 1])
        if lateness_s >= LOG_LATE_S:
            logger.info("request %s: chunk of %d frames %.0f ms late (%s: first frame %+.0f ms, decode start %+.0f ms "
                        "from the deadline, decode %.0f ms in a batch of %d)", stream.request_id, num_frames,
                        lateness_s * 1e3, cause, (timing.oldest_frame_s - deadline_s) * 1e3,
                        (timing.decode_start_s - deadline_s) * 1e3, timing.decode_ms, timing.batch_size)

    def num_late_recent(self, window_s: float = 1.0) -> int:
        """Chunks that left audibly late (AUDIBLE_STALL_S or more) within the last `window_s`: what
        heartbeats tell talkers, which may hold new streams back meanwhile."""
        horizon_s = self.clock() - window_s
        while self._late_at_s and self._late_at_s[0] < horizon_s:
            self._late_at_s.popleft()
        return len(self._late_at_s)

    # ---- helpers -------------------------------------------------------------------------------
    def _fail(self, stream: StreamState, code: str, message: str) -> ErrorOut:
        logger.warning("request %s failed (%s): %s", stream.request_id, code, message)
        self._release(stream)
        self.stats["failed"] += 1
        return ErrorOut(stream.request_id, stream.reply_to, stream.talker_id, code, message)

    def _release(self, stream: StreamState) -> None:
        del self.streams[stream.request_id]
        self.slots.release(stream.slot)

    @property
    def num_active(self) -> int:
        return len(self.streams)
