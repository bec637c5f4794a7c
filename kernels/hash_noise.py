"""Counter-based uniform noise: u = hash(seed, step, group, token) computed on device.

A request's random draws must not depend on its batch mates or on the batch row it lands in, and
the sampling must run inside a CUDA graph. A per-row torch.Generator satisfies neither, so every
uniform is a pure function of (request seed, frame index, codebook group, token id). The hash is
a 3-round xorshift-multiply mixer over 32-bit lanes held in int64; multipliers are odd and below
2**31, so no product of a 32-bit lane overflows int64 (signed overflow would be
implementation-defined on some backends).
"""
from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF
_MUL_A = 0x7FEB352D
_MUL_B = 0x5BD1E995
_TOKEN_SALT = 0x2545F491
_GROUP_SALT = 0x68E31DA4
# 23 random bits: (k + 0.5) / 2**23 is exact in fp32 and never reaches 0 or 1
_UNIFORM_BITS = 23


def mix32(x: torch.Tensor) -> torch.Tensor:
    """Bijective mixer of 32-bit values stored in int64 (inputs must lie in [0, 2**32))."""
    x = x ^ (x >> 16)
    x = (x * _MUL_A) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _MUL_B) & _MASK32
    x = x ^ (x >> 16)
    x = (x * _MUL_A) & _MASK32
    return x ^ (x >> 15)


def _frame_key(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """int64 [bs]: the part of every group's key that depends on (seed, frame index) only."""
    key = mix32(seeds & _MASK32)
    key = mix32(key ^ ((seeds >> 32) & _MASK32))
    return mix32(key ^ (steps & _MASK32))


def _group_salt(group):
    # int or int64 tensor alike; group * multiplier stays far below 2**63
    return (group * 0x9E3779B1 + _GROUP_SALT) & _MASK32


def row_keys(seeds: torch.Tensor, steps: torch.Tensor, group: int) -> torch.Tensor:
    """int64 [bs] key per row from a non-negative 63-bit seed, the frame index and the group."""
    return mix32(_frame_key(seeds, steps) ^ _group_salt(group))


def group_keys(seeds: torch.Tensor, steps: torch.Tensor, first_group: int, num_groups: int) -> torch.Tensor:
    """int64 [bs, num_groups]: row_keys for groups first_group.. in one pass. The code predictor
    draws 15 groups per frame; keying them together launches one hash chain instead of 15 (the
    decode step is launch-bound at small batches). Equal to row_keys group by group. The frame step
    calls kernels/noise_keys.py, which computes this chain (~65 launches) in one."""
    groups = torch.arange(first_group, first_group + num_groups, dtype=torch.int64, device=seeds.device)
    return mix32(_frame_key(seeds, steps)[:, None] ^ _group_salt(groups)[None, :])


def token_hashes(vocab_size: int, device) -> torch.Tensor:
    """int64 [vocab_size]: the token half of the noise hash, a constant per token id. Precomputed
    once (outside any graph capture) and gathered per draw instead of hashed again."""
    return mix32((torch.arange(vocab_size, dtype=torch.int64, device=device) + _TOKEN_SALT) & _MASK32)


def uniform_for_tokens(keys: torch.Tensor, token_ids: torch.Tensor, hashes: torch.Tensor | None = None) -> torch.Tensor:
    """float32 [bs, K] in (0, 1): keys [bs] int64, token_ids [bs, K] int64 (vocabulary ids);
    `hashes` = token_hashes(vocab) gives the same values with fewer launches."""
    token_part = mix32((token_ids + _TOKEN_SALT) & _MASK32) if hashes is None else hashes[token_ids]
    bits = mix32(keys[:, None] ^ token_part)
    return ((bits >> (32 - _UNIFORM_BITS)).to(torch.float32) + 0.5) * (1.0 / (1 << _UNIFORM_BITS))


def gumbel_for_tokens(keys: torch.Tensor, token_ids: torch.Tensor, hashes: torch.Tensor | None = None) -> torch.Tensor:
    """Gumbel(0, 1) noise [bs, K]: argmax(logits + noise) samples softmax(logits)."""
    return -torch.log(-torch.log(uniform_for_tokens(keys, token_ids, hashes)))
