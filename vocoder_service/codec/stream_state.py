"""One streaming step's view of the slot-indexed state pools.

Every stateful op keeps, per slot, the tail of its own input that its next call needs (a causal
conv: the last (k-1)*dilation samples; a transposed conv: the last input frame; attention: the
post-RoPE K/V of the last window-1 frames). A step reads those tails for the batch's slots,
prepends them to the new input, and writes back the tail that ends at each row's *valid* length,
so right padding never enters the state. Everything is gather/scatter on device tensors: no host
syncs, no data-dependent Python branches (the step is captured in CUDA graphs).

Conv tails (per-slot shape (channels, samples)) are stored time-major like the activations they
come from (vocoder_service/codec/layout.py): reading them into a conv's input buffer and writing
the new tail back are then copies of whole [samples, channels] rows, not transposes.
"""
from __future__ import annotations

import torch


def new_pool(num_rows: int, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Zeroed pool [num_rows, *shape]; a conv tail (channels, samples) is stored [rows, samples, channels]."""
    if len(shape) == 2:
        channels, num_samples = shape
        return torch.zeros((num_rows, num_samples, channels), device=device, dtype=dtype).transpose(1, 2)
    return torch.zeros((num_rows, *shape), device=device, dtype=dtype)


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
        # (samples_per_frame, context_len) -> [bs, context_len] window index of each row's new tail;
        # ops at the same rate and context (all attention layers, K and V) share one: three tiny
        # launches fewer per op per step.
        self._tail_index: dict[tuple[int, int], torch.Tensor] = {}

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
        index_shape = [1] * full.dim()
        index_shape[0], index_shape[dim] = full.shape[0], context_len
        out_shape = list(full.shape)
        out_shape[dim] = context_len
        index = self._window_index(samples_per_frame, context_len).view(index_shape).expand(out_shape)
        pool.index_copy_(0, self.slots, torch.gather(full, dim, index))

    def load_conv_context(self, key: str, dest: torch.Tensor) -> None:
        """Copy the stored conv tail of `key` for this batch's slots into dest [bs, C, context_len]."""
        pool_rows, dest_rows = self.pools[key].transpose(1, 2), dest.transpose(1, 2)  # [*, context_len, C]
        if torch.compiler.is_compiling():
            # Dynamo breaks the graph at an out= into a strided view; Inductor fuses the copy anyway.
            dest_rows.copy_(pool_rows.index_select(0, self.slots))
            return
        # Eager: one gather straight into the buffer's rows (index_select writes strided outputs).
        torch.index_select(pool_rows, 0, self.slots, out=dest_rows)

    def save_conv_tail(self, key: str, buffer: torch.Tensor, samples_per_frame: int) -> None:
        """Store each row's new tail from buffer [bs, C, context_len + T] = [stored tail ++ new input].

        Row b's valid part ends at context_len + lengths[b] * samples_per_frame, so its new tail is
        buffer[b, :, start_b : start_b + context_len] with start_b = lengths[b] * samples_per_frame.
        """
        pool = self.pools[key]
        context_len = pool.shape[-1]
        index = self._window_index(samples_per_frame, context_len)  # [bs, context_len]
        rows = buffer.transpose(1, 2)  # [bs, context_len + T, C], rows of C adjacent channels
        tail = torch.gather(rows, 1, index.unsqueeze(-1).expand(-1, -1, rows.shape[-1]))
        pool.transpose(1, 2).index_copy_(0, self.slots, tail)

    def _window_index(self, samples_per_frame: int, size: int) -> torch.Tensor:
        key = (samples_per_frame, size)
        if key not in self._tail_index:
            offsets = torch.arange(size, device=self.lengths.device)
            self._tail_index[key] = torch.add(offsets, self.lengths.view(-1, 1), alpha=samples_per_frame)
        return self._tail_index[key]
