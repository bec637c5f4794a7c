"""Speaker encoder of the Base checkpoints: an ECAPA-TDNN variant mapping a log-mel to an x-vector.

Differences from the SpeechBrain ECAPA that the checkpoint depends on: no BatchNorm anywhere, and
every conv pads "same" by reflection (non-causal). Parameter names follow the checkpoint's
`speaker_encoder.*` layout so weights load strictly by name.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from talker_service.voice.ragged import RaggedFrames

logger = logging.getLogger(__name__)

_STD_VAR_FLOOR = 1e-12


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    """`speaker_encoder_config` of config.json; the official files set only enc_dim and sample_rate."""

    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, config: dict) -> "SpeakerEncoderConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            logger.debug("speaker_encoder_config: ignoring keys %s", unknown)
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in known}
        result = cls(**values)
        result.validate()
        return result

    def validate(self) -> None:
        if not len(self.enc_channels) == len(self.enc_kernel_sizes) == len(self.enc_dilations):
            raise ValueError(
                "speaker_encoder_config: enc_channels, enc_kernel_sizes and enc_dilations must have the same "
                f"length, got {len(self.enc_channels)}, {len(self.enc_kernel_sizes)}, {len(self.enc_dilations)}"
            )
        if len(self.enc_channels) < 3:
            raise ValueError(f"speaker_encoder_config: need at least 3 enc_channels, got {list(self.enc_channels)}")
        for width in self.enc_channels[1:-1]:
            if width % self.enc_res2net_scale:
                raise ValueError(f"speaker_encoder_config: channel width {width} not divisible by res2net scale {self.enc_res2net_scale}")
        if sum(self.enc_channels[1:-1]) != self.enc_channels[-1]:
            raise ValueError(
                f"speaker_encoder_config: the last enc_channels entry ({self.enc_channels[-1]}) must equal the sum of "
                f"the SE-Res2Net widths {list(self.enc_channels[1:-1])}, which it aggregates"
            )
        if self.sample_rate != 24000:
            raise ValueError(f"speaker_encoder_config: sample_rate {self.sample_rate} unsupported; the mel front end is 24 kHz only")


class TdnnBlock(nn.Module):
    """Conv1d with reflect "same" padding, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)
        total = dilation * (kernel_size - 1)
        # torch's padding="same" puts the odd sample on the right; keep that split
        self.pad = (total // 2, total - total // 2)

    def forward(self, x: torch.Tensor, ragged: RaggedFrames | None = None) -> torch.Tensor:   # [B, C_in, T] -> [B, C_out, T]
        if self.pad != (0, 0):
            x = F.pad(x, self.pad, mode="reflect") if ragged is None else ragged.reflect_pad(x, self.pad)
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """Split channels into `scale` groups; group i>0 is convolved after adding group i-1's output."""

    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(TdnnBlock(width, width, kernel_size, dilation) for _ in range(scale - 1))

    def forward(self, x: torch.Tensor, ragged: RaggedFrames | None = None) -> torch.Tensor:
        parts = torch.chunk(x, self.scale, dim=1)
        outputs = [parts[0]]
        previous = None
        for block, part in zip(self.blocks, parts[1:]):
            previous = block(part if previous is None else part + previous, ragged)
            outputs.append(previous)
        return torch.cat(outputs, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(channels, se_channels, 1)
        self.conv2 = nn.Conv1d(se_channels, channels, 1)

    def forward(self, x: torch.Tensor, ragged: RaggedFrames | None = None) -> torch.Tensor:
        mean = x.mean(dim=2, keepdim=True) if ragged is None else ragged.mean(x)            # [B, C, 1]
        gate = torch.sigmoid(self.conv2(F.relu(self.conv1(mean))))                          # [B, C, 1]
        return x * gate


class SeRes2NetBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, scale: int, se_channels: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        if in_channels != out_channels:
            raise ValueError(f"SE-Res2Net block needs equal widths for its residual, got {in_channels} -> {out_channels}")
        self.tdnn1 = TdnnBlock(in_channels, out_channels, 1, 1)
        self.res2net_block = Res2NetBlock(out_channels, scale, kernel_size, dilation)
        self.tdnn2 = TdnnBlock(out_channels, out_channels, 1, 1)
        self.se_block = SqueezeExcitation(out_channels, se_channels)

    def forward(self, x: torch.Tensor, ragged: RaggedFrames | None = None) -> torch.Tensor:
        # tdnn1 and tdnn2 are 1x1 convs: no padding, nothing for `ragged` to do
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x), ragged)), ragged)


def _weighted_stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std over time of x [B, C, T] under per-step weights summing to 1 -> ([B, C], [B, C])."""
    mean = (weights * x).sum(dim=2)
    var = (weights * (x - mean.unsqueeze(2)).pow(2)).sum(dim=2)
    return mean, torch.sqrt(var.clamp(min=_STD_VAR_FLOOR))


class AttentiveStatsPooling(nn.Module):
    """Attention over time conditioned on the utterance's global mean/std; returns [B, 2C, 1]."""

    def __init__(self, channels: int, attention_channels: int) -> None:
        super().__init__()
        self.tdnn = TdnnBlock(channels * 3, attention_channels, 1, 1)
        self.conv = nn.Conv1d(attention_channels, channels, 1)

    def forward(self, x: torch.Tensor, ragged: RaggedFrames | None = None) -> torch.Tensor:
        if ragged is None:
            num_frames = x.shape[-1]
            uniform = torch.full((1, 1, num_frames), 1.0 / num_frames, dtype=x.dtype, device=x.device)
        else:
            x = ragged.zero_padding(x)   # weight 0 times garbage must stay 0
            uniform = ragged.uniform_weights(x.dtype)
        mean, std = _weighted_stats(x, uniform)
        context = torch.cat([x, mean.unsqueeze(2).expand_as(x), std.unsqueeze(2).expand_as(x)], dim=1)
        scores = self.conv(torch.tanh(self.tdnn(context)))          # [B, C, T]
        weights = F.softmax(scores, dim=2) if ragged is None else ragged.masked_softmax(scores)
        mean, std = _weighted_stats(x, weights)
        return torch.cat([mean, std], dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    """log-mel [B, mel_dim, T] -> x-vector [B, enc_dim] (enc_dim equals the talker hidden size)."""

    def __init__(self, config: SpeakerEncoderConfig, tts_model_size: str | None = None) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.tts_model_size = tts_model_size   # recorded into voice prompts made with this encoder
        ch, ks, dil = config.enc_channels, config.enc_kernel_sizes, config.enc_dilations
        blocks: list[nn.Module] = [TdnnBlock(config.mel_dim, ch[0], ks[0], dil[0])]
        for i in range(1, len(ch) - 1):
            blocks.append(SeRes2NetBlock(ch[i - 1], ch[i], config.enc_res2net_scale, config.enc_se_channels, ks[i], dil[i]))
        self.blocks = nn.ModuleList(blocks)
        # mfa aggregates the concatenated SE-Res2Net outputs (validate() checks the widths add up)
        self.mfa = TdnnBlock(ch[-1], ch[-1], ks[-1], dil[-1])
        self.asp = AttentiveStatsPooling(ch[-1], config.enc_attention_channels)
        self.fc = nn.Conv1d(ch[-1] * 2, config.enc_dim, 1)

    @property
    def min_num_frames(self) -> int:
        # reflect padding needs more frames than its widest one-sided pad
        pads = [max(m.pad) for m in self.modules() if isinstance(m, TdnnBlock)]
        return max(pads) + 1

    def forward(self, mel: torch.Tensor, num_frames: list[int] | None = None) -> torch.Tensor:
        """num_frames: each row's own mel length when the rows were right-padded to one (see ragged.py);
        None, or all equal to the padded length, runs the plain path a lone clip takes."""
        if mel.dim() != 3 or mel.shape[1] != self.config.mel_dim:
            raise ValueError(f"mel must be [batch, {self.config.mel_dim}, frames], got shape {tuple(mel.shape)}")
        shortest = mel.shape[2] if num_frames is None else min(num_frames)
        if shortest < self.min_num_frames:
            raise ValueError(f"mel has {shortest} frames; the speaker encoder needs at least {self.min_num_frames}")
        ragged = None
        if num_frames is not None:
            if len(num_frames) != mel.shape[0] or max(num_frames) > mel.shape[2]:
                raise ValueError(f"num_frames {num_frames} does not fit a mel batch of shape {tuple(mel.shape)}")
            if shortest < mel.shape[2]:
                ragged = RaggedFrames(torch.tensor(num_frames, device=mel.device), mel.shape[2])
        x = mel
        block_outputs = []
        for block in self.blocks:
            x = block(x, ragged)
            block_outputs.append(x)
        x = self.mfa(torch.cat(block_outputs[1:], dim=1), ragged)  # [B, C_last, T]
        return self.fc(self.asp(x, ragged)).squeeze(-1)           # [B, enc_dim]
