"""Fixed pool of decoder state slots; a slot holds one request's streaming state."""
from __future__ import annotations


class SlotPoolFull(RuntimeError):
    """Every slot is taken: the request must be refused (RESOURCE_EXHAUSTED), never queued silently."""


class SlotPool:
    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        self.num_slots = num_slots
        # LIFO free list: a just-freed slot is reused first, keeping the hot state pages warm.
        self._free = list(range(num_slots - 1, -1, -1))
        self._owner: dict[int, str] = {}

    def acquire(self, owner: str) -> int:
        if not self._free:
            raise SlotPoolFull(f"all {self.num_slots} decoder slots are in use")
        slot = self._free.pop()
        self._owner[slot] = owner
        return slot

    def release(self, slot: int) -> None:
        if slot not in self._owner:
            raise KeyError(f"slot {slot} is not in use")
        del self._owner[slot]
        self._free.append(slot)

    @property
    def num_used(self) -> int:
        return len(self._owner)

    @property
    def num_free(self) -> int:
        return len(self._free)
