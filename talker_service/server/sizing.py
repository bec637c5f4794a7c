"""The talker's slots and queue when left to auto (`max_slots=0`, `max_queued=0`), before loading.

On CUDA the KV cache is what grows with streams: 2 (K, V) x layers x KV heads x head_dim x
max_seq_len x dtype bytes per slot (235 MiB at 1.7B, 2048 positions, bf16). Its budget is this
process's share of the GPU (`gpu_memory_fraction`) less the weights (the checkpoint's tensor bytes,
converted to the serving dtype) and a reserve for graphs and activations. On CPU the default stays
small: a CPU talker is for tests and demos.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from service_common.memory_sizing import AUTO, GIB, queue_for, slots_that_fit
from talker_service.model.loader import read_talker_config
from talker_service.server.config import CPU_DEFAULT_SLOTS, TalkerServiceConfig

logger = logging.getLogger(__name__)

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
# Decode graphs (one per batch bucket), prefill activations, sampling tables, cuBLAS workspaces:
# measured well under 2 GiB at 1.7B x 256 slots; the rest is headroom against fragmentation.
RESERVE_BYTES = 3 * GIB


def kv_bytes_per_slot(model_dir: Path, max_seq_len: int, dtype: str) -> int:
    cfg = read_talker_config(model_dir)
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * max_seq_len * DTYPE_BYTES[dtype]


def weight_bytes(model_dir: Path, dtype: str) -> int:
    """The checkpoint's weights in the serving dtype (the file stores them in bf16 or fp32)."""
    from safetensors import safe_open   # a header read, no tensor loaded
    num_elements = 0
    with safe_open(str(model_dir / "model.safetensors"), framework="np") as f:
        for name in f.keys():
            shape = f.get_slice(name).get_shape()
            count = 1
            for size in shape:
                count *= size
            num_elements += count
    return num_elements * DTYPE_BYTES[dtype]


def sized_config(config: TalkerServiceConfig, model_dir: Path, total_bytes: int | None = None,
                 free_bytes: int | None = None) -> TalkerServiceConfig:
    """`config` with auto slots and queue resolved; on CUDA the memory figures are measured unless given."""
    if config.max_slots != AUTO and config.max_queued != AUTO:
        return config
    num_slots = config.max_slots
    if num_slots == AUTO and not config.device.startswith("cuda"):
        num_slots = CPU_DEFAULT_SLOTS
    elif num_slots == AUTO:
        if total_bytes is None or free_bytes is None:
            import torch
            free_bytes, total_bytes = torch.cuda.mem_get_info(torch.device(config.device))
        dtype = config.resolved_dtype()
        sizing = slots_that_fit(total_bytes=total_bytes, free_bytes=free_bytes, fraction=config.gpu_memory_fraction,
                                fixed_bytes=weight_bytes(model_dir, dtype) + RESERVE_BYTES,
                                bytes_per_slot=kv_bytes_per_slot(model_dir, config.max_seq_len, dtype))
        num_slots = sizing.num_slots
        logger.info("talker sized from GPU memory: %s", sizing.describe())
    return dataclasses.replace(config, max_slots=num_slots, max_queued=queue_for(num_slots, config.max_queued))
