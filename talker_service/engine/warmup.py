"""Warm-up before SERVING: run every shape serving can use once, through the serving call path.

Capture already runs each captured shape (its warm-up runs compile the Triton kernels, pick the
cuBLAS algorithms, load lazily loaded CUDA modules); what serving can still meet for the first
time is the eager remainder: decode buckets above graph_max_batch, prefill shapes without a graph,
everything when graphs are off. Running each shape here, on padding rows of the scratch slot
that no request owns, makes the first request as fast as the hundredth.

The shapes come from `serving_shapes`, which reads the same buckets the runner serves with
(EngineConfig.buckets, PrefillShapes.all()); what actually ran is read back from the runner's
graph statistics, so a test can check that serving never meets a shape the warm-up missed.
Unpadded runners (CPU without graphs) have no fixed shapes and nothing to warm.
Every function takes the ModelRunner (untyped here: runner.py imports this module, and a type-only
import back would be an import circle).
"""
from __future__ import annotations

import logging
import time
import torch

logger = logging.getLogger(__name__)


def serving_shapes(runner) -> set[tuple]:
    """("decode", batch bucket) and ("prefill", kind, prompts, positions) that serving can run."""
    if not runner.is_padding:
        return set()
    return {("decode", b) for b in runner.buckets} | {("prefill", *s) for s in runner.prefill_shapes.all()}


def shapes_run(runner) -> set[tuple]:
    """The shapes the runner ran since its counters were last reset."""
    stats = runner.graph_stats
    return {("decode", b) for b in stats.shape_histogram} | {("prefill", *s) for s in stats.prefill_shape_histogram}


@torch.no_grad()
def warm_up(runner) -> set[tuple]:
    """Run every serving shape once; -> the shapes that ran. The counters start from zero after."""
    if not runner.is_padding:
        logger.info("talker warm-up skipped: unpadded shapes follow the requests")
        return set()
    started_s = time.perf_counter()
    scratch, pad = runner.scratch_slot, runner.vocab.tts_pad_id
    for bucket in runner.buckets:
        runner.decode([scratch] * bucket, [0] * bucket, [0] * bucket, [pad] * bucket)
    for shape in runner.prefill_shapes.all():
        runner.prefiller.run_padding(shape).cpu()
    # prompt embedding (build_prefill) is eager at the prompt's own length: warm its GEMMs per bucket
    for length in runner.prefill_shapes.length_buckets:
        ids = torch.zeros(length, dtype=torch.long, device=runner.model.device)
        runner.model.embed_text(ids)
        runner.model.embed_codec(ids)
    if runner.model.device.type == "cuda":
        torch.cuda.synchronize(runner.model.device)
    warmed = shapes_run(runner)
    stats = runner.graph_stats
    stats.reset_counters()
    stats.warm_up_s = time.perf_counter() - started_s
    stats.num_warm_up_shapes = len(warmed)
    logger.info("talker warm-up: %d shapes in %.2f s", len(warmed), stats.warm_up_s)
    return warmed
