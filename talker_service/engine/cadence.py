"""How much prompt prefill a talker step may put before the running streams' next frames (no torch).

Every running stream has audio ahead of a real-time listener who started at its first frame:
`first frame + frames x 80 ms - now`, its talker-side slack (the vocoder and the network only add
to the listener's wait, so this is the most the listener can have). A step's prefill runs before
its decode, so the prefill of arrivals delays every running stream's next frame. The guard gives a
step only the prefill positions whose measured time fits into the smallest slack, less two decode
steps and a margin: when admitting more would make a running stream late, the arrivals wait (their
first frame, and so their TTFA, later; the summary's prefill_ms shows it) instead of every stream
stuttering. An arrival never waits longer than `max_hold_ms`: a device slower than real time for
its running streams would otherwise hold arrivals until those end.

The rule binds rarely on a GPU that generates several times faster than real time (a stream that
just started has 80 ms ahead, the decode step a few ms); it is what keeps cadence when the talker
is near its limit. Off by default (`EngineConfig.cadence_margin_ms` = 0) until measured.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from service_common.frame_budget import FRAME_RATE_HZ

FRAME_S = 1.0 / FRAME_RATE_HZ   # audio of one codec frame


@dataclass
class CadenceGuard:
    margin_s: float                   # kept in hand for the vocoder, the gateway and the network
    max_hold_s: float                 # an arrival is prefilled after this long whatever the slack
    alpha: float = 0.2                # weight of each new measurement in the EWMAs
    decode_s: float = 0.0             # EWMA of a decode step (launch to codes read)
    s_per_token: float | None = None  # EWMA of prefill time per padded position; None: not measured yet

    def observe_decode(self, elapsed_s: float) -> None:
        self.decode_s += self.alpha * (elapsed_s - self.decode_s) if self.decode_s else elapsed_s

    def observe_prefill(self, padded_tokens: int, elapsed_s: float) -> None:
        if padded_tokens <= 0:
            return
        rate = elapsed_s / padded_tokens
        self.s_per_token = rate if self.s_per_token is None else self.s_per_token + self.alpha * (rate - self.s_per_token)

    @staticmethod
    def slack_s(first_frame_s: float, num_frames: int, now_s: float) -> float:
        return first_frame_s + num_frames * FRAME_S - now_s

    def token_budget(self, slacks_s: Iterable[float], full_budget: int, oldest_wait_s: float) -> int:
        """Padded prefill positions this step may run: all of `full_budget` when no running stream
        is short of audio (or the oldest waiting prefill has waited max_hold_s), else what fits
        into the smallest slack less two decode steps and the margin (0: hold the arrivals)."""
        if oldest_wait_s >= self.max_hold_s:
            return full_budget
        min_slack_s = min(slacks_s, default=math.inf)
        if min_slack_s == math.inf:
            return full_budget
        spare_s = min_slack_s - 2 * self.decode_s - self.margin_s
        if spare_s <= 0:
            return 0
        if self.s_per_token is None or self.s_per_token <= 0:
            return full_budget   # nothing measured yet: the first prefills teach the rate
        return min(full_budget, int(spare_s / self.s_per_token))
