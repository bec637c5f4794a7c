"""Which captured decode graphs replay a torch.compile of the step instead of the plain step.

A decode step is hundreds of small kernels; Inductor fuses each conv's elementwise neighbours
(SnakeBeta, bias, residual add, layout copies) into few Triton kernels. Measured on the H200
(`benchmarks/probe_vocoder_compile.py`, results 2026-11-25-vocoder-compile-h200.md):
- batch 1 x 1 frame (a lone stream's first chunk): replay 1.68 ms compiled vs 2.97 ms plain,
  for ~40 s of compile on a cold Inductor cache and ~5 s with a warm one;
- batch 64-256 x 25 frames (steady chunks): +21-23% audio-s/s (2759 vs 2274 at 64) from a
  compile whose batch dimension is symbolic, shared by every batch size >= 2 (measured when it
  still compiled twice: ~3 min cold / ~35 s warm; once, as now, should save about half).
Hence two independent choices: small shapes get a static compile each (`max_row_frames`: every
captured shape with rows x frames at most this), and listed frame counts get one dynamic-shape
compile for all their batch sizes >= 2 (`dynamic_batch_frames`). Everything else replays the plain
step. Compilation happens while the graphs are captured, before the service says SERVING.

The compiled outputs are not bit-equal to the plain step's (fusion reorders bf16 arithmetic);
streaming stays exact in the sense that matters: a compiled step carries the same state forward.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Callable

import torch

from vocoder_service.runtime.graphs import StepBody

logger = logging.getLogger(__name__)

# torch.compile(fn, mode=..., dynamic=...) -> callable; a test passes a recorder instead.
Compiler = Callable[..., StepBody]
# Dynamo keeps one compiled entry per shape specialisation and gives up past its limit (8).
RECOMPILE_LIMIT = 256


def compile_step(step: StepBody, mode: str = "default", dynamic: bool = False,
                 compiler: Compiler | None = None) -> StepBody:
    """A torch.compile of `step` (same signature).

    static (dynamic=False): one specialisation per shape. dynamic: the batch dimension is symbolic
    from the first call and the frame count stays static. (torch.compile(dynamic=True) gave the
    first batch size code of its own and compiled again for the next one: ~90 s more of cold
    start-up on the H200, measured for 2 x 25 then 4 x 25; marking the batch dimension compiles once.)
    Dynamo caches compiled code per Python code object, so each kind wraps the step in a function
    of its own: a 1 x 1 call never lands on the dynamic entry's code, nor a batch-64 call on a
    static specialisation.
    """
    _lift_recompile_limit()
    compile_fn = compiler or torch.compile
    if not dynamic:
        return compile_fn(_static_entry(step), mode=mode, dynamic=False)
    compiled = compile_fn(_dynamic_entry(step), mode=mode, dynamic=None)

    def batch_dynamic_step(codes, slots, lengths):
        for tensor in (codes, slots, lengths):
            torch._dynamo.maybe_mark_dynamic(tensor, 0)   # rows: any count >= 2 shares the code
        torch._dynamo.mark_static(codes, 2)               # frames: one specialisation per count
        return compiled(codes, slots, lengths)
    return batch_dynamic_step


def _static_entry(step: StepBody) -> StepBody:
    def static_step(codes, slots, lengths):
        return step(codes, slots, lengths)
    return static_step


def _dynamic_entry(step: StepBody) -> StepBody:
    def dynamic_shape_step(codes, slots, lengths):
        return step(codes, slots, lengths)
    return dynamic_shape_step


def _lift_recompile_limit() -> None:
    # Newer torch names the limit recompile_limit; set whichever this version has.
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), RECOMPILE_LIMIT))


def use_cache_dir(path: str | Path) -> Path:
    """Keep Inductor's and Triton's on-disk caches under `path`, so a restart (or another replica
    with the same folder mounted) loads compiled kernels instead of compiling them again; -> the
    folder used. One that cannot be written (a read-only model volume) must not stop the start:
    the caches then go to a folder under the temp dir, with a warning."""
    root = Path(path).expanduser()
    try:
        _make_writable_dir(root)
    except OSError as exc:
        fallback = Path(tempfile.gettempdir()) / "qwen3-tts-compile"
        logger.warning("compile cache %s cannot be written (%s); using %s, which a restart of this "
                       "container does not keep", root, exc, fallback)
        root = fallback
        _make_writable_dir(root)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root)
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    logger.info("compile caches under %s", root)
    return root


def _make_writable_dir(root: Path) -> None:
    (root / "triton").mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=root):   # mkdir succeeds on an existing read-only folder
        pass


class CompilePlan:
    """Chooses, per captured (batch, frames) shape, a compiled step body or None (the plain step)."""

    def __init__(self, step: StepBody, max_row_frames: int = 0, dynamic_batch_frames: tuple[int, ...] = (),
                 mode: str = "default", compiler: Compiler | None = None) -> None:
        if max_row_frames < 0:
            raise ValueError(f"max_row_frames must be >= 0 (0: no static compile), got {max_row_frames}")
        if any(t < 1 for t in dynamic_batch_frames):
            raise ValueError(f"dynamic_batch_frames must be positive frame counts, got {dynamic_batch_frames}")
        self.step = step
        self.max_row_frames = max_row_frames
        self.dynamic_batch_frames = tuple(sorted(set(dynamic_batch_frames)))
        self.mode = mode
        self.compiler = compiler
        self._static: StepBody | None = None     # one compile object, one specialisation per shape
        self._dynamic: StepBody | None = None    # one compile object shared by every batch size >= 2
        self.failed: dict[str, str] = {}          # kind -> why compiling it failed (GraphTable falls back)

    @property
    def is_empty(self) -> bool:
        return self.max_row_frames == 0 and not self.dynamic_batch_frames

    def kind_for(self, batch_size: int, num_frames: int) -> str:
        """"static", "dynamic" or "plain" for a captured shape (static wins where both apply)."""
        if batch_size * num_frames <= self.max_row_frames:
            return "static"
        if batch_size >= 2 and num_frames in self.dynamic_batch_frames:
            return "dynamic"
        return "plain"

    def body_for(self, batch_size: int, num_frames: int) -> StepBody | None:
        kind = self.kind_for(batch_size, num_frames)
        if kind == "static":
            if self._static is None:
                self._static = compile_step(self.step, self.mode, dynamic=False, compiler=self.compiler)
            return self._static
        if kind == "dynamic":
            if self._dynamic is None:
                self._dynamic = compile_step(self.step, self.mode, dynamic=True, compiler=self.compiler)
            return self._dynamic
        return None

    def describe(self) -> dict:
        return {"max_row_frames": self.max_row_frames, "dynamic_batch_frames": list(self.dynamic_batch_frames),
                "mode": self.mode, "failed": dict(self.failed)}
