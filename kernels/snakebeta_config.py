"""Launch-config heuristic for the SnakeBeta kernel (pure Python, no triton import).

A fixed table instead of triton.autotune: the decoder is captured into CUDA graphs, and autotuning
inside a capture would time (and launch) candidate kernels into the graph. The constants below are
the knobs that `benchmarks/bench_snakebeta.py --sweep` measures; edit them from its "best" table.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

# Longest time tile: rows longer than this are split along time. The H200 sweep (2026-11-22,
# benchmarks/results/2026-11-22-snakebeta-h200.json.gz) found t512 best or within 2% at every large
# decoder shape, and 16 warps best for the wide 1536-channel stage.
MAX_BLOCK_T = 512
# Bytes of x one program reads: 16 KiB keeps enough loads in flight per SM to saturate HBM on
# Hopper for a streaming kernel, while the grid still has thousands of programs at decoder sizes.
BYTES_PER_PROGRAM = 8192
# Never shrink a tile below this many elements when spreading small tensors over the SMs.
MIN_ELEMS_PER_PROGRAM = 512
# Bytes each thread handles: 32 bytes = two 16-byte vector loads per thread.
BYTES_PER_THREAD = 32
MAX_NUM_WARPS = 16
# Time-major tensors ([B, T, C] in memory): the widest channel tile. 256 bf16 channels are 512
# contiguous bytes per time step; the decoder's 96..1536 channels take 1..6 channel tiles.
MAX_BLOCK_C_TIME_MAJOR = 256
# Assumed SM count when the caller does not pass one (H100 SXM: 132, H200: 132).
DEFAULT_NUM_SMS = 132
# Small tensors are split until the grid has this many programs per SM (or tiles hit the minimum).
PROGRAMS_PER_SM = 2


@dataclass(frozen=True)
class SnakeConfig:
    block_c: int  # channels per program (power of two)
    block_t: int  # samples per row per program (power of two)
    num_warps: int
    fast_sin: bool  # MUFU sin.approx (CUDA only; the interpreter cannot run inline asm)

    @property
    def block_elems(self) -> int:
        return self.block_c * self.block_t


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


# Cached: the launcher calls this on every launch and the decoder reuses a handful of shapes.
@functools.lru_cache(maxsize=4096)
def choose_config(
    num_channels: int,
    num_samples: int,
    elem_bytes: int,
    num_batch: int = 1,
    is_cuda: bool = True,
    num_sms: int = DEFAULT_NUM_SMS,
    time_major: bool = False,
) -> SnakeConfig:
    """Tile shape for x of shape [num_batch, num_channels, num_samples] with `elem_bytes` per element.

    Channel-major x (time contiguous): long time tiles, channels fill the rest of the tile.
    Time-major x (channels contiguous): wide channel tiles, time steps fill the rest.
    """
    if min(num_channels, num_samples, elem_bytes, num_batch) < 1:
        raise ValueError(
            f"choose_config needs positive sizes, got C={num_channels} T={num_samples} "
            f"elem_bytes={elem_bytes} B={num_batch}"
        )
    if time_major:
        block_c = min(next_pow2(num_channels), MAX_BLOCK_C_TIME_MAJOR)
        block_elems = max(BYTES_PER_PROGRAM // elem_bytes, block_c)
    else:
        block_t = min(next_pow2(num_samples), MAX_BLOCK_T)
        block_elems = max(BYTES_PER_PROGRAM // elem_bytes, block_t)
    numel = num_batch * num_channels * num_samples
    # Small launches (batch-1 first chunks) are latency bound: more, smaller programs use more SMs.
    while block_elems > MIN_ELEMS_PER_PROGRAM and numel < PROGRAMS_PER_SM * num_sms * block_elems:
        block_elems //= 2
    if time_major:
        block_c = min(block_c, block_elems)
        block_t = min(next_pow2(num_samples), max(1, block_elems // block_c))
    else:
        block_t = min(block_t, block_elems)
        block_c = min(next_pow2(num_channels), max(1, block_elems // block_t))
    tile_bytes = block_c * block_t * elem_bytes
    num_warps = max(1, min(MAX_NUM_WARPS, next_pow2(tile_bytes // (32 * BYTES_PER_THREAD))))
    return SnakeConfig(block_c=block_c, block_t=block_t, num_warps=num_warps, fast_sin=is_cuda)


@dataclass(frozen=True)
class RowsConfig:
    block: int  # consecutive elements of a row per program (power of two)
    num_warps: int
    fast_sin: bool


@functools.lru_cache(maxsize=4096)
def choose_rows_config(row_numel: int, elem_bytes: int, num_batch: int = 1, is_cuda: bool = True,
                       num_sms: int = DEFAULT_NUM_SMS) -> RowsConfig:
    """Program size for the flat-row kernel: BYTES_PER_PROGRAM of x per program, halved (down to
    MIN_ELEMS_PER_PROGRAM) while the grid would give fewer than PROGRAMS_PER_SM programs per SM,
    and BYTES_PER_THREAD per thread (two 16-byte vectors)."""
    if min(row_numel, elem_bytes, num_batch) < 1:
        raise ValueError(f"choose_rows_config needs positive sizes, got row_numel={row_numel} "
                         f"elem_bytes={elem_bytes} B={num_batch}")
    block = BYTES_PER_PROGRAM // elem_bytes
    while block > MIN_ELEMS_PER_PROGRAM and num_batch * row_numel < PROGRAMS_PER_SM * num_sms * block:
        block //= 2
    num_warps = max(1, min(MAX_NUM_WARPS, next_pow2(block * elem_bytes // (32 * BYTES_PER_THREAD))))
    return RowsConfig(block=block, num_warps=num_warps, fast_sin=is_cuda)
