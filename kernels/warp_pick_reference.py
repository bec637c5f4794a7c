"""Eager reference for "temperature + top-k/top-p mask + seeded Gumbel-max pick + greedy select" over
the sorted raw candidates of every row: what talker_service.model.sampling.choose_tokens_keyed does
after its topk/sort and argmax. The fused kernel (kernels/warp_pick_triton.py) has this one
definition to match; tests/test_warp_pick.py checks it against _candidates and the unfused formula.

Per row, on raw logits sorted descending (the topk/sort of the unscaled logits):
- temperature: values / t in float32, t = temperature where do_sample else 1 (a greedy row may send
  t = 0: its pick is replaced below, and dividing by 1 keeps it finite); the same IEEE division as
  `logits / temperature[:, None]` before the sort, element by element;
- top-k: k = top_k, or vocab_size where top_k == 0, clamped to [1, K]; everything below the k-th
  value is dropped (ties with the k-th value are kept, as HF does);
- top-p in HF form: softmax of what survived, cumulative mass summed from the tail; drop where it is
  <= 1 - top_p, only in rows with top_p < 1, never the first (best) candidate;
- pick: token_ids[row, argmax(masked values + gumbel(keys[row], token_ids[row]))], first maximum;
- rows with do_sample False return greedy[row] (the caller's argmax of the raw logits) instead.
"""
from __future__ import annotations

from typing import Optional

import torch

from kernels.gumbel_pick_reference import gumbel_pick_reference


def sampling_temperature(temperature: torch.Tensor, do_sample: torch.Tensor) -> torch.Tensor:
    """float32 [bs]: the temperature each row's sampled pick divides by; greedy rows get 1 so that a
    0 sent with do_sample=False cannot divide by zero (their pick is not used)."""
    return torch.where(do_sample, temperature, torch.ones_like(temperature))


def warp_values_reference(values: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                          vocab_size: int) -> torch.Tensor:
    """float32 [bs, K]: the sorted, temperature-scaled candidate values with -inf where top-k or
    top-p drops them."""
    num = values.shape[-1]
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab_size)).clamp(1, num)
    kth = values.gather(1, (k - 1)[:, None])
    values = values.masked_fill(values < kth, float("-inf"))
    probs = values.softmax(dim=-1)
    mass_from_tail = probs.flip(-1).cumsum(-1).flip(-1)
    drop = (mass_from_tail <= (1.0 - top_p)[:, None]) & (top_p < 1.0)[:, None]
    drop[:, 0] = False
    return values.masked_fill(drop, float("-inf"))


def warp_pick_reference(values: torch.Tensor, token_ids: torch.Tensor, temperature: torch.Tensor,
                        top_k: torch.Tensor, top_p: torch.Tensor, do_sample: torch.Tensor, greedy: torch.Tensor,
                        vocab_size: int, keys: torch.Tensor, hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [bs]: the chosen token of every row (module docstring).

    values [bs, K] float32 raw logits sorted descending; token_ids [bs, K] int64; temperature [bs]
    float32 (> 0 where do_sample); top_k [bs] int64 (0 = off); top_p [bs] float32 in (0, 1];
    do_sample [bs] bool; greedy [bs] int64 the tokens of the rows that do not sample; vocab_size:
    what top_k = 0 means; keys [bs] int64 noise keys in [0, 2**32); hashes: optional
    noise.token_hashes(vocab) table.
    """
    scaled = values / sampling_temperature(temperature, do_sample)[:, None]
    sampled = gumbel_pick_reference(warp_values_reference(scaled, top_k, top_p, vocab_size), token_ids, keys, hashes)
    return torch.where(do_sample, sampled, greedy)


def check_args(values: torch.Tensor, token_ids: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
               top_p: torch.Tensor, do_sample: torch.Tensor, greedy: torch.Tensor, vocab_size: int,
               keys: torch.Tensor, hashes: Optional[torch.Tensor]) -> None:
    """Shapes, dtypes, devices and vocab_size the kernel needs (ValueError otherwise); never reads tensor data."""
    if values.dim() != 2 or token_ids.shape != values.shape or values.shape[1] < 1:
        raise ValueError(f"warp_pick expects values and token_ids of one shape [bs, K] with K >= 1, got "
                         f"{tuple(values.shape)} and {tuple(token_ids.shape)}")
    bs, num = values.shape
    for name, t, dtype in (("temperature", temperature, torch.float32), ("top_k", top_k, torch.int64),
                           ("top_p", top_p, torch.float32), ("do_sample", do_sample, torch.bool),
                           ("greedy", greedy, torch.int64), ("keys", keys, torch.int64)):
        if t.shape != (bs,) or t.dtype != dtype:
            raise ValueError(f"warp_pick expects {name} [bs] = [{bs}] {dtype}, got {t.dtype} {tuple(t.shape)}")
    if values.dtype != torch.float32 or token_ids.dtype != torch.int64:
        raise ValueError(f"warp_pick expects float32 values and int64 token_ids, got {values.dtype}, {token_ids.dtype}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < num:
        raise ValueError(f"warp_pick expects an int vocab_size >= K = {num}, got {vocab_size!r}")
    if hashes is not None and (hashes.dim() != 1 or hashes.dtype != torch.int64):
        raise ValueError(f"warp_pick expects an int64 [V] hashes table, got {hashes.dtype} {tuple(hashes.shape)}")
    for name, t in (("token_ids", token_ids), ("temperature", temperature), ("top_k", top_k), ("top_p", top_p),
                    ("do_sample", do_sample), ("greedy", greedy), ("keys", keys), ("hashes", hashes)):
        if t is not None and t.device != values.device:
            raise ValueError(f"warp_pick: {name} is on {t.device} but values is on {values.device}")
