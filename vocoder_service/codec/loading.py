"""Locate and load the official speech-tokenizer decoder weights into a Code2Wav."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from checkpoint.errors import CheckpointError
from checkpoint.state import load_state, read_tensors
from vocoder_service.codec.config import DecoderConfig

logger = logging.getLogger(__name__)

SPEECH_TOKENIZER_SUBDIR = "speech_tokenizer"
SPEECH_TOKENIZER_MODEL_TYPE = "qwen3_tts_tokenizer_12hz"
WEIGHTS_FILE = "model.safetensors"
TENSOR_PREFIX = "decoder."  # encoder.* tensors in the same file are not looked at


def speech_tokenizer_dir(path: str | Path) -> Path:
    """`path/speech_tokenizer` when it exists (a full model dir), else `path` itself."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"missing directory: {path}")
    nested = path / SPEECH_TOKENIZER_SUBDIR
    return nested if nested.is_dir() else path


def read_speech_tokenizer_config(directory: Path) -> dict:
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"missing file: {config_path}")
    try:
        raw = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{config_path} is not valid JSON: {exc}") from exc
    model_type = raw.get("model_type")
    if model_type not in (None, SPEECH_TOKENIZER_MODEL_TYPE):
        hint = f" (a full model dir needs a {SPEECH_TOKENIZER_SUBDIR}/ subfolder)" if model_type == "qwen3_tts" else ""
        raise CheckpointError(
            f"{config_path}: model_type {model_type!r} is not {SPEECH_TOKENIZER_MODEL_TYPE!r}{hint}"
        )
    if "decoder_config" not in raw:
        raise CheckpointError(f"{config_path} has no 'decoder_config'")
    return raw


def load_code2wav(cls, path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """Build `cls` (Code2Wav) from a checkpoint dir; derived tables are computed before the cast."""
    directory = speech_tokenizer_dir(path)
    raw = read_speech_tokenizer_config(directory)
    config = DecoderConfig.from_dict(raw["decoder_config"])
    sample_rate_hz = int(raw.get("output_sample_rate", 24000))
    upsample = int(raw.get("decode_upsample_rate", config.samples_per_frame))
    if upsample != config.samples_per_frame:
        raise CheckpointError(
            f"decode_upsample_rate {upsample} disagrees with the decoder's upsampling product {config.samples_per_frame}"
        )
    with torch.device("meta"):
        model = cls(config, sample_rate_hz=sample_rate_hz)
    model.to_empty(device="cpu")
    source = str(directory / WEIGHTS_FILE)
    tensors = read_tensors(directory, WEIGHTS_FILE)
    load_state(model, tensors, TENSOR_PREFIX, source)
    del tensors
    model.prepare()  # fp32 source weights -> fp32 derived tables, kept fp32 by the cast below
    model.requires_grad_(False)
    model.eval()
    model.to(device=device, dtype=dtype)
    logger.info(
        "loaded Code2Wav from %s (%.1fM params, %s, %s)", directory, model.num_parameters() / 1e6, device, dtype
    )
    return model
