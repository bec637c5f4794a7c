"""Shared helpers for the talker-model tests (no tests here): official tiny models with O(1)
random weights, saved in the official checkpoint layout, and our model loaded from them."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from checkpoint.configs import model_config
from oracle import import_oracle


def randomize_(module: torch.nn.Module, seed: int) -> None:
    """Weights with O(1) activations: HF's default init (std 0.02) makes logits ~1e-3, which
    would let a 1e-5 tolerance hide real mistakes."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * noise)
            elif param.dim() == 1:
                param.copy_(0.1 * noise)
            elif "embedding" in name:
                param.copy_(noise)
            else:
                param.copy_(noise / math.sqrt(param.shape[1]))


def official_model(config: dict, seed: int = 0):
    import_oracle()
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**copy.deepcopy(config))).eval()
    randomize_(model, seed + 1)
    return model


def save_official(model, config: dict, directory: Path) -> Path:
    """config.json + model.safetensors in the official layout (all tensors, incl. speaker_encoder.*)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def tiny_pair(tmp_dir: Path, model_type: str = "custom_voice", seed: int = 0, config: dict | None = None,
              max_slots: int = 4, max_seq_len: int = 64):
    """(official model, our TalkerModel in fp32 on CPU, checkpoint dir) from the same weights."""
    from talker_service.model import TalkerModel

    config = config or model_config(model_type, "tiny")
    official = official_model(config, seed)
    directory = save_official(official, config, tmp_dir)
    ours = TalkerModel.from_checkpoint(directory, device="cpu", dtype=torch.float32, max_slots=max_slots,
                                       max_seq_len=max_seq_len)
    return official, ours, directory


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()
