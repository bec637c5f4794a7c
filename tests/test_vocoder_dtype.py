"""The vocoder's default dtype (issue #39) and the benchmark that chose it.

The default on CUDA is float16: the most exact dtype within 3% of the fastest on every speed
figure (benchmarks/results/2026-11-28-vocoder-dtype-h200.md). The benchmark runs on CPU with
tiny shapes (--smoke): its SNRs must order the dtypes by precision and its pick follow the rule.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_vocoder_dtype import pick
from vocoder_service.main import config_from

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_is_float16_on_cuda_and_float32_on_cpu_and_a_flag_wins():
    assert config_from(["--device", "cuda"], {}).resolved_dtype() == "float16"
    assert config_from(["--device", "cuda:1"], {}).resolved_dtype() == "float16"
    assert config_from([], {}).resolved_dtype() == "float32"
    assert config_from(["--device", "cuda", "--dtype", "bfloat16"], {}).resolved_dtype() == "bfloat16"
    assert config_from(["--device", "cuda"], {"QWEN3_TTS_VOCODER_DTYPE": "float32"}).resolved_dtype() == "float32"


def _result(rate_64: float, rate_256: float, first_ms: float) -> dict:
    return {"throughput": {"64": {"audio_s_per_s": rate_64}, "256": {"audio_s_per_s": rate_256}},
            "first_chunk": {"p50_ms": first_ms}, "graphs": {}}   # no graphs (CPU): the host-clock first chunk


def test_pick_takes_the_most_exact_dtype_under_three_percent_of_every_figure():
    results = {"bfloat16": _result(3000, 3000, 2.00), "float16": _result(2950, 2990, 2.05),
               "float32": _result(1400, 1400, 2.8)}
    assert pick(results, ["64", "256"])["pick"] == "float16"
    results["float16"] = _result(2950, 2990, 2.07)   # first chunk 3.5% slower: out
    assert pick(results, ["64", "256"])["pick"] == "bfloat16"
    results["float32"] = _result(2990, 3000, 2.01)
    assert pick(results, ["64", "256"])["pick"] == "float32"


def test_pick_judges_first_chunk_by_the_graph_replay_where_there_is_one():
    results = {"bfloat16": _result(3000, 3000, 1.80), "float16": _result(3000, 3000, 1.99)}
    results["bfloat16"]["graphs"] = {"first_chunk_graph_ms": 1.610}
    results["float16"]["graphs"] = {"first_chunk_graph_ms": 1.618}
    choice = pick(results, ["64", "256"])
    assert choice["pick"] == "float16"
    assert choice["costs_vs_fastest"]["float16"]["first_chunk"] == pytest.approx(0.005, abs=1e-3)


@pytest.mark.timeout(600)
def test_the_benchmark_runs_on_cpu_and_orders_the_dtypes_by_snr(tmp_path):
    out = tmp_path / "vocoder-dtype.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_vocoder_dtype.py"), "--smoke",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    snr = {d: r["snr_db"] for d, r in report["dtypes"].items()}
    assert snr["bfloat16"] < snr["float16"] < snr["float32"]
    assert 20 < snr["bfloat16"] < 40 and snr["float32"] > 90   # bf16's 8 bits; float32 against itself, TF32 off
    for r in report["dtypes"].values():
        assert r["is_finite"] and set(r["throughput"]) == {"2", "4"} and r["first_chunk"]["count"] == 3
        assert r["faults"]["nonfinite_chunks"] == 0
    # the pick is the rule applied to the report's own figures, and the log says which it was
    assert report["choice"] == pick(report["dtypes"], ["2", "4"])
    last_line = out.with_suffix(".log").read_text().rstrip().splitlines()[-1]
    assert last_line == f"pick ({report['choice']['rule']}): {report['choice']['pick']}; wrote {out}"
