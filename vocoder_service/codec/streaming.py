"""Exact stateful streaming over slot-indexed state pools.

Each request owns a slot. A step decodes `t` new frames for a batch of slots, prepending each
op's stored tail (see stream_state.py), so no frame is ever recomputed and the concatenated
output equals the offline decode. Row i of a step may be right-padded beyond `lengths[i]`: the
padding is clamped to valid code ids, produces zeros in the output, and never reaches state.

Pools hold `max_slots + 1` rows; the extra row is a scratch slot that graph replays use for
padding rows of a batch bucket, so real slots are never touched by padding.
"""
from __future__ import annotations

import logging
from typing import Sequence

import torch

from vocoder_service.codec.model import Code2Wav
from vocoder_service.codec.stream_state import StepState
from vocoder_service.codec.validation import check_step

logger = logging.getLogger(__name__)


class StreamingDecoder:
    def __init__(
        self,
        model: Code2Wav,
        max_slots: int,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if max_slots < 1:
            raise ValueError(f"max_slots must be >= 1, got {max_slots}")
        weight = model.pre_conv.conv.weight
        self.device = torch.device(device) if device is not None else weight.device
        self.dtype = dtype if dtype is not None else weight.dtype
        if weight.device != self.device or weight.dtype != self.dtype:
            raise ValueError(
                f"model weights are on {weight.device}/{weight.dtype} but the decoder was asked for "
                f"{self.device}/{self.dtype}: load the model with that device and dtype"
            )
        self.model = model
        self.max_slots = max_slots
        self.scratch_slot = max_slots
        self.num_quantizers = model.config.num_quantizers
        self.codebook_size = model.config.codebook_size
        self.samples_per_frame = model.samples_per_frame
        self.pools = {
            key: torch.zeros((max_slots + 1, *shape), device=self.device, dtype=self.dtype)
            for key, shape in model.state_specs().items()
        }
        # Frames decoded so far per slot: the absolute position of its next frame (RoPE, window).
        self.positions = torch.zeros(max_slots + 1, device=self.device, dtype=torch.int64)
        num_bytes = sum(p.numel() * p.element_size() for p in self.pools.values())
        logger.info(
            "streaming state: %d pools, %.2f MB per slot, %d slots",
            len(self.pools), num_bytes / (max_slots + 1) / 1e6, max_slots,
        )

    # -- host-side API (validates, converts) -------------------------------------------------

    def as_step_inputs(self, codes, slots, lengths=None):
        """Convert to device tensors and validate; raises ValueError before any state is touched."""
        if lengths is None:  # every row full; a malformed `codes` is reported by check_step
            ok = isinstance(codes, torch.Tensor) and codes.dim() == 3
            lengths = torch.full((codes.shape[0] if ok else 0,), codes.shape[2] if ok else 0, dtype=torch.int64)
        # No dtype forced: a float slot or length must fail validation, not be truncated.
        slots = slots if isinstance(slots, torch.Tensor) else torch.as_tensor(slots)
        lengths = lengths if isinstance(lengths, torch.Tensor) else torch.as_tensor(lengths)
        check_step(codes, slots, lengths, self.num_quantizers, self.codebook_size, self.max_slots)
        return (
            codes.to(self.device),
            slots.to(self.device, torch.int64),
            lengths.to(self.device, torch.int64),
        )

    def step(self, codes, slots, lengths=None, emit: bool = True) -> torch.Tensor | None:
        """codes [bs, Q, t] int, slots [bs], lengths [bs] (default t) -> pcm [bs, t*1920] or None.

        Row i's samples beyond lengths[i]*1920 are zeros. With emit=False the frames only
        advance the state (priming with reference codes) and nothing is returned.
        """
        codes, slots, lengths = self.as_step_inputs(codes, slots, lengths)
        pcm = self.step_unchecked(codes, slots, lengths)
        return pcm if emit else None

    def prime(self, codes, slots, lengths=None) -> None:
        """Decode context frames (e.g. voice-clone reference codes) into state without emitting."""
        self.step(codes, slots, lengths, emit=False)

    def reset(self, slots: Sequence[int] | torch.Tensor) -> None:
        """Start slots afresh (a new request): zero their state and position."""
        index = torch.as_tensor(slots, dtype=torch.int64).reshape(-1)
        bad = (index < 0) | (index >= self.max_slots)
        if bool(bad.any()):
            raise ValueError(f"slot out of range [0, {self.max_slots}): {index[bad].tolist()}")
        # non_blocking from pageable memory: staged before the call returns, no wait for the device
        # (a blocking copy waited for the GPU's time slice behind the talker's kernels)
        self._zero_rows(index.to(self.device, non_blocking=True))

    def _zero_rows(self, index: torch.Tensor) -> None:
        for pool in self.pools.values():
            pool.index_fill_(0, index, 0)
        self.positions.index_fill_(0, index, 0)

    # -- graphable body ---------------------------------------------------------------------

    @torch.no_grad()
    def step_unchecked(self, codes: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The step body: device tensors only, no host syncs, shapes fixed by (bs, t).

        codes [bs, Q, t] int (any values beyond lengths), slots [bs] int64, lengths [bs] int64.
        """
        codes = codes.clamp(0, self.codebook_size - 1)
        positions = self.positions.index_select(0, slots)
        state = StepState(self.pools, slots, lengths, positions)
        wav = self.model(codes, state)[:, 0]  # [bs, t * samples_per_frame]
        self.positions.index_copy_(0, slots, positions + lengths)
        sample_index = torch.arange(wav.shape[1], device=wav.device)
        valid = sample_index.unsqueeze(0) < (lengths * self.samples_per_frame).unsqueeze(1)
        return wav * valid
