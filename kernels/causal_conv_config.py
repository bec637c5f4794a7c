"""Tile sizes for the causal conv kernel (pure Python, no triton import).

A fixed rule instead of triton.autotune, for the same reason as SnakeBeta's table: the decoder is
captured in CUDA graphs, and autotuning inside a capture would launch candidates into the graph.
tl.dot needs every tile side >= 16; tiles are powers of two and masked at the edges.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

MIN_DOT_SIDE = 16
MAX_BLOCK_CO = 128
MAX_BLOCK_T = 128
# The Triton interpreter (CPU tests) pays per program, not per element: fewer, longer tiles.
MAX_BLOCK_T_INTERPRETED = 2048


@dataclass(frozen=True)
class ConvConfig:
    block_co: int  # output channels per program
    block_ci: int  # input channels per reduction step
    block_t: int  # output positions per program
    num_warps: int
    num_stages: int


def _pow2_at_least(n: int, floor: int) -> int:
    size = floor
    while size < n:
        size *= 2
    return size


@functools.lru_cache(maxsize=1024)
def choose_conv_config(c_in: int, c_out: int, num_samples: int, num_batch: int = 1,
                       interpreted: bool = False) -> ConvConfig:
    if min(c_in, c_out, num_samples, num_batch) < 1:
        raise ValueError(f"choose_conv_config needs positive sizes, got C_in={c_in} C_out={c_out} "
                         f"T={num_samples} B={num_batch}")
    block_co = min(MAX_BLOCK_CO, _pow2_at_least(c_out, MIN_DOT_SIDE))
    block_t = min(MAX_BLOCK_T_INTERPRETED if interpreted else MAX_BLOCK_T, _pow2_at_least(num_samples, MIN_DOT_SIDE))
    block_ci = 64 if c_in >= 256 else 32 if c_in >= 32 else MIN_DOT_SIDE
    num_warps = 8 if block_co * block_t >= 128 * 128 else 4
    return ConvConfig(block_co=block_co, block_ci=block_ci, block_t=block_t, num_warps=num_warps, num_stages=3)
