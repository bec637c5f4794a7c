"""Read safetensors files and load tensors into modules with named, actionable errors."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from checkpoint.errors import CheckpointError


def read_tensors(directory: str | Path, filename: str = "model.safetensors") -> dict[str, torch.Tensor]:
    """All tensors of `directory/filename`, or of its shards when `<filename>.index.json` exists."""
    directory = Path(directory)
    single = directory / filename
    index = directory / (filename + ".index.json")
    if single.is_file():
        return load_file(str(single))
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        tensors: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            shard_path = directory / shard
            if not shard_path.is_file():
                raise CheckpointError(f"missing file: shard {shard_path} listed in {index}")
            tensors.update(load_file(str(shard_path)))
        return tensors
    raise CheckpointError(f"missing file: {single} (nor a sharded {index})")


def load_state(
    module: torch.nn.Module,
    tensors: dict[str, torch.Tensor],
    prefix: str,
    source: str,
    ignore_prefixes: tuple[str, ...] = (),
) -> None:
    """Copy `tensors[prefix + name]` into every parameter/buffer of `module` (strict).

    Raises CheckpointError naming the first missing tensor, every shape mismatch, and unexpected
    tensors under `prefix` (except `ignore_prefixes`, given relative to `prefix`). Persistent
    buffers count; non-persistent buffers (e.g. RoPE tables) are derived, never loaded.
    """
    expected = module.state_dict()
    problems: list[str] = []
    for name, target in expected.items():
        key = prefix + name
        if key not in tensors:
            problems.append(f"missing tensor {key!r} in {source}")
            continue
        value = tensors[key]
        if tuple(value.shape) != tuple(target.shape):
            problems.append(
                f"wrong shape for {key!r} in {source}: expected {tuple(target.shape)}, got {tuple(value.shape)}"
            )
    known = {prefix + name for name in expected}
    for key in tensors:
        if key.startswith(prefix) and key not in known:
            rel = key[len(prefix):]
            if not any(rel.startswith(p) for p in ignore_prefixes):
                problems.append(f"unexpected tensor {key!r} in {source}")
    if problems:
        raise CheckpointError("; ".join(problems[:20]) + (f" (+{len(problems) - 20} more)" if len(problems) > 20 else ""))
    with torch.no_grad():
        for name, target in expected.items():
            target.copy_(tensors[prefix + name].to(dtype=target.dtype))
