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


def check_args(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
               hashes: Optional[torch.Tensor]) -> None:
    """Shapes, dtypes and devices the kernel needs (ValueError otherwise); never reads values."""
    if values.dim() != 2 or token_ids.shape != values.shape:
        raise ValueError(f"gumbel_pick expects values and token_ids of one shape [bs, K], got "
                         f"{tuple(values.shape)} and {tuple(token_ids.shape)}")
    if keys.shape != (values.shape[0],):
        raise ValueError(f"gumbel_pick expects keys [bs] = [{values.shape[0]}], got {tuple(keys.shape)}")
    if values.dtype != torch.float32 or token_ids.dtype != torch.int64 or keys.dtype != torch.int64:
        raise ValueError(f"gumbel_pick expects float32 values and int64 token_ids/keys, got "
                         f"{values.dtype}, {token_ids.dtype}, {keys.dtype}")
    if hashes is not None and (hashes.dim() != 1 or hashes.dtype != torch.int64):
        raise ValueError(f"gumbel_pick expects an int64 [V] hashes table, got {hashes.dtype} {tuple(hashes.shape)}")
    for name, t in (("token_ids", token_ids), ("keys", keys), ("hashes", hashes)):
        if t is not None and t.device != values.device:
            raise ValueError(f"gumbel_pick: {name} is on {t.device} but values is on {values.device}")
