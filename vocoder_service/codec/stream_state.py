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
        # Tail indices depend only on (samples per frame, context length, ...), not on the op: built
        # once per step and shared. Each would otherwise cost 3-7 small launches per stateful op,
        # about a quarter of the nodes of a batch-1, 1-frame graph (the first chunk's latency).
        self._window_index: dict[tuple, torch.Tensor] = {}
        self._split_index: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

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
        memo = (samples_per_frame, context_len, dim, full.dim())
        index = self._window_index.get(memo)
        if index is None:
            index = window_index(self.lengths * samples_per_frame, context_len, dim, full.dim())
            self._window_index[memo] = index
        out_shape = list(full.shape)
        out_shape[dim] = context_len
        pool.index_copy_(0, self.slots, torch.gather(full, dim, index.expand(out_shape)))


    def advance_split(self, key: str, tail: torch.Tensor, x: torch.Tensor, samples_per_frame: int) -> None:
        """`advance` for full = [tail ++ x] without building `full` (x is at least as long as tail).

        Row b's new tail is full[start_b : start_b + context_len] with start_b = lengths[b] * spf:
        positions < context_len come from the old tail, the rest from x.
        """
        pool = self.pools[key]
        context_len = pool.shape[-1]
        memo = (samples_per_frame, context_len)
        if memo not in self._split_index:
            index = window_index(self.lengths * samples_per_frame, context_len, 2, 3)  # [bs, 1, ctx], full coords
            self._split_index[memo] = ((index - context_len).clamp(min=0), index.clamp(max=context_len - 1),
                                       index >= context_len)
        in_x, in_tail, take_x = (t.expand(x.shape[0], x.shape[1], context_len) for t in self._split_index[memo])
        from_x = torch.gather(x, -1, in_x)
        from_tail = torch.gather(tail, -1, in_tail)
        pool.index_copy_(0, self.slots, torch.where(take_x, from_x, from_tail))


def window_index(start: torch.Tensor, size: int, dim: int, ndim: int) -> torch.Tensor:
    """start[b] + [0, size) along `dim` (> 0) of an ndim-dim index tensor, 1 elsewhere but dim 0."""
    index_shape = [1] * ndim
    index_shape[0] = start.shape[0]
    offsets_shape = [1] * ndim
    offsets_shape[dim] = size
    return start.view(index_shape) + torch.arange(size, device=start.device).view(offsets_shape)
