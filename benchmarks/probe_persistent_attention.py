"""Does the talker's slot attention lose its tail to block scheduling? A persistent variant against
the one-program-per-(row, kv head) kernel (kernels/slot_attention_triton.py) at batch 256.

Nsight Compute on the batch-256 launch (random lengths up to 256) shows the SMs idle ~14% of the
kernel (SM active cycles 71.7k of 83.2k) while DRAM runs at ~87% of peak whenever they are busy. This
times, each as a CUDA graph of CALLS calls, median us per call:
  - base:        the kernel as the step runs it (grid B x KV, 5.2 waves of 3 programs per SM);
  - persistent:  grid = PROGRAMS_PER_SM x SMs programs, each looping over (row, kv head) items
                 item = p, p + G, ... (natural order: row fastest);
  - sorted:      the same over items sorted longest row first (an argsort of the lengths, as one
                 launch per step would give it), so the last items to start are the shortest;
  - queue:       items claimed from an atomic counter, longest first (greedy LPT);
and checks each output against base (max abs difference, bf16).

  python benchmarks/probe_persistent_attention.py --out persistent-attention.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decode_kernels import graph_ms  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402
from kernels.bf16_bits import from_f32  # noqa: E402
from kernels.slot_attention_triton import _LOG2E, attend_keys, slot_decode_attention_triton  # noqa: E402


@triton.jit
def _persistent_attn_kernel(q_ptr, k_ptr, v_ptr, slots_ptr, lengths_ptr, order_ptr, counter_ptr, out_ptr,
                            qk_scale, num_positions, num_items, num_rows,
                            stride_qb, stride_qh, stride_ks, stride_kh, stride_kp, stride_vs, stride_vh, stride_vp,
                            GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr,
                            BLOCK_N: tl.constexpr, ORDERED: tl.constexpr, QUEUE: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    num_kv = num_items // num_rows
    num_heads = num_kv * GROUP
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM)
    head_ok = offs_h < GROUP
    if QUEUE:
        i = tl.atomic_add(counter_ptr, 1)
    else:
        i = pid
    while i < num_items:
        if ORDERED:
            item = tl.load(order_ptr + i)
        else:
            item = i
        row = item % num_rows
        kv_head = item // num_rows
        slot = tl.load(slots_ptr + row).to(tl.int64)
        length = tl.maximum(tl.minimum(tl.load(lengths_ptr + row).to(tl.int32), num_positions), 0)
        heads = kv_head * GROUP + offs_h
        q = tl.load(q_ptr + row.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=head_ok[:, None], other=0.0)
        acc, m_i, l_i = attend_keys(q, k_ptr + slot * stride_ks + kv_head * stride_kh,
                                    v_ptr + slot * stride_vs + kv_head * stride_vh, stride_kp, stride_vp,
                                    0, length, qk_scale, BLOCK_H, BLOCK_N, HEAD_DIM, False)
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        out_offs = (row.to(tl.int64) * num_heads + heads)[:, None] * HEAD_DIM + offs_d[None, :]
        tl.store(out_ptr + out_offs, from_f32(out, out_ptr.dtype.element_ty), mask=head_ok[:, None])
        if QUEUE:
            i = tl.atomic_add(counter_ptr, 1)
        else:
            i += num_programs


def persistent(q, k, v, slots, lengths, order, counter, programs: int, ordered: bool, queue: bool,
               block_n: int = 64, warps: int = 4, stages: int = 3):
    batch, heads, dim = q.shape
    kv = k.shape[1]
    out = torch.empty_like(q)
    if queue:
        counter.zero_()
    _persistent_attn_kernel[(programs,)](
        q, k, v, slots, lengths, order, counter, out, 0.088 * _LOG2E, k.shape[2], batch * kv, batch,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        GROUP=heads // kv, HEAD_DIM=dim, BLOCK_H=max(16, triton.next_power_of_2(heads // kv)), BLOCK_N=block_n,
        ORDERED=ordered, QUEUE=queue, num_warps=warps, num_stages=stages)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--positions", default="256,1024")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    batch, heads, kv = 256, 16, 8
    report = {"benchmark": "persistent_attention", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "sms": sms, "cases": []}
    for positions in (int(p) for p in args.positions.split(",")):
        q = torch.randn(batch, heads, 128, generator=gen).bfloat16().cuda()
        k = torch.randn(batch + 1, kv, positions, 128, generator=gen).bfloat16().cuda()
        v = torch.randn(batch + 1, kv, positions, 128, generator=gen).bfloat16().cuda()
        slots = torch.arange(batch).cuda()
        for spread in ("random", "linear"):
            if spread == "random":
                lengths = torch.randint(1, positions + 1, (batch,), generator=gen).cuda()
            else:   # bench_talker's rows: spread evenly below the context
                lengths = torch.linspace(1, positions, batch).long().cuda()
            items_len = lengths.repeat(kv)                      # item = head * B + row
            order = torch.argsort(items_len, descending=True, stable=True).to(torch.int32)
            counter = torch.zeros(1, dtype=torch.int32, device="cuda")
            want = slot_decode_attention_triton(q, k, v, slots, lengths, 0.088)
            entry = {"positions": positions, "spread": spread,
                     "base_us": 1e3 * graph_ms(lambda: slot_decode_attention_triton(q, k, v, slots, lengths, 0.088))}
            for per_sm in (2, 3, 4):
                for name, ordered, queue in (("persistent", False, False), ("sorted", True, False),
                                             ("queue", True, True)):
                    programs = per_sm * sms

                    def call():
                        return persistent(q, k, v, slots, lengths, order, counter, programs, ordered, queue)

                    try:
                        got = call()
                        torch.cuda.synchronize()
                        err = (got.float() - want.float()).abs().max().item()
                        entry[f"{name}{per_sm}_us"] = 1e3 * graph_ms(call)
                        entry[f"{name}{per_sm}_err"] = err
                    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a finding
                        entry[f"{name}{per_sm}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            report["cases"].append(entry)
            print(json.dumps(entry), flush=True)
            Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
