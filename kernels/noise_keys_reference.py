"""Eager reference for the per-frame noise keys: kernels/hash_noise.group_keys, the hash chain
(seed, frame index, codebook group) -> key that every sampling of a frame feeds its Gumbel noise
with. It is ~65 tiny integer launches at any batch size (four mix32 rounds of 14 ops, the seed
split, the group salts); the fused kernel (kernels/noise_keys_triton.py) computes the same keys in
one launch and has this one definition to match bit for bit.
"""
from __future__ import annotations

import torch

from kernels.hash_noise import group_keys

# the kernel takes first_group and num_groups as 32-bit ints
MAX_GROUPS = 2**31 - 1


def noise_keys_reference(seeds: torch.Tensor, steps: torch.Tensor, first_group: int, num_groups: int) -> torch.Tensor:
    """int64 [bs, num_groups], contiguous: column j is hash_noise.row_keys(seeds, steps, first_group + j).

    seeds [bs] int64 request seeds in [0, 2**63); steps [bs] int64 frame indices (>= 0; only their
    low 32 bits count, as in hash_noise)."""
    return group_keys(seeds, steps, first_group, num_groups).contiguous()


def check_args(seeds: torch.Tensor, steps: torch.Tensor, first_group: int, num_groups: int) -> None:
    """Shapes, dtypes, devices and group range the kernel needs (ValueError otherwise); never reads values."""
    if seeds.dim() != 1 or steps.shape != seeds.shape:
        raise ValueError(f"noise_keys expects seeds and steps of one shape [bs], got "
                         f"{tuple(seeds.shape)} and {tuple(steps.shape)}")
    if seeds.dtype != torch.int64 or steps.dtype != torch.int64:
        raise ValueError(f"noise_keys expects int64 seeds and steps, got {seeds.dtype}, {steps.dtype}")
    if steps.device != seeds.device:
        raise ValueError(f"noise_keys: steps is on {steps.device} but seeds is on {seeds.device}")
    for name, value in (("first_group", first_group), ("num_groups", num_groups)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"noise_keys expects an int {name}, got {value!r}")
    if first_group < 0 or num_groups < 1 or first_group + num_groups > MAX_GROUPS:
        raise ValueError(f"noise_keys expects first_group >= 0, num_groups >= 1 and groups below {MAX_GROUPS}, "
                         f"got first_group={first_group}, num_groups={num_groups}")
