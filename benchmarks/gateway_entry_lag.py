"""How long a stream's call took to reach the gateway's handler, from the client's side.

Joins a bench_e2e JSON (each stream's wall-clock start and request id) with the gateway's log of the
same run (one INFO line per stream, "request <id>: stream on talker ...", written once the config is
resolved, a fraction of a millisecond after the handler was entered), on one host and so one clock.
Per level: the entry lag (log line - client start: the client sending, gRPC accepting and the
worker's loop getting to the call), the rest of the client's wait for the start message (the talker's
ACK), and how the streams split over the gateway's worker processes. At 256 streams the client's wait
for the start message was 140-290 ms (p95) in waves and 12-22 ms with spread arrivals
(benchmarks/results/2026-11-28-gapless5-h200.md); this says on which side of the handler it goes.

    python benchmarks/gateway_entry_lag.py gapless-head.json head-gateway.log [--log-utc-offset-h 0]
"""
from __future__ import annotations

import argparse
import calendar
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_json import read_bench_json  # noqa: E402

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \w+ (?:\[worker (\d+)\] )?gateway\.servicer: "
                  r"request ([0-9a-f]+): stream on talker")


def log_entries(lines, utc_offset_h: float = 0.0) -> dict[str, tuple[float, str]]:
    """request id -> (unix time of its "stream on talker" line, worker) from gateway log lines whose
    clock is UTC + `utc_offset_h`."""
    out = {}
    for line in lines:
        m = LINE.match(line)
        if m:
            when, ms, worker, request_id = m.groups()
            unix_s = calendar.timegm(time.strptime(when, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1e3
            out[request_id] = (unix_s - utc_offset_h * 3600, worker or "0")
    return out


def level_report(level: dict, entries: dict[str, tuple[float, str]]) -> dict:
    lags_ms, rest_ms, workers = [], [], Counter()
    for row in level["raw"]:
        entry = entries.get(row.get("request_id", ""))
        if entry is None or "start_unix_s" not in row:
            continue
        lag_ms = (entry[0] - row["start_unix_s"]) * 1e3
        lags_ms.append(lag_ms)
        rest_ms.append(row["client_start_ms"] - lag_ms)
        workers[entry[1]] += 1

    def pct(xs):
        return {"p50": float(np.percentile(xs, 50)), "p95": float(np.percentile(xs, 95)), "max": float(max(xs))} if xs else None
    return {"concurrency": level["concurrency"], "arrivals": level["arrivals"], "num_streams": len(level["raw"]),
            "num_joined": len(lags_ms), "entry_lag_ms": pct(lags_ms), "entry_to_start_message_ms": pct(rest_ms),
            "streams_by_worker": dict(sorted(workers.items()))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bench_json", type=Path)
    p.add_argument("gateway_logs", type=Path, nargs="+")
    p.add_argument("--log-utc-offset-h", type=float, default=0.0, help="the log clock's offset from UTC (hours)")
    args = p.parse_args()
    entries = {}
    for path in args.gateway_logs:
        entries.update(log_entries(path.read_text(errors="replace").splitlines(), args.log_utc_offset_h))
    for level in read_bench_json(args.bench_json)["levels"]:
        r = level_report(level, entries)
        if not r["num_joined"]:
            print(f"c={r['concurrency']} {r['arrivals']}: no stream found in the logs (a JSON from before "
                  "start_unix_s, or another run's log)")
            continue
        lag, rest = r["entry_lag_ms"], r["entry_to_start_message_ms"]
        print(f"c={r['concurrency']} {r['arrivals']}: {r['num_joined']} of {r['num_streams']} streams; to the handler "
              f"p50/p95/max {lag['p50']:.1f}/{lag['p95']:.1f}/{lag['max']:.1f} ms, then to the start message "
              f"{rest['p50']:.1f}/{rest['p95']:.1f}/{rest['max']:.1f} ms; by worker {r['streams_by_worker']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
