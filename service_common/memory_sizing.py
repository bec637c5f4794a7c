"""How many slots a GPU process gets, from its share of the device's memory (issue #11).

Out of the box the talker served 8 streams on a 141 GB card. Like vLLM's gpu_memory_utilization,
each GPU process now gets one setting, `gpu_memory_fraction`: the share of the device's TOTAL
memory it may hold (weights, graphs, activations, caches). Two processes on one GPU split it
(`shared_gpu_fractions`), so their sizes do not depend on which one started first. Pure
arithmetic here (no torch): the services measure the device and call in; tests pass fake figures.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

GIB = 2**30
AUTO = 0   # max_slots / max_queued / gpu_memory_fraction: derive from the device

# Alone on a GPU a process may take this share of it: the rest is the CUDA context, NCCL/cuBLAS
# workspaces and fragmentation headroom (vLLM's default is the same 0.9).
SOLO_FRACTION = 0.9
# Talker and vocoder on one GPU (the launcher's default): the talker's KV cache is what scales
# with streams (~235 MB per 2048-position slot at 1.7B), the vocoder needs its graphs and a few
# MB of streaming state per slot; 0.6 + 0.3 keeps the 0.9 total.
SHARED_FRACTIONS = {"talker": 0.6, "vocoder": 0.3}
# Streams served per process when memory allows; more than the e2e goal (256) needs longer
# graph captures and gives nothing: one talker step at 256 already fills the GPU.
MAX_AUTO_SLOTS = 256


def shared_gpu_fractions() -> dict[str, float]:
    return dict(SHARED_FRACTIONS)


def resolved_fraction(fraction: float) -> float:
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"gpu_memory_fraction must be in [0, 1) (0: {SOLO_FRACTION} of the GPU), got {fraction}")
    return fraction or SOLO_FRACTION


@dataclass(frozen=True)
class SlotSizing:
    num_slots: int
    budget_bytes: int        # what this process may hold in all
    fixed_bytes: int         # weights + reserve, before any slot
    bytes_per_slot: int

    def describe(self) -> str:
        return (f"{self.num_slots} slots x {self.bytes_per_slot / 2**20:.1f} MiB within a budget of "
                f"{self.budget_bytes / GIB:.1f} GiB ({self.fixed_bytes / GIB:.1f} GiB weights and reserve)")


def slots_that_fit(*, total_bytes: int, free_bytes: int, fraction: float, fixed_bytes: int, bytes_per_slot: int,
                   max_slots: int = MAX_AUTO_SLOTS) -> SlotSizing:
    """Slots of `bytes_per_slot` within fraction x total, never more than is free now (another
    process may already hold part of the card). ValueError naming the numbers when none fits."""
    if bytes_per_slot <= 0 or max_slots < 1:
        raise ValueError(f"bytes_per_slot and max_slots must be positive, got {bytes_per_slot}, {max_slots}")
    budget_bytes = min(int(total_bytes * resolved_fraction(fraction)), free_bytes)
    fit = (budget_bytes - fixed_bytes) // bytes_per_slot
    if fit < 1:
        raise ValueError(
            f"not one slot fits: {budget_bytes / GIB:.1f} GiB budget ({resolved_fraction(fraction):.2f} of "
            f"{total_bytes / GIB:.1f} GiB, {free_bytes / GIB:.1f} GiB free) minus {fixed_bytes / GIB:.1f} GiB for "
            f"weights and reserve leaves less than one slot of {bytes_per_slot / 2**20:.1f} MiB; raise "
            f"gpu_memory_fraction, lower max_seq_len, or free the GPU")
    return SlotSizing(int(min(fit, max_slots)), budget_bytes, fixed_bytes, bytes_per_slot)


def queue_for(num_slots: int, max_queued: int) -> int:
    """Requests admitted to wait for a slot: one more round of every slot, at least 64."""
    return max_queued if max_queued != AUTO else max(64, num_slots)


# Kept free inside a vocoder's share for activations of eager fallbacks and allocator slack.
VOCODER_RESERVE_BYTES = 1 * GIB


def graph_budget_within(*, total_bytes: int, free_bytes: int, held_bytes: int, fraction: float) -> int:
    """Bytes a vocoder may spend on captured graphs: its share, less what it already holds
    (weights, slot state) and a reserve, never more than is free now. ValueError if nothing is left."""
    budget_bytes = min(int(total_bytes * resolved_fraction(fraction)) - held_bytes, free_bytes) - VOCODER_RESERVE_BYTES
    if budget_bytes <= 0:
        raise ValueError(f"no GPU memory left for decoder graphs: {resolved_fraction(fraction):.2f} of "
                         f"{total_bytes / GIB:.1f} GiB, {held_bytes / GIB:.1f} GiB already held, "
                         f"{free_bytes / GIB:.1f} GiB free; raise gpu_memory_fraction or set "
                         f"graph_memory_budget_mb")
    return budget_bytes
