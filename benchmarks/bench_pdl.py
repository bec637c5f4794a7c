"""What programmatic dependent launch (PDL) saves at a kernel boundary inside a CUDA graph.

The talker's frame step is ~1000 dependent kernels, most of them a few us long, so the time between
one kernel's last block and the next kernel's first one counts. A Triton kernel launched with
`launch_pdl=True` may be scheduled before the kernel ahead of it in the stream has finished; it
must then wait (`gdc_wait`, griddepcontrol.wait) before it reads that kernel's output. This times
chains of dependent launches captured as one graph, each case with and without PDL:

  - triton:  CHAIN small Triton kernels, each reading the previous one's output ([rows, 1024] bf16);
  - mm+triton: a cuBLAS GEMM ([rows, 1024] x [1024, 1024]) then a Triton kernel, CHAIN/2 times
    (only the Triton kernels can be PDL launches: torch launches cuBLAS);
  - trigger: as triton, and each kernel also calls gdc_launch_dependents right after its wait, so
    the next one is launched while this one still runs.

Median us per kernel boundary, CUDA events, rows 1 and 256.

  python benchmarks/bench_pdl.py --out pdl.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decode_kernels import graph_ms  # noqa: E402
from benchmarks.commit import git_commit  # noqa: E402

CHAIN = 200
WIDTH = 1024


@triton.jit
def _scale_add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, WAIT: tl.constexpr, TRIGGER: tl.constexpr):
    if WAIT:
        gdc_wait()
    if TRIGGER:
        gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok).to(tl.float32)
    tl.store(y_ptr + offs, (x * 0.5 + 1.0).to(y_ptr.dtype.element_ty), mask=ok)


def scale_add(x: torch.Tensor, y: torch.Tensor, pdl: bool, trigger: bool) -> None:
    n = x.numel()
    block = 1024
    _scale_add_kernel[(triton.cdiv(n, block),)](x, y, n, BLOCK=block, WAIT=pdl, TRIGGER=trigger, num_warps=4,
                                                 launch_pdl=pdl)


def graph_us_per_launch(fn, launches: int) -> float:
    """fn (a chain of `launches` dependent launches) captured once; median us per launch."""
    return 1e3 * graph_ms(fn, calls=1) / launches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    report = {"benchmark": "pdl", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "triton": triton.__version__, "chain": CHAIN, "cases": []}
    for rows in (1, 256):
        a = torch.randn(rows, WIDTH, device="cuda").bfloat16()
        b = torch.empty_like(a)
        w = (torch.randn(WIDTH, WIDTH, device="cuda") * WIDTH ** -0.5).bfloat16()

        def triton_chain(pdl: bool, trigger: bool = False):
            def run():
                for _ in range(CHAIN // 2):
                    scale_add(a, b, pdl, trigger)
                    scale_add(b, a, pdl, trigger)
            return run

        def mm_chain(pdl: bool):
            def run():
                for _ in range(CHAIN // 2):
                    torch.mm(a, w, out=b)
                    scale_add(b, a, pdl, False)
            return run

        for case, fn in (("triton", triton_chain(False)), ("triton_pdl", triton_chain(True)),
                         ("trigger_pdl", triton_chain(True, True)), ("mm+triton", mm_chain(False)),
                         ("mm+triton_pdl", mm_chain(True))):
            try:
                us = graph_us_per_launch(fn, CHAIN)
            except Exception as exc:  # noqa: BLE001 - record and go on (an old driver or Triton)
                report["cases"].append({"rows": rows, "case": case, "error": repr(exc)[:300]})
                print(f"rows {rows} {case}: {exc!r}"[:300], flush=True)
                continue
            report["cases"].append({"rows": rows, "case": case, "us_per_launch": us})
            print(f"rows {rows} {case}: {us:.2f} us per launch", flush=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
