"""Streaming safetensors writing and header-only reading.

The writer produces tensors one at a time, so a random full-size (4 GB) checkpoint never sits
in memory twice, and its output depends only on the tensors (sorted names, no timestamps), so
the same inputs give byte-identical files. The reader parses only the JSON header, so checking
the names/shapes of a multi-GB file costs one small read.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable

import torch

from checkpoint.errors import CheckpointError

_DTYPE_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
_HEADER_ALIGN_BYTES = 8
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit; larger means a corrupt file


def write_safetensors(
    path: str | Path,
    shapes: dict[str, tuple[int, ...]],
    dtype: torch.dtype,
    make_tensor: Callable[[str, tuple[int, ...]], torch.Tensor],
) -> None:
    """Write `path` holding one `dtype` tensor per entry of `shapes`, from `make_tensor(name, shape)`."""
    names = sorted(shapes)
    itemsize = torch.empty((), dtype=dtype).element_size()
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in names:
        num_bytes = itemsize * _numel(shapes[name])
        header[name] = {"dtype": _DTYPE_NAMES[dtype], "shape": list(shapes[name]), "data_offsets": [offset, offset + num_bytes]}
        offset += num_bytes
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % _HEADER_ALIGN_BYTES)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header_bytes)))
        out.write(header_bytes)
        for name in names:
            tensor = make_tensor(name, shapes[name])
            if tuple(tensor.shape) != tuple(shapes[name]):
                raise ValueError(f"make_tensor({name!r}) gave shape {tuple(tensor.shape)}, expected {shapes[name]}")
            # little-endian raw bytes, as the format requires (every torch CPU target is LE)
            out.write(tensor.to(dtype).contiguous().view(torch.uint8).numpy().tobytes())


def read_header(path: str | Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype name, shape) from a safetensors file's header, without reading tensor data."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > _MAX_HEADER_BYTES:
                raise CheckpointError(f"corrupt safetensors file {path}: header length {length}")
            header = json.loads(f.read(length))
    except FileNotFoundError:
        raise CheckpointError(f"missing file: {path}") from None
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"corrupt safetensors file {path}: {exc}") from exc
    return {
        name: (info["dtype"], tuple(info["shape"]))
        for name, info in header.items()
        if name != "__metadata__"
    }


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
