"""Load the Base checkpoint's speaker encoder and turn 24 kHz audio into an x-vector."""
from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import torch

from checkpoint.errors import CheckpointError
from checkpoint.model_files import ModelCheckpoint, open_checkpoint
from checkpoint.state import load_state
from talker_service.voice.mel import SPEAKER_SAMPLE_RATE_HZ, LogMelSpectrogram
from talker_service.voice.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

logger = logging.getLogger(__name__)

PREFIX = "speaker_encoder."


def speaker_encoder_from_state(
    config: dict,
    tensors: dict[str, torch.Tensor],
    source: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> SpeakerEncoder:
    """The speaker encoder described by a top-level config.json dict, with weights `speaker_encoder.*` of `tensors`."""
    model_type = config.get("tts_model_type")
    if model_type != "base" or "speaker_encoder_config" not in config:
        raise CheckpointError(
            f"{source} is a {model_type!r} model; only Base checkpoints carry a speaker encoder, "
            "so voice cloning needs a Base model"
        )
    encoder_config = SpeakerEncoderConfig.from_dict(config["speaker_encoder_config"])
    hidden_size = config.get("talker_config", {}).get("hidden_size")
    if hidden_size is not None and hidden_size != encoder_config.enc_dim:
        raise CheckpointError(
            f"{source}: speaker_encoder_config.enc_dim {encoder_config.enc_dim} must equal "
            f"talker_config.hidden_size {hidden_size} (the x-vector is one talker input position)"
        )
    encoder = SpeakerEncoder(encoder_config, tts_model_size=config.get("tts_model_size"))
    load_state(encoder, tensors, prefix=PREFIX, source=source)
    encoder.to(device=device, dtype=dtype).eval()
    logger.info("loaded speaker encoder from %s (enc_dim %d, %s on %s)", source, encoder_config.enc_dim, dtype, device)
    return encoder


def load_speaker_encoder(
    checkpoint: ModelCheckpoint | str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> SpeakerEncoder:
    """The speaker encoder of a Base checkpoint (an opened one, a directory, or a name for open_checkpoint).

    Reads only the `speaker_encoder.*` tensors (12 M parameters of the 1.9 B in model.safetensors).
    """
    if not isinstance(checkpoint, ModelCheckpoint):
        checkpoint = open_checkpoint(checkpoint)
    if checkpoint.tts_model_type != "base":   # checked before reading any tensor
        return speaker_encoder_from_state(checkpoint.config, {}, str(checkpoint.root))
    return speaker_encoder_from_state(
        checkpoint.config, checkpoint.tensors(PREFIX), str(checkpoint.root / "model.safetensors"), device, dtype
    )


@functools.lru_cache(maxsize=1)
def _cpu_mel() -> LogMelSpectrogram:
    # Kept off the encoder's module tree: moving the encoder to bf16 must not round the filters or
    # window, and the reference computes the mel on CPU in float32.
    return LogMelSpectrogram()


@torch.inference_mode()
def extract_x_vector(encoder: SpeakerEncoder, audio_24k: np.ndarray | torch.Tensor) -> torch.Tensor:
    """x-vector [enc_dim] float32 (on CPU) of mono audio [N] at 24 kHz."""
    audio = torch.as_tensor(audio_24k)
    if audio.dim() != 1:
        raise ValueError(f"audio must be mono [samples] at {SPEAKER_SAMPLE_RATE_HZ} Hz, got shape {tuple(audio.shape)}")
    mel = _cpu_mel()(audio.detach().to("cpu", torch.float32).unsqueeze(0))          # [1, 128, frames]
    param = next(encoder.parameters())
    x_vector = encoder(mel.to(device=param.device, dtype=param.dtype))[0]            # [enc_dim]
    return x_vector.float().cpu()
