"""Pure-Python scheduling of the talker: admission into slots, the prefill queue, the runnable set.

No torch here, so every rule is testable without a model. A queued request waits for a free
slot and for the text its prefill needs (streaming requests need one token, non-streaming ones
the whole text); queued requests that are ready are prefilled together, in arrival order. A
running request is stepped only when its next text-track element is known; otherwise it is
parked and costs nothing. Whatever ends a request (EOS, length, abort, failure) frees its slot
at once through `release`.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable, Container, Hashable

from talker_service.engine.request import EngineError, EngineRequest, RequestState

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, max_slots: int, max_queued: int, max_prefill_batch: int) -> None:
        self.max_slots = max_slots
        self.max_queued = max_queued
        self.max_prefill_batch = max_prefill_batch
        self.free_slots = list(range(max_slots - 1, -1, -1))   # pop() hands out the lowest slot first
        self.queued: OrderedDict[Hashable, EngineRequest] = OrderedDict()
        self.running: OrderedDict[Hashable, EngineRequest] = OrderedDict()

    # ---- bookkeeping ----------------------------------------------------------------------
    def get(self, request_id: Hashable) -> EngineRequest | None:
        return self.running.get(request_id) or self.queued.get(request_id)

    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self.running or request_id in self.queued

    @property
    def num_live(self) -> int:
        return len(self.running) + len(self.queued)

    @property
    def num_parked(self) -> int:
        return sum(1 for r in self.running.values() if not r.feed.is_step_ready)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.queued)

    # ---- admission ------------------------------------------------------------------------
    def add(self, request: EngineRequest) -> int:
        """Queue a new request; returns how many requests are queued ahead of it."""
        if request.request_id in self:
            raise EngineError("ALREADY_EXISTS", f"request {request.request_id!r} is already live on this talker")
        # A free slot can take it now; otherwise it waits in a bounded queue.
        if len(self.queued) >= len(self.free_slots) + self.max_queued:
            raise EngineError("RESOURCE_EXHAUSTED",
                              f"request {request.request_id!r} refused: {self.max_slots} slots busy and "
                              f"{len(self.queued)} requests queued (limit {self.max_queued})")
        ahead = len(self.queued)
        self.queued[request.request_id] = request
        return ahead

    def take_prefills(self, may_start: Callable[[Hashable], bool] | None = None) -> list[EngineRequest]:
        """Queued requests that can be prefilled now, each moved to RUNNING with a slot.
        `may_start(request_id)`: the server's admission (its vocoder's free slots, deadline
        pressure); it is asked only for a request that would start, and True commits it."""
        chosen = []
        for request in list(self.queued.values()):
            if not self.free_slots or len(chosen) >= self.max_prefill_batch:
                break
            if not request.feed.is_prefill_ready:
                continue    # waits for text; later arrivals that are ready go ahead of it
            if may_start is not None and not may_start(request.request_id):
                continue    # its vocoder is full (or behind): another's request may go
            del self.queued[request.request_id]
            request.slot = self.free_slots.pop()
            request.state = RequestState.RUNNING
            self.running[request.request_id] = request
            chosen.append(request)
        return chosen

    def take_runnable(self, skip: Container[Hashable] = ()) -> list[tuple[EngineRequest, int]]:
        """(request, text id of this step) for every running request whose next text is known;
        consumes that text element. Parked requests, and those in `skip` (still prefilling), are
        left untouched."""
        out = []
        for request in self.running.values():
            if request.request_id in skip:
                continue
            text_id = request.feed.take_step()
            if text_id is not None:
                out.append((request, text_id))
        return out

    def release(self, request: EngineRequest) -> None:
        """The request ended (any reason): forget it and free its slot at once. Idempotent."""
        if self.running.pop(request.request_id, None) is not None:
            self.free_slots.append(request.slot)
        else:
            self.queued.pop(request.request_id, None)
        request.state = RequestState.DONE

    def check_invariants(self) -> None:
        """Slots are conserved: every slot is free or held by exactly one running request."""
        held = [r.slot for r in self.running.values()]
        if sorted(held + self.free_slots) != list(range(self.max_slots)):
            raise AssertionError(f"slot leak: free {sorted(self.free_slots)}, held {sorted(held)}")
