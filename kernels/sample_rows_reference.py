"""Eager reference for whole-row sampling (kernels/sample_rows_triton.py): the sort path of
talker_service.model.sampling.choose_tokens_keyed with every token a candidate -- the argmax of the
float logits for greedy rows, a descending sort of the row, then warp_pick's definition
(kernels/warp_pick_reference.py: temperature, top-k, top-p, seeded Gumbel-max pick, greedy select).
The sort is stable, so equal logits stay in index order: the order the kernel's top-p uses, which
makes the two agree token for token (up to the summation order of the tail masses) even on rows
full of ties, where torch.sort's unstable order would be another, equally valid, sample.
"""
from __future__ import annotations

import torch

from kernels.warp_pick_reference import warp_pick_reference

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def sample_rows_reference(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                          do_sample: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """int64 [bs]: each row's token; logits [bs, V] (fp32/bf16/fp16), the rest as warp_pick takes them."""
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    values, token_ids = torch.sort(logits, dim=-1, descending=True, stable=True)
    return warp_pick_reference(values, token_ids, temperature, top_k, top_p, do_sample, greedy, logits.shape[-1],
                               keys)


def check_args(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
               do_sample: torch.Tensor, keys: torch.Tensor) -> None:
    """Shapes, dtypes and devices (ValueError otherwise); never reads tensor data."""
    if logits.dim() != 2 or logits.shape[1] < 1 or logits.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"sample_rows expects float logits [bs, V] with V >= 1, got {logits.dtype} "
                         f"{tuple(logits.shape)}")
    bs = logits.shape[0]
    for name, t, dtype in (("temperature", temperature, torch.float32), ("top_k", top_k, torch.int64),
                           ("top_p", top_p, torch.float32), ("do_sample", do_sample, torch.bool),
                           ("keys", keys, torch.int64)):
        if t.shape != (bs,) or t.dtype != dtype:
            raise ValueError(f"sample_rows expects {name} [bs] = [{bs}] {dtype}, got {t.dtype} {tuple(t.shape)}")
        if t.device != logits.device:
            raise ValueError(f"sample_rows: {name} is on {t.device} but logits is on {logits.device}")
