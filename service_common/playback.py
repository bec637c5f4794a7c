"""What a listener hears: a player that starts at the first chunk and plays without a buffer.

The one model of playback deadlines in the project: the vocoder schedules by it (a stream's
deadline is when its listener runs out of audio), the gateway measures each chunk's lateness
against it (`tts_chunk_lateness_seconds`, the summary's stall count and longest stall), and
`benchmarks/bench_e2e.py` measures stalls as the client sees them. A chunk that arrives after its
audio was needed is a stall: the player waits for it and resumes when it comes, so later deadlines
move by the stall (the listener hears the gap once, not again for every chunk after it).
"""
from __future__ import annotations

from dataclasses import dataclass

# Lateness below this is not counted as a stall in summaries: scheduling and socket jitter of a few
# ms, which a player's output buffer (tens of ms in every audio stack) hides. Longest stall still
# reports every positive lateness.
AUDIBLE_STALL_S = 0.010


@dataclass
class PlaybackClock:
    deadline_s: float | None = None   # when the listener runs out of audio (None: no audio yet)
    num_stalls: int = 0               # chunks later than AUDIBLE_STALL_S
    longest_stall_s: float = 0.0
    total_stall_s: float = 0.0

    @property
    def is_started(self) -> bool:
        return self.deadline_s is not None

    def slack_s(self, now_s: float) -> float:
        """Audio the listener still has at now_s (negative: it is waiting); 0 before the first chunk."""
        return 0.0 if self.deadline_s is None else self.deadline_s - now_s

    def on_chunk(self, now_s: float, duration_s: float) -> float:
        """A chunk of `duration_s` audio reaches the listener at now_s; -> its lateness in seconds
        (negative: early by that much; 0 for the first chunk, which starts playback)."""
        if self.deadline_s is None:
            lateness_s, self.deadline_s = 0.0, now_s
        else:
            lateness_s = now_s - self.deadline_s
            if lateness_s > 0:   # the player stalled: it resumes now
                self.total_stall_s += lateness_s
                self.longest_stall_s = max(self.longest_stall_s, lateness_s)
                self.num_stalls += lateness_s > AUDIBLE_STALL_S
                self.deadline_s = now_s
        self.deadline_s += duration_s
        return lateness_s


def stall_report(stalls_by_stream: list[list[float]], thresholds_ms: tuple[float, ...] = (50.0, 100.0)) -> dict:
    """Per load level: how many streams had a stall over each threshold, and the longest (ms), from
    each stream's list of stall lengths in seconds."""
    longest = [max(s, default=0.0) * 1e3 for s in stalls_by_stream]
    report = {f"streams_stall_over_{t:g}ms": sum(1 for m in longest if m > t) for t in thresholds_ms}
    report["longest_stall_ms"] = max(longest, default=0.0)
    report["num_streams"] = len(stalls_by_stream)
    return report
