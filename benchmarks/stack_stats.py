"""Where a benchmark level's time went, from the services' own counters (admin GetStats).

After each e2e level the talker and the vocoder are asked for their windows (step time, batch
sizes, graph hit rate) and the windows are reset, so each level reports only itself. Found through
the ready files the launcher writes in its work dir, or, for a compose run (launcher.compose_run),
through its ready file, which lists every replica: then each replica reports under its own name
("vocoder-1", "vocoder-2"), with the requests and audio it served, which is how the load split
between replicas is read. A stack given by --target alone has neither, and nothing is collected.
"""
from __future__ import annotations

import json
from pathlib import Path

import grpc

from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc

# the order the talker loop runs its phases in (talker_service.engine.stats.HOST_PHASES; not imported:
# that package loads torch, which a client of the stack need not have)
HOST_PHASES = ("intake", "admit", "prefill", "decode", "emit", "intake_in_wait")

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
    requests = stats.requests
    out = {"requests": {name: getattr(requests, name) for name in ("num_started", "num_finished", "num_aborted",
                                                                   "num_failed", "num_refused")},
           "step_time": _latency(stats.step_time),
           "batch_size_histogram": dict(sorted(stats.batch_size_histogram.items())),
           "graph_hit_rate": round(stats.graphs.hit_rate, 4),
           "num_graph_steps": stats.graphs.num_graph_steps, "num_eager_steps": stats.graphs.num_eager_steps}
    if role == "talker":
        out["prefill_time"] = _latency(stats.prefill_time)
        out["first_frame_time"] = _latency(stats.first_frame_time)
        # what a burst of arrivals cost the running streams (issue #10: bound the longest gap)
        out["decode_gap"] = _latency(stats.decode_gap)
        out["max_decode_gap_ms"] = round(stats.max_decode_gap_ms, 3)
        out["host_time"] = _latency(stats.host_time)
        out["host_time_by_phase"] = {phase: _latency(window) for phase, window in stats.host_time_by_phase.items()}
        out["host_time_by_batch"] = {batch: _latency(window)
                                     for batch, window in sorted(stats.host_time_by_batch.items())}
        out["prefill_hit_rate"] = round(stats.graphs.prefill_hit_rate, 4)
        out["num_prefill_graph_steps"] = stats.graphs.num_prefill_graph_steps
        out["num_prefill_eager_steps"] = stats.graphs.num_prefill_eager_steps
        out["voices"] = _voices(stats.voices)
        if stats.HasField("admission_holds"):   # counts since start (older talkers lack them)
            h = stats.admission_holds
            out["admission_holds"] = {"num_gather_holds": h.num_gather_holds, "num_cadence_holds": h.num_cadence_holds,
                                      "num_deadline_holds": h.num_deadline_holds}
    else:
        out["audio_s_emitted"] = round(stats.audio_s_emitted, 3)
        out["first_chunk_time"] = _latency(stats.first_chunk_time)
        # how long a slot stays taken after the talker's last frames (count 0: an older vocoder)
        out["tail_time"] = _latency(stats.tail_time)
        out["chunk_frames_histogram"] = dict(sorted(stats.chunk_frames_histogram.items()))
        if stats.HasField("deadlines"):   # playback-deadline scheduling (issue #36; older vocoders lack it)
            d = stats.deadlines
            out["deadlines"] = {"num_due_rows": d.num_due_rows, "num_deferred_rows": d.num_deferred_rows,
                                "num_late_chunks": d.num_late_chunks, "max_lateness_ms": round(d.max_lateness_ms, 3),
                                "step_estimate_ms": round(d.step_estimate_ms, 3),
                                "budget_row_frames": round(d.budget_row_frames, 1),
                                "num_late_talker": d.num_late_talker, "num_late_queued": d.num_late_queued,
                                "num_late_decode": d.num_late_decode, "filled_row_frames": d.filled_row_frames}
    return out


def ask(role: str, target: str, reset: bool, timeout_s: float) -> dict:
    """One service's summary (its window reset after reading when `reset`), or {"error": ...}."""
    with grpc.insecure_channel(target) as channel:
        try:
            stats = STUBS[role](channel).GetStats(admin_pb2.GetStatsRequest(reset=reset), timeout=timeout_s)
        except grpc.RpcError as exc:
            return {"error": f"{exc.code().name}: {exc.details()}"}
    return _summary(role, stats)


def collect(work_dir: Path | None, reset: bool = True, timeout_s: float = 5.0) -> dict:
    """{role: summary} for each service whose ready file is in `work_dir`; {} without one."""
    found = {}
    for role in STUBS:
        ready = work_dir / f"{role}.ready.json" if work_dir is not None else None
        if ready is None or not ready.is_file():
            continue
        found[role] = ask(role, f"127.0.0.1:{json.loads(ready.read_text())['grpc_port']}", reset, timeout_s)
    return found


def collect_replicas(compose_ready: Path | None, reset: bool = True, timeout_s: float = 5.0) -> dict:
    """{replica name: summary} for every talker and vocoder replica a compose run's ready file lists
    (asked at its health target, which is also its admin port); {} without the file."""
    if compose_ready is None or not compose_ready.is_file():
        return {}
    replicas = json.loads(compose_ready.read_text())["replicas"]
    return {name: ask(info["role"], info["health"], reset, timeout_s)
            for name, info in sorted(replicas.items()) if info.get("role") in STUBS}


def load_split(before: dict, after: dict, role: str = "vocoder") -> dict:
    """What each replica of `role` served between two collect_replicas() snapshots (its counters run
    from its start: a replica that restarted in between counts from zero). Vocoders: {name: {streams,
    audio_s, audio_share}}; talkers (no audio of their own): {name: {streams, stream_share}}.
    Replicas are told apart by name: a compose service's name starts with its role."""
    served = {}
    for name, now in after.items():
        if not name.startswith(role) or "error" in now:
            continue
        streams = now["requests"]["num_started"]
        audio_s = now.get("audio_s_emitted", 0.0)
        then = before.get(name)
        if then and "requests" in then and then["requests"]["num_started"] <= streams:   # not restarted since
            streams -= then["requests"]["num_started"]
            audio_s -= then.get("audio_s_emitted", 0.0)
        served[name] = {"streams": streams, "audio_s": round(audio_s, 3)} if role == "vocoder" else {"streams": streams}
    share_of, share = ("audio_s", "audio_share") if role == "vocoder" else ("streams", "stream_share")
    total = sum(s[share_of] for s in served.values())
    for s in served.values():
        s[share] = round(s[share_of] / total, 4) if total else 0.0
    return served


def one_line(found: dict) -> str:
    parts = []
    for role, s in found.items():
        if "error" in s:
            continue
        batches = s["batch_size_histogram"]
        mean_bs = sum(int(b) * n for b, n in batches.items()) / max(1, sum(batches.values()))
        line = (f"{role} step p50 {s['step_time']['p50_ms']:.2f} ms, mean batch {mean_bs:.1f}, "
                f"graphs {s['graph_hit_rate']:.2f}")
        if role.startswith("talker"):
            line += (f", prefill graphs {s['prefill_hit_rate']:.2f}, decode gap p50/max "
                     f"{s['decode_gap']['p50_ms']:.1f}/{s['max_decode_gap_ms']:.1f} ms")
            if "host_time" in s:   # older talkers do not report it
                line += f", host p50 {s['host_time']['p50_ms']:.2f} ms"
                phases = s.get("host_time_by_phase") or {}
                if phases:
                    line += " (" + ", ".join(f"{name} {phases[name]['p50_ms']:.2f}" for name in HOST_PHASES
                                             if name in phases) + ")"
                by_batch = {int(b): w for b, w in (s.get("host_time_by_batch") or {}).items() if int(b)}
                if by_batch:   # the iterations that launched the largest decode batch bucket seen
                    top = max(by_batch)
                    line += f", at batch {top}: host p50 {by_batch[top]['p50_ms']:.2f} ms ({by_batch[top]['count']} steps)"
        tail = s.get("tail_time")
        if tail and tail["count"]:
            line += f", tail after the talker p50/p90 {tail['p50_ms']:.0f}/{tail['p90_ms']:.0f} ms"
        deadlines = s.get("deadlines")
        if deadlines:
            line += (f", due rows {deadlines['num_due_rows']}, deferred {deadlines['num_deferred_rows']}, late chunks "
                     f"{deadlines['num_late_chunks']} (max {deadlines['max_lateness_ms']:.1f} ms; talker "
                     f"{deadlines.get('num_late_talker', 0)}, queued {deadlines.get('num_late_queued', 0)}, decode "
                     f"{deadlines.get('num_late_decode', 0)}), filled {deadlines.get('filled_row_frames', 0)} "
                     f"row-frames, budget "
                     f"{deadlines['budget_row_frames']:.0f} row-frames")
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
