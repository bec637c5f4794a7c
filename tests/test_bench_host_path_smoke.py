"""The host-path benchmark runs (a few steps, CPU) and reports every stage at every batch size;
its harness checks on the way that each decode step brings back one chunk per stream."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)
STAGES = {"talker_emit", "talker_emit_in_socket", "vocoder_intake", "vocoder_pcm_send", "vocoder_pcm_send_in_socket",
          "gateway_pcm_receive"}


def test_smoke_run_times_every_stage(tmp_path):
    out = tmp_path / "host_path.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_host_path.py"), "--smoke", "--batches", "1,8",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [run["batch"] for run in result["runs"]] == [1, 8] and result["commit"] and result["cpu"]
    for run in result["runs"]:
        assert set(run["stages"]) == STAGES
        assert all(stage["median_ms"] > 0 and stage["n"] > 0 for stage in run["stages"].values())
        assert run["pcm_request_ids"]["parse_us_per_chunk"] > 0
