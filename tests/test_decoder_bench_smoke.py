"""The decoder benchmarks run on CPU (--smoke) and time the service's own decode path.

bench_decoder's runner rows must go through DecoderRunner.decode with the runtime's graph table
(emulated on CPU), the same one the vocoder service replays; bench_vocoder_host must take the
captured-step path (its stage/launch/wait host phases only exist there); bench_vocoder_service's
"graphs" mode must replay a captured shape for every step and its "eager" mode none.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(600)


def run_smoke(script: str, out: Path) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_bench_decoder_times_the_runner_with_its_graph_table(tmp_path):
    report = run_smoke("bench_decoder.py", tmp_path / "decoder.json")
    assert report["errors"] == {}
    assert report["captures"]["emulated"]["num_graphs"] == 4          # batch {1, 2} x frames {2, 3}
    assert report["graph_vs_eager_max_abs"]["emulated"] <= 1e-5
    paths = {(r["kind"], r["path"], r["batch"], r["frames"]): r for r in report["rows"]}
    for batch, frames, kind in [(1, 3, "stream"), (2, 3, "stream"), (1, 2, "first_chunk")]:
        for path in ("body:eager", "runner:eager", "runner:emulated"):
            assert paths[(kind, path, batch, frames)]["median_ms"] > 0
        assert paths[(kind, "runner:emulated", batch, frames)]["is_graph"] is True
        assert paths[(kind, "runner:eager", batch, frames)]["is_graph"] is False
    assert {r["path"] for r in report["rows"] if r["kind"] == "windowed_reference"} == {"eager"}


def test_bench_vocoder_host_replays_a_captured_step(tmp_path):
    report = run_smoke("bench_vocoder_host.py", tmp_path / "host.json")
    assert [run["frames_per_message"] for run in report["runs"]] == [25, 1]
    for run in report["runs"]:
        assert {"check", "stage", "launch", "wait"} <= set(run["runner_ms_per_step"])


def test_bench_vocoder_service_graph_mode_replays_every_step(tmp_path):
    report = run_smoke("bench_vocoder_service.py", tmp_path / "service.json")
    graphs, eager = report["modes"]["graphs"], report["modes"]["eager"]
    assert graphs["capture"]["num_graphs"] > 0 and not graphs["capture"]["skipped"]
    assert graphs["runs"] and all(run["hit_rate"] == 1.0 and run["eager_steps"] == 0 for run in graphs["runs"])
    assert eager["runs"] and all(run["graph_steps"] == 0 for run in eager["runs"])
