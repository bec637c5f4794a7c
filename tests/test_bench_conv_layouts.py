"""benchmarks/bench_conv_layouts.py on CPU (--smoke): every layout runs, agrees with the NCL conv,
and the channels-last views are what the GPU run claims to time."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_conv_layouts  # noqa: E402


def test_smoke_report(tmp_path):
    out = tmp_path / "layouts.json"
    assert bench_conv_layouts.main(["--smoke", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] and report["commit"] and len(report["results"]) == len(bench_conv_layouts.SMOKE_SHAPES)
    for row in report["results"]:
        for layout in bench_conv_layouts.LAYOUTS:
            entry = row[layout]
            assert entry["heuristic_ms"] > 0 and entry["benchmark_ms"] > 0, (row["shape"], layout, entry)
            assert entry["max_rel_err_vs_ncl"] <= 1e-4
    assert torch.backends.cudnn.benchmark is False   # restored after each timing


def test_layouts_compute_the_causal_conv():
    """Each layout's output, back in [B, C_out, T], is the causal dilated conv of x."""
    gen = torch.Generator().manual_seed(1)
    x, weight, bias = torch.randn(2, 5, 30, generator=gen), torch.randn(3, 5, 7, generator=gen), torch.randn(3)
    want = torch.nn.functional.conv1d(torch.nn.functional.pad(x, (12, 0)), weight, bias, dilation=2)
    for layout in bench_conv_layouts.LAYOUTS:
        conv, to_ncl = bench_conv_layouts.make_conv(layout, x, weight, bias, 2)
        torch.testing.assert_close(to_ncl(conv()), want, atol=1e-5, rtol=1e-5)
