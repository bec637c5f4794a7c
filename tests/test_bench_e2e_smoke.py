"""The end-to-end load generator runs against a real local stack (tiny, CPU) and every stream has the
fixed length it asked for (min_frames = max_frames keeps end of speech from being sampled)."""
from __future__ import annotations

import bisect
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from talker_service.engine.config import decode_batch_buckets
from talker_service.server.config import CPU_DEFAULT_SLOTS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)
BUCKETS = decode_batch_buckets(CPU_DEFAULT_SLOTS)   # the smoke stack's talker: CPU defaults, no --max-slots


@pytest.mark.parametrize("workload, stagger", [("custom-voice", False), ("clone-icl", True)])
def test_smoke_run_gives_fixed_length_streams_at_every_level(tmp_path, workload, stagger):
    out, hops_dir = tmp_path / "e2e.json", tmp_path / "hops"
    # the staggered run adds an open-loop Poisson level and a burst after each closed one, and names
    # the tree whose stack it starts (an A/B base elsewhere; this tree here)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_e2e.py"), "--smoke", "--out", str(out),
                           "--workload", workload] + (["--stagger-starts", "--arrivals", "closed,poisson,burst",
                                                       "--stack-dir", str(ROOT), "--launcher-arg=--http-port=-1",
                                                       "--client-procs", "2", "--client-channels", "2",
                                                       "--poisson-load", "0.5"]
                                                      if stagger else ["--hop-trace-dir", str(hops_dir)]),
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["workload"] == workload and result["model"] == ("tiny-base" if workload == "clone-icl" else
                                                                   "tiny-custom-voice")
    # asked for closed,poisson,burst: poisson runs last, its rate from the closed level's streams
    modes = ["closed", "burst", "poisson"] if stagger else ["burst"]
    assert result["stack_dir"] == (str(ROOT) if stagger else "")
    assert [(row["concurrency"], row["arrivals"]) for row in result["levels"]] == [(c, m) for c in (1, 2)
                                                                                   for m in modes]
    assert result["stagger_starts"] is stagger
    # staggered: the first streams spread over the warm-up stream's wall time; else a burst; the
    # open loop arrives at a rate from the closed level's mean stream wall time
    for row in result["levels"]:
        assert (row["stagger_period_s"] > 0) is (row["arrivals"] == "closed"), row["arrivals"]
        assert (row["arrival_rate_hz"] is not None) is (row["arrivals"] == "poisson")
        assert 0 < row["mean_open_streams"] <= row["num_streams"] and row["num_refused"] == 0
        # stalls as the client heard them, with the servers' own count beside them
        stalls = row["stalls"]
        assert stalls["num_streams"] == row["num_streams"]
        assert stalls["streams_stall_over_100ms"] <= stalls["streams_stall_over_50ms"] <= row["num_streams"]
        assert stalls["longest_stall_ms"] == max(max(r["stalls_ms"], default=0.0) for r in row["raw"])
        assert all(x > 0 for r in row["raw"] for x in r["stalls_ms"])
        assert stalls["server_longest_stall_ms"] == max(r["server_longest_stall_ms"] for r in row["raw"])
        assert stalls["server_streams_with_stalls"] == sum(1 for r in row["raw"] if r["server_num_stalls"])
    poisson = [row for row in result["levels"] if row["arrivals"] == "poisson"]
    for closed, row in zip([r for r in result["levels"] if r["arrivals"] == "closed"], poisson):
        # at half the rate the closed loop sustains (--poisson-load 0.5)
        assert row["arrival_rate_hz"] == pytest.approx(0.5 * row["concurrency"] / closed["mean_stream_wall_s"])
        assert row["poisson_load"] == 0.5
    assert ("stalls > 50 ms in" in proc.stdout) and ("poisson (" in proc.stdout) is stagger
    single = result["single_stream"]   # the first request after start, then the steady values
    assert single["first"]["ttfa_ms"] > 0 and single["first"]["client_ttfa_ms"] > 0
    for mode in ("steady_words", "steady_whole_text"):
        assert single[mode]["ttfa_ms_p50"] > 0
        assert set(single[mode]["stages_p50_ms"]) == {"queue_ms", "prefill_ms", "first_frame_ms",
                                                      "vocoder_first_chunk_ms", "vocoder_decode_ms", "encode_ms",
                                                      "voice_encode_ms", "admit_ms", "second_frame_ms"}
    for row in result["levels"]:
        # each service's CPU while the level ran, and the client's parts: the staggered run spreads
        # the streams of a level over two processes (one per closed-loop worker or arrival)
        assert {"gateway", "talker", "vocoder", "client"} <= set(row["cpu"]), row["cpu"]
        assert all(row["cpu"][name]["cpu_pct"] > 0 for name in ("gateway", "talker", "vocoder", "client"))
        jobs = row["concurrency"] if row["arrivals"] != "poisson" else row["num_streams"]
        assert row["cpu"]["client"]["procs"] == (min(2, jobs) if stagger else 1)
        assert row["num_streams"] == 2 * row["concurrency"]
        assert {r["frames"] for r in row["raw"]} == {result["frames_per_utterance"]}
        assert all(abs(r["audio_s"] - result["frames_per_utterance"] / 12.5) < 1e-6 for r in row["raw"])
        assert row["ttfa_ms_p50"] > 0 and row["audio_s_per_s"] > 0
        assert row["client_ttfa_ms_p95"] >= row["client_ttfa_ms_p50"] > 0
        # the start message comes before any audio, on every stream
        assert all(0 < r["client_start_ms"] <= r["client_ttfa_ms"] for r in row["raw"])
        # ... and names the request, whose wall-clock start joins the gateway's log (gateway_entry_lag.py)
        assert all(len(r["request_id"]) == 16 and r["start_unix_s"] > 1.7e9 for r in row["raw"])
        talker, vocoder = row["server_stats"]["talker"], row["server_stats"]["vocoder"]
        # the windows were reset before the level: its own steps only, and the warm-up stream's
        assert sum(talker["batch_size_histogram"].values()) == talker["step_time"]["count"] > 0
        assert vocoder["step_time"]["count"] > 0 and talker["prefill_time"]["count"] > 0
        # every stream of the level (and its warm-up stream) ended with a timed tail after its talker
        assert vocoder["tail_time"]["count"] >= row["num_streams"]
        # the playback-deadline scheduling's counters, this level's only (every stream starts with a first
        # chunk, which is never a due row; its later chunks may be)
        assert set(vocoder["deadlines"]) == {"num_due_rows", "num_deferred_rows", "num_late_chunks", "max_lateness_ms",
                                             "step_estimate_ms", "budget_row_frames", "num_late_talker",
                                             "num_late_queued", "num_late_decode", "filled_row_frames"}
        causes = vocoder["deadlines"]
        assert causes["num_late_talker"] + causes["num_late_queued"] + causes["num_late_decode"] == causes["num_late_chunks"]
        assert vocoder["deadlines"]["step_estimate_ms"] > 0
        assert talker["max_decode_gap_ms"] >= talker["decode_gap"]["p50_ms"] >= 0
        # why ready requests waited in the talker's queue (counts since start, not per level)
        assert set(talker["admission_holds"]) == {"num_gather_holds", "num_cadence_holds", "num_deadline_holds"}
        # host time per loop iteration that stepped: as many as the steps (+ prefill-only iterations)
        assert talker["host_time"]["count"] >= talker["step_time"]["count"] and talker["host_time"]["p50_ms"] > 0
        # ... split by the loop's phases, one sample per phase per such iteration
        phases = talker["host_time_by_phase"]
        assert set(phases) == {"intake", "admit", "prefill", "decode", "emit", "intake_in_wait"}
        assert all(phase["count"] == talker["host_time"]["count"] for phase in phases.values())
        assert sum(phase["mean_ms"] for phase in phases.values()) == pytest.approx(talker["host_time"]["mean_ms"],
                                                                                    rel=1e-3, abs=0.01)
        # ... and filed under the batch bucket each iteration launched (0: none), one sample each:
        # each decode step's under its size's bucket, the iterations that only prefilled under 0
        by_batch = {int(b): w["count"] for b, w in talker["host_time_by_batch"].items()}
        expected = Counter({0: talker["host_time"]["count"] - talker["step_time"]["count"]})
        for size, num_steps in talker["batch_size_histogram"].items():
            expected[BUCKETS[bisect.bisect_left(BUCKETS, int(size))]] += num_steps
        assert by_batch == {b: n for b, n in expected.items() if n}
        # no prefill graphs on CPU: every prefill forward ran eagerly, and the level had prompts
        assert talker["num_prefill_graph_steps"] == 0 and talker["num_prefill_eager_steps"] >= 1
        assert talker["prefill_hit_rate"] == 0.0
        # the server's timings per stage, next to TTFA, from the streams' summaries
        assert list(row["stages"]) == ["queue_ms", "prefill_ms", "first_frame_ms", "vocoder_first_chunk_ms",
                                       "vocoder_decode_ms", "encode_ms", "voice_encode_ms", "admit_ms",
                                       "second_frame_ms"]
        for name, stage in row["stages"].items():
            assert 0 <= stage["p50_ms"] <= stage["p95_ms"], name
            assert all(r["timings"][name] >= 0 for r in row["raw"])
        for name in ("prefill_ms", "first_frame_ms", "vocoder_first_chunk_ms"):
            assert row["stages"][name]["p50_ms"] > 0, name
        # every stream has 8 frames: its second frame came after its first
        assert all(r["timings"]["second_frame_ms"] > r["timings"]["first_frame_ms"] > 0 for r in row["raw"])
    assert "server p50/p95 ms: queue " in proc.stdout
    if not stagger:   # each request's way to first audio, marked by the three services on one clock
        check_first_audio_hops(hops_dir, result["levels"], proc.stdout)
    assert "(intake " in proc.stdout and ", emit " in proc.stdout   # the host time's phases, printed


FIRST_AUDIO_PATH = ("g_text_in", "g_text_out", "t_text_in", "t_frame0_out", "v_frames0_in", "v_pcm_out", "g_pcm_in",
                    "g_audio_out")


def check_first_audio_hops(hops_dir: Path, levels: list[dict], stdout: str) -> None:
    from benchmarks.first_audio_hops import HOPS, load_marks
    marks = load_marks(hops_dir)
    assert len(list(hops_dir.glob("*.tsv"))) >= 3   # one file per process: gateway(s), talker, vocoder
    for row in levels:
        hops = row["first_audio_hops"]
        assert set(hops) == {name for name, _, _ in HOPS}
        assert all(h["n"] == row["num_streams"] for h in hops.values())   # every request has every mark
        for r in row["raw"]:
            m = marks[r["request_id"]]
            # in the order the request met them, across the processes (START leaves before any text is read)
            times = [m[event] for event in FIRST_AUDIO_PATH]
            assert times == sorted(times), {event: m[event] for event in FIRST_AUDIO_PATH}
            assert m["g_start_out"] <= m["t_start_in"] <= m["t_text_in"] and m["g_start_out"] <= m["g_text_in"]
            assert m["t_frame0_out"] <= m["t_frame1_out"] <= m["v_frames1_in"]
            # the whole way is the server's TTFA: stamped beside the same two clock reads
            assert m["g_audio_out"] - m["g_text_in"] == pytest.approx(r["ttfa_ms"], abs=1.0)
    assert "hops p50/p95 ms: gateway_text " in stdout
