"""One talker-shaped slot attention launch (batch 256, 8 kv heads, 256 positions, random lengths),
for a profiler to look at: `ncu --set full python benchmarks/probe_slot_attention.py`."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.slot_attention_triton import slot_decode_attention_triton  # noqa: E402


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    batch, heads, kv, positions = 256, 16, 8, int(sys.argv[1]) if len(sys.argv) > 1 else 256
    q = torch.randn(batch, heads, 128, generator=gen).bfloat16().cuda()
    k = torch.randn(batch + 1, kv, positions, 128, generator=gen).bfloat16().cuda()
    v = torch.randn(batch + 1, kv, positions, 128, generator=gen).bfloat16().cuda()
    slots = torch.arange(batch).cuda()
    lengths = torch.randint(1, positions + 1, (batch,), generator=gen).cuda()
    for _ in range(3):
        slot_decode_attention_triton(q, k, v, slots, lengths, 0.088)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
