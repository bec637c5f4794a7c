#!/usr/bin/env python3
"""The vocoder's real scheduling engine under a simulated talker that shares one GPU with it.

No device: a fake clock. The vocoder is `VocoderEngine` itself (deadlines.py plans every step); its
decoder is a cost model (a launch cost plus a cost per padded row-frame of the (batch, frames) graph
it would replay). The talker is a model of the real one: decode steps of `a + b x batch` ms that
give every running stream one frame, prefills of up to 32 arrivals between decode steps (their
first frame comes with the prefill), each only while the vocoder has a free slot for it (the real
admission), gathered as the service does by default (`--gather-ms`, 0: off;
talker_service/engine/prefill_gather.py, the real rule). The two share the GPU by time-slicing:
while both have work, each runs at half speed (a vocoder step of W ms of GPU work takes 2 W ms of
wall time and delays the talker by W).

Clients are a closed loop (each of `concurrency` workers starts a new stream when its last ended,
the first wave spread over `--stagger-s`) or a burst, then with `--poisson-load F` an open loop at
F x the closed loop's rate (as bench_e2e). Reports, per run: audio-s/s, streams with a stall over
50 / 100 ms (a player that starts at the first chunk), TTFA p50 / p95 from arrival at the talker,
the talker queue's p95, the streams open on average, the mean stream lifetime and its tail after the
talker's last frame, the talker's mean batch and prefills, and the GPU's share of each kind of work.

The default costs are the talker's own on a GPU of its own (two-GPU stack, H200, 2026-11-28: a step
of ~4.9 ms at batch ~165, a prefill of ~6 ms whatever its batch) and the vocoder fitted alone. The
decoder's batches are read back in order and each batch's chunks leave then, as the server sends
them (until 2026-11-28 every chunk left at the step's end). At 256 streams on one H200 the model
gives, closed loop, 1380 audio-s/s at 40/120 ms steps (measured 1359) and 1214 at 20/40 (1329);
open loop at 0.9, TTFA p95 142 ms at 40/120 (measured 366) and 1429 at 20/40 (1130): it ranks the
two as the GPU did but sees less of the queue at 40/120 (results 2026-11-28-gapless5/6-h200.md).
Use it to compare policies, not to quote speeds.

  python benchmarks/sim_gapless.py --concurrency 256 --streams 1024 --poisson-load 0.9
  python benchmarks/sim_gapless.py --policy target_step_ms=0     # the old all-ready-rows steps
"""
from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service_common.frame_budget import FRAME_RATE_HZ  # noqa: E402
from service_common.playback import PlaybackClock, stall_report  # noqa: E402
from talker_service.engine.config import EngineConfig as TalkerEngineConfig  # noqa: E402
from talker_service.engine.prefill_gather import PrefillGather  # noqa: E402
from vocoder_service.engine.chunk_policy import ChunkPolicy  # noqa: E402
from vocoder_service.engine.config import VocoderEngineConfig  # noqa: E402
from vocoder_service.engine.deadlines import DeadlinePolicy  # noqa: E402
from vocoder_service.engine.engine import VocoderEngine  # noqa: E402

FRAME_S = 1.0 / FRAME_RATE_HZ
SPF = 4
SAMPLE_RATE_HZ = int(SPF / FRAME_S)


@dataclasses.dataclass
class Costs:
    talker_step_base_ms: float = 3.9
    talker_step_per_row_ms: float = 0.0065
    prefill_ms: float = 5.8            # one prefill forward of up to prefill_group arrivals ...
    prefill_per_row_ms: float = 0.05   # ... plus this much per arrival in it
    prefill_group: int = 32
    # a (B, T) graph replay: T x (vocoder_frame_ms + B x vocoder_row_frame_us) + a launch; fitted to the
    # vocoder service alone on an H200 (2026-11-26-vocoder-time-major-h200.md: 64 x 25 in ~41.5 ms,
    # 128 x 25 in ~79 ms, 1 x 25 in ~3.7 ms): the per-frame part is what a small batch wastes
    vocoder_launch_ms: float = 0.3
    vocoder_frame_ms: float = 0.16
    vocoder_row_frame_us: float = 23.4
    delivery_ms: float = 3.0           # vocoder -> gateway -> client


class QueuedOnClock:
    """A launched decode on a fake clock: reading it back moves the clock to when the device is done
    with it (also the vocoder tests' fake device, tests/test_vocoder_deadlines.py)."""
    is_graph = False

    def __init__(self, clock: list[float], done_at_s: float, pcm: np.ndarray) -> None:
        self.clock, self.done_at_s, self.pcm = clock, done_at_s, pcm

    def wait(self) -> np.ndarray:
        self.clock[0] = max(self.clock[0], self.done_at_s)
        return self.pcm


class SharedGpuRunner:
    """Decodes nothing; each launch is queued on the device behind the previous one and takes its
    padded cost, doubled while the talker also has work (time-slicing), and books the GPU time it
    took from the talker. The engine reads the batches back in order and the server sends each
    batch's chunks then, so a due chunk in the first batch leaves before the step's big ones."""
    codebook_size = 2048

    def __init__(self, clock: list[float], costs: Costs, max_batch: int) -> None:
        self.clock, self.costs, self.max_batch = clock, costs, max_batch
        self.gpu_s = 0.0           # GPU work of the current step (the talker loses this much)
        self.total_gpu_s = 0.0     # all the vocoder's GPU work
        self.talker_busy = True
        self._busy_until_s = 0.0

    def reset(self, slots) -> None:
        pass

    def launch(self, codes, slots, lengths) -> QueuedOnClock:
        bs, _, t = codes.shape
        padded = 1
        while padded < bs:
            padded *= 2
        c = self.costs
        work_s = (c.vocoder_launch_ms + t * (c.vocoder_frame_ms + min(padded, self.max_batch) * c.vocoder_row_frame_us / 1e3)) / 1e3
        self.gpu_s += work_s
        self.total_gpu_s += work_s
        self._busy_until_s = max(self.clock[0], self._busy_until_s) + (2 * work_s if self.talker_busy else work_s)
        return QueuedOnClock(self.clock, self._busy_until_s, np.zeros((bs, t * SPF), np.float32))


def simulate(concurrency: int, num_streams: int, num_frames: int, policy: DeadlinePolicy, costs: Costs,
             stagger_s: float, max_slots: int = 256, fill_padding: bool = True, rate_hz: float = 0.0,
             gather: PrefillGather | None = None, seed: int = 0, vocoder_slots: int = 0) -> dict:
    """`rate_hz` > 0: open-loop Poisson arrivals at that rate (`concurrency` unused) instead of the
    closed loop. The talker prefills an arrival only while the vocoder has a slot for it (as the real
    admission does) and, with `gather`, lets ready arrivals wait for more (talker_service/engine/
    prefill_gather.py, the real rule). `vocoder_slots`: the vocoder's streams (0: `max_slots`, the
    talker's): more than the talker's leaves room for streams whose talker finished."""
    clock = [0.0]
    vocoder_slots = vocoder_slots or max_slots
    runner = SharedGpuRunner(clock, costs, vocoder_slots)
    config = VocoderEngineConfig(max_slots=vocoder_slots, samples_per_frame=SPF, sample_rate_hz=SAMPLE_RATE_HZ,
                                 chunk=ChunkPolicy(2, 25), deadline=policy, fill_padding=fill_padding,
                                 launch_cost_row_frames=64.0)
    engine = VocoderEngine(runner, config, clock=lambda: clock[0])
    if rate_hz > 0:
        gaps = np.random.default_rng(seed).exponential(1.0 / rate_hz, num_streams)
        arrivals: list[tuple[float, int]] = [(float(t), k) for k, t in enumerate(np.cumsum(gaps) - gaps[0])]
    else:
        arrivals = [(stagger_s * k / concurrency, k) for k in range(concurrency)]
    heapq.heapify(arrivals)
    next_id = [0]
    waiting: list[tuple[str, float]] = []          # (request id, arrival) not yet prefilled
    talking: dict[str, int] = {}                   # request id -> frames sent
    arrived_s: dict[str, float] = {}
    listeners: dict[str, PlaybackClock] = {}
    first_s: dict[str, float] = {}
    done_s: dict[str, float] = {}
    talker_done_s: dict[str, float] = {}     # the talker's last frame of a stream
    prefill_start_s: dict[str, float] = {}
    deliveries: list[tuple[float, str, float, bool]] = []   # (at, rid, audio s, final)
    talker_free_s = 0.0            # the talker's current work item ends here
    talker_item: tuple | None = None
    num_prefills = [0]
    busy_s = {"prefill": 0.0, "decode": 0.0}
    batches: list[int] = []
    codes = np.ones((1, 16), np.int64)
    last_was_prefill = False

    def start_worker_stream(at_s: float) -> None:
        if next_id[0] >= num_streams:
            return
        rid = f"s{next_id[0]}"
        next_id[0] += 1
        waiting.append((rid, at_s))
        arrived_s[rid] = at_s

    while len(done_s) < num_streams:
        now = clock[0]
        # clients: arrivals and deliveries due by now
        while arrivals and arrivals[0][0] <= now:
            at, _ = heapq.heappop(arrivals)
            start_worker_stream(at)
        deliveries.sort()
        while deliveries and deliveries[0][0] <= now:
            at, rid, audio_s, final = deliveries.pop(0)
            if audio_s:
                first_s.setdefault(rid, at)
                listeners.setdefault(rid, PlaybackClock()).on_chunk(at, audio_s)
            if final:
                done_s[rid] = at
                if rate_hz <= 0:
                    heapq.heappush(arrivals, (at, 0))    # its worker starts the next stream
        # the talker: finish the item that ended by now, start the next
        while talker_free_s <= now:
            if talker_item is not None:
                kind, rows = talker_item
                if kind == "prefill":
                    for rid in rows:
                        engine.open(rid)
                        talking[rid] = 0
                for rid in rows:                      # one frame each (a prefill's first frame too)
                    n = talking[rid]
                    final = n + 1 == num_frames
                    engine.add_frames(rid, n, codes, is_final=final)
                    talking[rid] = n + 1
                    if final:
                        del talking[rid]
                        talker_done_s[rid] = talker_free_s
                talker_item = None
            # arrivals that may start: a vocoder slot each (the talker's admission), the talker's own slots
            room = min(engine.slots.num_free, max_slots - len(talking))
            startable = waiting[:min(room, costs.prefill_group)]
            held = gather is not None and gather.should_hold(len(talking), [t for _, t in startable], now)
            if startable and not held and (not last_was_prefill or not talking):
                group = [rid for rid, _ in startable]
                del waiting[:len(group)]
                for rid in group:
                    prefill_start_s[rid] = talker_free_s
                talker_item, last_was_prefill = ("prefill", group), True
                num_prefills[0] += 1
                busy_s["prefill"] += (costs.prefill_ms + costs.prefill_per_row_ms * len(group)) / 1e3
                talker_free_s += (costs.prefill_ms + costs.prefill_per_row_ms * len(group)) / 1e3
            elif talking:
                rows = list(talking)
                batches.append(len(rows))
                talker_item, last_was_prefill = ("decode", rows), False
                busy_s["decode"] += (costs.talker_step_base_ms + costs.talker_step_per_row_ms * len(rows)) / 1e3
                talker_free_s += (costs.talker_step_base_ms + costs.talker_step_per_row_ms * len(rows)) / 1e3
            else:
                talker_free_s = max(talker_free_s, now)
                break
        # the vocoder: a step when it has work (atomic; the talker's item stretches by its GPU time)
        if engine.has_work():
            runner.gpu_s = 0.0
            runner.talker_busy = talker_item is not None
            engine.step(on_outputs=lambda outs: deliveries.extend(
                (clock[0] + costs.delivery_ms / 1e3, out.request_id, len(out.pcm) / SAMPLE_RATE_HZ, out.is_final)
                for out in outs))   # each batch's chunks as it is read back (the server sends them then)
            if talker_item is not None:
                talker_free_s += runner.gpu_s
            continue
        events = [talker_free_s if talker_item is not None else float("inf")]
        if waiting and gather is not None:
            events.append(waiting[0][1] + gather.wait_s)    # a held arrival's wait runs out
        if arrivals:
            events.append(arrivals[0][0])
        if deliveries:
            events.append(min(d[0] for d in deliveries))
        events.append(now + engine.idle_timeout_s(1.0))
        clock[0] = max(now + 1e-6, min(e for e in events if e > now) if any(e > now for e in events) else now + 1e-3)

    rids = list(done_s)
    wall_s = max(done_s.values()) - min(arrived_s.values())
    stalls = stall_report([[listeners[r].longest_stall_s] for r in rids])
    ttfa_ms = np.array([(first_s[r] - arrived_s[r]) * 1e3 for r in rids])
    life_s = np.array([done_s[r] - arrived_s[r] for r in rids])
    tail_s = np.array([done_s[r] - talker_done_s[r] for r in rids])
    queue_ms = np.array([(prefill_start_s[r] - arrived_s[r]) * 1e3 for r in rids])
    return {"audio_s_per_s": round(len(rids) * num_frames * FRAME_S / wall_s, 1),
            "stall_over_50ms": stalls["streams_stall_over_50ms"], "stall_over_100ms": stalls["streams_stall_over_100ms"],
            "longest_stall_ms": round(stalls["longest_stall_ms"], 1),
            "ttfa_p50_ms": round(float(np.percentile(ttfa_ms, 50)), 1), "ttfa_p95_ms": round(float(np.percentile(ttfa_ms, 95)), 1),
            "queue_p95_ms": round(float(np.percentile(queue_ms, 95)), 1),
            "mean_open": round(float(life_s.sum() / wall_s), 1), "num_prefills": num_prefills[0],
            # GPU seconds per second of the level: the vocoder's, and the talker's prefills and decode steps
            "vocoder_gpu_share": round(runner.total_gpu_s / wall_s, 3),
            "prefill_gpu_share": round(busy_s["prefill"] / wall_s, 3), "decode_gpu_share": round(busy_s["decode"] / wall_s, 3),
            "mean_life_s": round(float(life_s.mean()), 2),
            "mean_tail_s": round(float(tail_s.mean()), 2), "talker_mean_batch": round(float(np.mean(batches)), 1),
            "vocoder_steps": engine.stats["decode_calls"], "late_chunks": engine.deadline_stats["late_chunks"],
            "due_rows": engine.deadline_stats["due_rows"], "deferred_rows": engine.deadline_stats["deferred_rows"]}


def parse_policy(items: list[str]) -> DeadlinePolicy:
    fields = {f.name: f.type for f in dataclasses.fields(DeadlinePolicy)}
    kwargs = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"unknown policy field {key!r}; fields: {', '.join(fields)}")
        kwargs[key] = float(value)
    return DeadlinePolicy(**kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--streams", type=int, default=0, help="streams in all (default 4 x concurrency)")
    ap.add_argument("--frames", type=int, default=125)
    ap.add_argument("--stagger-s", type=float, default=0.38, help="first wave spread (0: a burst)")
    ap.add_argument("--policy", nargs="*", default=[], help="DeadlinePolicy fields, e.g. target_step_ms=0")
    ap.add_argument("--no-fill", action="store_true", help="decode only the planned rows (no padding fill)")
    ap.add_argument("--vocoder-row-frame-us", type=float, default=Costs.vocoder_row_frame_us)
    ap.add_argument("--vocoder-frame-ms", type=float, default=Costs.vocoder_frame_ms)
    ap.add_argument("--talker-step-base-ms", type=float, default=Costs.talker_step_base_ms)
    ap.add_argument("--talker-step-per-row-ms", type=float, default=Costs.talker_step_per_row_ms)
    ap.add_argument("--prefill-ms", type=float, default=Costs.prefill_ms)
    ap.add_argument("--prefill-per-row-ms", type=float, default=Costs.prefill_per_row_ms)
    ap.add_argument("--poisson-load", type=float, default=0.0,
                    help="> 0: after the closed loop, open-loop Poisson arrivals at this x its rate (as bench_e2e)")
    talker = TalkerEngineConfig()   # the service's gathering defaults (on since 2026-11-28)
    ap.add_argument("--gather-ms", type=float, default=talker.prefill_gather_ms,
                    help="the talker's prefill gathering, as the service's --prefill-gather-ms; 0: off")
    ap.add_argument("--gather-batch", type=int, default=talker.prefill_gather_batch)
    ap.add_argument("--gather-min-decoding", type=int, default=talker.prefill_gather_min_decoding)
    ap.add_argument("--vocoder-slots", type=int, default=0, help="the vocoder's streams (0: the talker's 256)")
    args = ap.parse_args()
    costs = Costs(vocoder_row_frame_us=args.vocoder_row_frame_us, vocoder_frame_ms=args.vocoder_frame_ms,
                  talker_step_base_ms=args.talker_step_base_ms, talker_step_per_row_ms=args.talker_step_per_row_ms,
                  prefill_ms=args.prefill_ms, prefill_per_row_ms=args.prefill_per_row_ms)
    num_streams = args.streams or 4 * args.concurrency
    gather = (PrefillGather(args.gather_ms / 1e3, args.gather_batch, args.gather_min_decoding)
              if args.gather_ms > 0 else None)
    closed = simulate(args.concurrency, num_streams, args.frames, parse_policy(args.policy), costs, args.stagger_s,
                      fill_padding=not args.no_fill, gather=gather, vocoder_slots=args.vocoder_slots)
    print(json.dumps({"arrivals": "closed", **closed}))
    if args.poisson_load > 0:
        rate_hz = args.poisson_load * args.concurrency / closed["mean_life_s"]
        result = simulate(args.concurrency, num_streams, args.frames, parse_policy(args.policy), costs, args.stagger_s,
                          fill_padding=not args.no_fill, rate_hz=rate_hz, gather=gather, vocoder_slots=args.vocoder_slots)
        print(json.dumps({"arrivals": f"poisson {args.poisson_load} ({rate_hz:.1f}/s)", **result}))


if __name__ == "__main__":
    main()
