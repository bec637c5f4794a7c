"""CUDA graphs of the streaming decode step, one per (batch size, frames) shape.

A decode step launches hundreds of small kernels (8 transformer layers, ~60 convs, ~30 SnakeBeta);
at small batches the launch overhead dominates, so each shape the batcher produces is captured
once and replayed. Shapes are padded up to the smallest captured one: extra rows point at the
decoder's scratch slot with length 0 (their state and position never change, and no real request
ever reads that slot), extra frames are right padding that the step never writes into state.

Every graph shares one memory pool: replays never overlap (one loop thread), so intermediates of
different shapes can live in the same blocks. Capture goes from the smallest shape to the largest
and stops before a shape whose predicted pool growth would pass the configured memory budget, so a
tight budget drops the big shapes first. The engine's batch planner then splits work into the
shapes that were captured (batcher.largest_covered); a call no graph covers runs eagerly, and is
counted.

On a CPU decoder a table can be built with `emulate=True`: the same static buffers, padding and
lookup, with the step body run eagerly on the padded inputs instead of a graph replay. Tests use it
to prove on CPU that padding rows never disturb real slots; host benchmarks give it a cheap stub body.

This is the decoder's only graph wrapper: the service's runner replays it and the decoder
benchmarks time it through that runner. The table is keyed by (batch, frames) alone, so a new
shape choice (another batch size, a 1-frame first chunk) is one more entry in the capture sizes.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from service_common.host_copy import HostCopy
from vocoder_service.codec import StreamingDecoder
from vocoder_service.runtime.stats import HostTimes

logger = logging.getLogger(__name__)

NUM_WARMUP_RUNS = 2
# Replays timed per shape at capture (median): a call takes the covering graph with the least padding
# among those within SLOW_GRAPH_RATIO of the fastest covering one. Timing at capture found graphs of
# 32 row-frames (16x2, 8x4, 4x8, 2x16) replaying in ~93 ms on an H200 next to 7.5 ms for 32x2 (a
# pathological conv algorithm for that length, 2026-11-28): each stalled its whole step and every
# first chunk behind it.
NUM_TIMED_REPLAYS = 3
SLOW_GRAPH_RATIO = 1.25

# codes [B,Q,T] int64, slots [B] int64, lengths [B] int64 (device) -> pcm [B, T*spf]: the signature
# of StreamingDecoder.step_unchecked, which every body (compiled, or a benchmark's stub) shares.
StepBody = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def row_fault_counts(pcm: torch.Tensor) -> torch.Tensor:
    """pcm [B, n] -> [B, 2] int32 per row: non-finite samples, samples with |x| >= 1.0 (inf included).
    Counted on the device, inside the graph, while the output is there (the service's check of every
    chunk, service_common/audio_samples.py): the host then looks at a row's samples only when it has
    a NaN/inf to replace. Samples past a row's length are zeros, so the counts are the chunk's. Cost
    on the H200, a 128 x 25-frame output: 0.03 ms against the step's 64 ms (bench_vocoder_dtype.py)."""
    nonfinite = (~torch.isfinite(pcm)).sum(1)
    at_full_scale = ((pcm >= 1.0) | (pcm <= -1.0)).sum(1)
    return torch.stack((nonfinite, at_full_scale), 1).to(torch.int32)


class PendingPcm:
    """A decode queued on the device: `wait()` -> host pcm [bs, t*spf] float32 (fresh, pinned memory);
    then `row_faults()` -> its rows' row_fault_counts [bs, 2]."""

    def __init__(self, copy: HostCopy, num_samples: int, is_graph: bool, faults: HostCopy) -> None:
        self.copy, self.num_samples, self.is_graph, self.faults = copy, num_samples, is_graph, faults

    def wait(self) -> np.ndarray:
        return self.copy.wait()[:, : self.num_samples]

    def row_faults(self) -> np.ndarray:
        return self.faults.wait()


class CapturedStep:
    """One captured step: static device inputs, the graph, and its static output."""

    def __init__(self, decoder: StreamingDecoder, batch_size: int, num_frames: int, pool=None,
                 body: StepBody | None = None, cudnn_benchmark: bool = False) -> None:
        device = decoder.device
        self.decoder = decoder
        # The step body: decoder.step_unchecked, or a torch.compile of it (same signature).
        self.body = body or decoder.step_unchecked
        self.batch_size = batch_size
        self.num_frames = num_frames
        self.scratch_slot = decoder.scratch_slot
        self.codes = torch.zeros((batch_size, decoder.num_quantizers, num_frames), dtype=torch.int64, device=device)
        self.slots = torch.full((batch_size,), decoder.scratch_slot, dtype=torch.int64, device=device)
        self.lengths = torch.zeros(batch_size, dtype=torch.int64, device=device)
        # Pinned host staging: one async H2D copy per input instead of many small ones.
        is_cuda = device.type == "cuda"
        self.host_codes = _host_buffer(self.codes.shape, is_cuda)
        self.host_slots = _host_buffer((batch_size,), is_cuda)
        self.host_lengths = _host_buffer((batch_size,), is_cuda)
        self.graph = None
        self.out = None          # [B, T*spf] float32 device output (the graph's, once captured)
        self.faults = None       # [B, 2] int32 row_fault_counts(out), captured with it
        self.uploaded = None     # event after the last input copies: the staging is free again after it
        self.replay_ms: float | None = None   # median replay time measured at capture (None: emulated)
        if not is_cuda:
            return  # emulation: run() calls the body eagerly on the padded buffers
        # Warm-up (every row on the scratch slot, length 0: no state moves) compiles the Triton
        # kernels and lets cuBLAS/cuDNN pick algorithms outside the capture; with `cudnn_benchmark`
        # cuDNN times its candidates for this shape's convs there, and the graph keeps the winners.
        with cudnn_benchmark_set_to(cudnn_benchmark):
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(NUM_WARMUP_RUNS):
                    self.body(self.codes, self.slots, self.lengths).float()
            torch.cuda.current_stream(device).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
                # The float32 cast is captured too: no extra launch or allocation per step.
                self.out = self.body(self.codes, self.slots, self.lengths).float()  # [B, T*spf]
                self.faults = row_fault_counts(self.out)   # [B, 2]
            # One replay on the warm-up inputs (scratch rows, length 0: no state moves) now, at start:
            # a graph's first launch also uploads it to the device, which would otherwise land on the
            # first request of each shape.
            self.graph.replay()
            torch.cuda.current_stream(device).synchronize()
            self.replay_ms = self._time_replays(device)

    def _time_replays(self, device) -> float:
        """Median of NUM_TIMED_REPLAYS replays on the warm-up inputs (scratch rows: no state moves)."""
        stream = torch.cuda.current_stream(device)
        times = []
        for _ in range(NUM_TIMED_REPLAYS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            self.graph.replay()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
        return float(np.median(times))

    def run(self, codes: np.ndarray, slots: np.ndarray, lengths: np.ndarray, times: HostTimes | None = None) -> np.ndarray:
        """codes [bs,Q,t] (bs <= B, t <= T), slots [bs], lengths [bs] -> host pcm [bs, t*spf] float32.

        The result is fresh memory the caller owns (rows may be handed out as views): on CUDA a
        pinned block from torch's caching host allocator, filled by one async copy, that returns
        to the cache once the last view of it is gone, so no host-side copy is ever made.
        """
        pending = self.launch(codes, slots, lengths, times)
        waited = time.perf_counter()
        pcm = pending.wait()
        if times is not None:
            times.add("wait", time.perf_counter() - waited)
        return pcm

    def launch(self, codes: np.ndarray, slots: np.ndarray, lengths: np.ndarray,
               times: HostTimes | None = None) -> PendingPcm:
        """run() without waiting: inputs copied in, the graph replayed and its real rows' copy to the
        host queued, all before any later launch can overwrite the static output."""
        bs, _, t = codes.shape
        if bs > self.batch_size or t > self.num_frames:
            raise ValueError(f"a ({bs}, {t}) step does not fit the ({self.batch_size}, {self.num_frames}) graph")
        clock = time.perf_counter
        started = clock()
        if self.uploaded is not None:   # a launch of this shape earlier in the step: its copies have run
            self.uploaded.synchronize()
        fill_padded(self.host_codes.numpy(), self.host_slots.numpy(), self.host_lengths.numpy(),
                    codes, slots, lengths, self.scratch_slot)
        staged = clock()
        # non_blocking from pinned staging: `uploaded` marks when the DMA has read it
        self.codes.copy_(self.host_codes, non_blocking=True)
        self.slots.copy_(self.host_slots, non_blocking=True)
        self.lengths.copy_(self.host_lengths, non_blocking=True)
        num_samples = t * self.decoder.samples_per_frame
        if self.graph is not None:
            self.uploaded = torch.cuda.Event()
            self.uploaded.record()
            self.graph.replay()
            # Whole real rows: one contiguous block, padding rows never cross the bus.
            pending = PendingPcm(HostCopy(self.out[:bs]), num_samples, True, HostCopy(self.faults[:bs]))
        else:
            # Emulation: the body may return a static buffer (as a graph does): copy the real rows out.
            out = self.body(self.codes, self.slots, self.lengths)[:bs].float().clone()
            pending = PendingPcm(HostCopy(out), num_samples, True, HostCopy(row_fault_counts(out)))
        if times is not None:
            times.add("stage", staged - started)
            times.add("launch", clock() - staged)
        return pending


@contextlib.contextmanager
def cudnn_benchmark_set_to(on: bool) -> Iterator[None]:
    """torch.backends.cudnn.benchmark = on inside, the process's own setting back after (errors too).
    (torch.backends.cudnn.flags would reset the other cuDNN flags to its own defaults.)"""
    was_on = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = was_on


def fill_padded(host_codes: np.ndarray, host_slots: np.ndarray, host_lengths: np.ndarray,
                codes: np.ndarray, slots: np.ndarray, lengths: np.ndarray, scratch_slot: int) -> None:
    """Write a (bs, t) step into (B, T) buffers: zero codes beyond it, padding rows on the scratch slot
    with length 0 (so they neither read nor move any real slot's state)."""
    bs, _, t = codes.shape
    host_codes.fill(0)
    host_codes[:bs, :, :t] = codes
    host_slots.fill(scratch_slot)
    host_slots[:bs] = slots
    host_lengths.fill(0)
    host_lengths[:bs] = lengths


def _host_buffer(shape, pinned: bool) -> torch.Tensor:
    buffer = torch.zeros(shape, dtype=torch.int64)
    return buffer.pin_memory() if pinned else buffer


@dataclass
class CaptureReport:
    captured: list[tuple[int, int]] = field(default_factory=list)       # (batch, frames)
    skipped: list[tuple[int, int]] = field(default_factory=list)        # left out by the budget
    cudnn_benchmarked: list[tuple[int, int]] = field(default_factory=list)   # captured with timed conv picks
    # "BxT" -> {"kind": "static" | "dynamic", "s": seconds to compile (if first of its kind) and capture}
    compiled: dict[str, dict] = field(default_factory=dict)
    compile_failed: dict[str, str] = field(default_factory=dict)   # kind -> why its compile failed
    graph_memory_bytes: int = 0      # growth of reserved device memory over the whole capture
    replay_ms: dict[str, float] = field(default_factory=dict)   # "BxT" -> median replay at capture
    # "BxT" -> "B'xT'": a captured shape whose calls replay a bigger graph instead (it was slower)
    replaced: dict[str, str] = field(default_factory=dict)
    # "BxT" -> reserved growth (bytes) once that shape was captured, in capture order: the curve the
    # budget check extrapolates before each shape (predicted_growth; 4.9 GB for the 41 smallest of
    # 54 shapes on an H100, 55.6 GB for all 54)
    reserved_after: dict[str, int] = field(default_factory=dict)
    allocated_bytes: int = 0         # growth of allocated memory (static inputs and outputs)
    capture_s: float = 0.0


def predicted_growth(grown_bytes: int, largest_row_frames: int, next_row_frames: int) -> int:
    """The pool's growth once a shape of `next_row_frames` rows x frames is captured too, predicted
    from the growth so far. Graphs share one pool, so it grows with the largest shape's activations:
    in proportion to its row-frames. Checking the growth only after each capture let the last one
    overshoot the budget by GBs (a 25-frame shape at 128 rows), and those GBs were the headroom."""
    if largest_row_frames <= 0 or next_row_frames <= largest_row_frames:
        return grown_bytes
    return grown_bytes * next_row_frames // largest_row_frames


class GraphTable:
    """Captured steps by shape, and the smallest covering shape for a request."""

    def __init__(self, decoder: StreamingDecoder, emulate: bool = False, body: StepBody | None = None,
                 cudnn_benchmark_min_row_frames: int = 0, compile_plan=None) -> None:
        self.is_cuda = decoder.device.type == "cuda"
        self.body = body
        self.compile_plan = compile_plan   # compile_plan.CompilePlan or None: per-shape compiled bodies
        self.cudnn_benchmark_min_row_frames = cudnn_benchmark_min_row_frames
        if not self.is_cuda and not emulate:
            raise ValueError(f"CUDA graphs need a CUDA decoder, this one is on {decoder.device}")
        self.decoder = decoder
        self.steps: dict[tuple[int, int], CapturedStep] = {}
        self._lookup: dict[tuple[int, int], CapturedStep | None] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.is_cuda else None

    def capture(self, batch_sizes: list[int], frame_sizes: list[int], budget_bytes: int) -> CaptureReport:
        """Capture every (batch, frames) shape, smallest first, until `budget_bytes` is reached."""
        if budget_bytes <= 0:
            raise ValueError(f"graph memory budget must be > 0 bytes, got {budget_bytes}")
        for name, sizes in (("batch", batch_sizes), ("frame", frame_sizes)):
            if not sizes or min(sizes) < 1:
                raise ValueError(f"capture {name} sizes must be positive integers, got {sizes}")
        batch_sizes = [b for b in sorted(set(batch_sizes)) if b <= self.decoder.max_slots]
        shapes = sorted({(b, t) for b in batch_sizes for t in set(frame_sizes)}, key=lambda s: (s[0] * s[1], s))
        report = CaptureReport()
        memory = _DeviceMemory(self.decoder.device if self.is_cuda else None)
        started = time.perf_counter()
        grown_bytes = 0   # reserved growth so far: read once per shape (each read synchronizes the device)
        largest_row_frames = 0
        for index, shape in enumerate(shapes):
            if predicted_growth(grown_bytes, largest_row_frames, shape[0] * shape[1]) > budget_bytes:
                report.skipped = shapes[index:]
                logger.warning(
                    "graph memory budget %.0f MB: %d graphs fit (%.0f MB); %d larger shapes are left out "
                    "(batches are split to the captured sizes): %s", budget_bytes / 2**20, len(report.captured),
                    grown_bytes / 2**20, len(report.skipped), report.skipped,
                )
                break
            shape_started = time.perf_counter()
            body, kind = self._body_and_kind(shape)
            self.steps[shape] = CapturedStep(self.decoder, shape[0], shape[1], self.pool, body,
                                             cudnn_benchmark=self.uses_cudnn_benchmark(*shape))
            report.captured.append(shape)
            grown_bytes = memory.reserved_growth()
            largest_row_frames = max(largest_row_frames, shape[0] * shape[1])
            report.reserved_after[f"{shape[0]}x{shape[1]}"] = grown_bytes
            if kind != "plain":
                report.compiled[f"{shape[0]}x{shape[1]}"] = {"kind": kind, "s": time.perf_counter() - shape_started}
            if self.uses_cudnn_benchmark(*shape):
                report.cudnn_benchmarked.append(shape)
        self._lookup.clear()
        for (b, t), step in self.steps.items():
            if step.replay_ms is not None:
                report.replay_ms[f"{b}x{t}"] = round(step.replay_ms, 3)
            chosen = self.find(b, t)
            if chosen is not step:
                report.replaced[f"{b}x{t}"] = f"{chosen.batch_size}x{chosen.num_frames}"
        if report.replay_ms:
            logger.info("median replay ms at capture: %s", " ".join(f"{k}:{v:.1f}" for k, v in report.replay_ms.items()))
        if report.replaced:
            logger.warning("decode graphs slower than a bigger covering one (median replay ms at capture); their "
                           "calls replay the bigger graph: %s", ", ".join(
                               f"{shape} ({report.replay_ms[shape]:.1f}) -> {bigger} ({report.replay_ms[bigger]:.1f})"
                               for shape, bigger in report.replaced.items()))
        if self.compile_plan is not None:
            report.compile_failed = dict(self.compile_plan.failed)
        report.graph_memory_bytes = memory.reserved_growth()
        report.allocated_bytes = memory.allocated_growth()
        report.capture_s = time.perf_counter() - started
        logger.info(
            "captured %d decode graphs in %.1f s: %.1f MB reserved, %.1f MB allocated; reserved MB after each: %s",
            len(report.captured), report.capture_s, report.graph_memory_bytes / 2**20, report.allocated_bytes / 2**20,
            " ".join(f"{name}:{grown / 2**20:.0f}" for name, grown in report.reserved_after.items()),
        )
        return report

    def _body_and_kind(self, shape: tuple[int, int]) -> tuple[StepBody | None, str]:
        """What to capture for `shape`: the compiled step the plan names ("static" / "dynamic"), or
        the table's body ("plain"; None: the decoder's step). A compiled step compiles on its first
        call, here, outside any capture; if that fails (no C compiler for Triton, an Inductor error)
        the shape, and every later one of that kind, takes the plain step, with a warning: a start
        with slower graphs beats no start."""
        plan = self.compile_plan
        kind = plan.kind_for(*shape) if plan is not None else "plain"
        if kind == "plain" or kind in plan.failed:
            return self.body, "plain"
        compiled = plan.body_for(*shape)
        batch_size, num_frames = shape
        device = self.decoder.device
        try:   # every row on the scratch slot with length 0: no state moves
            compiled(torch.zeros((batch_size, self.decoder.num_quantizers, num_frames), dtype=torch.int64, device=device),
                     torch.full((batch_size,), self.decoder.scratch_slot, dtype=torch.int64, device=device),
                     torch.zeros(batch_size, dtype=torch.int64, device=device))
        except Exception as exc:  # noqa: BLE001 (any compiler failure: fall back, say why)
            plan.failed[kind] = (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]
            logger.warning("the %s compile of the decode step failed at %dx%d (%s): those graphs replay the "
                           "plain step", kind, batch_size, num_frames, plan.failed[kind])
            return self.body, "plain"
        return compiled, kind

    def uses_cudnn_benchmark(self, batch_size: int, num_frames: int) -> bool:
        threshold = self.cudnn_benchmark_min_row_frames
        return threshold > 0 and batch_size * num_frames >= threshold

    def find(self, batch_size: int, num_frames: int) -> CapturedStep | None:
        """The captured shape covering (batch_size, num_frames) with the least padded work, among those
        whose replay (measured at capture) is within SLOW_GRAPH_RATIO of the fastest covering one."""
        key = (batch_size, num_frames)
        if key not in self._lookup:
            covering = [step for (b, t), step in self.steps.items() if b >= batch_size and t >= num_frames]
            timed = [step.replay_ms for step in covering if step.replay_ms is not None]
            if timed and len(timed) == len(covering):
                covering = [step for step in covering if step.replay_ms <= SLOW_GRAPH_RATIO * min(timed)]
            self._lookup[key] = min(covering, key=lambda step: (step.batch_size * step.num_frames,
                                                                 step.batch_size), default=None)
        return self._lookup[key]

    def covering_shape(self, batch_size: int, num_frames: int) -> tuple[int, int] | None:
        """(B, T) of the graph a (batch_size, num_frames) call would replay; None: it would run eagerly."""
        step = self.find(batch_size, num_frames)
        return None if step is None else (step.batch_size, step.num_frames)

    def __len__(self) -> int:
        return len(self.steps)


class _DeviceMemory:
    """Growth of the CUDA caching allocator's reserved/allocated bytes since construction (0 on CPU)."""

    def __init__(self, device: torch.device | None) -> None:
        self.device = device
        if device is not None:
            torch.cuda.synchronize(device)
        self.reserved0, self.allocated0 = self._read()

    def _read(self) -> tuple[int, int]:
        if self.device is None:
            return 0, 0
        torch.cuda.synchronize(self.device)
        return torch.cuda.memory_reserved(self.device), torch.cuda.memory_allocated(self.device)

    def reserved_growth(self) -> int:
        return self._read()[0] - self.reserved0

    def allocated_growth(self) -> int:
        return self._read()[1] - self.allocated0
