#!/usr/bin/env python3
"""Summary of a vocoder step trace (`--vocoder-arg=--step-trace=PATH`, vocoder_service/engine/step_trace.py).

What a long step held and who waited for it: step time by size class, the share of wall time in
steps of each class (a frame that arrives during a step is read only after it), rows per step
(due, first chunks, the rest), the gap between steps and the part of it the loop was busy (not
waiting in its poll: reading messages, opening streams, sending), and how long each first chunk's
stream waited for its decode to start (since its oldest frame was read: the scheduler's share of
its TTFA). A busy gap holds every stream's next chunk: 2026-11-28 they reached 150-325 ms when a
burst of streams opened (a device round trip per open, gapless4-h200.md).

  python benchmarks/step_trace_report.py trace.jsonl [--json] [--split-idle-s 1]

With --split-idle-s, the trace is cut where the vocoder sat idle that long (a bench's levels are
separated by such pauses) and each part of at least --min-steps steps is summarised on its own.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import numpy as np

LONG_STEP_MS = (20.0, 50.0, 100.0)
BUSY_GAP_MS = 50.0   # a busy gap this long between steps delays every waiting chunk audibly


def pcts(values) -> dict:
    if not len(values):
        return {"n": 0}
    a = np.asarray(values, float)
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 1), "p90": round(float(np.percentile(a, 90)), 1),
            "p99": round(float(np.percentile(a, 99)), 1), "max": round(float(a.max()), 1)}


def summarize(lines: list[dict]) -> dict:
    ends = np.array([s["end_ms"] for s in lines], float)
    wall_ms = (lines[-1]["t"] - lines[0]["t"]) * 1e3 + lines[-1]["end_ms"] if lines else 0.0
    firsts = [f for s in lines for f in s["firsts"]]
    busy = [s["gap_ms"] - s["poll_ms"] for s in lines if s["gap_ms"] is not None]
    report = {
        "steps": len(lines), "wall_ms": round(wall_ms, 1),
        "step_ms": pcts(ends), "gap_ms": pcts([s["gap_ms"] for s in lines if s["gap_ms"] is not None]),
        "plan_ms": pcts([s["plan_ms"] for s in lines]),
        "batches_per_step": pcts([len(s["b"]) for s in lines]),
        "rows_per_step": pcts([s["rows"] for s in lines]), "due_per_step": pcts([s["due"] for s in lines]),
        "row_frames_per_step": pcts([sum(b[0] * b[1] for b in s["b"]) for s in lines]),
        "received_per_gap": pcts([s["recv"] for s in lines]),
        "busy_gap_ms": pcts(busy), f"busy_gaps_over_{BUSY_GAP_MS:g}ms": sum(1 for g in busy if g > BUSY_GAP_MS),
        "first_chunks": len(firsts),
        "first_wait_since_open_ms": pcts([f[0] for f in firsts]),
        "first_wait_since_oldest_frame_ms": pcts([f[1] for f in firsts]),
        # (traces written before late_chunks was listed, 2026-11-28 4054890, carry a count only)
        "late_chunks": sum(len(s["late_chunks"]) if "late_chunks" in s else s.get("late", 0) for s in lines),
    }
    late = [chunk for s in lines for chunk in s.get("late_chunks", [])]   # [ms, cause, frames, index]
    if late:
        report["late_ms"] = pcts([c[0] for c in late])
        report["late_by_cause"] = dict(Counter(c[1] for c in late))
        report["late_by_chunk_index"] = dict(sorted(Counter(min(c[3], 5) for c in late).items()))   # 5: 5th or later
    for bound in LONG_STEP_MS:   # share of the wall clock inside steps at least this long
        long = ends[ends >= bound]
        report[f"wall_share_in_steps_over_{bound:g}ms"] = round(float(long.sum() / wall_ms), 3) if wall_ms else 0.0
        report[f"steps_over_{bound:g}ms"] = int(long.size)
    long_steps = [s for s in lines if s["end_ms"] >= LONG_STEP_MS[-1]]
    report["long_steps"] = {   # what the longest steps held
        "due": pcts([s["due"] for s in long_steps]), "rows": pcts([s["rows"] for s in long_steps]),
        "first_chunks": pcts([len(s["firsts"]) for s in long_steps]),
        "row_frames": pcts([sum(b[0] * b[1] for b in s["b"]) for s in long_steps]),
        "first_batch_ms": pcts([s["b"][0][3] for s in long_steps if s["b"]]),
        "step_est_ms": pcts([s["step_est_ms"] for s in long_steps])}
    return report


def split_at_idle(lines: list[dict], idle_s: float) -> list[list[dict]]:
    parts: list[list[dict]] = [[]]
    for step in lines:
        if parts[-1] and step["gap_ms"] is not None and step["gap_ms"] >= idle_s * 1e3:
            parts.append([])
        parts[-1].append(step)
    return parts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    p.add_argument("--split-idle-s", type=float, default=0.0, help="summarise each part between idle pauses this long")
    p.add_argument("--min-steps", type=int, default=50, help="parts with fewer steps are left out")
    args = p.parse_args()
    with open(args.trace) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines:
        print("no steps in the trace", file=sys.stderr)
        return 1
    parts = split_at_idle(lines, args.split_idle_s) if args.split_idle_s > 0 else [lines]
    for index, part in enumerate(parts):
        if len(parts) > 1 and len(part) < args.min_steps:
            continue
        report = summarize(part)
        if args.json:
            print(json.dumps({"part": index, **report}))
            continue
        print(f"== part {index} ({len(part)} steps)")
        for key, value in report.items():
            print(f"{key:42s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
