"""benchmarks/probe_gateway_starts.py runs end to end: a real gateway process, the fake talker, a
round of calls opened at once, one figure set per round."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("whole_text", [False, True])
def test_probe_reports_cpu_per_call_and_start_waits(tmp_path, whole_text):
    out = tmp_path / "probe.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "probe_gateway_starts.py"), "--calls", "4",
                           "--rounds", "2", "--out", str(out)] + (["--whole-text"] if whole_text else []),
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["whole_text"] is whole_text and len(result["rounds"]) == 2
    for row in result["rounds"]:
        assert row["calls"] == 4 and row["messages_per_call"] == (1 if whole_text else 13)
        assert row["gateway_cpu_ms_per_call"] >= 0   # 10 ms clock ticks: four short calls may read 0
        assert 0 < row["start_ms_p50"] <= row["start_ms_p95"] <= row["start_ms_max"]
