"""First audio hop by hop: the services' marks (service_common/hop_trace.py) joined per request.

Each hop is the time between two marks of one request, in ms (p50 / p95 / max over the requests
that have both); `ttfa` is the whole way, first text read to first audio out (the server's TTFA).
The hops that cross processes (`to_*`, `start_to_talker`) are what no stage timing of the summary
holds: a message waiting in a socket while its reader steps.

    python benchmarks/first_audio_hops.py TRACE_DIR [BENCH_E2E_JSON]   # per level of that run
"""
from __future__ import annotations

import collections
import gzip
import json
import sys
from pathlib import Path

import numpy as np

HOPS = (  # name, from event, to event (service_common.hop_trace.EVENTS)
    ("gateway_text", "g_text_in", "g_text_out"),          # first text read -> TEXT sent
    ("to_talker", "g_text_out", "t_text_in"),             # ... -> read by the talker
    ("talker_first_frame", "t_text_in", "t_frame0_out"),  # queue, gather, prefill -> frame 0 sent
    ("to_vocoder", "t_frame0_out", "v_frames0_in"),       # ... -> read by the vocoder
    ("frame1_to_vocoder", "t_frame1_out", "v_frames1_in"),
    ("vocoder_first_chunk", "v_frames0_in", "v_pcm_out"),  # its first chunk decoded and sent
    ("to_gateway", "v_pcm_out", "g_pcm_in"),
    ("gateway_audio", "g_pcm_in", "g_audio_out"),          # PCM read -> audio response built
    ("start_to_talker", "g_start_out", "t_start_in"),
    ("start_to_ack", "g_start_out", "g_ack_in"),
    ("ttfa", "g_text_in", "g_audio_out"),
)


def load_marks(trace_dir: str | Path) -> dict[str, dict[str, float]]:
    """request id -> event -> ms (monotonic), from every process's file in `trace_dir`."""
    marks: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for path in sorted(Path(trace_dir).glob("*.tsv")):
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3:   # a line being written as we read is skipped
                marks[parts[0]][parts[1]] = int(parts[2]) / 1e6
    return dict(marks)


def summarize(marks: dict[str, dict[str, float]], request_ids) -> dict[str, dict]:
    """hop -> {n, p50_ms, p95_ms, max_ms} over `request_ids` (hops no request has are left out)."""
    out = {}
    for name, start, end in HOPS:
        ms = [m[end] - m[start] for m in (marks.get(rid, {}) for rid in request_ids) if start in m and end in m]
        if ms:
            out[name] = {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 2),
                         "p95_ms": round(float(np.percentile(ms, 95)), 2), "max_ms": round(max(ms), 2)}
    return out


def one_line(hops: dict[str, dict]) -> str:
    return "hops p50/p95 ms: " + " | ".join(f"{name} {h['p50_ms']:.1f}/{h['p95_ms']:.1f}" for name, h in hops.items())


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__)
        return 2
    marks = load_marks(argv[0])
    groups = {"all": list(marks)}
    if len(argv) == 2:
        opener = gzip.open if argv[1].endswith(".gz") else open
        with opener(argv[1], "rt") as f:
            levels = json.load(f)["levels"]
        groups = {f"c={row['concurrency']} {row['arrivals']}": [r["request_id"] for r in row["raw"]] for row in levels}
    for group, rids in groups.items():
        print(f"{group} ({len(rids)} requests): {one_line(summarize(marks, rids))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
