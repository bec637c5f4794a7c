"""Two pieces of the talker's frame step, alone, at batch 1 / 64 / 256:

1. sampling (16 per frame): the one-launch whole-row kernel (kernels/sample_rows_triton.py) against
   the sort path it replaces (float copy, argmax, topk-64 or full sort, warp_pick), on the code
   predictor's 2048 tokens and codebook 0's 3072;
2. slot decode attention (kernels/slot_attention_triton.py): the code predictor's 16-position
   cache (75 calls per frame) and the talker's cache with rows spread below 256 / 1024 positions
   (28 calls), over a sweep of (BLOCK_N, num_warps) against the default choice, then of the
   pipeline depth (num_stages) at the best and the default choice (at every sweep point for the
   predictor's one-tile cache, where the depth sets the shared memory a program holds).

Each case is a CUDA graph of CALLS calls (launch gaps as in the step), timed by CUDA events,
median ms per call. Kernel outputs are checked against the references; exits non-zero on a mismatch.

  python benchmarks/bench_decode_kernels.py --out decode-kernels.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit  # noqa: E402
from kernels import gemm_tuning, hash_noise as noise  # noqa: E402
from kernels.sample_rows_reference import sample_rows_reference  # noqa: E402
from kernels.sample_rows_triton import sample_rows_triton  # noqa: E402
from kernels.slot_attention_reference import slot_decode_attention_reference  # noqa: E402
from kernels.slot_attention_triton import choose_block, slot_decode_attention_triton  # noqa: E402
from kernels.warp_pick import warp_pick  # noqa: E402
from talker_service.model.sampling import _sorted_candidates  # noqa: E402

CALLS = 16
BATCHES = (1, 64, 256)
SAMPLING_WARPS = (1, 2, 4, 8, 16)
ATTN_SWEEP = [(16, 1), (16, 2), (16, 4), (32, 2), (32, 4), (64, 2), (64, 4), (64, 8), (128, 4), (128, 8)]
# K/V load pipeline depths tried at the sweep's best and the default (BLOCK_N, warps), and at every sweep
# point for the predictor's cache; None: the launcher's default (Triton's, or 2 for a one-tile cache)
ATTN_STAGES = (None, 1, 2, 3, 4, 5)


def graph_ms(fn, warmup: int = 3, iters: int = 30, calls: int = CALLS) -> float:
    """Median ms per call of fn, `calls` calls captured in one graph (the GEMM tuner's timing,
    kernels/gemm_tuning.py, after `warmup` eager calls)."""
    for _ in range(warmup):
        fn()
    return gemm_tuning.replay_us(gemm_tuning.capture_calls([fn] * calls), calls, iters) / 1e3


def sampling_rows(batch: int, vocab: int, dtype: torch.dtype, gen: torch.Generator):
    logits = (torch.randn(batch, vocab, generator=gen) * 3.0).to(dtype).cuda()
    temperature = torch.full((batch,), 0.9).cuda()
    top_k = torch.full((batch,), 50, dtype=torch.int64).cuda()
    top_p = torch.ones(batch).cuda()
    do_sample = torch.ones(batch, dtype=torch.bool).cuda()
    seeds = torch.randint(0, 2**62, (batch,), generator=gen)
    keys = noise.row_keys(seeds, torch.zeros(batch, dtype=torch.int64), 1).cuda()
    return logits, temperature, top_k, top_p, do_sample, keys


def sort_path(logits, temperature, top_k, top_p, do_sample, keys, candidate_k):
    """choose_tokens_keyed's path without the kernel: float copy, argmax, sort/topk, warp_pick."""
    x = logits.float()
    greedy = x.argmax(dim=-1)
    values, ids = _sorted_candidates(x, candidate_k)
    return warp_pick(values, ids, temperature, top_k, top_p, do_sample, greedy, x.shape[-1], keys)


def bench_sampling(gen) -> list[dict]:
    rows = []
    for vocab, dtype in ((2048, torch.bfloat16), (3072, torch.float32)):
        for batch in BATCHES:
            args = sampling_rows(batch, vocab, dtype, gen)
            for top_p in (1.0, 0.9):
                args[3].fill_(top_p)
                got = sample_rows_triton(*args)
                want = sample_rows_reference(*args)
                mismatches = int((got != want).sum())
                entry = {"vocab": vocab, "dtype": str(dtype), "batch": batch, "top_p": top_p,
                         "fused_ms": graph_ms(lambda: sample_rows_triton(*args)),
                         "fused_ms_by_warps": {w: graph_ms(lambda: sample_rows_triton(*args, num_warps=w))
                                               for w in SAMPLING_WARPS},
                         "topk64_path_ms": graph_ms(lambda: sort_path(*args, 64)),
                         "full_sort_path_ms": graph_ms(lambda: sort_path(*args, None)),
                         "mismatches_vs_reference": mismatches}
                rows.append(entry)
                for w in SAMPLING_WARPS:
                    if int((sample_rows_triton(*args, num_warps=w) != want).sum()):
                        raise SystemExit(f"sample_rows with {w} warps differs from the reference (V={vocab} bs={batch})")
                by_warps = " ".join(f"{w}w {t * 1e3:.1f}" for w, t in entry["fused_ms_by_warps"].items())
                print(f"sampling V={vocab} bs={batch} top_p={top_p}: fused {entry['fused_ms'] * 1e3:.1f} us "
                      f"(by warps, us: {by_warps}), "
                      f"topk-64 path {entry['topk64_path_ms'] * 1e3:.1f} us, full sort path "
                      f"{entry['full_sort_path_ms'] * 1e3:.1f} us, mismatches {mismatches}", flush=True)
    return rows


def bench_attention(gen) -> list[dict]:
    rows = []
    # (name, heads, kv heads, cache positions, longest row length): predictor 16 / 8 heads, talker 16 / 8
    for name, heads, kv, positions, longest in (("predictor", 16, 8, 16, 16), ("talker256", 16, 8, 256, 256),
                                                ("talker1024", 16, 8, 1024, 1024)):
        for batch in BATCHES:
            q = torch.randn(batch, heads, 128, generator=gen).bfloat16().cuda()
            k = torch.randn(batch + 1, kv, positions, 128, generator=gen).bfloat16().cuda()
            v = torch.randn(batch + 1, kv, positions, 128, generator=gen).bfloat16().cuda()
            slots = torch.arange(batch).cuda()
            lengths = (torch.randint(1, longest + 1, (batch,), generator=gen) if name != "predictor"
                       else torch.full((batch,), 8)).cuda()
            want = slot_decode_attention_reference(q, k, v, slots, lengths, 0.088).float()
            default_block, default_warps = choose_block(128, torch.bfloat16)
            default_block = min(default_block, max(16, 1 << (positions - 1).bit_length()))
            entry = {"case": name, "batch": batch, "default": [default_block, default_warps], "sweep": {}}
            for block_n, warps in ATTN_SWEEP:
                if block_n > max(16, positions):
                    continue
                run = lambda: slot_decode_attention_triton(q, k, v, slots, lengths, 0.088, block_n=block_n,  # noqa: E731
                                                          num_warps=warps)
                err = float((run().float() - want).abs().max())
                if err > 2e-2:
                    raise SystemExit(f"slot attention {name} bs={batch} {block_n}x{warps}: max error {err}")
                entry["sweep"][f"{block_n}x{warps}"] = graph_ms(run)
            best = min(entry["sweep"], key=entry["sweep"].get)
            entry["best"] = best
            # the pipeline depth: how many K/V tiles a program has in flight (long caches), and how much
            # shared memory it holds, so how many programs share an SM (the predictor's one-tile cache)
            entry["stages"] = {}
            configs = {best, f"{default_block}x{default_warps}"} | (set(entry["sweep"]) if positions <= 16 else set())
            for config in sorted(configs):
                block_n, warps = (int(x) for x in config.split("x"))
                for stages in ATTN_STAGES:
                    run = lambda: slot_decode_attention_triton(q, k, v, slots, lengths, 0.088, block_n=block_n,  # noqa: E731
                                                              num_warps=warps, num_stages=stages)
                    try:
                        err = float((run().float() - want).abs().max())
                    except Exception as exc:  # noqa: BLE001 (deep pipelines of big tiles run out of shared memory)
                        print(f"attention {name} bs={batch} {config} stages {stages}: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:120]}", flush=True)
                        continue
                    if err > 2e-2:
                        raise SystemExit(f"slot attention {name} bs={batch} {config} stages {stages}: max error {err}")
                    entry["stages"][f"{config}s{stages or 'd'}"] = graph_ms(run)
            print(f"attention {name} bs={batch} by stages: "
                  f"{json.dumps({a: round(b * 1e3, 1) for a, b in entry['stages'].items()})}", flush=True)
            print(f"attention {name} bs={batch}: default {default_block}x{default_warps} "
                  f"{entry['sweep'].get(f'{default_block}x{default_warps}', float('nan')) * 1e3:.1f} us, best {best} "
                  f"{entry['sweep'][best] * 1e3:.1f} us  {json.dumps({a: round(b * 1e3, 1) for a, b in entry['sweep'].items()})}",
                  flush=True)
            rows.append(entry)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", choices=("sampling", "attention"), default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(0)
    result = {"benchmark": "decode_kernels", "device": torch.cuda.get_device_name(), "commit": git_commit(),
              "calls_per_graph": CALLS,
              "sampling": bench_sampling(gen) if args.only != "attention" else [],
              "attention": bench_attention(gen) if args.only != "sampling" else []}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
