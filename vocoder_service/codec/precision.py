"""Keep derived float32 tables in float32 when a module is cast to bf16/fp16.

Derived tensors (exp of log-scale SnakeBeta params, normalised codebooks, RoPE frequencies) are
computed once from the loaded weights. `Module.to(dtype)` casts every floating buffer, which would
round them to bf16 and lose the point of precomputing them in fp32: these buffers follow device
moves but never dtype casts.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def apply_keeping_fp32(
    module: nn.Module,
    parent_apply: Callable[..., nn.Module],
    fn: Callable[[torch.Tensor], torch.Tensor],
    recurse: bool,
    names: tuple[str, ...],
) -> nn.Module:
    """Run `parent_apply(fn, recurse)`, then undo any dtype change it made to buffers `names`."""
    before = {n: module._buffers[n] for n in names if module._buffers.get(n) is not None}
    parent_apply(fn, recurse)
    for name, old in before.items():
        new = module._buffers[name]
        if new is None or new.dtype == old.dtype:
            continue
        if old.is_meta:
            module._buffers[name] = torch.empty_like(old, device=new.device)
        else:
            module._buffers[name] = old.to(device=new.device)
    return module
