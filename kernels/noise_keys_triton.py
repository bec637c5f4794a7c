"""Fused per-frame noise keys: one Triton launch computes what kernels/hash_noise.group_keys computes
with ~65 eager integer launches (4 mix32 rounds of 14 ops, the seed split, the group salts) -- the
decode step is launch-bound at small batches, and these keys feed every one of a frame's 16 picks.

One program per batch row, the row's groups in one block; per row, bit for bit as hash_noise.py:
    key    = mix32(seed mod 2**32)
    key    = mix32(key ^ ((seed >> 32) mod 2**32))
    frame  = mix32(key ^ (step mod 2**32))
    salt   = (group * GROUP_MUL + GROUP_SALT) mod 2**32            for group = first_group + j
    out[j] = mix32(frame ^ salt)                                    stored as int64 in [0, 2**32)
The reference keeps 32-bit lanes in int64 with `& 0xFFFFFFFF`; here the lanes are uint32 (int64 ->
uint32 truncation keeps the low 32 bits, multiplies wrap, shifts are logical), which give the same
low 32 bits, and the uint32 -> int64 store zero-extends. mix32 is kernels/gumbel_pick_triton.py's
jit helper, the one the picks hash tokens with. Integer arithmetic only: nothing differs between
the GPU, the interpreter and the reference.

Capturable in a CUDA graph: no host syncs; the only allocation is the output (torch.empty).
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gumbel_pick_triton import _mix32
from kernels.noise_keys_reference import check_args
from kernels.pdl import pdl_launch, wait_for_prior_grid

# hash_noise.py's group-salt constants (tests check they match); constexpr so the kernel may read them
GROUP_MUL = tl.constexpr(0x9E3779B1)  # hash_noise._group_salt's multiplier
GROUP_SALT = tl.constexpr(0x68E31DA4)  # hash_noise._GROUP_SALT


@triton.jit
def _noise_keys_kernel(seeds_ptr, steps_ptr, out_ptr, first_group, num_groups, seeds_stride, steps_stride,
                       BLOCK_G: tl.constexpr, PDL: tl.constexpr):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    row = tl.program_id(0).to(tl.int64)
    seed = tl.load(seeds_ptr + row * seeds_stride)
    step = tl.load(steps_ptr + row * steps_stride)
    # hash_noise._frame_key: the part every group of this row shares
    key = _mix32(seed.to(tl.uint32))
    key = _mix32(key ^ (seed >> 32).to(tl.uint32))
    frame_key = _mix32(key ^ step.to(tl.uint32))
    cols = tl.arange(0, BLOCK_G)
    groups = (first_group + cols).to(tl.uint32)
    salt = groups * GROUP_MUL + GROUP_SALT  # uint32 wrap-around = the reference's & 0xFFFFFFFF
    keys = _mix32(frame_key ^ salt)
    tl.store(out_ptr + row * num_groups + cols, keys.to(tl.int64), mask=cols < num_groups)


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_noise_keys_kernel, triton.runtime.JITFunction)


def noise_keys_triton(seeds: torch.Tensor, steps: torch.Tensor, first_group: int, num_groups: int) -> torch.Tensor:
    """int64 [bs, num_groups] contiguous: hash_noise.group_keys(seeds, steps, first_group, num_groups), one launch."""
    check_args(seeds, steps, first_group, num_groups)
    out = torch.empty((seeds.shape[0], num_groups), dtype=torch.int64, device=seeds.device)
    if out.numel() == 0:
        return out
    _noise_keys_kernel[(seeds.shape[0],)](
        seeds, steps, out, first_group, num_groups, seeds.stride(0), steps.stride(0),
        BLOCK_G=max(16, triton.next_power_of_2(num_groups)), num_warps=1,
        enable_fp_fusion=False,  # integer arithmetic only; pinned as in the other kernels (and no knob warning)
        **pdl_launch(seeds.device),
    )
    return out
