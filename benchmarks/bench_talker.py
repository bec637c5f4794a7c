"""Talker frame-step benchmark: ms per frame (talker step + c0 sampling + 15-step code predictor
+ next-input embedding) at 1.7B shapes with random bf16 weights built on the GPU, EOS suppressed.

Paths: eager (batch 1), the whole step captured as one CUDA graph (batch sweep, rows spread over
positions up to each --context-lens value; attention reads each row's own length) timed two ways,
"graph" (each replay waited for: its latency, the host's graph launch included) and "graph_queued"
(QUEUE_DEPTH replays back to back per sample: the engine's steady state, which queues the next step
before it reads this one, so frames/s there is what the service can sustain), optionally
torch.compile'd then captured (--compile). Also a 40-token prefill.

    python benchmarks/bench_talker.py --out benchmarks/results/talker_h200.json
    python benchmarks/bench_talker.py --smoke          # tiny config on CPU, checks the script runs
    python benchmarks/bench_talker.py --path runner --context-lens 256,1024,2048 --out ...
        # the service path: ModelRunner.decode with its own graph table, one graph per batch
        # bucket (capture code in talker_service/engine/graphs.py, shared with the raw graph path)
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit as read_commit  # noqa: E402
from benchmarks.device_name import device_name  # noqa: E402

from checkpoint.configs import model_config  # noqa: E402
from talker_service.model import FrameDecoder, SamplingParams, SlotSamplingTable, TalkerConfig  # noqa: E402
from talker_service.engine import EngineConfig, ModelRunner  # noqa: E402
from talker_service.engine.graphs import capture_graph, captures_with_pdl  # noqa: E402
from talker_service.engine.prefiller import PrefillChunk  # noqa: E402
from talker_service.model.talker import build_empty  # noqa: E402
from talker_service.prompt import PromptVocab  # noqa: E402

logger = logging.getLogger("bench_talker")
EOS = 2150
QUEUE_DEPTH = 8   # graph replays queued per sample in the "graph_queued" path (time_calls depth)


def random_model(config: TalkerConfig, device, dtype, max_slots: int, max_seq_len: int):
    model = build_empty(config, device, dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=gen)
    model.init_runtime(max_slots=max_slots, max_seq_len=max_seq_len)
    return model


def build_random(config: TalkerConfig, device, dtype, max_slots: int, max_seq_len: int, candidate_k: int | None):
    model = random_model(config, device, dtype, max_slots, max_seq_len)
    table = SlotSamplingTable(max_slots, config.vocab_size, device)
    for slot in range(max_slots):  # official defaults; min_new_tokens huge keeps EOS masked
        table.assign(slot, SamplingParams(seed=slot, min_new_tokens=2**40))
    return FrameDecoder(model, table, EOS, candidate_k=candidate_k)


class FrameStep:
    """Static tensors + one frame step for `batch` rows at different positions below `context_len`."""

    def __init__(self, decoder: FrameDecoder, batch: int, context_len: int, prompt_len: int):
        model = decoder.model
        device, hidden = model.device, model.config.hidden_size
        self.decoder = decoder
        self.slots = torch.arange(batch, device=device)
        spread = max(1, context_len - prompt_len - 1)
        self.positions = prompt_len + (torch.arange(batch, device=device) * 7) % spread
        self.steps = torch.zeros(batch, dtype=torch.long, device=device)
        self.embeds = torch.randn(batch, hidden, device=device, dtype=model.dtype)
        self.pad_text = torch.randn(hidden, device=device, dtype=model.dtype)
        self.codes = torch.zeros(batch, 16, dtype=torch.long, device=device)
        self.decode = decoder.decode

    def __call__(self):
        frame = self.decode(self.embeds, self.slots, self.positions, self.steps)
        self.embeds.copy_(frame.codec_embeds + self.pad_text)
        self.codes.copy_(frame.codes)
        self.steps.add_(1)


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_calls(fn, device, warmup: int, iters: int, depth: int = 1) -> dict:
    """Median/p90 ms per call; CUDA events on GPU (launch-bound eager time included), wall clock on CPU.

    depth > 1 (the "graph_queued" path, QUEUE_DEPTH): that many calls back to back per sample, the
    talker engine's steady state, which queues step N+1 before it reads step N (async_decode), so a
    graph's submission overlaps the step ahead of it. With depth 1 every call is waited for, so each
    sample also holds the host's launch of the graph before its first kernel starts."""
    for _ in range(warmup):
        fn()
    sync(device)
    times_ms = []
    cuda = torch.device(device).type == "cuda"
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(depth):
                fn()
            end.record()
            end.synchronize()
            times_ms.append(start.elapsed_time(end) / depth)
        else:
            t0 = time.perf_counter()
            for _ in range(depth):
                fn()
            times_ms.append((time.perf_counter() - t0) * 1e3 / depth)
    times_ms.sort()
    return {"median_ms": statistics.median(times_ms), "p90_ms": times_ms[int(0.9 * (len(times_ms) - 1))],
            "min_ms": times_ms[0], "iters": iters, "calls_per_sample": depth}


def capture(fn, warmup: int, use_pdl: bool = False):
    """fn captured as one CUDA graph with the service's capture code -> its replay (use_pdl: pass
    talker_service.engine.graphs.captures_with_pdl(batch, device) to capture as the service does; its
    GEMMs tuned as the service's decode graphs are, kernels/gemm_tuning.py)."""
    graph, _ = capture_graph(fn, warmup, use_pdl=use_pdl, tune_gemms=True)
    return graph.replay


def bench_compiled(decoder: FrameDecoder, args, context_len: int) -> dict:
    """torch.compile (Inductor, fixed shapes) of the frame step, then one CUDA graph around it.
    Optional and the slowest part to set up: a failure is recorded, not fatal to the report."""
    results: dict = {}
    compiled_decode = torch.compile(decoder.decode, dynamic=False)
    for bs in [int(b) for b in args.compile_batch_sizes.split(",")]:
        step = FrameStep(decoder, bs, context_len, args.prompt_len)
        step.decode = compiled_decode
        try:
            t0 = time.perf_counter()
            step()  # compile outside the capture
            compile_s = time.perf_counter() - t0
            entry = time_calls(capture(step, args.warmup), args.device, args.warmup, args.iters)
        except Exception as exc:  # noqa: BLE001 - keep the eager/graph numbers when Inductor fails
            logger.exception("compiled step failed at bs=%d", bs)
            results[f"error_bs{bs}"] = {"error": repr(exc)[:500]}
            continue
        entry["compile_s"] = compile_s
        results[f"bs{bs}_ctx{context_len}"] = entry
        logger.info("compile+graph bs=%d: %.2f ms (compile %.0f s)", bs, entry["median_ms"], compile_s)
    return results


def bench_runner(raw: dict, config: TalkerConfig, args, device, dtype) -> dict:
    """The service path: ModelRunner.decode (host index rows -> graph lookup -> padded replay ->
    codes back on the host) with the runner's own graph table (one graph per batch bucket), at each
    batch size with rows spread over positions below each context length."""
    batches = [int(b) for b in args.batch_sizes.split(",")]
    contexts = [int(c) for c in args.context_lens.split(",")]
    engine_config = EngineConfig(max_slots=max(batches), max_seq_len=max(contexts), batch_buckets=tuple(batches),
                                 decode_graphs=args.runner_graphs)
    model = random_model(config, device, dtype, engine_config.max_slots + 1, engine_config.max_seq_len)
    vocab = PromptVocab.from_config(raw)
    started = time.perf_counter()
    runner = ModelRunner(model, vocab, engine_config)
    setup_s = time.perf_counter() - started
    for slot in range(engine_config.max_slots):   # official defaults; min_new_tokens huge keeps EOS masked
        runner.assign(slot, SamplingParams(seed=slot, min_new_tokens=2**40))
    results: dict = {}
    for ctx in contexts:
        spread = max(1, ctx - args.prompt_len - 1)
        for bs in batches:
            positions = [args.prompt_len + (i * 7) % spread for i in range(bs)]
            call = lambda: runner.decode(list(range(bs)), positions, [1] * bs, [vocab.tts_pad_id] * bs)  # noqa: E731
            before = runner.graph_stats.num_graph_steps
            entry = time_calls(call, device, args.warmup, args.iters)   # decode syncs: wall time is the step
            entry["graph_hit"] = runner.graph_stats.num_graph_steps - before == args.warmup + args.iters
            results[f"bs{bs}_ctx{ctx}"] = entry
            logger.info("runner bs=%d ctx=%d: %.2f ms (graph %s)", bs, ctx, entry["median_ms"], entry["graph_hit"])
    # prompt prefill + first frame through the runner (its prefill graphs): one prompt, then as
    # many as share a forward; each call syncs (codes come back), so wall time is the call
    hidden = model.config.hidden_size
    for num_prompts in sorted({1, runner.prefill_shapes.max_prompts}):
        prompts = [torch.randn(args.prompt_len, hidden, device=device, dtype=dtype) for _ in range(num_prompts)]
        call = lambda: runner.prefill([PrefillChunk(s, p, 0, True) for s, p in enumerate(prompts)])  # noqa: E731
        before = runner.graph_stats.num_prefill_graph_steps
        entry = time_calls(call, device, args.warmup, args.iters)
        entry["graph_hit"] = runner.graph_stats.num_prefill_graph_steps - before == args.warmup + args.iters
        results[f"prefill_{num_prompts}x{args.prompt_len}"] = entry
        logger.info("runner prefill %d x %d: %.2f ms (graph %s)", num_prompts, args.prompt_len, entry["median_ms"],
                    entry["graph_hit"])
    results["setup"] = {"graph_mode": runner.graph_mode, "capture_or_build_s": setup_s,
                        "kv_cache_bytes": runner.kv_cache_bytes, **runner.graph_stats.summary()}
    return results


def git_commit() -> str:
    return read_commit()


def run(args) -> dict:
    device = args.device
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    size = "tiny" if args.smoke else args.size
    raw = model_config("custom_voice", size)
    config = TalkerConfig.from_dict(raw["talker_config"])
    batches = [int(b) for b in args.batch_sizes.split(",")]
    contexts = [int(c) for c in args.context_lens.split(",")]
    max_slots, max_seq_len = max(batches), max(contexts)
    candidate_k = args.candidate_k or None
    cuda = torch.device(device).type == "cuda"
    results: dict = {"eager": {}, "graph": {}, "graph_queued": {}, "compile_graph": {}, "prefill": {}, "runner": {}}
    w, n = args.warmup, args.iters

    with torch.no_grad():
        if args.path == "runner":
            results["runner"] = bench_runner(raw, config, args, device, dtype)
            return report(args, results, size, max_slots, max_seq_len, candidate_k, cuda)
        started = time.perf_counter()
        decoder = build_random(config, device, dtype, max_slots, max_seq_len, candidate_k)
        logger.info("built %s model on %s in %.1f s", size, device, time.perf_counter() - started)
        prompt = torch.randn(args.prompt_len, config.hidden_size, device=device, dtype=dtype)
        results["prefill"][f"{args.prompt_len}_tokens"] = time_calls(lambda: decoder.model.prefill(prompt, 0), device, w, n)
        step = FrameStep(decoder, 1, contexts[0], args.prompt_len)
        results["eager"][f"bs1_ctx{contexts[0]}"] = time_calls(step, device, w, n)
        if cuda:
            for ctx in contexts:
                for bs in batches:
                    step = FrameStep(decoder, bs, ctx, args.prompt_len)
                    replay = capture(step, w, use_pdl=captures_with_pdl(bs, device))
                    results["graph"][f"bs{bs}_ctx{ctx}"] = time_calls(replay, device, w, n)
                    results["graph_queued"][f"bs{bs}_ctx{ctx}"] = time_calls(replay, device, w, n, QUEUE_DEPTH)
                    logger.info("graph bs=%d ctx=%d: %.2f ms (queued: %.2f ms)", bs, ctx,
                                results["graph"][f"bs{bs}_ctx{ctx}"]["median_ms"],
                                results["graph_queued"][f"bs{bs}_ctx{ctx}"]["median_ms"])
            if args.compile:
                results["compile_graph"] = bench_compiled(decoder, args, contexts[0])
        else:
            logger.warning("no CUDA device: graph and compile paths skipped")
        if args.path == "both":
            del decoder, step
            if cuda:
                torch.cuda.empty_cache()
            results["runner"] = bench_runner(raw, config, args, device, dtype)
    return report(args, results, size, max_slots, max_seq_len, candidate_k, cuda)


def report(args, results: dict, size: str, max_slots: int, max_seq_len: int, candidate_k, cuda: bool) -> dict:
    w, n = args.warmup, args.iters
    for entries in results.values():
        for key, entry in entries.items():
            if key.startswith("bs") and "median_ms" in entry:
                entry["frames_per_s"] = int(key.split("_")[0][2:]) * 1e3 / entry["median_ms"]
    return {
        "benchmark": "talker_frame_step",
        "device": device_name("cuda" if cuda else "cpu"),
        "torch": torch.__version__,
        "commit": git_commit(),
        "config": {"size": size, "dtype": args.dtype, "max_slots": max_slots, "max_seq_len": max_seq_len,
                   "candidate_k": candidate_k, "prompt_len": args.prompt_len, "eos_suppressed": True,
                   "warmup": w, "iters": n, "sampling": "official defaults (do_sample, top_k 50, temp 0.9)"},
        "results": results,
    }


def print_table(report: dict) -> None:
    print(f"device: {report['device']}  torch {report['torch']}  commit {report['commit'][:10]}")
    print(f"{'path':<14} {'case':<18} {'median ms':>10} {'p90 ms':>8} {'frames/s':>10}")
    for path, entries in report["results"].items():
        for case, e in entries.items():
            if "median_ms" not in e:
                print(f"{path:<14} {case:<18} {e}")
                continue
            fps = e.get("frames_per_s", "")
            print(f"{path:<14} {case:<18} {e['median_ms']:>10.2f} {e['p90_ms']:>8.2f} {fps if fps == '' else f'{fps:10.0f}':>10}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny config, few iterations (CPU check)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--size", default="1b7", choices=["1b7", "0b6"])
    parser.add_argument("--batch-sizes", default="1,8,32,64,128,256")
    parser.add_argument("--context-lens", default="256,1024",
                        help="rows spread over positions below each; the largest sets max_seq_len, "
                             "the first is used for eager/compile")
    parser.add_argument("--candidate-k", type=int, default=64, help="top-k candidate set for sampling (0 = full sort)")
    parser.add_argument("--prompt-len", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--compile", action="store_true", help="also torch.compile the step, then capture it")
    parser.add_argument("--compile-batch-sizes", default="1,64")
    parser.add_argument("--path", default="raw", choices=["raw", "runner", "both"],
                        help="raw: FrameDecoder paths; runner: the service's ModelRunner.decode with its graph table")
    parser.add_argument("--runner-graphs", default="auto", choices=["auto", "capture", "emulate", "off"],
                        help="the runner's decode_graphs (auto: capture on CUDA, eager on CPU)")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.batch_sizes, args.context_lens, args.warmup, args.iters = "1,4", "64", 2, 5
        if args.device == "cpu":
            args.dtype = "fp32"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    report = run(args)
    print_table(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
