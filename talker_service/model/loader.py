"""Reading an official-layout checkpoint directory (config.json + model.safetensors) for the talker.

Knows files, not the model: `TalkerModel.from_checkpoint` (talker.py) builds the model and hands
it here to be filled, so this module never imports the model back.
"""
from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from checkpoint.errors import CheckpointError
from checkpoint.state import load_state, read_tensors
from talker_service.model.config import TalkerConfig


def resolve_checkpoint_dir(path_or_name: str | Path) -> Path:
    """A local directory as is; otherwise a name for the project's resolver (tiny models, hub ids)."""
    path = Path(path_or_name)
    if path.is_dir():
        return path
    try:
        from checkpoint.files import resolve_model_dir
    except ImportError as exc:  # the resolver is optional for plain directories
        raise CheckpointError(f"checkpoint directory {path} does not exist") from exc
    return Path(resolve_model_dir(str(path_or_name)))


def read_config(directory: Path) -> dict:
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"missing file: {config_path}")
    try:
        return json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{config_path} is not valid JSON: {exc}") from exc


def read_talker_config(directory: Path) -> TalkerConfig:
    raw = read_config(directory)
    if "talker_config" not in raw:
        raise CheckpointError(f"{directory / 'config.json'} has no talker_config (not a Qwen3-TTS model config)")
    return TalkerConfig.from_dict(raw["talker_config"])


def load_talker_weights(model: nn.Module, directory: Path) -> None:
    """Fill `model` (a TalkerModel) with the checkpoint's `talker.*` tensors, names unchanged."""
    load_state(model, read_tensors(directory), prefix="talker.", source=str(directory / "model.safetensors"))
