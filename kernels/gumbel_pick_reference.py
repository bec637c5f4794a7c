"""Eager reference for the seeded Gumbel-max pick that ends every sampling in
talker_service.model.sampling.choose_tokens_keyed: exactly that code path, kept here so the fused
kernel (kernels/gumbel_pick_triton.py) has one definition to match bit for bit.
"""
from __future__ import annotations

from typing import Optional

import torch

from kernels.hash_noise import gumbel_for_tokens


def gumbel_pick_reference(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                          hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [bs]: token_ids[row, argmax(values[row] + gumbel(keys[row], token_ids[row]))].

    values [bs, K] float32 warped logits (-inf where filtered); token_ids [bs, K] int64 vocabulary
    ids; keys [bs] int64 noise keys in [0, 2**32); hashes: optional noise.token_hashes(vocab) table.
    Ties go to the first maximum (torch.argmax).
    """
    noise = gumbel_for_tokens(keys, token_ids, hashes)
    pick = (values + noise).argmax(dim=-1, keepdim=True)
    return token_ids.gather(1, pick)[:, 0]
