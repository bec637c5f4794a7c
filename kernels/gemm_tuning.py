"""Per-shape cuBLASLt algorithm choice for the decode GEMMs (y (+)= x W^T, bf16/fp16, no bias).

Why: cuBLAS's heuristic pick is not the fastest algorithm it has at the decode shapes. On an H100
(benchmarks/results/2026-11-27-cublaslt-algos-h100.json), at 256 rows: the code predictor's o_proj
6.73 -> 6.32 us and down_proj 8.91 -> 7.97 us (both with the residual add, beta = 1), the talker's
gate/up 28.4 -> 25.8 us; other shapes tie. A frame step runs those 70, 70 and 28 times.

How: the first eager call of a (device, M, N, K, dtype, accumulate) problem inside `allow_tuning()`
(and outside a CUDA-graph capture) tunes it. Torch's own call, the first CANDIDATES algorithms of
cuBLASLt's heuristic list and split-K variants of the first SPLIT_RANKS are each captured as a CUDA
graph of calls over private random weight copies that together pass the L2 (the frame step streams
its weights from HBM); a candidate whose output differs from torch's is dropped; the graphs are
timed round robin, TIMING_ROUNDS times, best median each, and the fastest candidate is kept if it
beats torch by MARGIN. Later calls of the problem, captured or not, launch the kept algorithm
(kernels/cublaslt.py) or answer None so the caller runs torch. The decode graphs' warm-up runs
(talker_service/engine/graphs.py) run inside allow_tuning(), so the captured steps hold the chosen
algorithms. A problem first seen elsewhere (a capture, where timing cannot run; a serving-path eager
call, which must not stall ~0.1 s) is not tuned and runs torch's call.

Only for MIN_ROWS..MAX_ROWS rows: the one- and two-row calls go to the few-row Triton kernel
(kernels/small_m_linear.py), and prefill's long calls are compute-bound, where cuBLAS's pick is
good. QWEN3_TTS_GEMM_TUNING=0 turns the whole thing off (A/B runs); any failure of the library or of
a tuning run is logged once and leaves torch in place.
"""
from __future__ import annotations

import contextlib
import logging
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

logger = logging.getLogger(__name__)

ENABLE_ENV = "QWEN3_TTS_GEMM_TUNING"
MIN_ROWS = 3
MAX_ROWS = 512
CANDIDATES = 8           # heuristic list entries timed (the probe's winners were among its first five)
SPLIT_RANKS = 2          # of which the first few also with split-K factors SPLITS
SPLITS = (2, 4)
MARGIN = 0.02            # a candidate must beat torch's call by 2% to replace it (timing noise)
STREAM_BYTES = 96 * 2**20  # weight copies per timing graph: more than an H100/H200 L2 (50 MiB)
TIMING_REPLAYS = 8
TIMING_ROUNDS = 3          # round-robin passes over the candidates (_tune)
ALIGN_BYTES = 256        # cuBLASLt's default alignment assumption for the heuristic's algorithms
_DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class GemmKey:
    device_index: int
    m: int
    n: int
    k: int
    dtype: torch.dtype
    accumulate: bool


@dataclass
class Choice:
    """What a problem runs: algo None means torch's call."""
    plan: object = None
    algo: object = None
    torch_us: float = 0.0
    chosen_us: float = 0.0
    config: dict = field(default_factory=dict)


_choices: dict[GemmKey, Choice] = {}
_lock = threading.Lock()
_scope = threading.local()
_library_failed = False
tuning_seconds = 0.0     # spent tuning in this process (logged, and read by tests)


def enabled_on(device: torch.device) -> bool:
    return device.type == "cuda" and os.environ.get(ENABLE_ENV, "1") != "0" and not _library_failed


def choices() -> dict[GemmKey, Choice]:
    """The problems tuned so far and what each runs (a copy)."""
    return dict(_choices)


def reset() -> None:
    """Forget every choice (tests)."""
    global _library_failed, tuning_seconds
    with _lock:
        _choices.clear()
        _library_failed = False
        tuning_seconds = 0.0


@contextlib.contextmanager
def allow_tuning():
    """Within this block (this thread), a problem's first call may be tuned (module docstring)."""
    depth = getattr(_scope, "depth", 0)
    _scope.depth = depth + 1
    try:
        yield
    finally:
        _scope.depth = depth


def tuning_allowed() -> bool:
    return getattr(_scope, "depth", 0) > 0


def _aligned(*tensors: torch.Tensor) -> bool:
    return all(t.data_ptr() % ALIGN_BYTES == 0 for t in tensors)


def _eligible(x2d: torch.Tensor, weight: torch.Tensor) -> bool:
    if torch.compiler.is_compiling() or not enabled_on(x2d.device):
        return False
    if x2d.dtype not in _DTYPES or weight.dtype != x2d.dtype or weight.dim() != 2 or x2d.dim() != 2:
        return False
    if torch.is_grad_enabled() and (x2d.requires_grad or weight.requires_grad):
        return False
    m, k = x2d.shape
    n = weight.shape[0]
    if not MIN_ROWS <= m <= MAX_ROWS or weight.shape[1] != k or k % 8 or n % 8:
        return False
    return x2d.is_contiguous() and weight.is_contiguous() and _aligned(x2d, weight)


def capture_calls(calls) -> torch.cuda.CUDAGraph:
    """`calls` captured in one CUDA graph (launch gaps as in the frame step), after a warm-up."""
    for fn in calls[:2]:
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in calls:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def replay_us(graph: torch.cuda.CUDAGraph, num_calls: int, replays: int = TIMING_REPLAYS) -> float:
    """Median us per call over `replays` replays of a graph of num_calls calls."""
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / num_calls)
    return statistics.median(times)


def _tune(key: GemmKey) -> Choice:
    """Time torch's call and cuBLASLt's candidates for key on private data (module docstring)."""
    from kernels import cublaslt

    device = torch.device("cuda", key.device_index)
    gen = torch.Generator(device=device).manual_seed(key.m * 1_000_003 + key.n * 1009 + key.k)
    copies = max(2, min(48, STREAM_BYTES // (key.n * key.k * 2)))
    x = torch.randn(key.m, key.k, device=device, generator=gen).to(key.dtype)
    weights = [(torch.randn(key.n, key.k, device=device, generator=gen) * key.k ** -0.5).to(key.dtype)
               for _ in range(copies)]
    base = (torch.randn(key.m, key.n, device=device, generator=gen) * 0.1).to(key.dtype)
    outs = [base.clone() for _ in range(copies)]
    if key.accumulate:
        torch_calls = [lambda o=o, w=w: o.addmm_(x, w.t()) for o, w in zip(outs, weights)]
        want = base.float() + x.float() @ weights[0].float().t()
    else:
        torch_calls = [lambda o=o, w=w: torch.mm(x, w.t(), out=o) for o, w in zip(outs, weights)]
        want = x.float() @ weights[0].float().t()
    tolerance = 0.02 * max(1.0, want.abs().max().item())

    plan = cublaslt.MatmulPlan(key.m, key.n, key.k, key.dtype, accumulate=key.accumulate)
    heuristic = plan.candidates(CANDIDATES)
    candidates = list(heuristic)
    for algo in heuristic[:SPLIT_RANKS]:
        for splits in SPLITS:
            variant = plan.with_splitk(algo, splits)
            if variant is not None:
                candidates.append(variant)
    # (algo or None for torch, graph): every candidate that computes the right answer
    entries = [(None, capture_calls(torch_calls))]
    for algo in candidates:
        check = base.clone()
        plan.run(algo, x, weights[0], check)
        if (check.float() - want).abs().max().item() > tolerance:   # a wrong answer is never a candidate
            continue
        entries.append((algo, capture_calls([lambda o=o, w=w, a=algo: plan.run(a, x, w, o)
                                        for o, w in zip(outs, weights)])))
    # round robin, best of TIMING_ROUNDS medians each: a clock or neighbour blip hits one round of one
    # candidate, not its verdict (single rounds picked differently between runs of the same problem)
    best_us = [float("inf")] * len(entries)
    for _ in range(TIMING_ROUNDS):
        for i, (_, graph) in enumerate(entries):
            best_us[i] = min(best_us[i], replay_us(graph, copies))
    torch_us = best_us[0]
    best = Choice(torch_us=torch_us, chosen_us=torch_us)
    for (algo, _), us in zip(entries[1:], best_us[1:]):
        if us < best.chosen_us and us < torch_us * (1 - MARGIN):
            best = Choice(plan=plan, algo=algo, torch_us=torch_us, chosen_us=us)
    del entries
    if best.algo is not None:
        best.config = cublaslt.algo_config(best.algo)
    return best


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def cublaslt_error() -> type:
    from kernels.cublaslt import CublasLtError
    return CublasLtError


def _choice(key: GemmKey) -> Optional[Choice]:
    """key's choice, tuning it first when this is its first call outside a capture."""
    global _library_failed, tuning_seconds
    choice = _choices.get(key)
    if choice is not None:
        return choice
    if not tuning_allowed() or _capturing():
        return None
    with _lock:
        if key in _choices:
            return _choices[key]
        started = time.perf_counter()
        try:
            choice = _tune(key)
        except (OSError, cublaslt_error()) as exc:  # the library itself failed: torch everywhere from now on
            _library_failed = True
            logger.warning("GEMM tuning off: %s: %s (torch's cuBLAS call is used)", type(exc).__name__, exc)
            return None
        except Exception as exc:  # this problem's timing run failed (memory, say): torch for it
            logger.warning("GEMM %dx%dx%d not tuned: %s: %s (torch's cuBLAS call is used)", key.m, key.n, key.k,
                           type(exc).__name__, exc)
            choice = Choice()
        finally:
            tuning_seconds += time.perf_counter() - started
        _choices[key] = choice
        logger.info("GEMM %dx%dx%d%s: %s (torch %.2f us)", key.m, key.n, key.k, " +=" if key.accumulate else "",
                    "torch" if choice.algo is None else f"cuBLASLt {choice.chosen_us:.2f} us {choice.config}",
                    choice.torch_us)
        return choice


def linear_or_none(x: torch.Tensor, weight: torch.Tensor) -> Optional[torch.Tensor]:
    """x [..., K] @ weight[N, K]^T through the tuned algorithm -> [..., N], or None: run torch."""
    # off CUDA (and when off) nothing else is looked at: no reshape, which could copy, for nothing
    if not enabled_on(x.device) or x.dim() < 1 or weight.dim() != 2 or x.shape[-1] != weight.shape[1]:
        return None
    x2d = x.reshape(-1, x.shape[-1])
    if not _eligible(x2d, weight):
        return None
    m, k = x2d.shape
    choice = _choice(GemmKey(x2d.device.index or 0, m, weight.shape[0], k, x2d.dtype, False))
    if choice is None or choice.algo is None:
        return None
    # torch's allocator hands out blocks aligned to 512 bytes: the 256 the algorithm assumes
    out = torch.empty(m, weight.shape[0], dtype=x2d.dtype, device=x2d.device)
    choice.plan.run(choice.algo, x2d, weight, out)
    return out.view(*x.shape[:-1], weight.shape[0])


def add_(residual2d: torch.Tensor, x2d: torch.Tensor, weight: torch.Tensor) -> bool:
    """residual2d [M, N] += x2d [M, K] @ weight[N, K]^T in place through the tuned algorithm; False
    (nothing done): run torch."""
    if not _eligible(x2d, weight) or residual2d.dtype != x2d.dtype or not residual2d.is_contiguous():
        return False
    if not _aligned(residual2d) or tuple(residual2d.shape) != (x2d.shape[0], weight.shape[0]):
        return False
    m, k = x2d.shape
    choice = _choice(GemmKey(x2d.device.index or 0, m, weight.shape[0], k, x2d.dtype, True))
    if choice is None or choice.algo is None:
        return False
    choice.plan.run(choice.algo, x2d, weight, residual2d)
    return True
