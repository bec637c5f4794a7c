"""benchmarks/gateway_entry_lag.py: a bench run's streams joined with the gateway's log lines."""
from __future__ import annotations

import calendar
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.gateway_entry_lag import level_report, log_entries

ROOT = Path(__file__).resolve().parents[1]
T0 = calendar.timegm(time.strptime("2026-11-28 16:04:37", "%Y-%m-%d %H:%M:%S"))
LOG = [
    "2026-11-28 16:04:37,704 INFO [worker 1] gateway.servicer: request aa01: stream on talker t@vm:1 (speaker, X)",
    "2026-11-28 16:04:37,950 INFO [worker 3] gateway.servicer: request bb02: stream on talker t@vm:1 (speaker, X)",
    "2026-11-28 16:04:38,000 INFO gateway.servicer: request cc03: stream on talker t@vm:1 (speaker, X)",
    "2026-11-28 16:04:38,001 INFO [worker 1] gateway.servicer: request dd04: INVALID_ARGUMENT text: empty",
]


def row(request_id: str, start_unix_s: float, client_start_ms: float) -> dict:
    return {"request_id": request_id, "start_unix_s": start_unix_s, "client_start_ms": client_start_ms}


def test_log_lines_give_each_request_its_time_and_worker():
    entries = log_entries(LOG)
    assert set(entries) == {"aa01", "bb02", "cc03"}           # only the "stream on talker" lines
    assert entries["aa01"] == (pytest.approx(T0 + 0.704), "1")
    assert entries["cc03"][1] == "0"                          # one gateway process: no worker tag
    assert log_entries(LOG, utc_offset_h=1.0)["aa01"][0] == pytest.approx(T0 + 0.704 - 3600)


def test_a_level_splits_the_wait_at_the_handler():
    level = {"concurrency": 2, "arrivals": "burst",
             "raw": [row("aa01", T0 + 0.700, 10.0), row("bb02", T0 + 0.850, 120.0), row("zz99", T0, 5.0)]}
    r = level_report(level, log_entries(LOG))
    assert r["num_joined"] == 2 and r["num_streams"] == 3     # a stream the log does not name is left out
    assert r["entry_lag_ms"]["max"] == pytest.approx(100.0, abs=0.01)   # bb02: 850 -> 950 ms
    assert r["entry_to_start_message_ms"]["max"] == pytest.approx(20.0, abs=0.01)
    assert r["streams_by_worker"] == {"1": 1, "3": 1}


def test_command_line_on_a_gzipped_run(tmp_path):
    run = {"levels": [{"concurrency": 1, "arrivals": "closed", "raw": [row("aa01", T0 + 0.7, 9.0)]},
                      {"concurrency": 1, "arrivals": "poisson", "raw": [{"client_start_ms": 3.0}]}]}
    (tmp_path / "run.json.gz").write_bytes(gzip.compress(json.dumps(run).encode()))
    (tmp_path / "gateway.log").write_text("\n".join(LOG) + "\n")
    done = subprocess.run([sys.executable, "benchmarks/gateway_entry_lag.py", str(tmp_path / "run.json.gz"),
                           str(tmp_path / "gateway.log")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    closed, poisson = done.stdout.strip().splitlines()
    assert closed.startswith("c=1 closed: 1 of 1 streams; to the handler p50/p95/max 4.0/4.0/4.0 ms")
    assert "no stream found" in poisson
