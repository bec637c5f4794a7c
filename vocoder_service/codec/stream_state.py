"""One streaming step's view of the slot-indexed state pools.

Every stateful op keeps, per slot, the tail of its own input that its next call needs (a causal
conv: the last (k-1)*dilation samples; a transposed conv: the last input frame; attention: the
post-RoPE K/V of the last window-1 frames). A step reads those tails for the batch's slots,
prepends them to the new input, and writes back the tail that ends at each row's *valid* length,
so right padding never enters the state. Everything is gather/scatter on device tensors: no host
syncs, no data-dependent Python branches (the step is captured in CUDA graphs).
"""
from __future__ import annotations

import torch


class StepState:
    def __init__(
        self,
        pools: dict[str, torch.Tensor],
        slots: torch.Tensor,  # [bs] int64, device
        lengths: torch.Tensor,  # [bs] int64, valid frames per row
        positions: torch.Tensor,  # [bs] int64, frames already decoded per row
    ) -> None:
        self.pools = pools
        self.slots = slots
        self.lengths = lengths
        self.positions = positions

    def context(self, key: str) -> torch.Tensor:
        """The stored tail of `key` for this batch's slots: [bs, *pool_shape]."""
        return self.pools[key].index_select(0, self.slots)

    def advance(self, key: str, full: torch.Tensor, samples_per_frame: int, dim: int = -1) -> None:
        """Store the last `context_len` samples of `full` that precede each row's padding.

        `full` = [stored tail ++ new input] along `dim`; row b's valid part ends at
        context_len + lengths[b] * samples_per_frame, so its new tail starts at
        lengths[b] * samples_per_frame.
        """
        pool = self.pools[key]
        dim = dim % full.dim()
        context_len = pool.shape[dim]
        start = self.lengths * samples_per_frame  # [bs]
        tail = take_rows_window(full, start, context_len, dim)
        pool.index_copy_(0, self.slots, tail)


    def advance_split(self, key: str, tail: torch.Tensor, x: torch.Tensor, samples_per_frame: int) -> None:
        """`advance` for full = [tail ++ x] without building `full` (x is at least as long as tail).

        Row b's new tail is full[start_b : start_b + context_len] with start_b = lengths[b] * spf:
        positions < context_len come from the old tail, the rest from x.
        """
        pool = self.pools[key]
        context_len = pool.shape[-1]
        start = self.lengths * samples_per_frame  # [bs]
        index = start.view(-1, 1, 1) + torch.arange(context_len, device=x.device).view(1, 1, -1)
        index = index.expand(x.shape[0], x.shape[1], context_len)  # [bs, C, context_len], full coords
        from_x = torch.gather(x, -1, (index - context_len).clamp(min=0))
        from_tail = torch.gather(tail, -1, index.clamp(max=context_len - 1))
        pool.index_copy_(0, self.slots, torch.where(index >= context_len, from_x, from_tail))


def take_rows_window(full: torch.Tensor, start: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """full[b, ..., start[b] : start[b] + size, ...] for every row b, along `dim` (> 0)."""
    index_shape = [1] * full.dim()
    index_shape[0] = full.shape[0]
    offsets_shape = [1] * full.dim()
    offsets_shape[dim] = size
    index = start.view(index_shape) + torch.arange(size, device=full.device).view(offsets_shape)
    out_shape = list(full.shape)
    out_shape[dim] = size
    return torch.gather(full, dim, index.expand(out_shape))
