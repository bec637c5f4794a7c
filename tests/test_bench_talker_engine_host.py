"""benchmarks/bench_talker_engine_host.py runs end to end at a small size: every stream decodes each
timed step (the stub decode never ends a stream) and the result names its figures."""
from __future__ import annotations

import json
import sys

from benchmarks import bench_talker_engine_host as bench
from test_vocoder_process_support import one_cpu_thread


def test_the_engine_host_bench_times_every_stream_every_step(tmp_path, monkeypatch):
    out = tmp_path / "host.json"
    monkeypatch.setattr(sys, "argv", ["bench", "--streams", "3", "--steps", "4", "--out", str(out)])
    with one_cpu_thread():
        bench.main()
    result = json.loads(out.read_text())
    assert result["streams"] == 3 and result["steps"] == 4
    assert 0 < result["median_ms"] <= result["p90_ms"]


def test_the_stub_decode_keeps_every_stream_running():
    with one_cpu_thread():
        engine = bench.running_engine(2)
        for _ in range(3):
            engine.prefill_phase()
            outs = engine.decode_phase()
    assert len(outs) == 2 and all(not out.is_final and out.codes.shape == (1, 16) for out in outs)
