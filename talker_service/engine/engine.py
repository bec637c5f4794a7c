"""The talker engine: scheduler + model runner, driven by `step()`, with no sockets.

Calls from the outside (add_request, push_text, end_text, abort) only change bookkeeping; all
model work happens in `step()`, which gives the ready queued requests slots, prefills prompt
chunks within the step's token budget (prefill_plan.py: prompts that arrive together share a
forward, long prompts are split over several steps), then advances every runnable request by
one frame in a single batched decode, and returns what each request got
this step: a `FramesOut` (numbered 0, 1, 2, ... per request; the last one is_final) or an
`ErrorOut`. The ZeroMQ server and the offline BatchRunner are both thin users of this class.

With async_decode (CUDA's default) a step's decode is queued before the previous one is read:
its inputs (each slot's last frame embedding, KV, sampling state) live on the device, and the
host knows every row's position and text without the codes. Only EOS needs them: a stream that
ended is dropped from its rows still on the device, and its slot, reused at once, is safe because
everything a next owner queues runs after those rows on the same stream.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Callable, Container, Hashable, Iterable

import numpy as np
import torch

from service_common.host_copy import HostCopy
from talker_service.engine.cadence import CadenceGuard
from talker_service.engine.config import EngineConfig
from talker_service.engine.prefill_gather import PrefillGather
from talker_service.engine.prefill_plan import KINDS, PrefillJob, plan_step
from talker_service.engine.prefiller import PendingPrefill, PrefillChunk
from talker_service.engine.request import FINISH_EOS, EngineError, EngineRequest, ErrorOut, FramesOut, RequestState
from talker_service.engine.runner import ModelRunner
from talker_service.engine.scheduler import Scheduler
from talker_service.engine.stats import EngineStats
from talker_service.model import SamplingParams
from talker_service.prompt import PromptRequest, TextFeed, embed_prepared, prepare_prefill, validate_request

logger = logging.getLogger(__name__)

Output = FramesOut | ErrorOut


@dataclass
class LaunchedDecode:
    """A decode step on the device: its rows' requests, and their codes on the way to the host."""
    requests: list[EngineRequest]
    codes: HostCopy


@dataclass
class LaunchedPrefill:
    """A step's prefill forwards on the device: the requests whose frame 0 they sample."""
    finishing: list[EngineRequest]
    codes: PendingPrefill
    start_s: float
    padded_tokens: int = 0   # positions the forwards run, padding included (the cadence guard's rate)


class _EitherOf:
    """`key in` either of two containers, without building their union every step."""

    def __init__(self, first: Container, second: Container) -> None:
        self.first, self.second = first, second

    def __contains__(self, key: object) -> bool:
        return key in self.first or key in self.second


class TalkerEngine:
    def __init__(self, runner: ModelRunner, clock: Callable[[], float] = time.monotonic) -> None:
        self.runner = runner
        self.vocab = runner.vocab
        self.config: EngineConfig = runner.config
        self.clock = clock
        self.scheduler = Scheduler(self.config.max_slots, self.config.max_queued, self.config.max_prefill_batch)
        self.stats = EngineStats()
        self._touched: dict[Hashable, EngineRequest] = {}   # requests with output this step
        self._errors: list[ErrorOut] = []
        self._prefilling: dict[Hashable, PrefillJob] = {}   # slot held, prompt not yet all in the cache
        self._last_decode_s = 0.0
        self._decode_step = 0   # decode steps launched (the stats' count can be reset, this one is not)
        self._step_start_s = 0.0   # set by prefill_phase: a step's time runs from its admission
        # the batch bucket of the decode step launched since prefill_phase() began (0: none); the
        # server files its loop's host time under it (TalkerStats.host_time_by_batch)
        self.launched_bucket = 0
        # async decode: step N+1 is launched (in prefill_phase) before step N is read (in decode_phase)
        self.async_decode = self.config.is_async_decode(runner.model.device.type)
        self._launched: LaunchedDecode | None = None     # the newest decode step, not read yet
        self._to_read: LaunchedDecode | None = None      # the one before it: decode_phase reads it
        # streams whose frames are all launched (frame limit): they end when the last is read
        self._all_launched: set[Hashable] = set()
        # prefill only what the running streams' slack allows (cadence.py); None: off
        self.cadence = (CadenceGuard(self.config.cadence_margin_ms / 1e3, self.config.cadence_max_hold_ms / 1e3)
                        if self.config.cadence_margin_ms > 0 else None)
        # arrivals spread in time wait to be prefilled together under load (prefill_gather.py); None: off
        self.gather = (PrefillGather(self.config.prefill_gather_ms / 1e3, self.config.prefill_gather_batch,
                                     self.config.prefill_gather_min_decoding)
                       if self.config.prefill_gather_ms > 0 else None)
        # the server's admission (server/admission.py: the request's vocoder has a free slot, no
        # deadline pressure): `could_start(id)` asks, `take(id)` commits; None: slots alone decide
        self.admission = None
        self._step_has_prefill = False

    # ---- requests in ------------------------------------------------------------------------
    def add_request(self, request_id: Hashable, prompt: PromptRequest, feed: TextFeed,
                    sampling: SamplingParams) -> int:
        """Queue a request (its feed may still be open); returns the number queued ahead of it.
        EngineError: INVALID_ARGUMENT (does not fit the model), ALREADY_EXISTS, RESOURCE_EXHAUSTED."""
        try:
            validate_request(self.vocab, prompt)
        except ValueError as exc:
            raise EngineError("INVALID_ARGUMENT", f"request {request_id!r}: {exc}") from None
        request = EngineRequest(request_id, prompt, feed, sampling, arrival_s=self.clock())
        try:
            ahead = self.scheduler.add(request)
        except EngineError as exc:
            if exc.code == "RESOURCE_EXHAUSTED":
                self.stats.num_refused += 1
            raise
        self.stats.num_started += 1
        logger.debug("request %r queued (%d ahead)", request_id, ahead)
        return ahead

    def _live(self, request_id: Hashable) -> EngineRequest:
        request = self.scheduler.get(request_id)
        if request is None:
            raise EngineError("NOT_FOUND", f"request {request_id!r} is not live on this talker")
        return request

    def push_text(self, request_id: Hashable, token_ids: Iterable[int]) -> None:
        """More text. EngineError NOT_FOUND, FAILED_PRECONDITION (after end), OUT_OF_RANGE (too long)."""
        feed = self._live(request_id).feed
        if feed.is_closed:
            raise EngineError("FAILED_PRECONDITION", f"request {request_id!r}: text arrived after end of input")
        try:
            feed.push(token_ids)
        except ValueError as exc:
            raise EngineError("OUT_OF_RANGE", f"request {request_id!r}: {exc}") from None

    def end_text(self, request_id: Hashable) -> None:
        feed = self._live(request_id).feed
        if feed.is_closed:
            raise EngineError("FAILED_PRECONDITION", f"request {request_id!r}: end of input received twice")
        try:
            feed.close()
        except ValueError as exc:
            raise EngineError("INVALID_ARGUMENT", f"request {request_id!r}: {exc}") from None

    def abort(self, request_id: Hashable) -> bool:
        """Stop a request and free its slot now; False (and nothing happens) if it is not live."""
        request = self.scheduler.get(request_id)
        if request is None:
            logger.info("abort of request %r ignored: not live", request_id)
            return False
        self._release(request)
        self.stats.num_aborted += 1
        logger.info("request %r aborted after %d frames", request_id, request.num_frames)
        return True

    def fail(self, request_id: Hashable, code: str, message: str) -> ErrorOut | None:
        """End a live request with an error (e.g. its vocoder died); None if it is not live."""
        request = self.scheduler.get(request_id)
        if request is None:
            return None
        self._release(request)
        self.stats.num_failed += 1
        return ErrorOut(request_id, code, message)

    # ---- state ------------------------------------------------------------------------------
    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self.scheduler

    def has_work(self) -> bool:
        return self.scheduler.has_work

    def _ready_arrivals_s(self) -> list[float]:
        """Arrivals (engine clock) of the queued requests whose prefill could start (text is there)."""
        return [r.arrival_s for r in self.scheduler.queued.values() if r.feed.is_prefill_ready]

    def oldest_ready_arrival_s(self) -> float | None:
        """Arrival (engine clock) of the longest-waiting queued request whose prefill could start."""
        return min(self._ready_arrivals_s(), default=None)

    def describe_queue(self) -> str:
        """The talker's own side of a queue wait, for the admission log."""
        s = self.scheduler
        ready = len(self._ready_arrivals_s())
        return (f"talker: {len(s.free_slots)} of {s.max_slots} slots free, {len(s.queued)} queued "
                f"({ready} with the text to start), {len(self._prefilling)} prefills under way")

    def _any_may_start(self) -> bool:
        gate = self.admission
        if gate is not None:
            gate.begin()
        return any(r.feed.is_prefill_ready and (gate is None or gate.could_start(r.request_id))
                   for r in self.scheduler.queued.values())

    def has_runnable(self) -> bool:
        """Something a step would do now (a ready prefill with a free slot, or an unparked request)."""
        s = self.scheduler
        return bool(self._prefilling) or self._launched is not None or \
            any(r.feed.is_step_ready for r in s.running.values()) or (
                bool(s.free_slots) and self._any_may_start())

    # ---- the step ---------------------------------------------------------------------------
    @torch.no_grad()
    def admit(self) -> list[Hashable]:
        """Give free slots to ready queued requests and start their prefills; their ids.

        `step()` does this first by itself. A server calls it before the step to learn who starts
        now: a voice clone's vocoder stream can then be opened (and primed with the reference
        codes) while this step's prefill runs, instead of after the first frame.
        """
        gate = self.admission
        if gate is not None:
            gate.begin()
        if self.gather is not None and not self._prefilling and self._gathering():
            self.stats.num_gather_holds += 1
            return []
        prefills = self.scheduler.take_prefills(None if gate is None else gate.take)
        if prefills:
            self._start_prefills(prefills)
        return [r.request_id for r in prefills]

    def _gathering(self) -> bool:
        """Do the ready arrivals wait for more this step (prefill_gather.py)?"""
        s = self.scheduler
        if not s.free_slots:
            return False
        ready_s = self._ready_arrivals_s()
        if not ready_s:
            return False
        num_decoding = sum(1 for r in s.running.values() if r.feed.is_step_ready)
        return self.gather.should_hold(num_decoding, ready_s, self.clock())

    @torch.no_grad()
    def step(self) -> list[Output]:
        """One step: `prefill_phase()` then `decode_phase()`, their outputs together."""
        return self.prefill_phase() + self.decode_phase()

    @torch.no_grad()
    def prefill_phase(self) -> list[Output]:
        """Admit, run this step's prompt chunks; -> the outputs so far: the first frame of every prompt
        that ended here, and errors. A server sends them before `decode_phase()`, so a new stream's
        first frame leaves without waiting for the running streams' decode step (6-12 ms on an H200).

        With async_decode this step's decode is launched here too, behind the prompt chunks and
        before their first frames are read: the GPU goes from one to the other without waiting."""
        self._step_start_s = self.clock()
        self.launched_bucket = 0
        self.admit()
        prefill = self._launch_prefill() if self._prefilling else None
        self._step_has_prefill = prefill is not None
        if self.async_decode:
            if self._to_read is not None:
                raise RuntimeError("prefill_phase() called twice without decode_phase()")
            self._to_read, self._launched = self._launched, self._launch_decode()
        if prefill is not None:
            self._read_prefill(prefill)
        return self._collect()

    @torch.no_grad()
    def decode_phase(self) -> list[Output]:
        """The frames of a decode step of every running stream whose next text is known; -> outputs.
        Without async_decode that step is launched and read here; with it, the step launched by
        the previous prefill_phase() is read (the current one is on the device meanwhile)."""
        if self.async_decode:
            launched, self._to_read = self._to_read, None
        else:
            launched = self._launch_decode()
        if launched is None:
            return self._collect()
        outs = self._read_decode(launched)
        step_s = self.clock() - self._step_start_s
        self.stats.step_time.add(step_s * 1e3)
        if self.cadence is not None and not self._step_has_prefill:
            self.cadence.observe_decode(step_s)
        return self._collect() + outs

    def _start_prefills(self, requests: list[EngineRequest]) -> None:
        """Prompt embeddings of requests that just got a slot; their chunks run from this step on."""
        start_s = self.clock()
        max_seq_len = self.config.max_seq_len
        model = self.runner.model
        starting = []   # (request, its checked plan): embedded together below, one launch set for the burst
        for request in requests:
            request.prefill_start_s = start_s
            try:
                prepared = prepare_prefill(self.vocab, request.prompt, request.feed,
                                           hidden_size=model.config.hidden_size)
            except ValueError as exc:
                self._error(request, "INVALID_ARGUMENT", f"request {request.request_id!r}: {exc}")
                continue
            request.prompt_len = prepared.length
            if request.prompt_len >= max_seq_len:
                self._error(request, "OUT_OF_RANGE",
                            f"request {request.request_id!r}: prompt of {request.prompt_len} positions does not fit "
                            f"the context of {max_seq_len} positions of this talker; "
                            "shorten the text or the voice reference")
                continue
            # official: max_new_tokens counts c0 samplings and the last one never gets residual codes,
            # so at most max_new_tokens - 1 frames; frame g >= 1 is decoded at position L + g - 1
            request.max_frames_by_length = request.sampling.max_new_tokens - 1
            request.max_frames_by_context = max_seq_len - request.prompt_len + 1
            request.max_frames, reason = request.frame_limit()
            if request.max_frames <= 0:
                self._finish(request, reason)
                continue
            starting.append((request, prepared))
        embeds = embed_prepared([prepared for _, prepared in starting], model, device=model.device,
                                dtype=model.dtype, hidden_size=model.config.hidden_size)   # [L_i, H] each
        self.runner.assign_many([request.slot for request, _ in starting], [request.sampling for request, _ in starting])
        for (request, _), prompt_embeds in zip(starting, embeds):
            self._prefilling[request.request_id] = PrefillJob(request, request.prompt_len, prompt_embeds)

    def _prefill_shapes(self, now_s: float):
        """The prefill shapes with this step's token budget: all of it, or (cadence guard) what the
        running streams' slack leaves."""
        shapes = self.runner.prefill_shapes
        if self.cadence is None:
            return shapes
        slacks = (CadenceGuard.slack_s(r.first_frame_s, r.num_frames, now_s) for rid, r in self.scheduler.running.items()
                  if r.first_frame_s and rid not in self._prefilling and r.feed.is_step_ready)
        oldest_wait_s = now_s - min(job.key.arrival_s for job in self._prefilling.values())
        budget = self.cadence.token_budget(slacks, shapes.token_budget, oldest_wait_s)
        return shapes if budget >= shapes.token_budget else dataclasses.replace(shapes, token_budget=budget)

    def _launch_prefill(self) -> LaunchedPrefill | None:
        """This step's prompt chunks (within the token budget), queued; a prompt's last chunk gives
        its first frame, in flight from here: the stream joins this step's decode already. None: the
        cadence guard holds every prompt back this step."""
        start_s = self.clock()
        shapes = self._prefill_shapes(start_s)
        plan = plan_step(list(self._prefilling.values()), shapes)
        if not plan:
            self.stats.num_cadence_holds += 1
            return None
        chunks = [PrefillChunk(job.key.slot, job.embeds[job.done:job.done + n], job.done, job.done + n == job.length)
                  for job, n in plan]
        padded = sum(shapes.cost([n for job, n in plan if job.kind == kind]) for kind in KINDS)
        codes = self.runner.launch_prefill(chunks)
        self.stats.num_prefill_chunks += len(chunks)
        finishing = []
        for job, n in plan:
            job.done += n
            if job.done == job.length:
                request = job.key
                del self._prefilling[request.request_id]
                self._launched_frame(request)
                finishing.append(request)
        return LaunchedPrefill(finishing, codes, start_s, padded)

    def _read_prefill(self, prefill: LaunchedPrefill) -> None:
        codes = prefill.codes.wait(self.runner.wait_clock)   # [k, 16]: one row per prompt that ended
        end_s = self.clock()
        self.stats.prefill_time.add((end_s - prefill.start_s) * 1e3)
        if self.cadence is not None:
            self.cadence.observe_prefill(prefill.padded_tokens, end_s - prefill.start_s)
        for request, row in zip(prefill.finishing, codes):
            request.prefill_ms = (end_s - request.prefill_start_s) * 1e3
            self._read_frame(request, row)

    def _launch_decode(self) -> LaunchedDecode | None:
        """One frame for every running stream whose next text is known and whose frames are not all
        launched yet, queued on the device."""
        # most steps skip no one: then the per-row membership test is against an empty tuple
        skip = _EitherOf(self._prefilling, self._all_launched) if self._prefilling or self._all_launched else ()
        runnable = self.scheduler.take_runnable(skip=skip)
        if not runnable:
            return None
        self._decode_step += 1   # numbered from 1: a request's last_decode_step starts at -1
        step = self._decode_step
        in_both = False   # a stream of the previous step runs in this one too (the decode-gap stat)
        all_launched = self._all_launched
        requests, slots, positions, launched, text_ids = [], [], [], [], []
        for request, text_id in runnable:   # one pass (every running stream, every step)
            requests.append(request)
            slots.append(request.slot)
            positions.append(request.position)
            num_launched = request.num_launched
            launched.append(num_launched)
            text_ids.append(text_id)
            in_both = in_both or request.last_decode_step == step - 1
            request.last_decode_step = step
            request.frames_in_flight += 1   # as _launched_frame, inlined
            if num_launched + 1 >= request.max_frames:
                all_launched.add(request.request_id)
        self._note_decode_gap(in_both)
        codes = self.runner.launch_decode(slots, positions, launched, text_ids)
        self.stats.num_decode_steps += 1
        self.stats.batch_size_histogram[len(requests)] += 1
        self.launched_bucket = self.runner.batch_bucket(len(requests))
        return LaunchedDecode(requests, codes)

    def _read_decode(self, launched: LaunchedDecode) -> list[FramesOut]:
        """Read a decode step back; -> the FramesOut of its usual rows (see below). The other rows (a
        stream that ended meanwhile, EOS, a first frame, the frame limit, a stream with output
        waiting already) go through _read_frame and leave from _collect.

        A usual row, the next frame of a running stream that neither ends nor has other output this
        step, becomes its FramesOut here, in one pass: every running stream takes this path every
        step, and per-row calls were most of the loop's host time at 256 streams (issue #11)."""
        codes = launched.codes.wait(self.runner.wait_clock)   # [n, 16]
        eos = self.vocab.ids.codec_eos
        running = RequestState.RUNNING
        now_s = self.clock()
        outs = []
        for i, (request, code0) in enumerate(zip(launched.requests, codes[:, 0].tolist())):
            num_frames = request.num_frames
            if request.state is not running or code0 == eos or not num_frames or request.pending:
                # dropped (it ended meanwhile), EOS, a first frame, or frames of it wait in _collect
                self._read_frame(request, codes[i])
                continue
            # as in _accept: the limit is re-read every frame (a streamed text's budget grows until it ends)
            limit = request.frame_limit()[0]
            if num_frames + 1 >= limit:
                self._read_frame(request, codes[i])   # its last frame: _accept finishes it
                continue
            request.max_frames = limit
            request.frames_in_flight -= 1
            request.num_frames = num_frames + 1
            if num_frames == 1:   # its second frame (the first came from its prefill)
                request.second_frame_s = now_s
            outs.append(FramesOut(request.request_id, request.next_seq, codes[i:i + 1], num_frames))
            request.next_seq += 1
        self.stats.num_frames_generated += len(outs)
        return outs

    def _launched_frame(self, request: EngineRequest) -> None:
        request.frames_in_flight += 1
        if request.num_launched >= request.max_frames:
            self._all_launched.add(request.request_id)

    def _read_frame(self, request: EngineRequest, row: np.ndarray) -> None:
        request.frames_in_flight -= 1
        # a stream that ended (EOS, limit, abort) while this frame was on the device: the row is dropped
        if request.state is RequestState.RUNNING:
            self._accept(request, row)

    def _note_decode_gap(self, in_both: bool) -> None:
        """Time since the previous decode step when a stream runs in both (`in_both`): what prefill
        work (a burst of arrivals) and everything else between two steps cost the running streams."""
        now_s = self.clock()
        if in_both:
            gap_ms = (now_s - self._last_decode_s) * 1e3
            self.stats.decode_gap.add(gap_ms)
            self.stats.max_decode_gap_ms = max(self.stats.max_decode_gap_ms, gap_ms)
        self._last_decode_s = now_s

    def _accept(self, request: EngineRequest, row: np.ndarray) -> None:
        self._touched[request.request_id] = request
        if int(row[0]) == self.vocab.ids.codec_eos:
            self._finish(request, FINISH_EOS)
            return
        request.pending.append(row)
        request.num_frames += 1
        self.stats.num_frames_generated += 1
        # re-evaluated every frame: a streamed request's text budget grows until its text ends
        request.max_frames, reason = request.frame_limit()
        if request.num_frames >= request.max_frames:
            self._finish(request, reason)

    def _release(self, request: EngineRequest) -> None:
        if request.state == RequestState.RUNNING:
            self.runner.release(request.slot)
        self._prefilling.pop(request.request_id, None)
        self._all_launched.discard(request.request_id)
        self.scheduler.release(request)
        self._touched.pop(request.request_id, None)

    def _finish(self, request: EngineRequest, reason: str) -> None:
        self._release(request)
        request.finish_reason = reason
        self._touched[request.request_id] = request
        self.stats.num_finished += 1
        logger.debug("request %r: %d frames (%s)", request.request_id, request.num_frames, reason)

    def _error(self, request: EngineRequest, code: str, message: str) -> None:
        self._release(request)
        self.stats.num_failed += 1
        self._errors.append(ErrorOut(request.request_id, code, message))
        logger.warning("%s", message)

    def _collect(self) -> list[Output]:
        now_s = self.clock()
        outs: list[Output] = list(self._errors)
        self._errors.clear()
        for request in self._touched.values():
            is_final = bool(request.finish_reason)
            pending = request.pending
            # the usual case, one frame this step: a view of the step's codes, no copy (each decode's
            # HostCopy is a buffer of its own, tests/test_talker_engine.py checks it)
            if len(pending) == 1:
                codes = pending[0][None]
            else:
                codes = np.stack(pending) if pending else np.zeros((0, 16), dtype=np.int64)
            request.pending = []
            if codes.shape[0] and not request.second_frame_s:   # (set in a stream's first few steps only)
                if not request.first_frame_s:
                    request.first_frame_s = now_s
                    self.stats.first_frame_time.add((now_s - request.arrival_s) * 1e3)
                if request.num_frames >= 2:
                    request.second_frame_s = now_s
            out = FramesOut(request.request_id, request.next_seq, codes, request.num_frames - codes.shape[0],
                            is_final=is_final)
            request.next_seq += 1
            if is_final:
                self._summarize(out, request, now_s)
            outs.append(out)
        self._touched.clear()
        return outs

    @staticmethod
    def _summarize(out: FramesOut, request: EngineRequest, now_s: float) -> None:
        out.finish_reason = request.finish_reason
        out.num_prompt_tokens = request.prompt_len
        out.num_text_tokens = request.feed.num_text_tokens
        out.queue_ms = (request.prefill_start_s - request.arrival_s) * 1e3 if request.prefill_start_s else 0.0
        out.prefill_ms = request.prefill_ms
        out.first_frame_ms = (request.first_frame_s - request.arrival_s) * 1e3 if request.first_frame_s else 0.0
        out.second_frame_ms = (request.second_frame_s - request.arrival_s) * 1e3 if request.second_frame_s else 0.0
        out.total_ms = (now_s - request.arrival_s) * 1e3

    def load(self) -> dict[str, int | float]:
        s = self.scheduler
        return dict(num_slots_total=self.config.max_slots, num_slots_used=len(s.running),
                    num_requests_queued=len(s.queued), num_requests_parked=s.num_parked,
                    step_time_ms=self.stats.step_time.mean_ms() if s.running else 0.0)
