"""Does an explicit cuBLASLt algorithm beat cuBLAS's own pick at the decode GEMM shapes?

For each (M, N, K) of the 1.7B talker and code predictor this times, each as a CUDA graph of one
call per weight copy (enough copies that the weights stream from HBM, as they do in the frame step),
CUDA events, median us per call:
  - torch:  F.linear / addmm_ (beta = 1, the residual add) as the step runs them;
  - every algorithm of cuBLASLt's heuristic list (kernels/cublaslt.py), and each with split-K factors
    2..8 where the library accepts them;
and checks every candidate's output against torch's (max abs difference, bf16 noise).

  python benchmarks/probe_cublaslt_algos.py --out cublaslt-algos.json [--batches 64,128,256]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit  # noqa: E402
from kernels import cublaslt, gemm_tuning  # noqa: E402

# (name, N, K, residual add) at 1.7B: talker hidden 2048 / intermediate 6144, predictor 1024 / 3072
SHAPES = (("predictor.qkv", 4096, 1024, False), ("predictor.o", 1024, 2048, True),
          ("predictor.gate_up", 6144, 1024, False), ("predictor.down", 1024, 3072, True),
          ("predictor.lm_head", 2048, 1024, False),
          ("talker.qkv", 4096, 2048, False), ("talker.o", 2048, 2048, True),
          ("talker.gate_up", 12288, 2048, False), ("talker.down", 2048, 6144, True))
SPLITS = (2, 3, 4, 6, 8)
STREAM_BYTES = 160 * 2**20  # weight copies per shape: more than the L2 holds


def graph_us(calls, iters: int = 25) -> float:
    """Median us per call of the callables in `calls`, all captured in one graph (the tuner's own timing)."""
    return gemm_tuning.replay_us(gemm_tuning.capture_calls(calls), len(calls), iters)


def probe_shape(name: str, m: int, n: int, k: int, residual: bool, gen: torch.Generator) -> dict:
    copies = max(4, min(64, STREAM_BYTES // (n * k * 2)))
    x = torch.randn(m, k, generator=gen).bfloat16().cuda()
    weights = [(torch.randn(n, k, generator=gen) * k ** -0.5).bfloat16().cuda() for _ in range(copies)]
    base = (torch.randn(m, n, generator=gen) * 0.1).bfloat16().cuda()
    outs = [base.clone() for _ in range(copies)]
    want = (base.float() if residual else 0) + x.float() @ weights[0].float().t()

    if residual:
        torch_calls = [lambda o=o, w=w: o.addmm_(x, w.t()) for o, w in zip(outs, weights)]
    else:
        torch_calls = [lambda o=o, w=w: torch.mm(x, w.t(), out=o) for o, w in zip(outs, weights)]
    entry = {"shape": name, "m": m, "n": n, "k": k, "residual": residual, "copies": copies,
             "gflop": 2 * m * n * k / 1e9, "torch_us": graph_us(torch_calls)}

    plan = cublaslt.MatmulPlan(m, n, k, torch.bfloat16, accumulate=residual)
    heuristic = plan.candidates(64)
    candidates = []
    for rank, algo in enumerate(heuristic):
        candidates.append((rank, 1, algo))
        config = cublaslt.algo_config(algo)
        for splits in SPLITS:
            if config.get("splitk", 1) == splits:
                continue
            variant = plan.with_splitk(algo, splits)
            if variant is not None:
                candidates.append((rank, splits, variant))
    results = []
    for rank, splits, algo in candidates:
        check = base.clone()
        try:
            plan.run(algo, x, weights[0], check)
            torch.cuda.synchronize()
        except (cublaslt.CublasLtError, RuntimeError) as exc:
            results.append({"rank": rank, "splitk_set": splits, "error": str(exc)})
            continue
        err = (check.float() - want).abs().max().item()
        scale = want.abs().max().item()
        for o in outs:
            o.copy_(base)
        us = graph_us([lambda o=o, w=w, a=algo: plan.run(a, x, w, o) for o, w in zip(outs, weights)])
        results.append({"rank": rank, "splitk_set": splits, "us": us, "max_err": err, "ref_scale": scale,
                        **cublaslt.algo_config(algo)})
    good = [r for r in results if "us" in r and r["max_err"] <= 0.02 * max(1.0, r["ref_scale"])]
    good.sort(key=lambda r: r["us"])
    entry["heuristic_count"] = len(heuristic)
    entry["candidates"] = len(candidates)
    entry["heuristic_first_us"] = next((r["us"] for r in results if r.get("rank") == 0 and r["splitk_set"] == 1
                                        and "us" in r), None)
    entry["best_us"] = good[0]["us"] if good else None
    entry["best"] = good[0] if good else None
    entry["top"] = good[:6]
    entry["rejected"] = [r for r in results if r not in good][:8]
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="256,128,64")
    parser.add_argument("--shapes", default="", help="comma-separated names (default all)")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    wanted = set(filter(None, args.shapes.split(",")))
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": git_commit(),
              "results": []}
    for m in [int(b) for b in args.batches.split(",")]:
        for name, n, k, residual in SHAPES:
            if wanted and name not in wanted:
                continue
            t0 = time.time()
            entry = probe_shape(name, m, n, k, residual, gen)
            report["results"].append(entry)
            best = entry["best"] or {}
            print(f"M={m:4d} {name:18s} torch {entry['torch_us']:7.2f} us  lt-first "
                  f"{entry['heuristic_first_us'] or float('nan'):7.2f}  best {entry['best_us'] or float('nan'):7.2f} "
                  f"(rank {best.get('rank')}, split {best.get('splitk')}, tile {best.get('tile')}, "
                  f"stages {best.get('stages')}, cluster {best.get('cluster')}) of {entry['candidates']} "
                  f"[{time.time() - t0:.1f} s]", flush=True)
            Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
