"""How many queued requests may start their prefill now: the vocoders' free slots, and their
playback deadlines (issue #36).

- **Free slots.** A stream opens on its vocoder with its first frame. Prefilling requests that no
  vocoder has a slot for made the vocoder refuse them ("all 256 decoder slots are in use":
  RESOURCE_EXHAUSTED to a client the talker had admitted): they now wait in the talker's queue until
  a heartbeat announces free slots (a vocoder sends one at once when slots free up).
- **Deadline pressure** (`hold_s` > 0). While a vocoder reports chunks that reached their listener
  late within the last second (`Load.num_late_chunks_recent`), more arrivals would add prefill work
  and first chunks in front of running streams that are already behind: queued requests wait (their
  TTFA grows, the summary's queue_ms says by how much) for at most `hold_s` each, then start anyway.

Pure bookkeeping over the links' last heartbeats: testable with a fake clock and no sockets.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from talker_service.server.vocoders import VocoderLinks

logger = logging.getLogger(__name__)


class Admission:
    def __init__(self, vocoders: VocoderLinks, oldest_waiting_s: Callable[[], float | None], hold_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`oldest_waiting_s()`: when the longest-waiting queued request that could start arrived
        (None: none waits)."""
        self.vocoders, self.oldest_waiting_s, self.hold_s, self.clock = vocoders, oldest_waiting_s, hold_s, clock
        self.is_holding = False
        self.num_holds = 0           # times admission was held for deadline pressure (log and tests)

    def limit(self) -> int | None:
        """Requests that may start now; None: no bound from the vocoders (none healthy: the requests
        fail on their own path, as before)."""
        now_s = self.clock()
        healthy = [link for link in self.vocoders.links if link.is_healthy(now_s, self.vocoders.timeout_s)]
        if not healthy:
            return None
        free = sum(max(0, link.free_slots) for link in healthy)
        behind = [link.name for link in healthy if link.load.num_late_chunks_recent]
        arrived_s = self.oldest_waiting_s()
        hold = bool(self.hold_s > 0 and behind and arrived_s is not None and now_s - arrived_s < self.hold_s)
        if hold != self.is_holding:
            self.is_holding = hold
            if hold:
                self.num_holds += 1
                logger.info("holding new streams: vocoder %s reports late chunks", ", ".join(behind))
            else:
                logger.info("admitting new streams again")
        return 0 if hold else free
