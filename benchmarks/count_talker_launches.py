"""Kernel launches per talker frame, counted on the CPU: the decode step's launch count at 1.7B depth.

At small batches the talker's frame step (one CUDA graph: 28 talker layers, 15 code-predictor
passes of 5 layers, 16 samplings) is bound by how many kernels it launches, not by FLOPs or bytes:
on the H200 one graph replay at batch 1 took 19.6 ms for ~8000 launches, about 2.5 us each. The
number of launches does not need a GPU to be known: the step runs here on the `meta` device (shapes
only, no memory, no math) under a dispatch-mode counter that sees every ATen op the step issues.
Ops that only make views or read metadata launch nothing and are listed apart; a custom op (our
Triton kernels) counts as one launch, as it is on the GPU. Attention is the one place where the
meta device and CUDA part ways: off CUDA, SDPA runs as its math decomposition (casts, two bmm,
softmax: ~11 ops), on CUDA as one fused kernel (memory-efficient backend; flash refuses masks).
So each SDPA call is counted once, as `sdpa`, and its decomposition is not counted.

    python benchmarks/count_talker_launches.py [--size 1b7] [--batch 1] [--candidate-k 64] [--out f.json]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from checkpoint.configs import model_config  # noqa: E402
from talker_service.model import FrameDecoder, SamplingParams, SlotSamplingTable, TalkerConfig  # noqa: E402
from talker_service.model.talker import build_empty  # noqa: E402

# ATen ops that return views or metadata: no kernel runs for them.
NO_LAUNCH = frozenset({
    "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.unsqueeze", "aten.squeeze", "aten.expand",
    "aten.slice", "aten.select", "aten.permute", "aten.as_strided", "aten.alias", "aten.detach", "aten.split",
    "aten.split_with_sizes", "aten.unbind", "aten.chunk", "aten._reshape_alias", "aten.lift_fresh", "aten.empty",
    "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided", "aten.unfold",
    "aten.diagonal", "aten.narrow", "aten.view_as_real", "aten.view_as_complex", "aten.sym_size", "aten.sym_stride",
    "aten.is_same_size", "aten._local_scalar_dense", "aten.flatten", "aten.reshape",
})
EOS_ID = 2150


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused:
            self.counts[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


class FusedAttentionCounter(TorchFunctionMode):
    """Counts each scaled_dot_product_attention call as one launch and hides its decomposition."""

    def __init__(self, ops: OpCounter):
        super().__init__()
        self.ops = ops

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is not F.scaled_dot_product_attention:
            return func(*args, **(kwargs or {}))
        self.ops.counts["sdpa"] += 1
        self.ops.paused = True
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.ops.paused = False


def build(size: str, batch: int, context_len: int, candidate_k: int | None) -> tuple[FrameDecoder, dict]:
    config = TalkerConfig.from_dict(model_config("custom_voice", size)["talker_config"])
    device = torch.device("meta")
    model = build_empty(config, device, torch.bfloat16)
    model.init_runtime(max_slots=batch + 1, max_seq_len=context_len)
    table = SlotSamplingTable(batch + 1, config.vocab_size, device)
    for slot in range(batch):
        table.assign(slot, SamplingParams(seed=slot, min_new_tokens=2**40))
    decoder = FrameDecoder(model, table, EOS_ID, candidate_k=candidate_k)
    inputs = dict(input_embeds=torch.empty(batch, config.hidden_size, device=device, dtype=torch.bfloat16),
                  slots=torch.arange(batch, device=device), positions=torch.full((batch,), 40, device=device),
                  steps=torch.zeros(batch, dtype=torch.int64, device=device))
    return decoder, inputs


def count(size: str = "1b7", batch: int = 1, context_len: int = 256, candidate_k: int | None = 64) -> dict:
    decoder, inputs = build(size, batch, context_len, candidate_k)
    counter = OpCounter()
    with torch.no_grad(), counter, FusedAttentionCounter(counter):
        decoder.decode(**inputs)
    launching = {op: n for op, n in counter.counts.items() if op not in NO_LAUNCH}
    return {"size": size, "batch": batch, "context_len": context_len, "candidate_k": candidate_k,
            "launches_per_frame": sum(launching.values()), "view_ops_per_frame": sum(counter.counts.values())
            - sum(launching.values()), "by_op": dict(sorted(launching.items(), key=lambda kv: -kv[1]))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="1b7", choices=["1b7", "0b6"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context-len", type=int, default=256)
    p.add_argument("--candidate-k", type=int, default=64, help="0 = full sort (exact for any top_k)")
    p.add_argument("--out", help="write the JSON report here")
    args = p.parse_args()
    report = count(args.size, args.batch, args.context_len, args.candidate_k or None)
    print(f"{args.size} batch {args.batch}: {report['launches_per_frame']} launching ops per frame "
          f"(+{report['view_ops_per_frame']} view/metadata ops)")
    for op, n in list(report["by_op"].items())[:20]:
        print(f"  {n:6d}  {op}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
