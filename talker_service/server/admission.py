"""Which queued requests may start their prefill now: their vocoder's free slots, and the
vocoders' playback deadlines (issue #36).

- **Free slots.** A request is routed to a vocoder at START, and its stream opens there with its
  first frame. Prefilling a request whose vocoder had no slot made that vocoder refuse it ("all 256
  decoder slots are in use": RESOURCE_EXHAUSTED to a client the talker had admitted; 388 of 1024
  Poisson arrivals at 256 streams on an H200). Now it waits in the talker's queue until a heartbeat
  announces a free slot there (a vocoder sends one at once when slots free up); requests routed to
  a vocoder with room go ahead of it.
- **Deadline pressure** (`hold_s` > 0). While a vocoder reports chunks that reached their listener
  late within the last second (`Load.num_late_chunks_recent`), more arrivals would add prefill work
  and first chunks in front of running streams that are already behind: queued requests wait (their
  TTFA grows, the summary's queue_ms says by how much) for at most `hold_s` each, then start anyway.

- **Why a request waits.** While a prefill-ready request has waited `LOG_WAIT_S` to start, the
  admission state is logged (at most every `LOG_EVERY_S`): each vocoder's free slots as the talker
  counts them (the heartbeat's, less our opens it did not count yet and the requests admitted) and
  the talker's own slots, so a queue wait in a summary can be traced to what held it.

The engine asks `could_start` (has_runnable: may a step start anything?) and commits with `take`
(the request starts: its vocoder counts it admitted until its stream opens); `begin()` once a round.
Pure bookkeeping over the routes and the links' last heartbeats: testable with a fake clock.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from talker_service.server.vocoders import VocoderLink, VocoderLinks

logger = logging.getLogger(__name__)

LOG_WAIT_S = 0.25    # a prefill-ready request queued this long: log what holds it ...
LOG_EVERY_S = 1.0    # ... at most this often
LOOK_EVERY_S = 0.1   # how often begin() looks (finding the oldest ready request scans the queue)


def link_state(link: VocoderLink, now_s: float, timeout_s: float) -> str:
    """One vocoder as admission sees it, for the log."""
    heard = "never heard" if link.last_heartbeat_s is None else f"heartbeat {(now_s - link.last_heartbeat_s) * 1e3:.0f} ms ago"
    health = "" if link.is_healthy(now_s, timeout_s) else ", not healthy"
    return (f"vocoder {link.name}: {link.free_slots} free of {link.load.num_slots_total} ({heard}{health}: "
            f"{link.load.num_slots_used} used, {len(link.opens_in_flight)} of our opens not counted yet, "
            f"{len(link.admitted)} admitted not opened, {len(link.unopened)} routed not opened)")


class Admission:
    def __init__(self, vocoders: VocoderLinks, link_of: Callable[[str], VocoderLink | None],
                 oldest_waiting_s: Callable[[], float | None], hold_s: float,
                 clock: Callable[[], float] = time.monotonic,
                 describe_talker: Callable[[], str] = lambda: "") -> None:
        """`link_of(request_id)`: the vocoder a request was routed to (None: not routed, e.g. an
        admin GenerateCodes request: no gate); `oldest_waiting_s()`: when the longest-waiting
        queued request that could start arrived (None: none waits); `describe_talker()`: the
        talker's own slots and queue, for the log of a long wait."""
        self.vocoders, self.link_of, self.oldest_waiting_s = vocoders, link_of, oldest_waiting_s
        self.hold_s, self.clock, self.describe_talker = hold_s, clock, describe_talker
        self.is_holding = False
        self._now_s = clock()
        self.num_holds = 0           # times admission was held for deadline pressure (log and tests)
        self.num_wait_logs = 0       # long waits logged (tests)
        self._next_look_s = self._next_log_s = self._now_s

    def begin(self) -> None:
        """Once per admission round: is a vocoder behind, and has nothing waited past hold_s?"""
        hold = False
        now_s = self._now_s = self.clock()
        if self.hold_s > 0:
            behind = [link.name for link in self.vocoders.links
                      if link.is_healthy(now_s, self.vocoders.timeout_s) and link.load.num_late_chunks_recent]
            arrived_s = self.oldest_waiting_s() if behind else None
            hold = arrived_s is not None and now_s - arrived_s < self.hold_s
            if hold and not self.is_holding:
                self.num_holds += 1
                logger.info("holding new streams: vocoder %s reports late chunks", ", ".join(behind))
            elif self.is_holding and not hold:
                logger.info("admitting new streams again")
        self.is_holding = hold
        if now_s >= self._next_look_s:
            self._next_look_s = now_s + LOOK_EVERY_S
            self._log_long_wait(now_s)

    def _log_long_wait(self, now_s: float) -> None:
        arrived_s = self.oldest_waiting_s()
        if arrived_s is None or now_s - arrived_s < LOG_WAIT_S or now_s < self._next_log_s:
            return
        self._next_log_s = now_s + LOG_EVERY_S
        self.num_wait_logs += 1
        links = "; ".join(link_state(link, now_s, self.vocoders.timeout_s) for link in self.vocoders.links)
        logger.info("a ready request has waited %.0f ms to start%s: %s; %s", (now_s - arrived_s) * 1e3,
                    " (holding: a vocoder reports late chunks)" if self.is_holding else "",
                    self.describe_talker() or "talker state unknown", links or "no vocoder linked")

    def could_start(self, request_id: str) -> bool:
        link = self.link_of(request_id)
        if link is None:
            return True
        if self.is_holding:
            return False
        # a vocoder not (or no longer) heard from announces no slots: its own path fails such requests
        return not link.is_healthy(self._now_s, self.vocoders.timeout_s) or link.free_slots > 0

    def take(self, request_id: str) -> bool:
        """`could_start`, and if so the request counts against its vocoder's free slots from now."""
        if not self.could_start(request_id):
            return False
        link = self.link_of(request_id)
        if link is not None:
            link.admitted.add(request_id)
        return True
