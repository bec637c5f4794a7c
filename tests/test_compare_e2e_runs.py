"""benchmarks/compare_e2e_runs.py on small synthetic bench_e2e results: the per-pass, median and
pooled TTFA figures, the B/A verdict (inside and outside the tolerance), the lone-stream row, the
table and the CLI; and bench_e2e's streams-per-level rule."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_e2e import arrival_order, start_offsets_s, streams_for_level
from benchmarks.compare_e2e_runs import (common_levels, compare, level_summary, lone_stream_summary, markdown,
                                         verdict)

ROOT = Path(__file__).resolve().parents[1]
REAL_RUN = ROOT / "benchmarks" / "results" / "2026-11-25-e2e-same-session-custom-voice-h200.json.gz"


def run(levels: dict[int, list[float]], lone_ms: float | None = None, workload: str = "w") -> dict:
    """A bench_e2e result with the fields the comparison reads: per level the streams' TTFA."""
    single = None if lone_ms is None else {"steady_words": {"ttfa_ms_p50": lone_ms}}
    return {"workload": workload, "single_stream": single,
            "levels": [{"concurrency": c, "raw": [{"ttfa_ms": t} for t in ttfa_ms]} for c, ttfa_ms in levels.items()]}


def test_level_summary_per_pass_median_and_pooled():
    runs = [run({4: [10, 20, 30, 40]}), run({4: [50, 60, 70, 80]}), run({4: [10, 10, 10, 10]})]
    s = level_summary(runs, 4)
    assert s["num_passes"] == 3 and s["num_streams"] == 12
    assert s["pass_p50_ms"] == [25.0, 65.0, 10.0]
    assert s["pass_p95_ms"] == pytest.approx([38.5, 78.5, 10.0])
    assert s["median_p50_ms"] == 25.0 and s["median_p95_ms"] == pytest.approx(38.5)
    # pooled over the 12 streams: sorted 10,10,10,10,10,20,30,40,50,60,70,80 -> median (20 + 30) / 2
    assert s["pooled_p50_ms"] == 25.0
    assert s["pooled_p95_ms"] == pytest.approx(74.5)


def test_a_pass_without_the_level_is_left_out_and_a_level_no_pass_has_is_an_error():
    runs = [run({1: [5.0], 4: [10, 20]}), run({1: [7.0]})]
    assert level_summary(runs, 4)["num_passes"] == 1
    assert level_summary(runs, 1)["pass_p50_ms"] == [5.0, 7.0]
    with pytest.raises(ValueError, match="concurrency 8"):
        level_summary(runs, 8)


def test_common_levels_are_those_both_groups_measured():
    assert common_levels([run({1: [1], 4: [1]}), run({16: [1]})], [run({4: [1], 16: [1], 64: [1]})]) == [4, 16]


def test_verdict_lets_a_faster_b_pass_and_fails_a_b_more_than_the_tolerance_slower():
    assert verdict(100.0, 110.0, 0.10) == {"ratio": pytest.approx(1.1), "within_tolerance": True}
    assert verdict(100.0, 111.0, 0.10)["within_tolerance"] is False
    assert verdict(100.0, 50.0, 0.10) == {"ratio": 0.5, "within_tolerance": True}


def test_lone_stream_is_the_median_over_passes_and_absent_without_a_stack_of_its_own():
    assert lone_stream_summary([run({}, 20.0), run({}, 30.0), run({}, 22.0)]) == {
        "num_passes": 3, "pass_p50_ms": [20.0, 30.0, 22.0], "median_p50_ms": 22.0}
    assert lone_stream_summary([run({})]) is None   # --target runs measure no lone stream


def test_compare_flags_the_level_outside_the_tolerance():
    a = [run({1: [20, 22], 8: [50, 60]}, 21.0), run({1: [21, 23], 8: [52, 58]}, 20.0)]
    b = [run({1: [21, 23], 8: [70, 80]}, 22.0), run({1: [22, 22], 8: [72, 78]}, 21.0)]
    result = compare(a, b, tolerance=0.10)
    by_level = {level["concurrency"]: level for level in result["levels"]}
    assert by_level[1]["within_tolerance"] is True
    assert by_level[1]["ratio"] == pytest.approx(22.0 / 21.5)
    assert by_level[8]["within_tolerance"] is False   # 75 against 55: 36% slower
    assert by_level[8]["ratio"] == pytest.approx(75.0 / 55.0)
    assert result["lone_stream"]["ratio"] == pytest.approx(21.5 / 20.5)
    assert result["lone_stream"]["within_tolerance"] is True
    assert result["all_within"] is False
    assert compare(a, a)["all_within"] is True


def test_a_slow_lone_stream_alone_fails_the_comparison():
    a = [run({1: [20.0]}, 20.0)]
    b = [run({1: [20.0]}, 30.0)]
    result = compare(a, b)
    assert result["levels"][0]["within_tolerance"] is True and result["all_within"] is False


def test_compare_needs_runs_in_both_groups():
    with pytest.raises(ValueError):
        compare([], [run({1: [1.0]})])


def test_markdown_has_a_row_per_group_and_level_and_the_verdicts():
    a = [run({1: [20, 22], 8: [50, 60]}, 21.0)]
    b = [run({1: [21, 23], 8: [70, 80]}, 22.0)]
    table = markdown(compare(a, b), "custom-voice", "registered-xvector")
    rows = [line for line in table.splitlines() if line.startswith("| c=") or line.startswith("| lone")]
    assert len(rows) == 6
    assert all(row.count("|") == 11 for row in rows)   # 10 columns in every row
    assert "| c=8 | registered-xvector | 75.0 |" in table and "| NO |" in table
    assert table.rstrip().endswith("all within 10%: NO")


def test_cli_on_a_committed_run_compared_with_itself(tmp_path):
    out_json, out_md = tmp_path / "c.json", tmp_path / "c.md"
    done = subprocess.run([sys.executable, "benchmarks/compare_e2e_runs.py", "--a", str(REAL_RUN), "--b", str(REAL_RUN),
                           "--b-name", "same", "--out-json", str(out_json), "--out-md", str(out_md)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(out_json.read_text())
    assert result["a_name"] == "custom-voice" and result["b_name"] == "same"   # A named by its runs' workload
    assert [level["concurrency"] for level in result["levels"]] == [1, 4, 8, 16, 32, 64]
    assert all(level["ratio"] == 1.0 for level in result["levels"]) and result["all_within"]
    assert result["lone_stream"]["a"]["median_p50_ms"] > 0
    assert out_md.read_text() == done.stdout


def test_streams_per_level_is_the_factor_times_concurrency_unless_given():
    assert streams_for_level(8) == 16              # today's default: 2 x concurrency
    assert streams_for_level(8, streams_factor=4) == 32
    assert streams_for_level(8, streams_per_level=5, streams_factor=4) == 5
    assert streams_for_level(1, streams_factor=4, min_streams=16) == 16   # the floor lifts small levels
    assert streams_for_level(8, streams_factor=4, min_streams=16) == 32   # and leaves larger ones
    assert streams_for_level(1, streams_per_level=5, min_streams=16) == 5
    with pytest.raises(ValueError):
        streams_for_level(8, streams_factor=0)


def test_poisson_runs_after_the_modes_that_set_its_rate_and_never_alone():
    assert arrival_order(["poisson", "burst"]) == ["burst", "poisson"]
    assert arrival_order(["closed", "poisson", "burst"]) == ["closed", "burst", "poisson"]
    assert arrival_order(["burst", "closed"]) == ["burst", "closed"]
    with pytest.raises(ValueError, match="closed or burst level"):
        arrival_order(["poisson"])


def test_staggered_starts_spread_the_first_streams_evenly_over_the_period():
    assert start_offsets_s(4, 0.0) == [0.0] * 4          # the default: a burst
    assert start_offsets_s(4, 2.0) == [0.0, 0.5, 1.0, 1.5]
    assert start_offsets_s(1, 3.0) == [0.0]
    with pytest.raises(ValueError, match="stagger period"):
        start_offsets_s(4, -1.0)


def test_runs_of_different_load_shapes_are_refused():
    burst, staggered = run({4: [10.0, 11.0]}), dict(run({4: [10.0, 11.0]}), stagger_starts=True)
    assert compare([burst], [dict(burst, stagger_starts=False)])["all_within"]   # absent = a burst
    with pytest.raises(ValueError, match="load shape"):
        compare([burst], [staggered])
    with pytest.raises(ValueError, match="load shape"):
        compare([staggered, burst], [staggered])
    with pytest.raises(ValueError, match="load shape"):
        compare([dict(burst, frames_per_utterance=125)], [dict(burst, frames_per_utterance=50)])
