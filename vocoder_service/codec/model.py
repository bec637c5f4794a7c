"""Code2Wav: the 12 Hz speech-tokenizer decoder, codes [B, 16, T] -> waveform [B, T*1920].

Module tree and parameter names mirror `decoder.*` in `speech_tokenizer/model.safetensors`:
quantizer -> pre_conv -> pre_transformer -> upsample (ConvT + ConvNeXt) x2 -> decoder.0 conv ->
decoder.1..4 blocks -> decoder.5 SnakeBeta -> decoder.6 conv -> clamp to [-1, 1].
Every op is causal (docs/decoder_causality.md), which is what makes `StreamingDecoder` exact.
"""
from __future__ import annotations

import logging
import math

import torch
from torch import nn

from vocoder_service.codec.blocks import ConvNeXtBlock, DecoderBlock, PendingSum, SnakeBeta
from vocoder_service.codec.config import DecoderConfig
from vocoder_service.codec.convs import CausalConv1d, CausalConvTranspose1d
from vocoder_service.codec.layout import default_time_major, to_time_major
from vocoder_service.codec.loading import load_code2wav
from vocoder_service.codec.quantizer import SplitQuantizer
from vocoder_service.codec.stream_state import StepState
from vocoder_service.codec.transformer import PreTransformer
from vocoder_service.codec.validation import check_codes

logger = logging.getLogger(__name__)

DEFAULT_SAMPLE_RATE_HZ = 24000


class Code2Wav(nn.Module):
    def __init__(self, config: DecoderConfig, sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ) -> None:
        super().__init__()
        self.config = config
        self.sample_rate_hz = sample_rate_hz
        self.samples_per_frame = config.samples_per_frame
        # Storage of the conv stack's activations from the upsampler on (codec/layout.py): time-major
        # feeds cuDNN's NHWC kernels directly; channel-major is the layout of the official code.
        self.time_major = default_time_major()
        self.quantizer = SplitQuantizer(
            config.num_quantizers, config.codebook_size, config.quantizer_dim, config.codebook_dim
        )
        self.pre_conv = CausalConv1d(config.codebook_dim, config.latent_dim, 3)
        self.pre_transformer = PreTransformer(config)
        rate = 1  # samples per code frame at the current stage's input
        upsample = []
        for factor in config.upsampling_ratios:
            upsample.append(nn.ModuleList([
                CausalConvTranspose1d(config.latent_dim, config.latent_dim, factor, factor, rate),
                ConvNeXtBlock(config.latent_dim, rate * factor),
            ]))
            rate *= factor
        self.upsample = nn.ModuleList(upsample)
        decoder: list[nn.Module] = [CausalConv1d(config.latent_dim, config.decoder_dim, 7, samples_per_frame=rate)]
        for i, block_rate in enumerate(config.upsample_rates):
            in_dim, out_dim = config.decoder_dim // 2**i, config.decoder_dim // 2 ** (i + 1)
            decoder.append(DecoderBlock(in_dim, out_dim, block_rate, rate))
            rate *= block_rate
        decoder += [SnakeBeta(config.output_channels), CausalConv1d(config.output_channels, 1, 7, samples_per_frame=rate)]
        self.decoder = nn.ModuleList(decoder)
        assert rate == self.samples_per_frame, (rate, self.samples_per_frame)
        for name, module in self.named_modules():
            if hasattr(module, "state_key"):
                module.state_key = name

    def state_specs(self) -> dict[str, tuple[int, ...]]:
        """Per-slot shape of every streaming state tensor, keyed by module name."""
        specs: dict[str, tuple[int, ...]] = {}
        for module in self.modules():
            if hasattr(module, "state_specs") and module is not self:
                specs.update(module.state_specs())
        return specs

    @torch.no_grad()
    def prepare(self) -> None:
        """Derive fp32 tables from the loaded weights (SnakeBeta exp, codebooks, RoPE). Call once after loading."""
        for module in self.modules():
            if module is not self and hasattr(module, "prepare"):
                module.prepare()

    def forward(self, codes: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        # codes: [B, Q, T] int -> wav [B, 1, T * samples_per_frame], clamped to [-1, 1]
        dtype = self.pre_conv.conv.weight.dtype
        hidden = self.pre_conv(self.quantizer(codes, dtype), state)  # [B, latent, T]
        hidden = self.pre_transformer(hidden.transpose(1, 2), state).transpose(1, 2)  # [B, latent, T]
        # every later op follows its input's layout (the transposed view is time-major already)
        hidden = to_time_major(hidden) if self.time_major else hidden.contiguous()
        for conv_t, convnext in self.upsample:
            hidden = convnext(conv_t(hidden, state), state)
        first = self.decoder[0]
        wav = PendingSum(first(hidden, state, add_bias=False), first.conv.bias)  # bias added by the next Snake
        for block in self.decoder[1:-2]:
            wav = block(wav, state)
        wav = self.decoder[-1](self.decoder[-2](wav), state)
        return wav.clamp(min=-1.0, max=1.0)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Offline: one exact forward over all frames. codes [B, Q, T] int -> pcm [B, T*1920] float."""
        check_codes(codes, self.config.num_quantizers, self.config.codebook_size)
        device = self.pre_conv.conv.weight.device
        return self.forward(codes.to(device), None)[:, 0]

    @classmethod
    def from_pretrained(
        cls, path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
    ) -> "Code2Wav":
        """Load from a model dir holding `speech_tokenizer/` or from a speech-tokenizer dir itself."""
        return load_code2wav(cls, path, device=device, dtype=dtype)

    def num_parameters(self) -> int:
        return sum(math.prod(p.shape) for p in self.parameters())
