"""Whether a talker step should let its ready arrivals wait for more (no torch).

A prefill with its first frame costs about one decode step whatever its batch: on an H200 at 256
streams, 68 prefills of ~15 arrivals took 10.2 ms each in a closed loop, and 297 prefills of ~3.4
took 12.7 ms each under Poisson arrivals of nearly the same rate (3.8 s of the talker's 10.7 s
against 0.7 s of 7.6 s; benchmarks/results/2026-11-28-gapless5-h200.md). Spread arrivals thus cost
the GPU that the running streams and the vocoder share, and the service sustains less under
steady arrivals than under waves.

The rule: while at least `min_decoding` streams have a decode step to run (the step happens
anyway, so waiting adds no idle turn), ready arrivals wait until `min_batch` of them are ready or
the oldest has waited `wait_s`. Under a lighter load every arrival is prefilled at once, so a
quiet service's first audio is untouched. On by default (60 ms, batch 8, from 128 decoding streams:
`EngineConfig`), measured in benchmarks/results/2026-11-28-gapless7-h200.md.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PrefillGather:
    wait_s: float        # the oldest ready arrival waits at most this long
    min_batch: int       # ... or until this many are ready
    min_decoding: int    # only while at least this many streams decode

    def should_hold(self, num_decoding: int, ready_arrivals_s: Sequence[float], now_s: float) -> bool:
        """True: this step prefills none of the ready arrivals (their times in `ready_arrivals_s`)."""
        if self.wait_s <= 0 or not ready_arrivals_s or num_decoding < self.min_decoding:
            return False
        if len(ready_arrivals_s) >= self.min_batch:
            return False
        return now_s - min(ready_arrivals_s) < self.wait_s
