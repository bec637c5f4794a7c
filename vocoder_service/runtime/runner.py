"""The decode runner: the only code that touches the device on the vocoder's hot path.

The engine hands it host arrays (`decode(codes [bs,16,t], slots [bs], lengths [bs])`) and gets
host PCM back; in between the runner replays the CUDA graph of the smallest captured
(batch, frames) shape that covers the call, or runs the streaming step eagerly (CPU, or a shape
no graph covers). Both paths run the same `StreamingDecoder.step_unchecked`, so they agree to the
last bit of the chosen dtype and the engine cannot tell them apart except through the stats.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from service_common.host_copy import HostCopy
from vocoder_service.codec import Code2Wav, StreamingDecoder
from vocoder_service.codec.validation import check_step_arrays
from vocoder_service.runtime.compile_plan import CompilePlan, compile_step
from vocoder_service.runtime.graphs import CaptureReport, GraphTable, PendingPcm, StepBody, row_fault_counts
from vocoder_service.runtime.stats import RunnerStats

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}") from None


class DecoderRunner:
    def __init__(self, model: Code2Wav, max_slots: int) -> None:
        weight = model.pre_conv.conv.weight
        self.model = model
        self.device, self.dtype = weight.device, weight.dtype
        self.decoder = StreamingDecoder(model, max_slots, self.device, self.dtype)
        self.max_slots = max_slots
        self.codebook_size = model.config.codebook_size
        self.num_quantizers = model.config.num_quantizers
        self.samples_per_frame = model.samples_per_frame
        self.sample_rate_hz = model.sample_rate_hz
        self.graphs: GraphTable | None = None
        self.stats = RunnerStats()
        self.last_step_is_graph = False   # read by the engine for the chunk's timings

    @classmethod
    def from_pretrained(cls, path: str | Path, max_slots: int, device: str = "cpu",
                        dtype: torch.dtype | str = torch.float32) -> "DecoderRunner":
        if isinstance(dtype, str):
            dtype = parse_dtype(dtype)
        return cls(Code2Wav.from_pretrained(path, device=device, dtype=dtype), max_slots)

    # ---- setup -------------------------------------------------------------------------------
    def compiled_step(self, mode: str = "default", dynamic: bool = False) -> StepBody:
        """A torch.compile of the step, for `capture_graphs(body=...)`: every captured shape gets it
        (compiled lazily, per shape: ~40 s each on the H200 with a cold cache). The service chooses
        per shape instead: `capture_graphs(compile_plan=...)`, see compile_plan.py."""
        return compile_step(self.decoder.step_unchecked, mode=mode, dynamic=dynamic)

    def compile_plan(self, max_row_frames: int = 0, dynamic_batch_frames: tuple[int, ...] = (),
                     mode: str = "default") -> CompilePlan:
        return CompilePlan(self.decoder.step_unchecked, max_row_frames, dynamic_batch_frames, mode)

    def capture_graphs(self, batch_sizes: list[int], frame_sizes: list[int], budget_bytes: int,
                       emulate: bool = False, body: StepBody | None = None,
                       cudnn_benchmark_min_row_frames: int = 0,
                       compile_plan: CompilePlan | None = None) -> CaptureReport:
        """Capture the step for every (batch, frames) shape within the memory budget (CUDA only).

        `emulate` (CPU tests): build the same padded static-shape table without graphs.
        `body`: what each graph runs instead of `decoder.step_unchecked` (same signature):
        `compiled_step()`, or a benchmark's stub that isolates the host cost.
        `compile_plan`: shapes it names replay a compiled step instead (the rest take `body`).
        `cudnn_benchmark_min_row_frames`: shapes of at least this many rows x frames are captured
        with conv algorithms timed by cuDNN (cudnn.benchmark); 0: heuristic picks for every shape.
        """
        if self.device.type != "cuda" and not emulate:
            logger.info("device %s has no CUDA graphs: every step runs eagerly", self.device)
            return CaptureReport(skipped=[(b, t) for b in batch_sizes for t in frame_sizes])
        self.graphs = GraphTable(self.decoder, emulate=emulate, body=body,
                                 cudnn_benchmark_min_row_frames=cudnn_benchmark_min_row_frames,
                                 compile_plan=compile_plan)
        report = self.graphs.capture(batch_sizes, frame_sizes, budget_bytes)
        self.stats.num_graphs = len(self.graphs)
        self.stats.graph_memory_bytes = report.graph_memory_bytes
        return report

    # ---- engine-facing API -----------------------------------------------------------------
    def reset(self, slots) -> None:
        """Fresh state for newly opened requests' slots."""
        self.decoder.reset(list(slots))

    def covering_shape(self, batch_size: int, num_frames: int) -> tuple[int, int] | None:
        """The captured (B, T) a call of this shape replays, None when it runs eagerly (batch planning)."""
        return self.graphs.covering_shape(batch_size, num_frames) if self.graphs is not None else None

    def decode(self, codes: np.ndarray, slots: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """codes [bs,16,t] int, slots [bs], lengths [bs] in [1, t] -> pcm [bs, t*spf] float32 (host).

        Advances each slot's state by its own length; samples past a row's length are zeros.
        The result is fresh memory owned by the caller (never reused by a later decode), so the
        engine hands out row views without copying.
        """
        return self.launch(codes, slots, lengths).wait()

    def launch(self, codes: np.ndarray, slots: np.ndarray, lengths: np.ndarray) -> "PendingDecode":
        """decode() without waiting for the device: the engine queues every batch of a step, then
        reads them in order, so the GPU does not idle while the host gathers and emits."""
        times, clock = self.stats.host_times, time.perf_counter
        started = clock()
        # Host-side checks before any device work: a bad call raises ValueError with state untouched.
        # (Checked as given: a float array must fail, not be truncated by a cast.)
        check_step_arrays(np.asarray(codes), np.asarray(slots), np.asarray(lengths),
                          self.num_quantizers, self.codebook_size, self.max_slots)
        codes = np.ascontiguousarray(codes, dtype=np.int64)
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        bs, _, t = codes.shape
        checked = clock()
        times.add("check", checked - started)
        captured = self.graphs.find(bs, t) if self.graphs is not None else None
        if captured is not None:
            pending = captured.launch(codes, slots, lengths, times)
        else:
            if self.graphs is not None:
                self.stats.uncaptured_shapes[(bs, t)] += 1
            # non_blocking from pageable memory: staged before the call returns, and no wait for
            # the batches queued before this one
            pcm = self.decoder.step_unchecked(*(torch.from_numpy(a).to(self.device, non_blocking=True)
                                                for a in (codes, slots, lengths))).float()
            pending = PendingPcm(HostCopy(pcm), pcm.shape[1], False, HostCopy(row_fault_counts(pcm)))
            times.add("launch", clock() - checked)
        times.count_call()
        self.last_step_is_graph = captured is not None
        return PendingDecode(pending, self.stats, bs, t, checked)

    # ---- one-pass decode (admin) -------------------------------------------------------------
    def decode_offline(self, codes: np.ndarray) -> np.ndarray:
        """codes [n,16] -> pcm [n*spf] float32 by one exact forward over all frames (no slot used)."""
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.num_quantizers:
            raise ValueError(f"codes must be [n, {self.num_quantizers}], got shape {list(codes.shape)}")
        batch = torch.from_numpy(np.ascontiguousarray(codes.T[None], dtype=np.int64))  # [1, 16, n]
        return self.model.decode(batch)[0].float().cpu().numpy()

    def reset_stats(self) -> None:
        """Fresh counters and windows (benchmarks, between runs); what was captured stays recorded."""
        num_graphs, graph_memory_bytes = self.stats.num_graphs, self.stats.graph_memory_bytes
        self.stats = RunnerStats(num_graphs=num_graphs, graph_memory_bytes=graph_memory_bytes)

    def describe(self) -> dict:
        return {"device": str(self.device), "dtype": str(self.dtype).removeprefix("torch."),
                "max_slots": self.max_slots, "samples_per_frame": self.samples_per_frame,
                "num_graphs": len(self.graphs) if self.graphs is not None else 0}


class PendingDecode:
    """A runner decode queued on the device; `wait()` -> host pcm, recording the call's stats; after
    it `row_faults` holds each row's non-finite and full-scale sample counts [bs, 2], counted on the device."""

    def __init__(self, pcm: PendingPcm, stats: RunnerStats, batch_size: int, num_frames: int,
                 launched_s: float) -> None:
        self.pcm, self.stats, self.batch_size, self.num_frames = pcm, stats, batch_size, num_frames
        self.launched_s = launched_s
        self.is_graph = pcm.is_graph
        self.row_faults: np.ndarray | None = None

    def wait(self) -> np.ndarray:
        waited_s = time.perf_counter()
        out = self.pcm.wait()
        self.row_faults = self.pcm.row_faults()
        now_s = time.perf_counter()
        self.stats.host_times.add("wait", now_s - waited_s)
        # from launch to read-back: with several batches queued it includes those queued before
        self.stats.record(self.batch_size, self.num_frames, self.is_graph, (now_s - self.launched_s) * 1e3)
        return out
