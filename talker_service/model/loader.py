"""Build a TalkerModel from an official-layout checkpoint directory (config.json + model.safetensors)."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch

from checkpoint.errors import CheckpointError
from checkpoint.state import load_state, read_tensors
from talker_service.model.config import TalkerConfig
from talker_service.model.talker import TalkerModel

logger = logging.getLogger(__name__)


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


def build_empty(config: TalkerConfig, device: str | torch.device, dtype: torch.dtype) -> TalkerModel:
    """Uninitialised parameters on `device`: no CPU fp32 copy of a 2B-parameter model, no init cost."""
    with torch.device("meta"):
        model = TalkerModel(config)
    return model.to(dtype=dtype).to_empty(device=device).eval().requires_grad_(False)


def load_talker(path_or_dir: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
                max_slots: int = 1, max_seq_len: int = 2048) -> TalkerModel:
    directory = resolve_checkpoint_dir(path_or_dir)
    started_s = time.perf_counter()
    raw = read_config(directory)
    if "talker_config" not in raw:
        raise CheckpointError(f"{directory / 'config.json'} has no talker_config (not a Qwen3-TTS model config)")
    config = TalkerConfig.from_dict(raw["talker_config"])
    model = build_empty(config, device, dtype)
    tensors = read_tensors(directory)
    load_state(model, tensors, prefix="talker.", source=str(directory / "model.safetensors"))
    model.init_runtime(max_slots=max_slots, max_seq_len=max_seq_len)
    logger.info("loaded talker from %s (%s, %s) in %.1f s", directory, device, dtype, time.perf_counter() - started_s)
    return model
