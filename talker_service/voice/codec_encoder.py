"""Speech-tokenizer encoder: 24 kHz reference audio -> 12.5 Hz codes [K, 16] for in-context cloning.

The official encoder is transformers' Mimi encoder with the decoder halves removed, so we assemble
it from transformers' own Mimi modules (SEANet encoder, transformer, replicate-padded downsample,
split RVQ) under the checkpoint's `encoder.*` names instead of re-writing them. Two settings must
match the reference and are not the Mimi defaults:
- full causal attention in the encoder transformer (the reference never applied Mimi's 250-frame
  window; the Transformers-5 build restores that by widening the window), and
- only the first 16 of 32 quantizers are kept (the acoustic RVQ is sequential, so computing 15
  acoustic stages gives the same codes as computing 31 and dropping 16).
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import MimiConfig
from transformers.models.mimi.modeling_mimi import (
    MimiConv1d,
    MimiEncoder,
    MimiSplitResidualVectorQuantizer,
    MimiTransformerModel,
)

from checkpoint import layout
from checkpoint.errors import CheckpointError
from checkpoint.model_files import ModelCheckpoint, open_checkpoint
from checkpoint.state import load_state, read_tensors
from service_common.host_copy import to_host

logger = logging.getLogger(__name__)

PREFIX = "encoder."


class CodecEncoder(nn.Module):
    """Mono 24 kHz audio [N] -> codes [ceil(N / 1920), 16] int64."""

    def __init__(self, tokenizer_config: dict, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        mimi = MimiConfig(**tokenizer_config["encoder_config"])
        # Set before building the layers: each attention module copies the window at construction.
        mimi.sliding_window = mimi.max_position_embeddings
        mimi._attn_implementation = attn_implementation
        self.mimi_config = mimi
        self.sample_rate_hz = int(tokenizer_config["input_sample_rate"])
        self.samples_per_frame = int(tokenizer_config["encode_downsample_rate"])
        self.num_quantizers = int(tokenizer_config["encoder_valid_num_quantizers"])
        if not mimi.num_semantic_quantizers <= self.num_quantizers <= mimi.num_quantizers:
            raise CheckpointError(
                f"encoder_valid_num_quantizers {self.num_quantizers} outside [{mimi.num_semantic_quantizers}, {mimi.num_quantizers}]"
            )
        self.encoder = MimiEncoder(mimi)
        self.encoder_transformer = MimiTransformerModel(mimi)
        self.downsample = None
        if mimi.frame_rate != mimi.encodec_frame_rate:
            ratio = int(mimi.encodec_frame_rate / mimi.frame_rate)
            self.downsample = MimiConv1d(
                mimi, mimi.hidden_size, mimi.hidden_size, kernel_size=2 * ratio, stride=2, bias=False, pad_mode="replicate"
            )
        self.quantizer = MimiSplitResidualVectorQuantizer(mimi)

    @property
    def max_num_samples(self) -> int:
        # the "full" attention window is max_position_embeddings transformer frames; past it the
        # window would silently start to slide
        transformer_rate_hz = self.mimi_config.encodec_frame_rate
        return int(self.mimi_config.max_position_embeddings * self.sample_rate_hz / transformer_rate_hz)

    def to_runtime(self, device: str | torch.device, dtype: torch.dtype) -> "CodecEncoder":
        """Move/cast for inference, keeping the RoPE frequencies in float32 as the reference does."""
        rotary = self.encoder_transformer.rotary_emb
        inv_freq = rotary.inv_freq.detach().float().clone()
        self.to(device=device, dtype=dtype)
        rotary.inv_freq = inv_freq.to(device)
        rotary.original_inv_freq = inv_freq.clone().to(device)
        for module in self.modules():   # codebooks cache embed_sum / usage on first use; drop stale copies
            if hasattr(module, "_embed"):
                module._embed = None
        return self.eval()

    def encode(self, audio_24k: np.ndarray | torch.Tensor) -> torch.Tensor:
        """codes [K, 16] int64 on CPU, K = ceil(N / 1920); column 0 is the semantic code (talker c0)."""
        return self.encode_batch([audio_24k])[0]

    @torch.inference_mode()
    def encode_batch(self, clips_24k: list[np.ndarray | torch.Tensor], pad_to: int = 0) -> list[torch.Tensor]:
        """The codes of each clip, [K_i, 16] int64 on CPU, from one forward over the right-padded batch.

        Exact per clip: the SEANet convs and the transformer are causal, so a clip's frames never
        read the padding after it, except where a strided conv completes its last window ("extra
        padding": zeros, or the last frame for the replicate-padded downsample). Before each strided
        conv the frames past each clip's own length are set to exactly what that padding is when the
        clip runs alone (`_as_if_alone`), so the codes kept (ceil(N_i / 1920)) are the lone clip's.
        """
        audio = [torch.as_tensor(clip) for clip in clips_24k]
        for clip in audio:
            if clip.dim() != 1 or clip.numel() == 0:
                raise ValueError(f"audio must be non-empty mono [samples] at {self.sample_rate_hz} Hz, got shape {tuple(clip.shape)}")
            if clip.numel() > self.max_num_samples:
                raise ValueError(f"audio has {clip.numel()} samples; the codec encoder takes at most {self.max_num_samples}")
        param = next(self.parameters())
        x = torch.nn.utils.rnn.pad_sequence([clip.to(device=param.device, dtype=param.dtype) for clip in audio],
                                            batch_first=True).unsqueeze(1)                   # [B, 1, N]
        if pad_to > x.shape[-1]:   # a fixed shape (shape_buckets.py): more padding, masked like the rest
            x = torch.nn.functional.pad(x, (0, pad_to - x.shape[-1]))
        return self.codes_of_padded(x, [clip.numel() for clip in audio])

    @torch.inference_mode()
    def codes_of_padded(self, x: torch.Tensor, num_samples: list[int]) -> list[torch.Tensor]:
        """Codes of each row of x [B, 1, T] from its first num_samples[i] samples; what follows them
        in the row (zeros, or any finite values: attention masks them by adding -inf) changes nothing."""
        if not self.mimi_config.use_causal_conv:
            raise ValueError("batched encoding relies on causal convolutions; this codec's are not")
        lengths = list(num_samples)
        for layer in self.encoder.layers:
            if isinstance(layer, MimiConv1d):
                x = layer(_as_if_alone(layer, x, lengths))
                lengths = [_conv_output_length(layer, n) for n in lengths]
            else:   # ELU and residual units: stride 1 and causal, lengths unchanged
                x = layer(x)                                                                   # [B, D, T25]
        hidden = self.encoder_transformer(x.transpose(1, 2), use_cache=False, return_dict=True)
        hidden = hidden.last_hidden_state.transpose(1, 2)                                     # [B, D, T25]
        if self.downsample is not None:
            hidden = self.downsample(_as_if_alone(self.downsample, hidden, lengths))           # [B, D, T12]
        codes = self.quantizer.encode(hidden, self.num_quantizers)                             # [16, B, T12]
        codes = torch.from_numpy(to_host(codes.transpose(0, 1).to(torch.int64)))               # [B, 16, T12] on CPU
        return [codes[i, :, :math.ceil(n / self.samples_per_frame)].transpose(0, 1).contiguous()
                for i, n in enumerate(num_samples)]


def _conv_output_length(conv: MimiConv1d, num_frames: int) -> int:
    # a causal conv pads (kernel - stride) on the left and completes the last window: ceil(N / stride)
    return math.ceil(num_frames / conv.conv.stride[0])


def _as_if_alone(conv: MimiConv1d, x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """x [B, C, T] with each row's frames past its own length set to the conv's padding of a lone clip."""
    if conv.conv.stride[0] == 1 or min(lengths) == x.shape[-1]:
        return x   # no extra padding at stride 1, and no row is padded
    num_frames = torch.tensor(lengths, device=x.device)
    valid = (torch.arange(x.shape[-1], device=x.device) < num_frames.unsqueeze(1)).unsqueeze(1)   # [B, 1, T]
    if conv.pad_mode == "replicate":   # _pad1d repeats the last frame
        last = (num_frames - 1).view(-1, 1, 1).expand(x.shape[0], x.shape[1], 1)
        return torch.where(valid, x, x.gather(2, last))
    if conv.pad_mode == "constant":    # _pad1d pads zeros
        return torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))
    raise ValueError(f"batched encoding cannot reproduce {conv.pad_mode!r} padding of a strided conv")


def _check_tokenizer_config(tokenizer_config: dict, source: str) -> None:
    if tokenizer_config.get("model_type") != layout.TOKENIZER_TYPE_12HZ:
        raise CheckpointError(
            f"{source}: speech tokenizer model_type {tokenizer_config.get('model_type')!r} is unsupported; only "
            f"the 12 Hz tokenizer ({layout.TOKENIZER_TYPE_12HZ!r}) is"
        )
    for key in ("encoder_config", "input_sample_rate", "encode_downsample_rate", "encoder_valid_num_quantizers"):
        if key not in tokenizer_config:
            raise CheckpointError(f"{source}: speech tokenizer config lacks {key!r}")


def codec_encoder_from_state(
    tokenizer_config: dict,
    tensors: dict[str, torch.Tensor],
    source: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
) -> CodecEncoder:
    """The encoder described by a speech-tokenizer config.json dict, with weights `encoder.*` of `tensors`."""
    _check_tokenizer_config(tokenizer_config, source)
    encoder = CodecEncoder(tokenizer_config, attn_implementation=attn_implementation)
    load_state(encoder, tensors, prefix=PREFIX, source=source)
    encoder.to_runtime(device, dtype)
    logger.info("loaded codec encoder from %s (%s on %s)", source, dtype, device)
    return encoder


def load_codec_encoder(
    checkpoint: ModelCheckpoint | str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
) -> CodecEncoder:
    """The codec encoder of a model checkpoint (opened, a directory or a name: its `speech_tokenizer/`),
    or of a standalone tokenizer directory such as Qwen/Qwen3-TTS-Tokenizer-12Hz.

    The reference runs the codec in the talker's dtype (normally bf16); pass the same dtype for
    identical codes.
    """
    options = dict(device=device, dtype=dtype, attn_implementation=attn_implementation)
    if isinstance(checkpoint, ModelCheckpoint):
        return codec_encoder_from_state(
            checkpoint.speech_tokenizer_config(), checkpoint.speech_tokenizer_tensors(PREFIX),
            str(checkpoint.speech_tokenizer_dir / "model.safetensors"), **options,
        )
    directory = Path(checkpoint)
    config_path = directory / "config.json"
    if config_path.is_file() and not (directory / "speech_tokenizer").exists():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{config_path} is not valid JSON: {exc}") from exc
        if config.get("model_type") != layout.MODEL_TYPE:
            # standalone tokenizer: a 170 M-parameter file, read whole (the decoder half is dropped)
            _check_tokenizer_config(config, str(config_path))
            return codec_encoder_from_state(config, read_tensors(directory), str(directory / "model.safetensors"), **options)
    return load_codec_encoder(open_checkpoint(checkpoint), **options)
