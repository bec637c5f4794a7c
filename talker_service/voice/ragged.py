"""Clips of different lengths in one right-padded batch [B, C, T], each row seeing only its own frames.

The speaker encoder is not causal: every conv pads by reflection at both ends, the SE blocks take a
mean over time and the pooling takes attention-weighted statistics over time. Right padding would
feed each of them the padded frames, so instead every row is treated as the clip it is:
- reflect padding indexes each row at its own end (`reflect_pad`): an output frame t < L reads
  input frames in [t - left, t + right], and the reflection of that range lies in [0, L) as long
  as L > max(left, right) (the encoder's `min_num_frames`), so valid frames never read padding;
- means and pooling weights count valid frames only (`mean`, `uniform_weights`,
  `masked_softmax`), and padded values are replaced (`zero_padding`) before they are summed, so
  even non-finite garbage cannot leak in.
Frames t >= L of a row hold garbage throughout and are never read by its valid frames.
"""
from __future__ import annotations

import torch


class RaggedFrames:
    def __init__(self, num_frames: torch.Tensor, max_num_frames: int) -> None:
        """num_frames [B] int64 (on the batch's device): each row's valid frames, the rest padding."""
        self.num_frames = num_frames
        self.max_num_frames = max_num_frames
        positions = torch.arange(max_num_frames, device=num_frames.device)
        self.mask = (positions.unsqueeze(0) < num_frames.unsqueeze(1)).unsqueeze(1)   # [B, 1, T]
        self._reflect_index: dict[tuple[int, int], torch.Tensor] = {}

    def reflect_pad(self, x: torch.Tensor, pad: tuple[int, int]) -> torch.Tensor:
        """[B, C, T] -> [B, C, left + T + right]: F.pad(mode="reflect") of each row at its own length."""
        index = self._reflect_index.get(pad)
        if index is None:
            left, right = pad
            source = torch.arange(-left, self.max_num_frames + right, device=x.device).unsqueeze(0)   # [1, T']
            last = (self.num_frames - 1).unsqueeze(1)                                               # [B, 1]
            source = torch.where(source < 0, -source, source)
            source = torch.where(source > last, 2 * last - source, source)
            # beyond a row's own right pad the frames are padding: any in-range index will do
            index = source.clamp(0, self.max_num_frames - 1)                                         # [B, T']
            self._reflect_index[pad] = index
        return x.gather(2, index.unsqueeze(1).expand(x.shape[0], x.shape[1], index.shape[1]))

    def zero_padding(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(self.mask, x, torch.zeros((), dtype=x.dtype, device=x.device))

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over each row's valid frames: [B, C, T] -> [B, C, 1]."""
        total = self.zero_padding(x).sum(dim=2, keepdim=True)
        return total / self.num_frames.to(x.dtype).view(-1, 1, 1)

    def uniform_weights(self, dtype: torch.dtype) -> torch.Tensor:
        """1 / L on each row's valid frames, 0 on its padding: [B, 1, T]."""
        return self.mask.to(dtype) / self.num_frames.to(dtype).view(-1, 1, 1)

    def masked_softmax(self, scores: torch.Tensor) -> torch.Tensor:
        """Softmax over time of [B, C, T] with each row's padding at weight 0."""
        return torch.softmax(scores.masked_fill(~self.mask, float("-inf")), dim=2)
