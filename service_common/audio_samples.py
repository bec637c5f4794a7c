"""Audio that is not audio: non-finite samples and samples beyond full scale, found and counted.

A decoder in reduced precision (float16 overflows past 65504; bf16 keeps 8 mantissa bits) or with
bad weights can produce NaN/inf or samples past +-1.0. Neither may reach a client silently:
- Non-finite samples are replaced by 0 (silence): every encoding the gateway offers (PCM16, WAV,
  mu-law, Opus, float32) would turn NaN into noise or a full-scale click, or hand the client a
  value it cannot play, and a NaN fed to the streaming resampler poisons its state for the rest of
  the stream. 0 is the one value that adds nothing audible and keeps the stream's length.
- Samples at or beyond full scale (|x| >= 1.0) are counted as clipped: the decoder ends with a clamp
  to [-1, 1], as the reference does, so its clipped samples arrive as exactly +-1.0; past it
  (resampling overshoots) they are clamped for every integer encoding (PCM16 clips, and libsndfile
  wraps float input past +-1.0 around unless told otherwise).

The common case must cost next to nothing: `peak` is one NaN-propagating reduction (max of
max and -min, no temporary), and only a chunk whose peak is not below 1.0 is looked at sample by
sample.
"""
from __future__ import annotations

import logging
import time
from typing import NamedTuple

import numpy as np

FULL_SCALE = 1.0


class SampleFaults(NamedTuple):
    num_nonfinite: int = 0    # NaN or +-inf samples (replaced by 0)
    num_clipped: int = 0      # finite samples with |x| >= 1.0

    def __bool__(self) -> bool:
        return bool(self.num_nonfinite or self.num_clipped)


NO_FAULTS = SampleFaults()


def peak(pcm: np.ndarray) -> float:
    """max |x| of a chunk, NaN if any sample is NaN (numpy's max/min propagate NaN); 0 when empty."""
    if pcm.size == 0:
        return 0.0
    return float(max(pcm.max(), -pcm.min()))


def is_clean(peak_value: float) -> bool:
    """True when a chunk of this peak needs no sample-level look (NaN and inf fail `<`)."""
    return peak_value < FULL_SCALE


def count_faults(pcm: np.ndarray) -> SampleFaults:
    """Sample-level counts of a chunk whose peak was not clean (the slow path)."""
    finite = np.isfinite(pcm)
    num_nonfinite = int(pcm.size - np.count_nonzero(finite))
    num_clipped = int(np.count_nonzero(np.abs(np.where(finite, pcm, 0.0)) >= FULL_SCALE))
    return SampleFaults(num_nonfinite, num_clipped)


def repaired(pcm: np.ndarray) -> tuple[np.ndarray, SampleFaults]:
    """(pcm with non-finite samples replaced by 0, the chunk's faults). Clean chunks come back as
    they are (no copy); a faulty one is fixed in place when writable, else copied (a received
    message's buffer is read-only)."""
    if is_clean(peak(pcm)):
        return pcm, NO_FAULTS
    faults = count_faults(pcm)
    if faults.num_nonfinite:
        if pcm.flags.writeable:
            pcm[~np.isfinite(pcm)] = 0.0
        else:
            pcm = np.where(np.isfinite(pcm), pcm, np.float32(0.0)).astype(pcm.dtype, copy=False)
    return pcm, faults


class FaultLog:
    """Warnings about faulty chunks, at most one per `interval_s` (a broken model would otherwise
    log every chunk of every stream); the next warning says how many were held back."""

    def __init__(self, logger: logging.Logger, what: str, interval_s: float = 10.0, clock=time.monotonic) -> None:
        self.logger, self.what, self.interval_s, self.clock = logger, what, interval_s, clock
        self._last_s: float | None = None
        self.num_suppressed = 0

    def chunk(self, request_id: str, seq: int, faults: SampleFaults, num_samples: int) -> None:
        now = self.clock()
        if self._last_s is not None and now - self._last_s < self.interval_s:
            self.num_suppressed += 1
            return
        self.logger.warning(
            "request %s: %s chunk %d has %d non-finite samples (sent as 0) and %d at or past full scale, of %d%s",
            request_id, self.what, seq, faults.num_nonfinite, faults.num_clipped, num_samples,
            f" ({self.num_suppressed} more faulty chunks since the last warning)" if self.num_suppressed else "")
        self._last_s, self.num_suppressed = now, 0
