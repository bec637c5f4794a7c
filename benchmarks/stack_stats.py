"""Where a benchmark level's time went, from the services' own counters (admin GetStats).

After each e2e level the talker and the vocoder are asked for their windows (step time, batch
sizes, graph hit rate) and the windows are reset, so each level reports only itself. Found through
the ready files the launcher writes in its work dir; a stack given by --target has none, and then
nothing is collected.
"""
from __future__ import annotations

import json
from pathlib import Path

import grpc

from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc

STUBS = {"talker": admin_pb2_grpc.TalkerAdminStub, "vocoder": admin_pb2_grpc.VocoderAdminStub}


def _latency(stats) -> dict:
    return {"count": stats.count, "p50_ms": round(stats.p50_ms, 3), "p90_ms": round(stats.p90_ms, 3),
            "max_ms": round(stats.max_ms, 3), "mean_ms": round(stats.mean_ms, 3)}


def _voices(stats) -> dict:
    """Clone-reference encoding: counters, batch sizes and where a batch's time went."""
    out = {name: getattr(stats, name) for name in ("num_encoded", "num_failed", "num_cache_hits", "num_batches",
                                                   "num_forwards")}
    out["batch_size_histogram"] = dict(sorted(stats.batch_size_histogram.items()))
    for name in ("queue_wait", "batch_time", "prepare_time", "mel_time", "speaker_time", "codec_time"):
        out[name] = _latency(getattr(stats, name))
    return out


def _summary(role: str, stats) -> dict:
    out = {"step_time": _latency(stats.step_time),
           "batch_size_histogram": dict(sorted(stats.batch_size_histogram.items())),
           "graph_hit_rate": round(stats.graphs.hit_rate, 4),
           "num_graph_steps": stats.graphs.num_graph_steps, "num_eager_steps": stats.graphs.num_eager_steps}
    if role == "talker":
        out["prefill_time"] = _latency(stats.prefill_time)
        out["first_frame_time"] = _latency(stats.first_frame_time)
        # what a burst of arrivals cost the running streams (issue #10: bound the longest gap)
        out["decode_gap"] = _latency(stats.decode_gap)
        out["max_decode_gap_ms"] = round(stats.max_decode_gap_ms, 3)
        out["prefill_hit_rate"] = round(stats.graphs.prefill_hit_rate, 4)
        out["num_prefill_graph_steps"] = stats.graphs.num_prefill_graph_steps
        out["num_prefill_eager_steps"] = stats.graphs.num_prefill_eager_steps
        out["voices"] = _voices(stats.voices)
    else:
        out["first_chunk_time"] = _latency(stats.first_chunk_time)
        out["chunk_frames_histogram"] = dict(sorted(stats.chunk_frames_histogram.items()))
    return out


def collect(work_dir: Path | None, reset: bool = True, timeout_s: float = 5.0) -> dict:
    """{role: summary} for each service whose ready file is in `work_dir`; {} without one."""
    found = {}
    for role, stub_class in STUBS.items():
        ready = work_dir / f"{role}.ready.json" if work_dir is not None else None
        if ready is None or not ready.is_file():
            continue
        port = json.loads(ready.read_text())["grpc_port"]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                stats = stub_class(channel).GetStats(admin_pb2.GetStatsRequest(reset=reset), timeout=timeout_s)
            except grpc.RpcError as exc:
                found[role] = {"error": f"{exc.code().name}: {exc.details()}"}
                continue
        found[role] = _summary(role, stats)
    return found


def one_line(found: dict) -> str:
    parts = []
    for role in ("talker", "vocoder"):
        s = found.get(role)
        if not s or "error" in s:
            continue
        batches = s["batch_size_histogram"]
        mean_bs = sum(int(b) * n for b, n in batches.items()) / max(1, sum(batches.values()))
        line = (f"{role} step p50 {s['step_time']['p50_ms']:.2f} ms, mean batch {mean_bs:.1f}, "
                f"graphs {s['graph_hit_rate']:.2f}")
        if role == "talker":
            line += (f", prefill graphs {s['prefill_hit_rate']:.2f}, decode gap p50/max "
                     f"{s['decode_gap']['p50_ms']:.1f}/{s['max_decode_gap_ms']:.1f} ms")
        parts.append(line)
        voices = s.get("voices")
        if voices and voices["num_batches"]:
            sizes = voices["batch_size_histogram"]
            mean_size = sum(int(b) * n for b, n in sizes.items()) / max(1, sum(sizes.values()))
            parts.append(f"voice batches {voices['num_batches']} (mean {mean_size:.1f}), p50 wait "
                         f"{voices['queue_wait']['p50_ms']:.0f} / batch {voices['batch_time']['p50_ms']:.0f} = "
                         f"mel {voices['mel_time']['p50_ms']:.0f} + speaker {voices['speaker_time']['p50_ms']:.0f} + "
                         f"codec {voices['codec_time']['p50_ms']:.0f} ms")
    return "; ".join(parts)
