"""benchmarks/bench_http_vs_grpc.py --smoke on CPU: both transports run every level, each stream
gets its fixed length of audio, and the JSON names the commit and the device."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)


def test_smoke_run_covers_both_transports(tmp_path):
    out = tmp_path / "hvg.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_http_vs_grpc.py"), "--smoke", "--out",
                           str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["commit"] and result["frames"] == 6 and result["client_procs"] == 2
    seen = {(row["transport"], row["concurrency"]) for row in result["rows"]}
    assert seen == {("grpc", 1), ("http", 1), ("grpc", 2), ("http", 2)}
    for row in result["rows"]:
        assert row["client_procs"] == min(2, row["concurrency"]) and row["streams"] == 2 and 0 < row["ttfa_p50_ms"] <= row["ttfa_p95_ms"] and row["audio_s_per_s"] > 0
        assert row["audio_s_per_stream"] == [round(6 * 1920 / 24000, 4)]   # every stream its 6 frames
        assert row["gateway_cpu_s"] is not None and row["gateway_cpu_s"] >= 0   # the gateway's pid from the ready file
        assert (row["chunks"] > 0) if row["transport"] == "grpc" else row["chunks"] is None
    assert "| http | 2 |" in done.stdout
